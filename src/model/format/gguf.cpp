// GGUF reading (versions 2 and 3) and writing (version 3). Layout: ../shared
// notes "GGUF (v2 and v3)"; ggml's docs/gguf.md.
//
// The reader trusts nothing it has not checked: every count is compared with
// the bytes left in the file (at the smallest size one item can take) before
// anything is sized from it, so a hostile count of 2^60 is refused at once
// instead of allocating; every tensor's extent is checked against the data
// section. Tensor data stays in the memory map.
#include "kvevict/model/format/gguf.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/files.h"
#include "mapped_file.h"

namespace kvevict {

static_assert(std::endian::native == std::endian::little, "GGUF files are little-endian; so must the host be");

struct GgufFile::Mapping {
  std::unique_ptr<detail::MappedFile> file;  // open()
  std::vector<std::uint8_t> bytes;           // parse()
};

namespace {

constexpr std::uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr std::uint64_t kMaxKeyBytes = 65535;
constexpr std::uint64_t kMaxTensorNameBytes = 64;
constexpr std::uint32_t kMaxDims = 4;
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr int kMaxArrayNesting = 8;  // arrays of arrays: deeper is refused (keeps recursion bounded)
// The fewest bytes one item can take, for checking counts against the file.
constexpr std::uint64_t kMinKvBytes = 8 + 4 + 1;              // empty key, type, a 1-byte value
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, n_dims, one dim, type, offset

std::string_view type_name(GgufType type) noexcept {
  switch (type) {
    case GgufType::kU8: return "u8";
    case GgufType::kI8: return "i8";
    case GgufType::kU16: return "u16";
    case GgufType::kI16: return "i16";
    case GgufType::kU32: return "u32";
    case GgufType::kI32: return "i32";
    case GgufType::kF32: return "f32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kU64: return "u64";
    case GgufType::kI64: return "i64";
    case GgufType::kF64: return "f64";
  }
  return "?";
}

bool valid_type(std::uint32_t id) noexcept { return id <= static_cast<std::uint32_t>(GgufType::kF64); }

// Bytes one element of an array of `type` takes at least.
std::uint64_t min_element_bytes(GgufType type) noexcept {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kBool: return 1;
    case GgufType::kU16: case GgufType::kI16: return 2;
    case GgufType::kU32: case GgufType::kI32: case GgufType::kF32: return 4;
    case GgufType::kU64: case GgufType::kI64: case GgufType::kF64: return 8;
    case GgufType::kString: return 8;
    case GgufType::kArray: return 4 + 8;
  }
  return 1;
}

// What the reader makes of the bytes, moved into a GgufFile at the end.
struct Parsed {
  std::uint32_t version = 0;
  std::uint64_t alignment = kDefaultAlignment;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::vector<GgufTensor> tensors;
};

class Reader {
 public:
  Reader(const std::uint8_t* base, std::uint64_t size, const std::string& file)
      : base_(base), size_(size), file_(file) {}

  // parse(), with running out of memory named as the file's fault: every
  // count is checked against the file's bytes, but what is held costs more
  // than it takes on disk (a string's header, a number as a double).
  Parsed parse_bounded() {
    try {
      return parse();
    } catch (const std::bad_alloc&) {
      fail(fmt::format("its metadata ({} bytes) does not fit in memory as read", pos_));
    }
  }

  Parsed parse() {
    Parsed out;
    if (size_ < 4) fail(fmt::format("not a GGUF file (only {} bytes)", size_));
    if (read<std::uint32_t>("magic") != kMagic) fail("not a GGUF file (bad magic; expected \"GGUF\")");
    out.version = read<std::uint32_t>("version");
    // ggml's order of checks: a byte-swapped file shows its version in the
    // high half, so the low half reads zero.
    if ((out.version & 0xFFFFU) == 0) {
      fail(fmt::format("byte-swapped (big-endian) GGUF file (version field 0x{:08x}); not supported", out.version));
    }
    if (out.version == 1) fail("GGUF version 1 is not supported (only 2 and 3)");
    if (out.version > 3) fail(fmt::format("GGUF version {} is newer than this reader (2 and 3)", out.version));

    const auto tensor_count = read<std::uint64_t>("tensor count");
    const auto kv_count = read<std::uint64_t>("metadata count");
    if (tensor_count > left() / kMinTensorInfoBytes) {
      fail(fmt::format("tensor count {} cannot fit in the {} bytes left", tensor_count, left()));
    }
    if (kv_count > (left() - tensor_count * kMinTensorInfoBytes) / kMinKvBytes) {
      fail(fmt::format("metadata count {} cannot fit in the {} bytes left", kv_count, left()));
    }

    out.metadata.reserve(static_cast<std::size_t>(kv_count));
    std::unordered_set<std::string> keys;
    for (std::uint64_t i = 0; i < kv_count; ++i) {
      const auto key_bytes = read<std::uint64_t>("metadata key length");
      if (key_bytes > kMaxKeyBytes) {
        fail(fmt::format("metadata key {} is {} bytes long (at most {})", i, key_bytes, kMaxKeyBytes));
      }
      std::string key = read_bytes(key_bytes, "metadata key");
      if (!keys.insert(key).second) fail(fmt::format("duplicate key '{}'", key));
      const auto type_id = read<std::uint32_t>("value type");
      if (!valid_type(type_id)) fail(fmt::format("key '{}': unknown value type {}", key, type_id));
      GgufValue value = read_value(static_cast<GgufType>(type_id), key);
      out.metadata.emplace_back(std::move(key), std::move(value));
    }

    for (const auto& [key, value] : out.metadata) {
      if (key != "general.alignment") continue;
      if (!value.is_integer()) fail(fmt::format("key 'general.alignment' is {}, not an integer", type_name(value.type)));
      if (value.integer <= 0 || !std::has_single_bit(static_cast<std::uint64_t>(value.integer))) {
        fail(fmt::format("key 'general.alignment' is {}, not a power of two", value.integer));
      }
      out.alignment = static_cast<std::uint64_t>(value.integer);
    }

    out.tensors.reserve(static_cast<std::size_t>(tensor_count));
    std::unordered_set<std::string> names;
    for (std::uint64_t i = 0; i < tensor_count; ++i) {
      out.tensors.push_back(read_tensor_info(i, out.alignment));
      if (!names.insert(out.tensors.back().name).second) {
        fail(fmt::format("duplicate tensor '{}'", out.tensors.back().name));
      }
    }

    if (tensor_count > 0) {
      const std::uint64_t rest = pos_ % out.alignment;
      const std::uint64_t pad = rest == 0 ? 0 : out.alignment - rest;
      if (pad > left()) {
        fail(fmt::format("truncated: the data section would start past the end ({} bytes)", size_));
      }
      const std::uint64_t data_start = pos_ + pad;
      const std::uint64_t data_bytes = size_ - data_start;
      for (GgufTensor& t : out.tensors) {
        if (t.offset > data_bytes || t.bytes > data_bytes - t.offset) {
          fail(fmt::format("tensor '{}': data at offset {} ({} bytes) runs past the end of the file "
                           "(truncated? the data section has {} bytes)",
                           t.name, t.offset, t.bytes, data_bytes));
        }
        t.data = base_ + data_start + t.offset;
      }
      // Two tensors sharing bytes would be read as each other's weights.
      std::vector<const GgufTensor*> by_offset;
      by_offset.reserve(out.tensors.size());
      for (const GgufTensor& t : out.tensors) by_offset.push_back(&t);
      std::sort(by_offset.begin(), by_offset.end(),
                [](const GgufTensor* a, const GgufTensor* b) { return a->offset < b->offset; });
      for (std::size_t i = 1; i < by_offset.size(); ++i) {
        const GgufTensor& a = *by_offset[i - 1];
        const GgufTensor& b = *by_offset[i];
        if (b.offset < a.offset + a.bytes) {
          fail(fmt::format("tensors '{}' (bytes {} ... {}) and '{}' (from byte {}) overlap in the data section",
                           a.name, a.offset, a.offset + a.bytes, b.name, b.offset));
        }
      }
    }
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", file_, what)); }

  std::uint64_t left() const noexcept { return size_ - pos_; }

  void need(std::uint64_t n, std::string_view what) const {
    if (n > left()) {
      fail(fmt::format("truncated header: {} needs {} bytes at offset {}, the file has {} left", what, n, pos_, left()));
    }
  }

  template <typename T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_bytes(std::uint64_t n, std::string_view what) {
    need(n, what);
    std::string s(reinterpret_cast<const char*>(base_ + pos_), static_cast<std::size_t>(n));
    pos_ += n;
    return s;
  }

  std::string read_string(std::string_view what) {
    const auto n = read<std::uint64_t>(what);
    return read_bytes(n, what);
  }

  // One scalar as an integer, a float, or a bool (into `integer`).
  void read_scalar(GgufType type, const std::string& key, GgufValue& v) {
    switch (type) {
      case GgufType::kU8: v.integer = read<std::uint8_t>(key); break;
      case GgufType::kI8: v.integer = read<std::int8_t>(key); break;
      case GgufType::kU16: v.integer = read<std::uint16_t>(key); break;
      case GgufType::kI16: v.integer = read<std::int16_t>(key); break;
      case GgufType::kU32: v.integer = read<std::uint32_t>(key); break;
      case GgufType::kI32: v.integer = read<std::int32_t>(key); break;
      case GgufType::kI64: v.integer = read<std::int64_t>(key); break;
      case GgufType::kU64: {
        const auto u = read<std::uint64_t>(key);
        // A value past int64 (a hash, a seed) is kept whole; as a size it
        // is refused where it is read (get_uint).
        v.unsigned_integer = u;
        v.integer = u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())
                        ? -1
                        : static_cast<std::int64_t>(u);
        break;
      }
      case GgufType::kF32: v.number = static_cast<double>(read<float>(key)); break;
      case GgufType::kF64: v.number = read<double>(key); break;
      case GgufType::kBool: {
        const auto b = read<std::uint8_t>(key);
        if (b > 1) fail(fmt::format("key '{}': bool value {} is neither 0 nor 1", key, b));
        v.integer = b;
        break;
      }
      case GgufType::kString:
      case GgufType::kArray: break;  // not scalars; the callers handle them
    }
  }

  GgufValue read_value(GgufType type, const std::string& key) {
    GgufValue v;
    v.type = type;
    if (type == GgufType::kString) {
      v.text = read_string(key);
    } else if (type == GgufType::kArray) {
      read_array(v, key, 1, true);
    } else {
      read_scalar(type, key, v);
    }
    return v;
  }

  // An array's element type, count and elements; `keep` false for a nested
  // array, which is checked and skipped (its count is all that is kept).
  void read_array(GgufValue& v, const std::string& key, int depth, bool keep) {
    if (depth > kMaxArrayNesting) fail(fmt::format("key '{}': arrays nested deeper than {}", key, kMaxArrayNesting));
    const auto element_id = read<std::uint32_t>(key);
    if (!valid_type(element_id)) fail(fmt::format("key '{}': unknown array element type {}", key, element_id));
    const auto element = static_cast<GgufType>(element_id);
    const auto count = read<std::uint64_t>(key);
    if (count > left() / min_element_bytes(element)) {
      fail(fmt::format("key '{}': array count {} cannot fit in the {} bytes left", key, count, left()));
    }
    v.element = element;
    v.count = count;
    if (element == GgufType::kString) {
      if (keep) v.strings.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t i = 0; i < count; ++i) {
        std::string s = read_string(key);
        if (keep) v.strings.push_back(std::move(s));
      }
    } else if (element == GgufType::kArray) {
      // Nested arrays are checked and skipped, never held: nothing kvevict
      // reads is one (llama.cpp refuses them), and held they would cost
      // many times their 12 bytes each -- a small file could exhaust memory.
      // Where they lie is kept, for a reader that shows them (inspect).
      v.nested_at = pos_;
      for (std::uint64_t i = 0; i < count; ++i) {
        GgufValue inner;
        inner.type = GgufType::kArray;
        read_array(inner, key, depth + 1, false);
      }
    } else {
      if (keep) v.numbers.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t i = 0; i < count; ++i) {
        GgufValue scalar;
        read_scalar(element, key, scalar);
        double x = 0.0;
        if (element == GgufType::kF32 || element == GgufType::kF64) {
          x = scalar.number;
        } else if (element == GgufType::kU64) {
          x = static_cast<double>(scalar.unsigned_integer);
          if (keep) v.bits64.push_back(scalar.unsigned_integer);
        } else {
          x = static_cast<double>(scalar.integer);
          if (keep && element == GgufType::kI64) v.bits64.push_back(static_cast<std::uint64_t>(scalar.integer));
        }
        if (keep) v.numbers.push_back(x);
      }
    }
  }

  GgufTensor read_tensor_info(std::uint64_t index, std::uint64_t alignment) {
    GgufTensor t;
    const auto name_bytes = read<std::uint64_t>("tensor name length");
    need(name_bytes, "tensor name");
    if (name_bytes > kMaxTensorNameBytes) {
      const std::string start(reinterpret_cast<const char*>(base_ + pos_), kMaxTensorNameBytes);
      fail(fmt::format("tensor {} name '{}...' is {} bytes long (at most {})", index, start, name_bytes,
                       kMaxTensorNameBytes));
    }
    t.name = read_bytes(name_bytes, "tensor name");
    const std::string what = "tensor '" + t.name + "'";
    const auto n_dims = read<std::uint32_t>(what);
    if (n_dims < 1 || n_dims > kMaxDims) fail(fmt::format("{}: n_dims {} (must be 1 to {})", what, n_dims, kMaxDims));
    t.ne.resize(n_dims);
    std::uint64_t elements = 1;
    for (std::uint32_t j = 0; j < n_dims; ++j) {
      const auto ne = read<std::uint64_t>(what);
      if (ne == 0) fail(fmt::format("{}: ne[{}] is 0", what, j));
      if (ne > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) / elements) {
        fail(fmt::format("{}: the element count overflows (ne[{}] = {})", what, j, ne));
      }
      elements *= ne;
      t.ne[j] = ne;
    }
    t.elements = elements;
    t.type = read<std::uint32_t>(what);
    std::uint32_t block_elements = 0;
    std::uint32_t block_bytes = 0;
    if (!ggml_block_size(t.type, block_elements, block_bytes)) {
      fail(fmt::format("{}: unknown ggml type id {}", what, t.type));
    }
    if (t.ne[0] % block_elements != 0) {
      fail(fmt::format("{}: ne[0] = {} is not a multiple of {}'s block of {}", what, t.ne[0], ggml_type_name(t.type),
                       block_elements));
    }
    const std::uint64_t blocks = elements / block_elements;
    if (blocks > std::numeric_limits<std::uint64_t>::max() / block_bytes) {
      fail(fmt::format("{}: the byte size overflows", what));
    }
    t.bytes = blocks * block_bytes;
    t.offset = read<std::uint64_t>(what);
    if (t.offset % alignment != 0) {
      fail(fmt::format("{}: offset {} is not a multiple of the alignment {}", what, t.offset, alignment));
    }
    return t;
  }

  const std::uint8_t* base_;
  std::uint64_t size_;
  std::uint64_t pos_ = 0;
  const std::string& file_;
};

// ---- writing ----------------------------------------------------------------

template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
  const auto at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(std::vector<std::uint8_t>& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// A scalar of `type` from a value's integer or number.
void put_scalar(std::vector<std::uint8_t>& out, GgufType type, std::int64_t integer, double number) {
  switch (type) {
    case GgufType::kU8: put(out, static_cast<std::uint8_t>(integer)); break;
    case GgufType::kI8: put(out, static_cast<std::int8_t>(integer)); break;
    case GgufType::kU16: put(out, static_cast<std::uint16_t>(integer)); break;
    case GgufType::kI16: put(out, static_cast<std::int16_t>(integer)); break;
    case GgufType::kU32: put(out, static_cast<std::uint32_t>(integer)); break;
    case GgufType::kI32: put(out, static_cast<std::int32_t>(integer)); break;
    case GgufType::kU64: put(out, static_cast<std::uint64_t>(integer)); break;
    case GgufType::kI64: put(out, integer); break;
    case GgufType::kF32: put(out, static_cast<float>(number)); break;
    case GgufType::kF64: put(out, number); break;
    case GgufType::kBool: put(out, static_cast<std::uint8_t>(integer != 0 ? 1 : 0)); break;
    case GgufType::kString:
    case GgufType::kArray: break;
  }
}

void put_value(std::vector<std::uint8_t>& out, const GgufValue& v) {
  if (v.type == GgufType::kString) {
    put_string(out, v.text);
  } else if (v.type == GgufType::kArray) {
    put(out, static_cast<std::uint32_t>(v.element));
    if (v.element == GgufType::kString) {
      put<std::uint64_t>(out, v.strings.size());
      for (const std::string& s : v.strings) put_string(out, s);
    } else {
      put<std::uint64_t>(out, v.numbers.size());
      const bool floats = v.element == GgufType::kF32 || v.element == GgufType::kF64;
      for (const double x : v.numbers) put_scalar(out, v.element, floats ? 0 : static_cast<std::int64_t>(x), x);
    }
  } else {
    put_scalar(out, v.type, v.integer, v.number);
  }
}

std::uint64_t align_up(std::uint64_t n, std::uint64_t alignment) noexcept {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

bool GgufValue::is_integer() const noexcept {
  switch (type) {
    case GgufType::kU8: case GgufType::kI8: case GgufType::kU16: case GgufType::kI16:
    case GgufType::kU32: case GgufType::kI32: case GgufType::kU64: case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

std::unique_ptr<GgufFile> GgufFile::open(const std::filesystem::path& path) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = path.string();
  file->mapping_ = std::make_unique<Mapping>();
  file->mapping_->file = std::make_unique<detail::MappedFile>(path);
  Parsed parsed = Reader(file->mapping_->file->data(), file->mapping_->file->size(), file->path_).parse_bounded();
  file->version_ = parsed.version;
  file->alignment_ = parsed.alignment;
  file->metadata_ = std::move(parsed.metadata);
  file->tensors_ = std::move(parsed.tensors);
  file->index();
  return file;
}

std::unique_ptr<GgufFile> GgufFile::parse(std::span<const std::uint8_t> bytes, const std::string& name) {
  std::unique_ptr<GgufFile> file(new GgufFile());
  file->path_ = name;
  file->mapping_ = std::make_unique<Mapping>();
  file->mapping_->bytes.assign(bytes.begin(), bytes.end());
  const std::vector<std::uint8_t>& held = file->mapping_->bytes;
  Parsed parsed = Reader(held.data(), held.size(), file->path_).parse_bounded();
  file->version_ = parsed.version;
  file->alignment_ = parsed.alignment;
  file->metadata_ = std::move(parsed.metadata);
  file->tensors_ = std::move(parsed.tensors);
  file->index();
  return file;
}

GgufFile::~GgufFile() = default;

std::span<const std::uint8_t> GgufFile::bytes() const noexcept {
  if (mapping_->file) return {mapping_->file->data(), static_cast<std::size_t>(mapping_->file->size())};
  return mapping_->bytes;
}

void GgufFile::index() {
  // The views point into the strings the vectors hold, which stay put.
  key_index_.reserve(metadata_.size());
  for (std::size_t i = 0; i < metadata_.size(); ++i) key_index_.emplace(metadata_[i].first, i);
  tensor_index_.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) tensor_index_.emplace(tensors_[i].name, i);
}

const GgufValue* GgufFile::find(std::string_view key) const noexcept {
  const auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &metadata_[it->second].second;
}

std::optional<std::uint64_t> GgufFile::get_uint_if(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_integer()) {
    throw InputError(fmt::format("{}: key '{}' is {}, expected an integer", path_, key, type_name(v->type)));
  }
  if (v->type == GgufType::kU64) {
    if (v->unsigned_integer > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      throw InputError(fmt::format("{}: key '{}' is {}, too large for a size", path_, key, v->unsigned_integer));
    }
    return v->unsigned_integer;
  }
  if (v->integer < 0) throw InputError(fmt::format("{}: key '{}' is negative ({})", path_, key, v->integer));
  return static_cast<std::uint64_t>(v->integer);
}

std::uint64_t GgufFile::get_uint(std::string_view key) const {
  if (auto v = get_uint_if(key)) return *v;
  throw InputError(fmt::format("{}: missing key '{}'", path_, key));
}

std::optional<double> GgufFile::get_float_if(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type == GgufType::kF32 || v->type == GgufType::kF64) return v->number;
  if (v->is_integer()) return static_cast<double>(v->integer);
  throw InputError(fmt::format("{}: key '{}' is {}, expected a number", path_, key, type_name(v->type)));
}

double GgufFile::get_float(std::string_view key) const {
  if (auto v = get_float_if(key)) return *v;
  throw InputError(fmt::format("{}: missing key '{}'", path_, key));
}

std::optional<std::string> GgufFile::get_string_if(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kString) {
    throw InputError(fmt::format("{}: key '{}' is {}, expected a string", path_, key, type_name(v->type)));
  }
  return v->text;
}

std::string GgufFile::get_string(std::string_view key) const {
  if (auto v = get_string_if(key)) return *v;
  throw InputError(fmt::format("{}: missing key '{}'", path_, key));
}

std::optional<bool> GgufFile::get_bool_if(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return std::nullopt;
  if (v->type != GgufType::kBool) {
    throw InputError(fmt::format("{}: key '{}' is {}, expected a bool", path_, key, type_name(v->type)));
  }
  return v->integer != 0;
}

const GgufTensor* GgufFile::tensor(std::string_view name) const noexcept {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

// ---- GgufWriter -------------------------------------------------------------

GgufWriter::GgufWriter(std::uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    throw ParameterError(fmt::format("gguf writer: alignment {} is not a power of two", alignment));
  }
  // A reader assumes 32 unless told otherwise.
  if (alignment != kDefaultAlignment) set_u32("general.alignment", alignment);
}

void GgufWriter::set(std::string key, GgufValue value) {
  if (key == "general.alignment" &&
      (!value.is_integer() || value.integer != static_cast<std::int64_t>(alignment_))) {
    throw ParameterError(fmt::format("gguf writer: general.alignment must be the writer's alignment {}", alignment_));
  }
  if (value.type == GgufType::kArray && value.element == GgufType::kArray) {
    throw ParameterError(fmt::format("gguf writer: key '{}': nested arrays are not written", key));
  }
  if (value.type == GgufType::kArray) {
    value.count = value.element == GgufType::kString ? value.strings.size() : value.numbers.size();
  }
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
}

void GgufWriter::set_u32(std::string key, std::uint32_t value) {
  GgufValue v;
  v.type = GgufType::kU32;
  v.integer = value;
  set(std::move(key), std::move(v));
}

void GgufWriter::set_i32(std::string key, std::int32_t value) {
  GgufValue v;
  v.type = GgufType::kI32;
  v.integer = value;
  set(std::move(key), std::move(v));
}

void GgufWriter::set_f32(std::string key, float value) {
  GgufValue v;
  v.type = GgufType::kF32;
  v.number = static_cast<double>(value);
  set(std::move(key), std::move(v));
}

void GgufWriter::set_bool(std::string key, bool value) {
  GgufValue v;
  v.type = GgufType::kBool;
  v.integer = value ? 1 : 0;
  set(std::move(key), std::move(v));
}

void GgufWriter::set_string(std::string key, std::string value) {
  GgufValue v;
  v.type = GgufType::kString;
  v.text = std::move(value);
  set(std::move(key), std::move(v));
}

void GgufWriter::set_strings(std::string key, std::vector<std::string> values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element = GgufType::kString;
  v.strings = std::move(values);
  set(std::move(key), std::move(v));
}

void GgufWriter::set_f32s(std::string key, std::span<const float> values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element = GgufType::kF32;
  v.numbers.reserve(values.size());
  for (const float x : values) v.numbers.push_back(static_cast<double>(x));
  set(std::move(key), std::move(v));
}

void GgufWriter::set_i32s(std::string key, std::span<const std::int32_t> values) {
  GgufValue v;
  v.type = GgufType::kArray;
  v.element = GgufType::kI32;
  v.numbers.assign(values.begin(), values.end());
  set(std::move(key), std::move(v));
}

void GgufWriter::add_tensor(std::string name, std::vector<std::uint64_t> ne, WeightType type,
                            std::vector<std::uint8_t> data) {
  const std::string what = "gguf writer: tensor '" + name + "'";
  if (name.size() > kMaxTensorNameBytes) {
    throw ParameterError(fmt::format("{}: name is {} bytes long (at most {})", what, name.size(), kMaxTensorNameBytes));
  }
  if (tensor_names_.contains(name)) throw ParameterError(what + ": added twice");
  if (ne.empty() || ne.size() > kMaxDims) throw ParameterError(fmt::format("{}: {} dimensions (1 to 4)", what, ne.size()));
  std::uint64_t elements = 1;
  for (const std::uint64_t n : ne) {
    if (n == 0) throw ParameterError(what + ": a dimension is 0");
    elements *= n;
  }
  const WeightTypeInfo& info = weight_type_info(type);
  if (ne[0] % info.block_elements != 0) {
    throw ParameterError(fmt::format("{}: ne[0] = {} is not a multiple of {}'s block of {}", what, ne[0], info.name,
                                     info.block_elements));
  }
  if (data.size() != weight_bytes(type, elements)) {
    throw ParameterError(fmt::format("{}: {} bytes of data, {} {} elements take {}", what, data.size(), elements,
                                     info.name, weight_bytes(type, elements)));
  }
  tensor_names_.insert(name);
  tensors_.push_back(Pending{std::move(name), std::move(ne), type, std::move(data)});
}

std::vector<std::uint8_t> GgufWriter::bytes() const {
  std::vector<std::uint8_t> out;
  put(out, kMagic);
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put(out, static_cast<std::uint32_t>(value.type));
    put_value(out, value);
  }
  std::uint64_t offset = 0;
  for (const Pending& t : tensors_) {
    put_string(out, t.name);
    put(out, static_cast<std::uint32_t>(t.ne.size()));
    for (const std::uint64_t n : t.ne) put(out, n);
    put(out, static_cast<std::uint32_t>(t.type));
    put(out, offset);
    offset = align_up(offset + t.data.size(), alignment_);
  }
  out.resize(static_cast<std::size_t>(align_up(out.size(), alignment_)), 0);
  for (const Pending& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(static_cast<std::size_t>(align_up(out.size(), alignment_)), 0);
  }
  return out;
}

void GgufWriter::write(const std::filesystem::path& path, bool overwrite) const {
  const std::vector<std::uint8_t> content = bytes();
  write_file_atomically(path, std::string_view(reinterpret_cast<const char*>(content.data()), content.size()),
                        overwrite);
}

}  // namespace kvevict
