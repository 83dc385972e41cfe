// GGUF files (versions 2 and 3; ggml's docs/gguf.md): the metadata, the
// tensor infos and the tensor data, read from a memory map without copying
// the data; and a writer (version 3) for the files kvevict makes itself
// (tiny random models, conversions, test fixtures).
//
// Every check a hostile file could fail is made before anything is sized
// from it: counts against the bytes left, lengths against the file,
// offsets and extents against the data section. Errors are InputError,
// one line, "<file>: <what>" (and the key or tensor where there is one).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "kvevict/model/kernels/weight_types.h"

namespace kvevict {

enum class GgufType : std::uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

// One metadata value. Scalars: integers in `integer` (signed types
// sign-extended; a u64 above 2^63 - 1 keeps its value in `unsigned_integer`
// only, with `integer` -1), floats in `number`, bools in `integer` (0/1),
// strings in `text`. Arrays: `element`, `count`, and the elements in
// `strings` (string arrays), `numbers` (numeric and bool arrays; every
// u32/i32/f32 is exact in a double, a 64-bit integer past 2^53 rounded --
// `bits64` holds those arrays' exact values, as their two's-complement bits)
// or `items` (arrays of arrays, each an array GgufValue).
struct GgufValue {
  GgufType type = GgufType::kU32;
  std::int64_t integer = 0;
  double number = 0.0;
  std::string text;
  GgufType element = GgufType::kU32;
  std::uint64_t count = 0;  // an array's elements (a nested array's: checked and skipped, only counted)
  std::vector<std::string> strings;
  std::vector<double> numbers;
  std::vector<std::uint64_t> bits64;  // u64 and i64 arrays: every element exactly
  // An array of arrays: where its first inner array starts in the file's
  // bytes (GgufFile::bytes()), checked by the reader but not held.
  std::uint64_t nested_at = 0;
  std::uint64_t unsigned_integer = 0;  // a u64 scalar's value, whatever its size

  bool is_integer() const noexcept;  // any of the eight integer types
};

struct GgufTensor {
  std::string name;
  std::vector<std::uint64_t> ne;  // ggml order: ne[0] varies fastest (PyTorch shape reversed)
  std::uint32_t type = 0;         // ggml type id (possibly one kvevict does not read)
  std::uint64_t offset = 0;       // from the start of the data section
  std::uint64_t elements = 0;
  std::uint64_t bytes = 0;
  const std::uint8_t* data = nullptr;  // into the map (or the parsed buffer)
};

class GgufFile {
 public:
  // Maps and parses a file. Throws InputError.
  static std::unique_ptr<GgufFile> open(const std::filesystem::path& path);
  // Parses bytes in memory (a copy is kept); `name` names them in errors.
  static std::unique_ptr<GgufFile> parse(std::span<const std::uint8_t> bytes, const std::string& name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  const std::string& path() const noexcept { return path_; }
  std::uint32_t version() const noexcept { return version_; }
  std::uint64_t alignment() const noexcept { return alignment_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const noexcept { return metadata_; }
  const GgufValue* find(std::string_view key) const noexcept;
  // Typed reads; each throws InputError naming the file and the key when it
  // is missing or of another type. Integers accept any integer type and
  // refuse negative values; floats accept f32, f64 and integers.
  std::uint64_t get_uint(std::string_view key) const;
  std::optional<std::uint64_t> get_uint_if(std::string_view key) const;
  double get_float(std::string_view key) const;
  std::optional<double> get_float_if(std::string_view key) const;
  std::string get_string(std::string_view key) const;
  std::optional<std::string> get_string_if(std::string_view key) const;
  std::optional<bool> get_bool_if(std::string_view key) const;

  const std::vector<GgufTensor>& tensors() const noexcept { return tensors_; }
  // The whole file as read (mapped, or the bytes given to parse()).
  std::span<const std::uint8_t> bytes() const noexcept;
  const GgufTensor* tensor(std::string_view name) const noexcept;

 private:
  GgufFile() = default;
  struct Mapping;
  std::unique_ptr<Mapping> mapping_;
  std::string path_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensor> tensors_;
  // By name, so a builder asking for every tensor stays linear in the file.
  std::unordered_map<std::string_view, std::size_t> key_index_;
  std::unordered_map<std::string_view, std::size_t> tensor_index_;
  void index();
};

// Builds a version-3 GGUF file: metadata in the order set, tensors in the
// order added, each aligned.
class GgufWriter {
 public:
  explicit GgufWriter(std::uint32_t alignment = 32);
  void set_u32(std::string key, std::uint32_t value);
  void set_i32(std::string key, std::int32_t value);
  void set_f32(std::string key, float value);
  void set_bool(std::string key, bool value);
  void set_string(std::string key, std::string value);
  void set_strings(std::string key, std::vector<std::string> values);
  void set_f32s(std::string key, std::span<const float> values);
  void set_i32s(std::string key, std::span<const std::int32_t> values);
  // Any value the reader returns (scalars of every type, arrays of numbers,
  // bools or strings; not nested arrays), replacing one already set.
  void set(std::string key, GgufValue value);
  // `data` holds the tensor's blocks (weight_bytes(type, elements) bytes).
  void add_tensor(std::string name, std::vector<std::uint64_t> ne, WeightType type, std::vector<std::uint8_t> data);
  std::vector<std::uint8_t> bytes() const;
  // Refuses (InputError) to replace an existing file unless `overwrite`.
  void write(const std::filesystem::path& path, bool overwrite = false) const;

 private:
  struct Entry;
  struct Tensor;
  std::uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  struct Pending {
    std::string name;
    std::vector<std::uint64_t> ne;
    WeightType type;
    std::vector<std::uint8_t> data;
  };
  std::vector<Pending> tensors_;
  std::unordered_set<std::string> tensor_names_;  // refuses a second of a name in constant time
};

}  // namespace kvevict
