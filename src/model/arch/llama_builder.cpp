// The Llama family (llama, qwen2, mistral) from GGUF files and Hugging Face
// safetensors folders: one builder, two sources of tensors and settings.
//
// Both sources are read into the layout the decoder runs (model.h): each
// matrix in its file's type for the weight kernels (matmul.h; Q5_0 decoded
// to F32), q, k and v as three, their biases next to each other in float32,
// SwiGLU's gate and up, and the output matrix or the tied embedding. Every tensor is checked against the shape the settings imply
// before anything is allocated, so a config that contradicts the weights is
// refused by name.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <optional>
#include <unordered_set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/model/format/gguf.h"
#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/format/safetensors.h"
#include "kvevict/model/kernels/weight_types.h"
#include "model/arch/model_builder.h"

namespace kvevict {

namespace {

constexpr const char* kTiny = "kvevict-tiny";

// Sizes past these are refused before anything is allocated: far beyond the
// models this builder is for (135M ... 8B), small enough that a hostile
// header cannot ask for terabytes.
constexpr std::uint64_t kMaxLayers = 512;
constexpr std::uint64_t kMaxWidth = 1U << 16;
constexpr std::uint64_t kMaxFf = 1U << 18;
constexpr std::uint64_t kMaxVocab = 1U << 22;
constexpr std::uint64_t kMaxHeads = 1024;
constexpr std::uint64_t kMaxContext = 1U << 24;
// Memory the weights take as kvevict holds them (the matrices in their
// file's types, norms and biases as float32): 24 GiB, an 8B model at F16
// and more than any quantized one this builder is for.
constexpr std::uint64_t kMaxBytes = 24ULL << 30;

[[noreturn]] void fail(const std::string& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file, what));
}

std::uint32_t checked(const std::string& file, const std::string& what, std::uint64_t value, std::uint64_t low,
                      std::uint64_t high) {
  if (value < low || value > high) fail(file, fmt::format("{} is {} (must be {} ... {})", what, value, low, high));
  return static_cast<std::uint32_t>(value);
}

// Where a tensor comes from: its shape in PyTorch order ([out, in] for a
// matrix) and its values as float32.
class TensorSource {
 public:
  virtual ~TensorSource() = default;
  virtual const std::string& file() const = 0;
  // The tensor's name as the file spells it, for errors and lookups.
  virtual std::string name_of(const std::string& role, std::uint32_t layer) const = 0;
  virtual bool has(const std::string& name) const = 0;
  // Every tensor the file holds, so that none goes unused unnoticed.
  virtual std::vector<std::string_view> names() const = 0;
  // A tensor the file may hold that the model does not need: derived from
  // the settings, or a duplicate of one it reads (never weights it drops).
  virtual bool ignorable(std::string_view name, const ModelConfig& c) const = 0;
  virtual std::vector<std::uint64_t> shape(const std::string& name) const = 0;
  // The type for the row's weight summary ("Q4_K", "BF16"); refuses (by name)
  // a type kvevict does not read.
  virtual std::string type_of(const std::string& name) const = 0;
  virtual void read(const std::string& name, float* out) const = 0;
  // The tensor's bytes as stored, in ggml's layout for its type (safetensors'
  // F32, F16 and BF16 are those of GGUF's).
  struct Raw {
    WeightType type;
    const std::uint8_t* data;
  };
  virtual Raw raw(const std::string& name) const = 0;
};

class GgufSource final : public TensorSource {
 public:
  explicit GgufSource(const GgufFile& gguf) : gguf_(gguf) {}
  const std::string& file() const override { return gguf_.path(); }
  std::string name_of(const std::string& role, std::uint32_t layer) const override {
    static const std::map<std::string, std::string> kNames = {
        {"embed", "token_embd.weight"},     {"output", "output.weight"},     {"final_norm", "output_norm.weight"},
        {"attn_norm", "attn_norm.weight"}, {"q", "attn_q.weight"},          {"k", "attn_k.weight"},
        {"v", "attn_v.weight"},             {"q_bias", "attn_q.bias"},       {"k_bias", "attn_k.bias"},
        {"v_bias", "attn_v.bias"},          {"o", "attn_output.weight"},     {"mlp_norm", "ffn_norm.weight"},
        {"gate", "ffn_gate.weight"},        {"up", "ffn_up.weight"},         {"down", "ffn_down.weight"},
        {"qkv", "attn_qkv.weight"},         {"o_bias", "attn_output.bias"},  {"gate_bias", "ffn_gate.bias"},
        {"up_bias", "ffn_up.bias"},         {"down_bias", "ffn_down.bias"},
    };
    const std::string& n = kNames.at(role);
    if (role == "embed" || role == "output" || role == "final_norm") return n;
    return fmt::format("blk.{}.{}", layer, n);
  }
  bool has(const std::string& name) const override { return gguf_.tensor(name) != nullptr; }
  std::vector<std::string_view> names() const override {
    std::vector<std::string_view> out;
    out.reserve(gguf_.tensors().size());
    for (const GgufTensor& t : gguf_.tensors()) out.emplace_back(t.name);
    return out;
  }
  // rope_freqs.weight is read with the settings (build_gguf_model).
  bool ignorable(std::string_view name, const ModelConfig&) const override { return name == "rope_freqs.weight"; }
  std::vector<std::uint64_t> shape(const std::string& name) const override {
    std::vector<std::uint64_t> s = gguf_.tensor(name)->ne;
    std::reverse(s.begin(), s.end());  // ggml's ne[0] is the fastest: PyTorch's last
    return s;
  }
  std::string type_of(const std::string& name) const override {
    const GgufTensor& t = *gguf_.tensor(name);
    const WeightTypeInfo* info = weight_type_info(t.type);
    if (info == nullptr) {
      fail(file(), fmt::format("tensor '{}' has type {}, which kvevict does not read (it reads {})", name,
                               ggml_type_name(t.type), supported_weight_types()));
    }
    return std::string(info->name);
  }
  void read(const std::string& name, float* out) const override {
    const GgufTensor& t = *gguf_.tensor(name);
    dequantize(weight_type_info(t.type)->type, t.data, out, t.elements);
  }
  Raw raw(const std::string& name) const override {
    const GgufTensor& t = *gguf_.tensor(name);
    return {weight_type_info(t.type)->type, t.data};
  }

 private:
  const GgufFile& gguf_;
};

class SafetensorsSource final : public TensorSource {
 public:
  SafetensorsSource(const Safetensors& st, std::string file) : st_(st), file_(std::move(file)) {}
  const std::string& file() const override { return file_; }
  std::string name_of(const std::string& role, std::uint32_t layer) const override {
    static const std::map<std::string, std::string> kNames = {
        {"attn_norm", "input_layernorm.weight"},
        {"q", "self_attn.q_proj.weight"},
        {"k", "self_attn.k_proj.weight"},
        {"v", "self_attn.v_proj.weight"},
        {"q_bias", "self_attn.q_proj.bias"},
        {"k_bias", "self_attn.k_proj.bias"},
        {"v_bias", "self_attn.v_proj.bias"},
        {"o", "self_attn.o_proj.weight"},
        {"o_bias", "self_attn.o_proj.bias"},
        {"gate_bias", "mlp.gate_proj.bias"},
        {"up_bias", "mlp.up_proj.bias"},
        {"down_bias", "mlp.down_proj.bias"},
        {"mlp_norm", "post_attention_layernorm.weight"},
        {"gate", "mlp.gate_proj.weight"},
        {"up", "mlp.up_proj.weight"},
        {"down", "mlp.down_proj.weight"},
    };
    if (role == "embed") return "model.embed_tokens.weight";
    if (role == "output") return "lm_head.weight";
    if (role == "final_norm") return "model.norm.weight";
    return fmt::format("model.layers.{}.{}", layer, kNames.at(role));
  }
  bool has(const std::string& name) const override { return st_.tensor(name) != nullptr; }
  std::vector<std::string_view> names() const override {
    std::vector<std::string_view> out;
    out.reserve(st_.tensors().size());
    for (const SafetensorsTensor& t : st_.tensors()) out.emplace_back(t.name);
    return out;
  }
  // As Hugging Face loads them: a tied model's lm_head (the config ties it
  // to the embedding) and old checkpoints' rotary inv_freq buffers (derived
  // from rope_theta) are not read.
  bool ignorable(std::string_view name, const ModelConfig& c) const override {
    constexpr std::string_view kInvFreq = ".rotary_emb.inv_freq";
    return (c.tied_output && name == "lm_head.weight") ||
           (name.size() > kInvFreq.size() && name.substr(name.size() - kInvFreq.size()) == kInvFreq);
  }
  std::vector<std::uint64_t> shape(const std::string& name) const override { return st_.tensor(name)->shape; }
  std::string type_of(const std::string& name) const override {
    const SafetensorsTensor& t = *st_.tensor(name);
    if (t.dtype != "F32" && t.dtype != "F16" && t.dtype != "BF16") {
      fail(t.file, fmt::format("tensor '{}' has dtype {}, which kvevict does not read (it reads F32, F16, BF16)",
                               name, t.dtype));
    }
    return t.dtype;
  }
  void read(const std::string& name, float* out) const override { st_.to_floats(*st_.tensor(name), out); }
  Raw raw(const std::string& name) const override {
    const SafetensorsTensor& t = *st_.tensor(name);
    const WeightType type = t.dtype == "F32" ? WeightType::kF32 : t.dtype == "F16" ? WeightType::kF16 : WeightType::kBF16;
    return {type, t.data};
  }

 private:
  const Safetensors& st_;
  std::string file_;
};

// One tensor to place: a vector (a norm, a bias) goes to the float32
// weights; a matrix keeps its file's type in the blocks when the kernels
// read it (matmul.h), or is decoded to F32 there (Q5_0; every matrix of
// kvevict-tiny, whose products stay Eigen's on float32).
struct Planned {
  std::string name;
  std::vector<std::uint64_t> shape;
  bool matrix = false;
  std::uint64_t offset = 0;  // in floats (a vector) or bytes (a matrix)
  WeightType type = WeightType::kF32;  // as held (a matrix)
};

// Which biases beyond q, k and v (ModelConfig::qkv_bias) a model has. A
// GGUF llama file's are optional, each read when present (as llama.cpp
// does); config.json's attention_bias and mlp_bias require them.
enum class Biases { kNone, kWherePresent, kRequired };
struct BiasPlan {
  Biases output = Biases::kNone;  // attn_output / o_proj
  Biases mlp = Biases::kNone;     // ffn_gate, ffn_up, ffn_down
};

// Every tensor in the file is read or refused by name: one the model would
// not use (a layer past block_count, a bias the settings leave out, another
// architecture's tensor) would make it compute something else than the file
// means, with no warning. Linear in the file's tensors.
void refuse_unused(const TensorSource& src, const std::vector<Planned>& plan, const ModelConfig& c) {
  std::unordered_set<std::string_view> used;
  used.reserve(plan.size());
  for (const Planned& p : plan) used.insert(p.name);
  std::vector<std::string_view> unused;
  for (const std::string_view name : src.names()) {
    if (!used.contains(name) && !src.ignorable(name, c)) unused.push_back(name);
  }
  if (unused.empty()) return;
  const std::size_t shown = std::min<std::size_t>(unused.size(), 3);
  fail(src.file(), fmt::format("tensor{} '{}'{} {} not part of a {} model with these settings ({} layers{}{}); "
                               "kvevict refuses a file whose tensors it would not all use",
                               unused.size() > 1 ? "s" : "",
                               fmt::join(unused.begin(), unused.begin() + static_cast<std::ptrdiff_t>(shown), "', '"),
                               unused.size() > shown ? fmt::format(" and {} more", unused.size() - shown) : "",
                               unused.size() > 1 ? "are" : "is", c.architecture, c.layers,
                               c.tied_output ? ", tied output" : "", c.qkv_bias ? ", q/k/v biases" : ""));
}

constexpr std::size_t kAbsent = static_cast<std::size_t>(-1);

// Where each of a layer's tensors is in the plan (kAbsent: a bias the file
// does not hold).
struct LayerAt {
  std::size_t attn_norm, q, k = 0, v = 0, q_bias = 0, k_bias = 0, v_bias = 0, o, mlp_norm, gate = 0, up, down;
  std::size_t o_bias = kAbsent, gate_bias = kAbsent, up_bias = kAbsent, down_bias = kAbsent;
};

// The types, counted (and any type kvevict does not read refused by name)
// before the weights are allocated: "Q4_K (97), F32 (33)".
std::string weight_types_of(const TensorSource& src, const std::vector<Planned>& plan) {
  std::map<std::string, std::uint32_t> types;
  for (const Planned& p : plan) ++types[src.type_of(p.name)];
  std::vector<std::pair<std::string, std::uint32_t>> by_count(types.begin(), types.end());
  std::stable_sort(by_count.begin(), by_count.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::vector<std::string> parts;
  for (const auto& [type, n] : by_count) parts.push_back(fmt::format("{} ({})", type, n));
  return by_count.size() == 1 ? by_count.front().first : fmt::format("{}", fmt::join(parts, ", "));
}

// Reads every planned tensor into the model's parts: vectors as float32,
// matrices as stored (or as float32 where no kernel reads their type), each
// weight checked finite.
void read_planned(const TensorSource& src, const std::vector<Planned>& plan, Model::Parts& m) {
  const std::string& file = src.file();
  std::vector<float> row;
  for (const Planned& p : plan) {
    auto nonfinite = [&](const float* values, std::uint64_t n, std::uint64_t first) {
      for (std::uint64_t i = 0; i < n; ++i) {
        if (!std::isfinite(values[i])) {
          fail(file, fmt::format("tensor '{}' holds a non-finite weight at index {}", p.name, first + i));
        }
      }
    };
    if (!p.matrix) {
      float* out = m.data.data() + p.offset;
      src.read(p.name, out);
      nonfinite(out, p.shape[0], 0);
      continue;
    }
    const std::uint64_t rows = p.shape[0];
    const std::uint64_t cols = p.shape[1];
    const TensorSource::Raw raw = src.raw(p.name);
    std::uint8_t* out = m.blocks.data() + p.offset;
    const std::uint64_t in_row = weight_bytes(raw.type, cols);
    const std::uint64_t out_row = weight_bytes(p.type, cols);
    row.resize(cols);
    // Row by row: decoded once to check every weight is finite, and kept as
    // stored or as those float32 values.
    for (std::uint64_t r = 0; r < rows; ++r) {
      dequantize(raw.type, raw.data + r * in_row, row.data(), cols);
      nonfinite(row.data(), cols, r * cols);
      if (p.type == raw.type) {
        std::memcpy(out + r * out_row, raw.data + r * in_row, in_row);
      } else {
        std::memcpy(out + r * out_row, row.data(), out_row);
      }
    }
  }
}

// Layer l's weights, viewed in the model's parts.
std::vector<Model::Layer> layers_of(const std::vector<LayerAt>& at, const ModelConfig& c,
                                    const std::function<WeightMatrix(std::size_t)>& matrix,
                                    const std::function<const float*(std::size_t)>& vector) {
  std::vector<Model::Layer> layers;
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const LayerAt& a = at[l];
    Model::Layer layer;
    layer.attn_norm = vector(a.attn_norm);
    layer.q = matrix(a.q);
    if (c.architecture != kTiny) {
      layer.k = matrix(a.k);
      layer.v = matrix(a.v);
    }
    layer.qkv_bias = c.qkv_bias ? vector(a.q_bias) : nullptr;  // k's and v's follow q's (planned in that order)
    layer.proj = matrix(a.o);
    layer.mlp_norm = vector(a.mlp_norm);
    if (c.mlp == MlpKind::kSwiGlu) layer.gate = matrix(a.gate);
    layer.up = matrix(a.up);
    layer.down = matrix(a.down);
    auto bias = [&](std::size_t i) { return i == kAbsent ? nullptr : vector(i); };
    layer.proj_bias = bias(a.o_bias);
    layer.gate_bias = bias(a.gate_bias);
    layer.up_bias = bias(a.up_bias);
    layer.down_bias = bias(a.down_bias);
    layers.push_back(layer);
  }
  return layers;
}

// Builds the model once the configuration is known: checks every tensor's
// presence and shape, sizes the weights, reads them; refuses a tensor the
// model would not use.
std::shared_ptr<const Model> assemble(const TensorSource& src, ModelConfig c, std::shared_ptr<const Vocabulary> vocab,
                                      std::vector<float> rope_divisors, const std::string& path, BiasPlan biases) {
  const std::string& file = src.file();
  const std::uint64_t d = c.head_dim();
  const std::uint64_t w = c.width;
  const bool kernels = c.architecture != kTiny;
  std::vector<Planned> plan;
  std::uint64_t floats = 0;
  std::uint64_t bytes = 0;
  std::uint64_t parameters = 0;
  auto take = [&](const std::string& name, std::vector<std::uint64_t> shape) -> std::size_t {
    if (!src.has(name)) fail(file, fmt::format("tensor '{}' is missing", name));
    const std::vector<std::uint64_t> have = src.shape(name);
    if (have != shape) {
      fail(file, fmt::format("tensor '{}' has shape [{}]; the model's settings make it [{}]", name,
                             fmt::join(have, ", "), fmt::join(shape, ", ")));
    }
    std::uint64_t n = 1;
    for (const std::uint64_t s : shape) n *= s;  // each factor is capped: no overflow
    Planned p{name, std::move(shape), false, 0, WeightType::kF32};
    parameters += n;
    if (p.shape.size() == 2) {
      src.type_of(name);  // refuses a type kvevict does not read, by name
      p.matrix = true;
      const WeightType stored = src.raw(name).type;
      p.type = kernels && has_matmul_kernel(stored) ? stored : WeightType::kF32;
      p.offset = bytes;
      bytes += weight_bytes(p.type, n);
    } else {
      p.offset = floats;
      floats += n;
    }
    if (bytes + floats * 4 > kMaxBytes) {
      fail(file, fmt::format("the model needs more than {} GiB of memory as kvevict holds it", kMaxBytes >> 30));
    }
    plan.push_back(std::move(p));
    return plan.size() - 1;
  };
  auto take_bias = [&](Biases rule, const std::string& name, std::uint64_t n) -> std::size_t {
    if (rule == Biases::kNone || (rule == Biases::kWherePresent && !src.has(name))) return kAbsent;
    return take(name, {n});
  };
  const std::size_t embed_at = take(src.name_of("embed", 0), {c.vocab, w});
  std::vector<LayerAt> at(c.layers);
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    LayerAt& a = at[l];
    a.attn_norm = take(src.name_of("attn_norm", l), {w});
    if (c.architecture == kTiny) {  // one fused q | k | v matrix, as its .kvm holds it
      a.q = take(src.name_of("qkv", l), {(c.heads + 2 * c.kv_heads) * d, w});
    } else {
      a.q = take(src.name_of("q", l), {c.heads * d, w});
      a.k = take(src.name_of("k", l), {c.kv_heads * d, w});
      a.v = take(src.name_of("v", l), {c.kv_heads * d, w});
    }
    if (c.qkv_bias) {  // planned in this order: the three biases lie next to each other
      a.q_bias = take(src.name_of("q_bias", l), {c.heads * d});
      a.k_bias = take(src.name_of("k_bias", l), {c.kv_heads * d});
      a.v_bias = take(src.name_of("v_bias", l), {c.kv_heads * d});
    }
    a.o = take(src.name_of("o", l), {w, c.heads * d});
    a.mlp_norm = take(src.name_of("mlp_norm", l), {w});
    if (c.mlp == MlpKind::kSwiGlu) a.gate = take(src.name_of("gate", l), {c.ff, w});
    a.up = take(src.name_of("up", l), {c.ff, w});
    a.down = take(src.name_of("down", l), {w, c.ff});
    if (c.architecture != kTiny) {
      a.o_bias = take_bias(biases.output, src.name_of("o_bias", l), w);
      if (c.mlp == MlpKind::kSwiGlu) a.gate_bias = take_bias(biases.mlp, src.name_of("gate_bias", l), c.ff);
      a.up_bias = take_bias(biases.mlp, src.name_of("up_bias", l), c.ff);
      a.down_bias = take_bias(biases.mlp, src.name_of("down_bias", l), w);
    }
  }
  const std::size_t norm_at = take(src.name_of("final_norm", 0), {w});
  std::size_t output_at = embed_at;
  if (!c.tied_output) output_at = take(src.name_of("output", 0), {c.vocab, w});
  refuse_unused(src, plan, c);

  c.weight_types = weight_types_of(src, plan);

  Model::Parts m;
  m.data.resize(floats);
  m.blocks.resize(bytes);
  m.parameters = parameters;
  m.kernels = kernels;
  read_planned(src, plan, m);
  auto matrix = [&](std::size_t i) {
    const Planned& p = plan[i];
    return WeightMatrix{p.type, static_cast<std::uint32_t>(p.shape[0]), static_cast<std::uint32_t>(p.shape[1]),
                        m.blocks.data() + p.offset};
  };
  auto vector = [&](std::size_t i) -> const float* { return m.data.data() + plan[i].offset; };
  m.embed = matrix(embed_at);
  m.output = matrix(output_at);
  m.final_norm = vector(norm_at);
  m.layers = layers_of(at, c, matrix, vector);
  c.rope_divisors = std::move(rope_divisors);
  m.config = std::move(c);
  m.path = path;
  m.vocab = std::move(vocab);
  return Model::from_parts(std::move(m));
}

void check_shape(const std::string& file, ModelConfig& c) {
  checked(file, "the number of layers", c.layers, 1, kMaxLayers);
  checked(file, "the embedding width", c.width, 2, kMaxWidth);
  checked(file, "the feed-forward width", c.ff, 1, kMaxFf);
  checked(file, "the number of attention heads", c.heads, 1, kMaxHeads);
  checked(file, "the number of KV heads", c.kv_heads, 1, c.heads);
  checked(file, "the vocabulary size", c.vocab, 2, kMaxVocab);
  checked(file, "the context length", c.context, 2, kMaxContext);
  if (c.heads % c.kv_heads != 0) {
    fail(file, fmt::format("{} KV heads do not divide {} attention heads", c.kv_heads, c.heads));
  }
  if (c.head_size == 0 && c.width % c.heads != 0) {
    fail(file, fmt::format("the width {} is not a whole number of heads ({})", c.width, c.heads));
  }
  const std::uint32_t d = c.head_dim();
  if (d < 2 || d % 2 != 0 || d > 1024) fail(file, fmt::format("the head size {} is not an even number in 2 ... 1024", d));
  if (!std::isfinite(c.rope_base) || c.rope_base <= 1.0F) fail(file, fmt::format("the rope base {} is not above 1", c.rope_base));
  if (!std::isfinite(c.norm_eps) || c.norm_eps <= 0.0F) fail(file, fmt::format("the norm epsilon {} is not positive", c.norm_eps));
}

// A rope scaling factor divides every angle: infinite (or past float's
// range, which a double in config.json can be) makes every angle 0.
void check_rope_factor(const std::string& file, const std::string& what, double factor) {
  if (!std::isfinite(static_cast<float>(factor))) {
    fail(file, fmt::format("{} is {}, which is not finite as a float", what, factor));
  }
  if (!(factor >= 1.0)) fail(file, fmt::format("{} {} is below 1", what, factor));
}

// GGUF settings that change the arithmetic of a llama.cpp architecture but
// that the decoder does not apply: refused unless neutral, never ignored.
void refuse_gguf_settings(const GgufFile& gguf, const std::string& p) {
  const std::string& file = gguf.path();
  for (const char* key : {"expert_count", "expert_used_count"}) {
    if (const auto n = gguf.get_uint_if(p + key); n && *n > 0) {
      fail(file, fmt::format("{}{} is {}: a mixture of experts, which kvevict does not run", p, key, *n));
    }
  }
  // (key, the value that changes nothing)
  for (const auto& [key, neutral] : {std::pair<const char*, double>{"logit_scale", 1.0}, {"embedding_scale", 1.0},
                                     {"residual_scale", 1.0}, {"attention.scale", 0.0},
                                     {"attn_logit_softcapping", 0.0}, {"final_logit_softcapping", 0.0},
                                     {"rope.scaling.attn_factor", 1.0}}) {
    const std::optional<double> v = gguf.get_float_if(p + key);
    if (v && *v != neutral) fail(file, fmt::format("{}{} is {}, which kvevict does not apply", p, key, *v));
  }
  if (const auto n = gguf.get_uint_if(p + "attention.sliding_window"); n && *n > 0) {
    fail(file, fmt::format("{}attention.sliding_window is {}, which kvevict does not apply", p, *n));
  }
}

const char* kSupported = "llama, qwen2, mistral";

void set_family(ModelConfig& c, const std::string& arch, const std::string& file, bool gguf) {
  if (gguf && arch == kTiny) {
    // kvevict's own model as a GGUF (write_gguf_of): GELU, NEOX rope, tied
    // output, one fused q|k|v matrix, the byte vocabulary.
    c.architecture = arch;
    c.mlp = MlpKind::kGelu;
    c.rope_mode = RopeMode::kNeox;
    return;
  }
  if (arch != "llama" && arch != "qwen2" && arch != "mistral") {
    fail(file, fmt::format("architecture '{}' is not supported (kvevict runs {}; and its own .kvm files)", arch,
                           kSupported));
  }
  c.architecture = arch;
  c.mlp = MlpKind::kSwiGlu;
  c.qkv_bias = arch == "qwen2";
  // GGUF llama files hold Q/K rows permuted for adjacent-pair rotation;
  // Qwen2's converter leaves them in HF's half-split order, as every
  // safetensors file has them.
  c.rope_mode = gguf && arch != "qwen2" ? RopeMode::kNormal : RopeMode::kNeox;
}

}  // namespace

// Llama-3's rope scaling as divisors of each angle (HF's
// _compute_llama3_parameters, Meta's apply_scaling; ggml's rope_freqs).
std::vector<float> llama3_divisors(std::uint32_t head_dim, double base, double factor, double low, double high,
                                   double original) {
  std::vector<float> out(head_dim / 2);
  const double low_wavelen = original / low;
  const double high_wavelen = original / high;
  for (std::uint32_t i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(base, -2.0 * i / head_dim);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double divisor = 1.0;
    if (wavelen > low_wavelen) {
      divisor = factor;
    } else if (wavelen >= high_wavelen) {
      const double s = (original / wavelen - low) / (high - low);
      divisor = 1.0 / ((1.0 - s) / factor + s);
    }
    out[i] = static_cast<float>(divisor);
  }
  return out;
}

std::shared_ptr<const Model> build_gguf_model(const std::filesystem::path& path, const ModelOptions& options) {
  const std::unique_ptr<GgufFile> gguf = GgufFile::open(path);
  const std::string& file = gguf->path();
  const std::optional<std::string> arch = gguf->get_string_if("general.architecture");
  if (!arch) fail(file, "has no general.architecture: not a model (a vocabulary alone?)");
  ModelConfig c;
  c.format = "gguf";
  set_family(c, *arch, file, true);
  const std::string p = *arch + ".";
  auto uint_key = [&](const std::string& key, std::uint64_t high) {
    return checked(file, p + key, gguf->get_uint(p + key), 0, high);
  };
  c.layers = uint_key("block_count", kMaxLayers);
  c.width = uint_key("embedding_length", kMaxWidth);
  c.ff = uint_key("feed_forward_length", kMaxFf);
  c.heads = uint_key("attention.head_count", kMaxHeads);
  c.kv_heads = c.heads;
  if (const GgufValue* v = gguf->find(p + "attention.head_count_kv"); v != nullptr) {
    if (v->type == GgufType::kArray) fail(file, fmt::format("{}attention.head_count_kv differs by layer, which kvevict does not run", p));
    c.kv_heads = uint_key("attention.head_count_kv", kMaxHeads);
  }
  c.context = uint_key("context_length", kMaxContext);
  if (const auto key_length = gguf->get_uint_if(p + "attention.key_length")) {
    c.head_size = checked(file, p + "attention.key_length", *key_length, 2, 1024);
    if (const auto value_length = gguf->get_uint_if(p + "attention.value_length"); value_length && *value_length != *key_length) {
      fail(file, fmt::format("key length {} and value length {} differ, which kvevict does not run", *key_length, *value_length));
    }
  }
  c.rope_base = static_cast<float>(gguf->get_float_if(p + "rope.freq_base").value_or(10000.0));
  c.norm_eps = static_cast<float>(gguf->get_float_if(p + "attention.layer_norm_rms_epsilon").value_or(1e-5));
  refuse_gguf_settings(*gguf, p);
  const GgufTensor* embed = gguf->tensor("token_embd.weight");
  if (embed == nullptr) fail(file, "tensor 'token_embd.weight' is missing");
  if (embed->ne.size() != 2) fail(file, fmt::format("tensor 'token_embd.weight' has {} dimensions, not 2", embed->ne.size()));
  c.vocab = checked(file, "the vocabulary size (token_embd.weight's rows)", embed->ne[1], 2, kMaxVocab);
  c.tied_output = gguf->tensor("output.weight") == nullptr;
  check_shape(file, c);
  if (const auto rot = gguf->get_uint_if(p + "rope.dimension_count"); rot && *rot != c.head_dim()) {
    fail(file, fmt::format("rope turns {} of each head's {} dimensions; kvevict runs rope over whole heads", *rot,
                           c.head_dim()));
  }
  std::vector<float> divisors;
  if (const GgufTensor* freqs = gguf->tensor("rope_freqs.weight")) {
    if (freqs->ne.size() != 1 || freqs->ne[0] != c.head_dim() / 2 || freqs->type != 0) {
      fail(file, fmt::format("tensor 'rope_freqs.weight' must be F32 of {} values (half the head size)", c.head_dim() / 2));
    }
    divisors.resize(c.head_dim() / 2);
    dequantize(WeightType::kF32, freqs->data, divisors.data(), divisors.size());
    for (const float f : divisors) {
      if (!std::isfinite(f) || f <= 0.0F) fail(file, "tensor 'rope_freqs.weight' holds a divisor that is not positive");
    }
  }
  if (const auto scaling = gguf->get_string_if(p + "rope.scaling.type"); scaling && *scaling != "none") {
    if (*scaling != "linear") {
      fail(file, fmt::format("rope scaling '{}' is not supported (kvevict runs none, linear and Llama-3's)", *scaling));
    }
    const double factor = gguf->get_float(p + "rope.scaling.factor");
    check_rope_factor(file, p + "rope.scaling.factor", factor);
    if (divisors.empty()) divisors.assign(c.head_dim() / 2, 1.0F);
    for (float& f : divisors) f *= static_cast<float>(factor);
  }
  apply_context(c, options, file);
  std::shared_ptr<const Vocabulary> vocab = c.architecture == kTiny ? Vocabulary::bytes() : Vocabulary::from_gguf(*gguf);
  if (vocab->size() > c.vocab) {
    fail(file, fmt::format("the tokenizer has {} tokens but token_embd.weight only {} rows", vocab->size(), c.vocab));
  }
  const GgufSource src(*gguf);
  BiasPlan biases;
  if (c.architecture != kTiny && c.architecture != "qwen2") {
    // llama.cpp's llama builder reads each of these biases when the file
    // has it; q, k and v come as three (the decoder adds them together).
    c.qkv_bias = src.has(src.name_of("q_bias", 0)) || src.has(src.name_of("k_bias", 0)) ||
                 src.has(src.name_of("v_bias", 0));
    biases = {Biases::kWherePresent, Biases::kWherePresent};
  }
  return assemble(src, std::move(c), std::move(vocab), std::move(divisors), file, biases);
}

namespace {

nlohmann::json read_json(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) fail(file.string(), "cannot be opened (does it exist?)");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    std::string what = e.what();
    std::replace(what.begin(), what.end(), '\n', ' ');
    fail(file.string(), fmt::format("is not valid JSON ({})", what));
  }
}

// A config.json number or integer, checked; `fallback` when absent or null.
double json_number(const nlohmann::json& config, const std::string& file, const std::string& key,
                   std::optional<double> fallback) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) {
    if (!fallback) fail(file, fmt::format("has no \"{}\"", key));
    return *fallback;
  }
  if (!it->is_number()) fail(file, fmt::format("\"{}\" is not a number", key));
  return it->get<double>();
}

std::uint32_t json_count(const nlohmann::json& config, const std::string& file, const std::string& key,
                         std::optional<double> fallback, std::uint64_t high) {
  const double v = json_number(config, file, key, fallback);
  if (v != std::floor(v) || v < 0 || v > static_cast<double>(high)) {
    fail(file, fmt::format("\"{}\" is {} (must be a whole number 0 ... {})", key, v, high));
  }
  return static_cast<std::uint32_t>(v);
}

// config.json keys that change the arithmetic: applied (biases) or
// refused, never accepted and ignored.
BiasPlan config_arithmetic(const nlohmann::json& config, const std::string& file, const std::string& arch,
                           ModelConfig& c) {
  auto flag = [&](const char* key) {
    const auto it = config.find(key);
    if (it == config.end() || it->is_null()) return false;
    if (!it->is_boolean()) fail(file, fmt::format("\"{}\" is not true or false", key));
    return it->get<bool>();
  };
  if (const auto it = config.find("hidden_act"); it != config.end() && !it->is_null()) {
    if (!it->is_string()) fail(file, "\"hidden_act\" is not a string");
    const std::string act = it->get<std::string>();
    if (act != "silu" && act != "swish") {
      fail(file, fmt::format("\"hidden_act\" is \"{}\"; a {} model's MLP is SwiGLU (silu), the one kvevict runs", act,
                             arch));
    }
  }
  if (const auto it = config.find("partial_rotary_factor"); it != config.end() && !it->is_null()) {
    if (!it->is_number() || it->get<double>() != 1.0) {
      fail(file, fmt::format("\"partial_rotary_factor\" is {}; kvevict runs rope over whole heads (1.0)", it->dump()));
    }
  }
  BiasPlan biases;
  if (flag("attention_bias")) {
    if (arch == "qwen2") fail(file, "\"attention_bias\" is true: Qwen2's attention has q, k and v biases only");
    c.qkv_bias = true;  // HF's Llama: q, k, v and o all have one
    biases.output = Biases::kRequired;
  }
  if (flag("mlp_bias")) biases.mlp = Biases::kRequired;
  return biases;
}

}  // namespace

std::shared_ptr<const Model> build_safetensors_model(const std::filesystem::path& path, const ModelOptions& options) {
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::is_directory(path, ec) ? path : path.parent_path();
  const std::filesystem::path config_file = folder / "config.json";
  if (!std::filesystem::exists(config_file, ec)) {
    // A folder holding a GGUF file instead: name it.
    if (std::filesystem::is_directory(path, ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(path, ec)) {
        if (entry.path().extension() == ".gguf") {
          fail(path.string(), fmt::format("holds no config.json but a GGUF file: give the file ({})",
                                          entry.path().string()));
        }
      }
    }
    fail(path.string(), fmt::format("no config.json beside the weights (looked for {})", config_file.string()));
  }
  const std::string file = config_file.string();
  const nlohmann::json config = read_json(config_file);
  if (!config.is_object()) fail(file, "is not a JSON object");
  std::string arch;
  if (const auto it = config.find("model_type"); it != config.end() && it->is_string()) arch = it->get<std::string>();
  if (arch.empty()) fail(file, fmt::format("has no \"model_type\" (kvevict runs {})", kSupported));
  ModelConfig c;
  c.format = "safetensors";
  set_family(c, arch, file, false);
  c.layers = json_count(config, file, "num_hidden_layers", std::nullopt, kMaxLayers);
  c.width = json_count(config, file, "hidden_size", std::nullopt, kMaxWidth);
  c.ff = json_count(config, file, "intermediate_size", std::nullopt, kMaxFf);
  c.heads = json_count(config, file, "num_attention_heads", std::nullopt, kMaxHeads);
  c.kv_heads = json_count(config, file, "num_key_value_heads", c.heads, kMaxHeads);
  c.vocab = json_count(config, file, "vocab_size", std::nullopt, kMaxVocab);
  c.context = json_count(config, file, "max_position_embeddings", std::nullopt, kMaxContext);
  if (config.contains("head_dim") && !config["head_dim"].is_null()) {
    c.head_size = json_count(config, file, "head_dim", std::nullopt, 1024);
  }
  c.rope_base = static_cast<float>(json_number(config, file, "rope_theta", 10000.0));
  c.norm_eps = static_cast<float>(json_number(config, file, "rms_norm_eps", 1e-6));
  const BiasPlan biases = config_arithmetic(config, file, arch, c);
  bool tied = false;  // HF's default
  if (const auto it = config.find("tie_word_embeddings"); it != config.end() && !it->is_null()) {
    if (!it->is_boolean()) fail(file, "\"tie_word_embeddings\" is not true or false");
    tied = it->get<bool>();
  }
  c.tied_output = tied;
  // Mistral's sliding window: past it the model attends over the window
  // alone, which the decoder does not do -- run no further than it.
  if (const auto it = config.find("sliding_window"); it != config.end() && !it->is_null()) {
    const bool used = arch != "qwen2" || config.value("use_sliding_window", false);
    const std::uint32_t window = json_count(config, file, "sliding_window", std::nullopt, kMaxContext);
    if (used && window >= 2 && window < c.context) c.context = window;
  }
  check_shape(file, c);
  std::vector<float> divisors;
  if (const auto it = config.find("rope_scaling"); it != config.end() && !it->is_null()) {
    if (!it->is_object()) fail(file, "\"rope_scaling\" is not an object");
    std::string type = it->value("rope_type", it->value("type", std::string()));
    const double factor = json_number(*it, file, "factor", std::nullopt);
    check_rope_factor(file, "rope_scaling's factor", factor);
    if (type == "llama3") {
      const double low = json_number(*it, file, "low_freq_factor", std::nullopt);
      const double high = json_number(*it, file, "high_freq_factor", std::nullopt);
      const double original = json_number(*it, file, "original_max_position_embeddings", std::nullopt);
      for (const double v : {low, high, original}) {
        if (!std::isfinite(static_cast<float>(v))) fail(file, fmt::format("rope_scaling holds {}, which is not finite as a float", v));
      }
      if (!(high > low) || !(low > 0) || !(original > 0)) {
        fail(file, "rope_scaling needs 0 < low_freq_factor < high_freq_factor and original_max_position_embeddings > 0");
      }
      divisors = llama3_divisors(c.head_dim(), c.rope_base, factor, low, high, original);
    } else if (type == "linear") {
      divisors.assign(c.head_dim() / 2, static_cast<float>(factor));
    } else if (type != "default") {
      fail(file, fmt::format("rope_scaling type '{}' is not supported (kvevict runs linear and llama3)", type));
    }
  }
  apply_context(c, options, file);

  const std::filesystem::path weights = std::filesystem::is_directory(path, ec) ? folder : path;
  const std::unique_ptr<Safetensors> st = Safetensors::open(weights);
  const std::filesystem::path tokenizer = folder / "tokenizer.json";
  if (!std::filesystem::exists(tokenizer, ec)) {
    fail(folder.string(), "has no tokenizer.json (kvevict tokenizes text with the model's own tokenizer)");
  }
  std::shared_ptr<const Vocabulary> vocab = Vocabulary::from_tokenizer_json(tokenizer);
  if (vocab->size() > c.vocab) {
    fail(file, fmt::format("vocab_size is {} but the tokenizer has {} tokens", c.vocab, vocab->size()));
  }
  // A tied model's file may still carry lm_head (equal to the embedding);
  // the config decides.
  const SafetensorsSource src(*st, weights.string());
  return assemble(src, std::move(c), std::move(vocab), std::move(divisors), folder.string(), biases);
}

}  // namespace kvevict
