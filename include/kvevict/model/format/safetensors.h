// Hugging Face safetensors (an 8-byte header length, a JSON header of
// tensor names -> dtype, shape and data offsets, then the data), one file or
// several shards named by a model.safetensors.index.json; read from memory
// maps without copying. And a writer, for the tiny models kvevict makes.
// Errors are InputError, one line, "<file>: <what>".
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kvevict {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;                 // "F32", "F16", "BF16", "I64", ... as the header spells it
  std::vector<std::uint64_t> shape;  // PyTorch order
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  const std::uint8_t* data = nullptr;
  std::string file;  // the shard it is in
};

class Safetensors {
 public:
  // A .safetensors file, a *.safetensors.index.json, or a folder holding
  // model.safetensors or model.safetensors.index.json.
  static std::unique_ptr<Safetensors> open(const std::filesystem::path& path);
  ~Safetensors();
  Safetensors(const Safetensors&) = delete;
  Safetensors& operator=(const Safetensors&) = delete;

  const std::vector<SafetensorsTensor>& tensors() const noexcept { return tensors_; }
  const SafetensorsTensor* tensor(std::string_view name) const noexcept;
  // The first file's "__metadata__" strings.
  const std::map<std::string, std::string>& metadata() const noexcept { return metadata_; }
  // Reads a tensor as float32 (F32, F16, BF16); any other dtype is refused
  // with InputError naming the tensor and its dtype.
  void to_floats(const SafetensorsTensor& tensor, float* out) const;

 private:
  Safetensors() = default;
  struct Shard;
  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, std::string> metadata_;
  std::unordered_map<std::string_view, std::size_t> index_;  // by name: lookups stay linear in the file
  void index();
};

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "F16" or "BF16"
  std::vector<std::uint64_t> shape;
  std::vector<std::uint8_t> data;
};
// Writes one .safetensors file (tensors in the order given, offsets
// ascending); refuses to replace a file unless `overwrite`.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {}, bool overwrite = false);

}  // namespace kvevict
