// safetensors reading and writing. Format (huggingface/safetensors): a u64
// little-endian header length N, N bytes of JSON (name -> {dtype, shape,
// data_offsets [begin, end)} relative to the data that follows, plus an
// optional "__metadata__" of strings), then the data. Sharded checkpoints
// add a model.safetensors.index.json whose "weight_map" names each tensor's
// shard, relative to the index's folder.
#include "kvevict/model/format/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/eval/files.h"
#include "kvevict/model/kernels/weight_types.h"
#include "mapped_file.h"

namespace kvevict {

static_assert(std::endian::native == std::endian::little, "safetensors files are little-endian; so must the host be");

struct Safetensors::Shard {
  std::string path;
  detail::MappedFile file;
  explicit Shard(const std::filesystem::path& p) : path(p.string()), file(p) {}
};

namespace {

using Json = nlohmann::ordered_json;  // keeps the header's order

// A header bigger than this is not a weights header (the format's own
// reader caps it at 100 MB too).
constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

// Bytes per element of each dtype the format defines (sub-byte ones aside).
std::uint64_t dtype_bytes(std::string_view dtype) noexcept {
  static constexpr std::pair<std::string_view, std::uint64_t> kDtypes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"F8_E8M0", 1},
      {"U16", 2},  {"I16", 2}, {"F16", 2}, {"BF16", 2},    {"U32", 4},     {"I32", 4},
      {"F32", 4},  {"U64", 8}, {"I64", 8}, {"F64", 8},     {"C64", 8},
  };
  for (const auto& [name, bytes] : kDtypes) {
    if (name == dtype) return bytes;
  }
  return 0;
}

// One line: nlohmann's messages are, but the text it quotes may not be.
std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  std::replace(s.begin(), s.end(), '\r', ' ');
  return s;
}

Json parse_json(const std::string& file, std::string_view text, std::string_view what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::parse_error& e) {
    fail(file, fmt::format("{} is not valid JSON: {}", what, one_line(e.what())));
  }
}

std::uint64_t json_uint(const std::string& file, const std::string& tensor, const Json& j, std::string_view field) {
  if (!j.is_number_unsigned()) {
    fail(file, fmt::format("tensor '{}': {} holds {}, not a non-negative integer", tensor, field, one_line(j.dump())));
  }
  return j.get<std::uint64_t>();
}

// Reads one file's header into `tensors` (pointing into its map) and its
// metadata into `metadata`.
void read_shard(const std::string& file, const std::uint8_t* base, std::uint64_t size,
                std::vector<SafetensorsTensor>& tensors, std::map<std::string, std::string>& metadata) {
  if (size < 8) fail(file, fmt::format("not a safetensors file (only {} bytes)", size));
  std::uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base, 8);
  if (header_bytes > size - 8) {
    fail(file, fmt::format("bad header length {}: the file has only {} bytes after it", header_bytes, size - 8));
  }
  if (header_bytes > kMaxHeaderBytes) {
    fail(file, fmt::format("bad header length {}: over the {} bytes a header may take", header_bytes, kMaxHeaderBytes));
  }
  const std::string_view text(reinterpret_cast<const char*>(base + 8), static_cast<std::size_t>(header_bytes));
  const Json header = parse_json(file, text, "the header");
  if (!header.is_object()) fail(file, "the header is not a JSON object");
  const std::uint8_t* data = base + 8 + header_bytes;
  const std::uint64_t data_bytes = size - 8 - header_bytes;
  const std::size_t first_new = tensors.size();

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(file, "__metadata__ is not a JSON object");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(file, fmt::format("__metadata__ '{}' is not a string", key));
        metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object()) fail(file, fmt::format("tensor '{}': entry is not a JSON object", name));
    const auto dtype_it = entry.find("dtype");
    const auto shape_it = entry.find("shape");
    const auto offsets_it = entry.find("data_offsets");
    if (dtype_it == entry.end() || !dtype_it->is_string()) fail(file, fmt::format("tensor '{}': no dtype string", name));
    if (shape_it == entry.end() || !shape_it->is_array()) fail(file, fmt::format("tensor '{}': no shape array", name));
    if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
      fail(file, fmt::format("tensor '{}': data_offsets is not a [begin, end] pair", name));
    }
    SafetensorsTensor t;
    t.name = name;
    t.file = file;
    t.dtype = dtype_it->get<std::string>();
    const std::uint64_t element_bytes = dtype_bytes(t.dtype);
    if (element_bytes == 0) fail(file, fmt::format("tensor '{}': unknown dtype '{}'", name, t.dtype));
    std::uint64_t elements = 1;
    for (const Json& dim : *shape_it) {
      const std::uint64_t n = json_uint(file, name, dim, "shape");
      if (n != 0 && elements > std::numeric_limits<std::uint64_t>::max() / element_bytes / n) {
        fail(file, fmt::format("tensor '{}': the shape's size overflows", name));
      }
      elements *= n;
      t.shape.push_back(n);
    }
    t.elements = elements;
    t.bytes = elements * element_bytes;
    const std::uint64_t begin = json_uint(file, name, (*offsets_it)[0], "data_offsets");
    const std::uint64_t end = json_uint(file, name, (*offsets_it)[1], "data_offsets");
    if (begin > end || end > data_bytes) {
      fail(file, fmt::format("tensor '{}': data_offsets [{}, {}) out of range (the data has {} bytes)", name, begin,
                             end, data_bytes));
    }
    if (end - begin != t.bytes) {
      fail(file, fmt::format("tensor '{}': data_offsets [{}, {}) hold {} bytes, its shape and dtype take {}", name,
                             begin, end, end - begin, t.bytes));
    }
    t.data = data + begin;
    tensors.push_back(std::move(t));
  }
  // Two tensors sharing bytes would be read as each other's weights.
  std::vector<std::pair<std::uint64_t, const SafetensorsTensor*>> by_offset;
  for (std::size_t i = first_new; i < tensors.size(); ++i) {
    by_offset.emplace_back(static_cast<std::uint64_t>(tensors[i].data - data), &tensors[i]);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto& [a_at, a] = by_offset[i - 1];
    const auto& [b_at, b] = by_offset[i];
    if (b_at < a_at + a->bytes) {
      fail(file, fmt::format("tensors '{}' (data_offsets [{}, {})) and '{}' (from {}) overlap", a->name, a_at,
                             a_at + a->bytes, b->name, b_at));
    }
  }
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), "cannot open");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return text;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::unique_ptr<Safetensors> Safetensors::open(const std::filesystem::path& path) {
  std::error_code ec;
  std::filesystem::path target = path;
  if (std::filesystem::is_directory(path, ec)) {
    if (std::filesystem::exists(path / "model.safetensors.index.json", ec)) {
      target = path / "model.safetensors.index.json";
    } else if (std::filesystem::exists(path / "model.safetensors", ec)) {
      target = path / "model.safetensors";
    } else {
      fail(path.string(), "holds neither model.safetensors nor model.safetensors.index.json");
    }
  }
  std::unique_ptr<Safetensors> st(new Safetensors());
  if (!ends_with(target.filename().string(), ".json")) {
    st->shards_.push_back(std::make_unique<Shard>(target));
    read_shard(st->shards_.back()->path, st->shards_.back()->file.data(), st->shards_.back()->file.size(),
               st->tensors_, st->metadata_);
    st->index();
    return st;
  }

  // An index: weight_map tensor -> shard file, each shard opened once.
  const std::string index = target.string();
  const Json json = parse_json(index, read_text_file(target), "the index");
  if (!json.is_object() || !json.contains("weight_map") || !json["weight_map"].is_object()) {
    fail(index, "has no \"weight_map\" object");
  }
  const std::filesystem::path folder = target.parent_path();
  std::vector<std::string> shard_names;  // in order of first mention
  std::unordered_map<std::string, std::string> wanted;  // tensor -> shard name
  for (const auto& [tensor, shard] : json["weight_map"].items()) {
    if (!shard.is_string()) fail(index, fmt::format("weight_map '{}' is not a file name", tensor));
    const std::string name = shard.get<std::string>();
    const std::filesystem::path relative(name);
    if (name.empty() || relative.is_absolute() ||
        std::any_of(relative.begin(), relative.end(), [](const auto& part) { return part == ".."; })) {
      fail(index, fmt::format("weight_map '{}': shard '{}' is not a file name inside the index's folder", tensor, name));
    }
    if (std::find(shard_names.begin(), shard_names.end(), name) == shard_names.end()) shard_names.push_back(name);
    wanted[tensor] = name;
  }
  std::unordered_map<std::string, std::string> found;  // tensor -> shard name
  bool first = true;
  for (const std::string& name : shard_names) {
    const std::filesystem::path shard_path = folder / name;
    if (!std::filesystem::exists(shard_path, ec)) {
      fail(index, fmt::format("missing shard '{}' ({} does not exist)", name, shard_path.string()));
    }
    st->shards_.push_back(std::make_unique<Shard>(shard_path));
    std::vector<SafetensorsTensor> tensors;
    std::map<std::string, std::string> metadata;
    read_shard(st->shards_.back()->path, st->shards_.back()->file.data(), st->shards_.back()->file.size(), tensors,
               metadata);
    if (first) st->metadata_ = std::move(metadata);
    first = false;
    for (SafetensorsTensor& t : tensors) {
      const auto [it, inserted] = found.emplace(t.name, name);
      if (!inserted) {
        fail(index, fmt::format("tensor '{}' is in two shards, '{}' and '{}'", t.name, it->second, name));
      }
      st->tensors_.push_back(std::move(t));
    }
  }
  for (const auto& [tensor, shard] : wanted) {
    const auto it = found.find(tensor);
    if (it == found.end() || it->second != shard) {
      fail(index, fmt::format("tensor '{}' is not in its shard '{}'", tensor, shard));
    }
  }
  st->index();
  return st;
}

Safetensors::~Safetensors() = default;

void Safetensors::index() {
  index_.reserve(tensors_.size());
  for (std::size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
}

const SafetensorsTensor* Safetensors::tensor(std::string_view name) const noexcept {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void Safetensors::to_floats(const SafetensorsTensor& tensor, float* out) const {
  if (tensor.dtype == "F32") {
    std::memcpy(out, tensor.data, static_cast<std::size_t>(tensor.elements) * 4);
  } else if (tensor.dtype == "F16" || tensor.dtype == "BF16") {
    const bool half = tensor.dtype == "F16";
    for (std::uint64_t i = 0; i < tensor.elements; ++i) {
      const auto bits = static_cast<std::uint16_t>(tensor.data[2 * i] | (tensor.data[2 * i + 1] << 8));
      out[i] = half ? half_to_float(bits) : bf16_to_float(bits);
    }
  } else {
    fail(tensor.file, fmt::format("tensor '{}': dtype {} cannot be read as floats (F32, F16 or BF16 only)", tensor.name,
                                  tensor.dtype));
  }
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata, bool overwrite) {
  const std::string file = path.string();
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  std::set<std::string> names;
  for (const SafetensorsEntry& t : tensors) {
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
      throw ParameterError(fmt::format("{}: tensor '{}': dtype '{}' is not written (F32, F16 or BF16)", file, t.name,
                                       t.dtype));
    }
    if (t.name == "__metadata__" || !names.insert(t.name).second) {
      throw ParameterError(fmt::format("{}: tensor name '{}' used twice or reserved", file, t.name));
    }
    std::uint64_t elements = 1;
    for (const std::uint64_t n : t.shape) elements *= n;
    if (elements * dtype_bytes(t.dtype) != t.data.size()) {
      throw ParameterError(fmt::format("{}: tensor '{}': {} bytes of data, its shape takes {}", file, t.name,
                                       t.data.size(), elements * dtype_bytes(t.dtype)));
    }
    header[t.name] = Json{{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.data.size()}}};
    offset += t.data.size();
  }
  std::string text = header.dump();
  // Spaces up to a multiple of 8, so the data starts 8-aligned.
  text.resize((text.size() + 7) / 8 * 8, ' ');

  check_output_file(path, overwrite);
  const std::filesystem::path tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(file, "cannot be written (is the folder there and writable?)");
    const std::uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    for (const SafetensorsEntry& t : tensors) {
      out.write(reinterpret_cast<const char*>(t.data.data()), static_cast<std::streamsize>(t.data.size()));
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      fail(file, "writing failed (disk full?)");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    fail(file, fmt::format("cannot be written: {}", ec.message()));
  }
}

}  // namespace kvevict
