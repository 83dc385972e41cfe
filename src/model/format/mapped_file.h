// A read-only POSIX memory map of a whole file, for the weight readers
// (gguf.cpp, safetensors.cpp): tensor data is used where it lies, never
// copied. Private to the model layer.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "kvevict/core/errors.h"

namespace kvevict::detail {

class MappedFile {
 public:
  // Throws InputError "<file>: cannot open: <reason>" (or "is a folder").
  explicit MappedFile(const std::filesystem::path& path) {
    const std::string name = path.string();
    const int fd = ::open(name.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw InputError(name + ": cannot open: " + std::strerror(errno));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
      const int err = errno;
      ::close(fd);
      throw InputError(name + ": cannot open: " + std::strerror(err));
    }
    if (S_ISDIR(st.st_mode)) {
      ::close(fd);
      throw InputError(name + ": is a folder, not a file");
    }
    size_ = static_cast<std::uint64_t>(st.st_size);
    if (size_ > 0) {
      // mmap of length 0 fails; an empty file simply has no bytes.
      void* p = ::mmap(nullptr, static_cast<std::size_t>(size_), PROT_READ, MAP_PRIVATE, fd, 0);
      if (p == MAP_FAILED) {
        const int err = errno;
        ::close(fd);
        throw InputError(name + ": cannot map: " + std::strerror(err));
      }
      data_ = static_cast<const std::uint8_t*>(p);
    }
    ::close(fd);  // the map keeps the file alive
  }
  ~MappedFile() {
    if (data_ != nullptr) ::munmap(const_cast<std::uint8_t*>(data_), static_cast<std::size_t>(size_));
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const noexcept { return data_; }
  std::uint64_t size() const noexcept { return size_; }

 private:
  const std::uint8_t* data_ = nullptr;
  std::uint64_t size_ = 0;
};

}  // namespace kvevict::detail
