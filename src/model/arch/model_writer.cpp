#include "kvevict/model/arch/model_writer.h"

#include <cmath>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/eval/rng.h"
#include "kvevict/model/format/gguf.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/format/safetensors.h"
#include "kvevict/model/vocab/vocab.h"
#include "model/arch/model_builder.h"

namespace kvevict {

namespace {

constexpr double kLlama3Low = 1.0, kLlama3High = 4.0, kLlama3Original = 64.0;

// A matrix's type given its rows' length: a K type's 256-element blocks
// need whole rows of 256; llama.cpp's quantizer writes the others as Q5_0
// (for Q4_K) or Q8_0 (for Q6_K), so a Q4_K file of a 576-wide model (SmolLM2)
// holds both, as its Q4_K_M files do.
WeightType matrix_type(WeightType type, std::uint64_t cols) {
  if (cols % 256 == 0) return type;
  if (type == WeightType::kQ4_K) return WeightType::kQ5_0;
  if (type == WeightType::kQ6_K) return WeightType::kQ8_0;
  return type;
}

void check_spec(const RandomModelSpec& s) {
  auto bad = [](const std::string& what) { throw ParameterError(fmt::format("random-model: {}", what)); };
  if (s.architecture != "llama" && s.architecture != "qwen2" && s.architecture != "mistral") {
    bad(fmt::format("--arch '{}' is not one of llama, qwen2, mistral", s.architecture));
  }
  if (s.format != "gguf" && s.format != "safetensors") bad(fmt::format("--format '{}' is not gguf or safetensors", s.format));
  if (s.layers < 1 || s.layers > 64) bad(fmt::format("--layers ({}) must be 1 ... 64", s.layers));
  if (s.heads < 1 || s.heads > 64) bad(fmt::format("--heads ({}) must be 1 ... 64", s.heads));
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0) {
    bad(fmt::format("--kv-heads ({}) must divide --heads ({})", s.kv_heads, s.heads));
  }
  if (s.width < 2 || s.width > 4096 || s.width % s.heads != 0 || (s.width / s.heads) % 2 != 0) {
    bad(fmt::format("--width ({}) must be at most 4096 and an even head size times --heads ({})", s.width, s.heads));
  }
  if (s.ff < 1 || s.ff > 16384) bad(fmt::format("--ff ({}) must be 1 ... 16384", s.ff));
  if (s.context < 2 || s.context > 65536) bad(fmt::format("--context ({}) must be 2 ... 65536", s.context));
  if (s.llama3_scaling && s.linear_scaling) bad("choose one rope scaling: llama3 or linear");
  if (!std::isfinite(s.rope_factor) || s.rope_factor < 1.0 || s.rope_factor > 1024.0) {
    bad(fmt::format("--rope-factor ({}) must be 1 ... 1024", s.rope_factor));
  }
  if (!std::isfinite(s.rope_base) || s.rope_base <= 1.0F || s.rope_base > 1e9F) {
    bad(fmt::format("--rope-theta ({}) must be above 1 and at most 1e9", s.rope_base));
  }
  if (s.biases && s.architecture == "qwen2") bad("--biases: qwen2 has its q, k and v biases already, and no others");
  if (s.merges > 4096) bad(fmt::format("--merges ({}) must be at most 4096", s.merges));
  if (s.vocab > 262144) bad(fmt::format("--vocab ({}) must be at most 262144", s.vocab));
  const WeightTypeInfo& info = weight_type_info(s.type);
  if (s.format == "safetensors" && s.type != WeightType::kF32 && s.type != WeightType::kF16 &&
      s.type != WeightType::kBF16) {
    bad(fmt::format("--type {}: safetensors models hold F32, F16 or BF16", info.name));
  }
  // Every matrix's rows (ggml's ne[0]: the width, or ff for the down
  // projection) must be whole blocks -- of the fallback's 32 for a K type,
  // as llama.cpp's quantizer falls back (matrix_type).
  for (const auto& [what, n] : {std::pair<const char*, std::uint32_t>{"--width", s.width}, {"--ff", s.ff}}) {
    const WeightTypeInfo& rows = weight_type_info(matrix_type(s.type, n));
    if (n % rows.block_elements != 0) {
      bad(fmt::format("{} ({}) is not a whole number of {}'s {}-element blocks", what, n, rows.name,
                      rows.block_elements));
    }
  }
}

// Uniform values with standard deviation `std` (and a mean `mean`).
std::vector<float> random_values(Rng& rng, std::size_t n, double std, double mean = 0.0) {
  std::vector<float> v(n);
  const double half = std * std::sqrt(3.0);
  for (float& x : v) x = static_cast<float>(mean + (2.0 * rng.next_float() - 1.0) * half);
  return v;
}

struct Tensor {
  std::string gguf_name, hf_name;
  std::vector<std::uint64_t> shape;  // PyTorch order
  std::vector<float> values;
  bool matrix = false;  // stored in the spec's type (vectors stay F32)
};

std::vector<std::uint8_t> encode(WeightType type, const std::vector<float>& values) {
  std::vector<std::uint8_t> out(weight_bytes(type, values.size()));
  quantize(type, values.data(), out.data(), values.size());
  return out;
}

// The general.* and {arch}.* keys of a model's shape (llama.cpp's names).
void set_model_keys(GgufWriter& writer, const ModelConfig& c, const std::string& name, WeightType type) {
  const std::string& arch = c.architecture;
  writer.set_string("general.architecture", arch);
  writer.set_string("general.name", name);
  writer.set_u32("general.alignment", 32);
  writer.set_u32(arch + ".context_length", c.trained_context);
  writer.set_u32(arch + ".embedding_length", c.width);
  writer.set_u32(arch + ".block_count", c.layers);
  writer.set_u32(arch + ".feed_forward_length", c.ff);
  writer.set_u32(arch + ".attention.head_count", c.heads);
  writer.set_u32(arch + ".attention.head_count_kv", c.kv_heads);
  writer.set_u32(arch + ".rope.dimension_count", c.head_dim());
  writer.set_f32(arch + ".rope.freq_base", c.rope_base);
  writer.set_f32(arch + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  if (weight_type_info(type).block_elements > 1) writer.set_u32("general.quantization_version", 2);
  // llama.cpp's llama_ftype for a file of one matrix type (it "guesses"
  // without it); Q4_K throughout is its Q4_K_S.
  const std::pair<WeightType, std::uint32_t> file_types[] = {
      {WeightType::kF32, 0},  {WeightType::kF16, 1},  {WeightType::kQ4_0, 2}, {WeightType::kQ8_0, 7},
      {WeightType::kQ5_0, 8}, {WeightType::kQ4_K, 14}, {WeightType::kQ6_K, 18}, {WeightType::kBF16, 32}};
  for (const auto& [t, id] : file_types) {
    if (t == type) writer.set_u32("general.file_type", id);
  }
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw InputError(fmt::format("{}: cannot be written", file.string()));
}

// The random tensors of a Llama-family model of `spec`'s shape, each under
// its GGUF and its Hugging Face name.
std::vector<Tensor> random_tensors(const RandomModelSpec& spec, std::uint32_t n_vocab, bool tied) {
  const std::uint64_t w = spec.width, d = spec.width / spec.heads, q = spec.heads * d, kv = spec.kv_heads * d;
  Rng rng(spec.seed);
  std::vector<Tensor> tensors;
  auto add = [&](std::string gguf_name, std::string hf_name, std::vector<std::uint64_t> shape, double std,
                 double mean, bool matrix) {
    std::size_t n = 1;
    for (const std::uint64_t s : shape) n *= s;
    tensors.push_back({std::move(gguf_name), std::move(hf_name), std::move(shape), random_values(rng, n, std, mean), matrix});
  };
  const double in_w = 1.0 / std::sqrt(static_cast<double>(w));
  // Logits of a tied model are embedding rows times a normalized state (each
  // element about 1): rows of this size keep them about 1 too.
  add("token_embd.weight", "model.embed_tokens.weight", {n_vocab, w}, in_w, 0.0, true);
  for (std::uint32_t l = 0; l < spec.layers; ++l) {
    const std::string g = fmt::format("blk.{}.", l), h = fmt::format("model.layers.{}.", l);
    add(g + "attn_norm.weight", h + "input_layernorm.weight", {w}, 0.1, 1.0, false);
    add(g + "attn_q.weight", h + "self_attn.q_proj.weight", {q, w}, in_w, 0.0, true);
    add(g + "attn_k.weight", h + "self_attn.k_proj.weight", {kv, w}, in_w, 0.0, true);
    add(g + "attn_v.weight", h + "self_attn.v_proj.weight", {kv, w}, in_w, 0.0, true);
    if (spec.architecture == "qwen2" || spec.biases) {
      add(g + "attn_q.bias", h + "self_attn.q_proj.bias", {q}, 0.1, 0.0, false);
      add(g + "attn_k.bias", h + "self_attn.k_proj.bias", {kv}, 0.1, 0.0, false);
      add(g + "attn_v.bias", h + "self_attn.v_proj.bias", {kv}, 0.1, 0.0, false);
    }
    add(g + "attn_output.weight", h + "self_attn.o_proj.weight", {w, q}, 1.0 / std::sqrt(static_cast<double>(q)), 0.0, true);
    if (spec.biases) add(g + "attn_output.bias", h + "self_attn.o_proj.bias", {w}, 0.1, 0.0, false);
    add(g + "ffn_norm.weight", h + "post_attention_layernorm.weight", {w}, 0.1, 1.0, false);
    add(g + "ffn_gate.weight", h + "mlp.gate_proj.weight", {spec.ff, w}, in_w, 0.0, true);
    add(g + "ffn_up.weight", h + "mlp.up_proj.weight", {spec.ff, w}, in_w, 0.0, true);
    add(g + "ffn_down.weight", h + "mlp.down_proj.weight", {w, spec.ff}, 1.0 / std::sqrt(static_cast<double>(spec.ff)), 0.0, true);
    if (spec.biases) {
      add(g + "ffn_gate.bias", h + "mlp.gate_proj.bias", {spec.ff}, 0.1, 0.0, false);
      add(g + "ffn_up.bias", h + "mlp.up_proj.bias", {spec.ff}, 0.1, 0.0, false);
      add(g + "ffn_down.bias", h + "mlp.down_proj.bias", {w}, 0.1, 0.0, false);
    }
  }
  add("output_norm.weight", "model.norm.weight", {w}, 0.1, 1.0, false);
  if (!tied) add("output.weight", "lm_head.weight", {n_vocab, w}, in_w, 0.0, true);
  return tensors;
}

void write_random_gguf(const RandomModelSpec& spec, const Vocabulary& vocab, const std::vector<Tensor>& tensors,
                       const std::filesystem::path& out, bool overwrite) {
  const std::uint64_t d = spec.width / spec.heads;
  // llama.cpp has no "mistral" architecture: its converter writes Mistral
  // models as "llama" (kvevict reads both names).
  const std::string arch = spec.architecture == "mistral" ? "llama" : spec.architecture;
  ModelConfig shape;
  shape.architecture = arch;
  shape.layers = spec.layers;
  shape.width = spec.width;
  shape.ff = spec.ff;
  shape.heads = spec.heads;
  shape.kv_heads = spec.kv_heads;
  shape.trained_context = spec.context;
  shape.rope_base = spec.rope_base;
  shape.norm_eps = 1e-5F;
  GgufWriter writer;
  set_model_keys(writer, shape, fmt::format("kvevict random {} ({})", spec.architecture, weight_type_info(spec.type).name),
                 spec.type);
  vocab.write_gguf(writer);
  for (const Tensor& t : tensors) {
    const std::vector<std::uint64_t> ne(t.shape.rbegin(), t.shape.rend());
    const WeightType type = t.matrix ? matrix_type(spec.type, ne[0]) : WeightType::kF32;
    writer.add_tensor(t.gguf_name, ne, type, encode(type, t.values));
  }
  if (spec.linear_scaling) {
    writer.set_string(arch + ".rope.scaling.type", "linear");
    writer.set_f32(arch + ".rope.scaling.factor", static_cast<float>(spec.rope_factor));
  }
  if (spec.llama3_scaling) {
    const std::vector<float> divisors = llama3_divisors(static_cast<std::uint32_t>(d), spec.rope_base, spec.rope_factor,
                                                        kLlama3Low, kLlama3High, kLlama3Original);
    writer.add_tensor("rope_freqs.weight", {d / 2}, WeightType::kF32, encode(WeightType::kF32, divisors));
  }
  writer.write(out, overwrite);
}

void write_random_safetensors(const RandomModelSpec& spec, const Vocabulary& vocab, const std::vector<Tensor>& tensors,
                              bool tied, const std::filesystem::path& out) {
  std::error_code ec;
  const std::string arch = spec.architecture;
  std::filesystem::create_directories(out, ec);
  if (ec) throw InputError(fmt::format("{}: cannot create the folder ({})", out.string(), ec.message()));
  const std::string dtype(weight_type_info(spec.type).name);
  std::vector<SafetensorsEntry> entries;
  for (const Tensor& t : tensors) {
    // Norms and biases in the matrices' dtype too, as HF checkpoints hold them.
    entries.push_back({t.hf_name, dtype, t.shape, encode(spec.type, t.values)});
  }
  write_safetensors(out / "model.safetensors", entries, {{"format", "pt"}}, true);
  nlohmann::ordered_json config = {
      {"architectures", {arch == "qwen2" ? "Qwen2ForCausalLM" : arch == "mistral" ? "MistralForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", arch},
      {"hidden_size", spec.width},
      {"intermediate_size", spec.ff},
      {"num_hidden_layers", spec.layers},
      {"num_attention_heads", spec.heads},
      {"num_key_value_heads", spec.kv_heads},
      {"max_position_embeddings", spec.context},
      {"rms_norm_eps", 1e-5},
      {"rope_theta", spec.rope_base},
      {"tie_word_embeddings", tied},
      {"vocab_size", vocab.size()},
      {"hidden_act", "silu"},
      {"bos_token_id", *vocab.bos()},
      {"eos_token_id", *vocab.eos()},
      {"torch_dtype", spec.type == WeightType::kF32 ? "float32" : spec.type == WeightType::kF16 ? "float16" : "bfloat16"},
  };
  if (spec.linear_scaling) config["rope_scaling"] = {{"rope_type", "linear"}, {"factor", spec.rope_factor}};
  if (spec.llama3_scaling) {
    config["rope_scaling"] = {{"rope_type", "llama3"},
                              {"factor", spec.rope_factor},
                              {"low_freq_factor", kLlama3Low},
                              {"high_freq_factor", kLlama3High},
                              {"original_max_position_embeddings", kLlama3Original}};
  }
  if (arch == "mistral") config["sliding_window"] = nullptr;
  if (spec.biases) {
    config["attention_bias"] = true;
    config["mlp_bias"] = true;
  }
  write_text(out / "config.json", config.dump(2) + "\n");
  write_text(out / "tokenizer.json", vocab.tokenizer_json());
  const nlohmann::ordered_json tokenizer_config = {
      {"add_bos_token", vocab.adds_bos()},
      {"bos_token", "<s>"},
      {"eos_token", "</s>"},
  };
  write_text(out / "tokenizer_config.json", tokenizer_config.dump(2) + "\n");
}

}  // namespace

void write_random_model(const RandomModelSpec& spec, const std::filesystem::path& out, bool overwrite) {
  check_spec(spec);
  std::error_code ec;
  const bool gguf = spec.format == "gguf";
  if (!gguf && std::filesystem::exists(out, ec)) {
    if (!std::filesystem::is_directory(out, ec)) {
      throw InputError(fmt::format("{}: exists and is not a folder (a safetensors model is a folder)", out.string()));
    }
    if (!overwrite && !std::filesystem::is_empty(out, ec)) {
      throw InputError(fmt::format("{}: the folder is not empty (--force to write into it)", out.string()));
    }
  }
  if (gguf && !overwrite && std::filesystem::exists(out, ec)) {
    throw InputError(fmt::format("{}: exists (--force to replace it)", out.string()));
  }
  if (spec.tokenizer_text.size() < 2) throw ParameterError("random-model: the tokenizer's text is empty");
  const std::string pre = spec.architecture == "qwen2" ? "qwen2" : "llama-bpe";
  std::shared_ptr<const Vocabulary> vocab = Vocabulary::train_byte_pairs(spec.tokenizer_text, spec.merges, pre, 0);
  if (spec.vocab != 0) {
    if (spec.vocab < vocab->size()) {
      throw ParameterError(fmt::format("random-model: --vocab {} is below the tokenizer's {} tokens (256 bytes, BOS, "
                                       "EOS and the merges learned): give 0 or at least {}",
                                       spec.vocab, vocab->size(), vocab->size()));
    }
    vocab = Vocabulary::train_byte_pairs(spec.tokenizer_text, spec.merges, pre, spec.vocab);
  }
  const bool tied = spec.tied.value_or(spec.architecture == "qwen2");
  const std::vector<Tensor> tensors = random_tensors(spec, vocab->size(), tied);
  if (gguf) {
    write_random_gguf(spec, *vocab, tensors, out, overwrite);
  } else {
    write_random_safetensors(spec, *vocab, tensors, tied, out);
  }
}

namespace {

// kvevict-tiny: its fused q|k|v matrices as blk.N.attn_qkv.weight, GELU's up
// and down, the tied embedding, the byte vocabulary implied.
void write_tiny_gguf(const Model& model, const std::filesystem::path& out, WeightType type, bool overwrite) {
  const ModelConfig& c = model.config();
  const WeightTypeInfo& info = weight_type_info(type);
  for (const auto& [what, n] : {std::pair<const char*, std::uint32_t>{"width", c.width}, {"ff", c.ff}}) {
    if (n % info.block_elements != 0) {
      throw ParameterError(fmt::format("convert: the model's {} ({}) is not a whole number of {}'s {}-element blocks",
                                       what, n, info.name, info.block_elements));
    }
  }
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(out, ec)) {
    throw InputError(fmt::format("{}: exists (--force to replace it)", out.string()));
  }
  GgufWriter writer;
  set_model_keys(writer, c, fmt::format("{} ({})", std::filesystem::path(model.path()).filename().string(), info.name),
                 type);
  auto put = [&](const std::string& name, const float* data, std::uint64_t rows, std::uint64_t cols) {
    const WeightType t = rows > 1 ? type : WeightType::kF32;  // vectors (norms) stay F32
    const std::vector<float> values(data, data + rows * cols);
    writer.add_tensor(name, rows > 1 ? std::vector<std::uint64_t>{cols, rows} : std::vector<std::uint64_t>{cols}, t,
                      encode(t, values));
  };
  const std::uint32_t d = c.head_dim();
  // kvevict-tiny's matrices are float32 (Model::uses_kernels is false for it).
  auto floats = [](const WeightMatrix& m) { return reinterpret_cast<const float*>(m.data); };
  put("token_embd.weight", floats(model.embed()), c.vocab, c.width);
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const Model::Layer& w = model.layer(l);
    const std::string g = fmt::format("blk.{}.", l);
    put(g + "attn_norm.weight", w.attn_norm, 1, c.width);
    put(g + "attn_qkv.weight", floats(w.q), (c.heads + 2 * c.kv_heads) * d, c.width);
    put(g + "attn_output.weight", floats(w.proj), c.width, c.q_width());
    put(g + "ffn_norm.weight", w.mlp_norm, 1, c.width);
    put(g + "ffn_up.weight", floats(w.up), c.ff, c.width);
    put(g + "ffn_down.weight", floats(w.down), c.width, c.ff);
  }
  put("output_norm.weight", model.final_norm(), 1, c.width);
  writer.write(out, overwrite);
}

// A Llama-family model read from a GGUF file: the same tensors under the same
// names (its q and k rows in the file's own rotary layout), each matrix
// decoded and encoded again in `type` (a row that is not a whole number of a
// K type's 256-element blocks as llama.cpp's quantizer writes it, matrix_type),
// vectors F32, the vocabulary and the settings kvevict runs it with.
void write_llama_gguf(const Model& model, const std::filesystem::path& out, WeightType type, bool overwrite) {
  const ModelConfig& c = model.config();
  const WeightTypeInfo& info = weight_type_info(type);
  for (const auto& [what, n] : {std::pair<const char*, std::uint32_t>{"width", c.width}, {"ff", c.ff},
                                {"query width", c.q_width()}}) {
    if (n % weight_type_info(matrix_type(type, n)).block_elements != 0) {
      throw ParameterError(fmt::format("convert: the model's {} ({}) is not a whole number of {}'s {}-element blocks",
                                       what, n, info.name, info.block_elements));
    }
  }
  std::error_code ec;
  if (!overwrite && std::filesystem::exists(out, ec)) {
    throw InputError(fmt::format("{}: exists (--force to replace it)", out.string()));
  }
  ModelConfig keys = c;
  keys.architecture = c.architecture == "mistral" ? "llama" : c.architecture;  // llama.cpp's name for it
  GgufWriter writer;
  set_model_keys(writer, keys, fmt::format("{} ({})", std::filesystem::path(model.path()).filename().string(), info.name),
                 type);
  model.vocabulary().write_gguf(writer);
  auto matrix = [&](const std::string& name, const WeightMatrix& m) {
    const WeightType t = matrix_type(type, m.cols);
    std::vector<float> values(std::size_t{m.rows} * m.cols);
    for (std::uint32_t r = 0; r < m.rows; ++r) dequantize(m.type, m.row(r), values.data() + std::size_t{r} * m.cols, m.cols);
    writer.add_tensor(name, {m.cols, m.rows}, t, encode(t, values));
  };
  auto vector = [&](const std::string& name, const float* data, std::uint64_t n) {
    if (data == nullptr) return;
    writer.add_tensor(name, {n}, WeightType::kF32, encode(WeightType::kF32, std::vector<float>(data, data + n)));
  };
  const std::uint64_t d = c.head_dim(), q = c.q_width(), kv = std::uint64_t{c.kv_heads} * d;
  matrix("token_embd.weight", model.embed());
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    const Model::Layer& w = model.layer(l);
    const std::string g = fmt::format("blk.{}.", l);
    vector(g + "attn_norm.weight", w.attn_norm, c.width);
    matrix(g + "attn_q.weight", w.q);
    matrix(g + "attn_k.weight", w.k);
    matrix(g + "attn_v.weight", w.v);
    if (w.qkv_bias != nullptr) {  // q's, then k's and v's right after it
      vector(g + "attn_q.bias", w.qkv_bias, q);
      vector(g + "attn_k.bias", w.qkv_bias + q, kv);
      vector(g + "attn_v.bias", w.qkv_bias + q + kv, kv);
    }
    matrix(g + "attn_output.weight", w.proj);
    vector(g + "attn_output.bias", w.proj_bias, c.width);
    vector(g + "ffn_norm.weight", w.mlp_norm, c.width);
    matrix(g + "ffn_gate.weight", w.gate);
    matrix(g + "ffn_up.weight", w.up);
    matrix(g + "ffn_down.weight", w.down);
    vector(g + "ffn_gate.bias", w.gate_bias, c.ff);
    vector(g + "ffn_up.bias", w.up_bias, c.ff);
    vector(g + "ffn_down.bias", w.down_bias, c.width);
  }
  vector("output_norm.weight", model.final_norm(), c.width);
  if (!c.tied_output) matrix("output.weight", model.output());
  // Rope scaling (llama3's, or linear) is what divides each angle: llama.cpp
  // reads the same divisors from rope_freqs.weight.
  if (!c.rope_divisors.empty()) vector("rope_freqs.weight", c.rope_divisors.data(), c.rope_divisors.size());
  writer.write(out, overwrite);
}

}  // namespace

void write_gguf_of(const Model& model, const std::filesystem::path& out, WeightType type, bool overwrite) {
  const ModelConfig& c = model.config();
  if (c.architecture == "kvevict-tiny") return write_tiny_gguf(model, out, type, overwrite);
  if (c.format != "gguf" || c.mlp != MlpKind::kSwiGlu) {
    throw ParameterError(fmt::format("convert: {} is a {} model read from {}; kvevict converts its own (.kvm) models "
                                     "and Llama-family GGUF files to GGUF",
                                     model.path(), c.architecture, c.format));
  }
  write_llama_gguf(model, out, type, overwrite);
}

}  // namespace kvevict
