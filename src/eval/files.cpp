#include "kvevict/eval/files.h"

#include <fstream>
#include <string>
#include <system_error>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {
[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file.string(), what));
}
}  // namespace

void check_output_file(const std::filesystem::path& file, bool overwrite) {
  std::error_code ec;
  if (file.empty()) throw InputError("no output file given");
  if (std::filesystem::is_directory(file, ec)) refuse(file, "is a folder, not a file");
  if (!overwrite && std::filesystem::exists(file, ec)) refuse(file, "already exists (pass --force to replace it)");
  const std::filesystem::path parent = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(parent, ec)) {
    refuse(file, fmt::format("cannot be written: the folder {} does not exist", parent.string()));
  }
}

void write_file_atomically(const std::filesystem::path& file, std::string_view content, bool overwrite) {
  check_output_file(file, overwrite);
  const std::filesystem::path tmp = file.string() + ".tmp";
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) refuse(file, "cannot be written (is the folder there and writable?)");
    out.write(content.data(), static_cast<std::streamsize>(content.size()));
    out.flush();
    if (!out) {
      out.close();
      std::filesystem::remove(tmp, ec);
      refuse(file, "writing failed (disk full?)");
    }
  }
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    refuse(file, fmt::format("cannot be written: {}", ec.message()));
  }
}

}  // namespace kvevict
