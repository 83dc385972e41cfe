#include "kvevict/model/arch/inspect.h"

#include <cstring>
#include <fstream>
#include <span>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "kvevict/model/format/safetensors.h"

namespace kvevict {

namespace {

// Arrays of arrays, decoded from the file's bytes where the reader checked
// them (it holds only their count: gguf.h). Only inspect shows them.
class NestedArrays {
 public:
  NestedArrays(std::span<const std::uint8_t> bytes, std::uint64_t at) : bytes_(bytes), at_(at) {}

  nlohmann::ordered_json arrays(std::uint64_t count) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::uint64_t i = 0; i < count; ++i) out.push_back(array());
    return out;
  }

 private:
  template <typename T>
  T take() {
    if (at_ + sizeof(T) > bytes_.size()) throw InputError("inspect: a nested array runs past the end of the file");
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }

  nlohmann::ordered_json array() {
    const auto type = static_cast<GgufType>(take<std::uint32_t>());
    const auto n = take<std::uint64_t>();
    if (type == GgufType::kArray) return arrays(n);
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (std::uint64_t i = 0; i < n; ++i) out.push_back(scalar(type));
    return out;
  }

  nlohmann::ordered_json scalar(GgufType type) {
    switch (type) {
      case GgufType::kU8: return take<std::uint8_t>();
      case GgufType::kI8: return take<std::int8_t>();
      case GgufType::kU16: return take<std::uint16_t>();
      case GgufType::kI16: return take<std::int16_t>();
      case GgufType::kU32: return take<std::uint32_t>();
      case GgufType::kI32: return take<std::int32_t>();
      case GgufType::kU64: return take<std::uint64_t>();
      case GgufType::kI64: return take<std::int64_t>();
      case GgufType::kF32: return take<float>();
      case GgufType::kF64: return take<double>();
      case GgufType::kBool: return take<std::uint8_t>() != 0;
      case GgufType::kString: {
        const auto n = take<std::uint64_t>();
        if (n > bytes_.size() - at_) throw InputError("inspect: a nested string runs past the end of the file");
        std::string text(reinterpret_cast<const char*>(bytes_.data() + at_), static_cast<std::size_t>(n));
        at_ += n;
        return text;
      }
      case GgufType::kArray: break;
    }
    return nullptr;
  }

  std::span<const std::uint8_t> bytes_;
  std::uint64_t at_;
};

nlohmann::ordered_json gguf_value_json(const GgufValue& v, std::span<const std::uint8_t> file) {
  if (v.type == GgufType::kU64) return v.unsigned_integer;
  auto number = [](GgufType type, double x) -> nlohmann::ordered_json {
    if (type == GgufType::kF32 || type == GgufType::kF64) return x;
    if (type == GgufType::kBool) return x != 0.0;
    return static_cast<std::int64_t>(x);
  };
  switch (v.type) {
    case GgufType::kString:
      return v.text;
    case GgufType::kF32:
    case GgufType::kF64:
      return v.number;
    case GgufType::kBool:
      return v.integer != 0;
    case GgufType::kArray: {
      nlohmann::ordered_json out = nlohmann::ordered_json::array();
      if (v.element == GgufType::kString) {
        for (const std::string& s : v.strings) out.push_back(s);
      } else if (v.element == GgufType::kArray) {
        return NestedArrays(file, v.nested_at).arrays(v.count);
      } else if (v.element == GgufType::kU64) {
        for (const std::uint64_t x : v.bits64) out.push_back(x);
      } else if (v.element == GgufType::kI64) {
        for (const std::uint64_t x : v.bits64) out.push_back(static_cast<std::int64_t>(x));
      } else {
        for (const double x : v.numbers) out.push_back(number(v.element, x));
      }
      return out;
    }
    default:
      return v.integer;
  }
}

nlohmann::ordered_json read_json_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw InputError(fmt::format("{}: cannot be opened", file.string()));
  try {
    return nlohmann::ordered_json::parse(in);
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: is not valid JSON", file.string()));
  }
}

}  // namespace

std::string inspect_file_json(const std::filesystem::path& path, int indent) {
  std::error_code ec;
  nlohmann::ordered_json out;
  std::string magic(8, '\0');
  if (!std::filesystem::is_directory(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", path.string()));
    in.read(magic.data(), 8);
    magic.resize(static_cast<std::size_t>(in.gcount()));
  }
  if (magic.rfind("GGUF", 0) == 0) {
    const std::unique_ptr<GgufFile> gguf = GgufFile::open(path);
    out["format"] = "gguf";
    out["version"] = gguf->version();
    out["alignment"] = gguf->alignment();
    nlohmann::ordered_json metadata = nlohmann::ordered_json::object();
    // The reader refused duplicate keys: each is appended as it is, without
    // ordered_json's search for an equal key (quadratic in a file of many).
    auto& entries = metadata.get_ref<nlohmann::ordered_json::object_t&>();
    entries.reserve(gguf->metadata().size());
    for (const auto& [key, value] : gguf->metadata()) {
      entries.nlohmann::ordered_json::object_t::Container::emplace_back(key, gguf_value_json(value, gguf->bytes()));
    }
    out["metadata"] = std::move(metadata);
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const GgufTensor& t : gguf->tensors()) {
      tensors.push_back({{"name", t.name}, {"ne", t.ne}, {"type", ggml_type_name(t.type)}, {"type_id", t.type},
                         {"offset", t.offset}});
    }
    out["tensors"] = std::move(tensors);
  } else if (magic == "KVEVMODL") {
    const auto model = Model::load(path);
    const ModelConfig& c = model->config();
    out["format"] = "kvm";
    out["config"] = {{"vocab", c.vocab}, {"layers", c.layers}, {"heads", c.heads}, {"kv_heads", c.kv_heads},
                     {"width", c.width}, {"ff", c.ff},         {"context", c.context}, {"rope_base", c.rope_base},
                     {"norm_eps", c.norm_eps}};
  } else {
    const std::filesystem::path folder = std::filesystem::is_directory(path, ec) ? path : path.parent_path();
    if (!std::filesystem::exists(folder / "config.json", ec)) {
      throw InputError(fmt::format("{}: not a model kvevict reads (a .kvm, a .gguf, or a folder with config.json "
                                   "and safetensors weights)",
                                   path.string()));
    }
    const std::unique_ptr<Safetensors> st = Safetensors::open(std::filesystem::is_directory(path, ec) ? folder : path);
    out["format"] = "safetensors";
    out["config"] = read_json_file(folder / "config.json");
    nlohmann::ordered_json tensors = nlohmann::ordered_json::array();
    for (const SafetensorsTensor& t : st->tensors()) {
      tensors.push_back({{"name", t.name}, {"shape", t.shape}, {"dtype", t.dtype}});
    }
    out["tensors"] = std::move(tensors);
  }
  return out.dump(indent);
}

std::string describe_model(const Model& model) {
  const ModelConfig& c = model.config();
  std::string out;
  auto line = [&](std::string_view name, const std::string& value) { out += fmt::format("{}: {}\n", name, value); };
  line("file", model.path());
  line("architecture", c.architecture);
  line("format", c.format);
  line("weights", fmt::format("{} ({} parameters, {})", c.weight_types, model.parameter_count(),
                              model.uses_kernels() ? fmt::format("held in the file's types: {:.1f} MB read a token",
                                                                 static_cast<double>(model.weight_bytes_per_token()) / 1e6)
                                                   : std::string("held as float32")));
  line("layers", std::to_string(c.layers));
  line("width", std::to_string(c.width));
  line("heads", fmt::format("{} query, {} KV (head size {})", c.heads, c.kv_heads, c.head_dim()));
  line("feed-forward", fmt::format("{} ({})", c.ff, c.mlp == MlpKind::kSwiGlu ? "SwiGLU" : "GELU"));
  line("context", c.context == c.trained_context
                      ? std::to_string(c.context)
                      : fmt::format("{} (of {} trained; --context to change)", c.context, c.trained_context));
  line("rope", fmt::format("{} pairs, base {}{}", c.rope_mode == RopeMode::kNeox ? "NEOX (i, i+d/2)" : "NORMAL (2i, 2i+1)",
                           c.rope_base, c.rope_divisors.empty() ? "" : ", scaled"));
  line("output", c.tied_output ? "tied to the token embedding" : "its own matrix");
  line("tokenizer", model.vocabulary().describe());
  const std::uint64_t kv = std::uint64_t{2} * 4 * c.head_dim() * c.head_count();
  line("KV per position", fmt::format("{} bytes at fp32 ({} layers x {} KV heads x {} x 2 x 4 B)", kv, c.layers,
                                       c.kv_heads, c.head_dim()));
  return out;
}

}  // namespace kvevict
