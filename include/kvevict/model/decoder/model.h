// A decoder-only transformer's weights, configuration and vocabulary:
// kvevict's own byte-level model (a .kvm file, model/FORMAT.md) or a
// Llama-family model (llama, qwen2, mistral) read from a GGUF file or a
// Hugging Face safetensors folder (docs/models.md), with its own vocabulary
// (vocab.h). Model::load is the one entry for every file family
// (src/model/arch/loader.cpp picks the builder); decoder.h runs it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/vocab/vocab.h"

namespace kvevict {

// The MLP: kvevict-tiny's GELU (erf form) of one up projection, or the
// Llama family's SwiGLU, down(silu(gate x) * up x).
enum class MlpKind : std::uint8_t { kGelu, kSwiGlu };

struct ModelConfig {
  std::uint32_t vocab = 256;
  std::uint32_t layers = 0;
  std::uint32_t heads = 0;     // query heads per layer
  std::uint32_t kv_heads = 0;  // KV heads per layer (grouped-query attention); = heads in version-1 files
  std::uint32_t width = 0;
  std::uint32_t ff = 0;
  std::uint32_t context = 0;  // positions the model was trained on
  float rope_base = 10000.0F;
  float norm_eps = 1e-5F;

  // The architecture as the file names it: "kvevict-tiny", "llama", "qwen2"
  // or "mistral"; the file's format ("kvm", "gguf", "safetensors") and its
  // weights' types ("F32", or e.g. "Q4_K (101), Q6_K (13), F32 (25)").
  std::string architecture = "kvevict-tiny";
  std::string format = "kvm";
  std::string weight_types = "F32";
  std::uint32_t head_size = 0;  // 0: width / heads
  RopeMode rope_mode = RopeMode::kNeox;
  MlpKind mlp = MlpKind::kGelu;
  bool qkv_bias = false;     // Qwen2's q, k and v biases
  bool tied_output = true;   // logits from the token embedding (no separate output matrix)
  // Llama-3 rope scaling as ggml applies it: angle i is divided by
  // rope_divisors[i] ([head_dim / 2]; empty: none).
  std::vector<float> rope_divisors;
  // The context the model was trained on, when `context` runs it shorter
  // (ModelOptions::context); = context otherwise.
  std::uint32_t trained_context = 0;

  std::uint32_t head_dim() const noexcept { return head_size != 0 ? head_size : width / heads; }
  // Query heads x head size: the attention output's width.
  std::uint32_t q_width() const noexcept { return heads * head_dim(); }
  // Query heads that share one KV head.
  std::uint32_t group() const noexcept { return heads / kv_heads; }
  // Layers x KV heads: the number of caches, and so of policy instances, a
  // decoder runs. "Head h" in the decoder's API is cache h = layer * kv_heads + kv_head.
  std::uint32_t head_count() const noexcept { return layers * kv_heads; }
};

// How to open a model file.
struct ModelOptions {
  // Positions to run at (0: the trained context, but at most
  // kDefaultContextCap for a model trained longer -- a real model's full
  // context would size every cache for 100k+ positions). Over the trained
  // context is refused.
  std::uint32_t context = 0;
  static constexpr std::uint32_t kDefaultContextCap = 4096;
  // How the weight kernels compute the products (matmul.h): exact, or
  // against vectors rounded to 8 bits as llama.cpp rounds them. kInt8 on a
  // model the kernels do not multiply (kvevict-tiny) is refused.
  MatmulMode matmul = MatmulMode::kExact;
};

// Weights read from a model file. The Llama family keeps its matrices in the
// file's types (F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K; Q5_0 is decoded to
// F32), multiplied by the weight kernels (matmul.h) on as many threads as a
// decoder is given; kvevict-tiny's are float32, multiplied one vector at a
// time by Eigen as they always were, so its published figures stay
// reproducible to the bit (docs/performance.md). Norms and biases are
// float32. Immutable once loaded; one Model may serve many Decoders (one per
// thread) at once.
class Model {
 public:
  // Opens any model kvevict reads: a .kvm file (magic KVEVMODL), a .gguf
  // (magic GGUF), or a safetensors model (a folder with config.json and
  // model.safetensors or its index, or one of those files). Reads and checks
  // everything (for .kvm: magic, version, sizes, every tensor's name and
  // shape, the CRC-32 and that nothing follows it). Throws InputError naming
  // the file and what is wrong.
  static std::shared_ptr<const Model> load(const std::filesystem::path& file, const ModelOptions& options = {});
  // The same checks on a file's bytes already in memory; `file` names it in errors.
  static std::shared_ptr<const Model> parse(std::vector<char> bytes, const std::string& file);

  const ModelConfig& config() const noexcept { return config_; }
  const std::string& path() const noexcept { return path_; }
  std::size_t parameter_count() const noexcept { return parameters_; }
  // Bytes a decode step reads from the weights: every matrix once, the
  // output matrix included, and one embedding row.
  std::uint64_t weight_bytes_per_token() const noexcept;
  // The tokenizer: bytes for kvevict-tiny, the file's own otherwise.
  const Vocabulary& vocabulary() const noexcept { return *vocab_; }
  std::shared_ptr<const Vocabulary> shared_vocabulary() const noexcept { return vocab_; }
  // True when the weight kernels multiply this model's matrices (the Llama
  // family); false for kvevict-tiny's float32 path, one vector and one
  // thread at a time.
  bool uses_kernels() const noexcept { return kernels_; }
  // How its products are computed (ModelOptions::matmul).
  MatmulMode matmul_mode() const noexcept { return matmul_; }

  struct Layer {
    const float* attn_norm = nullptr;  // [width]
    // [heads * head_dim, width], [kv_heads * head_dim, width] twice; k and v
    // empty when q holds all three, rows q | k | v (kvevict-tiny's one matrix).
    WeightMatrix q, k, v;
    const float* qkv_bias = nullptr;  // [(heads + 2 * kv_heads) * head_dim] or null
    WeightMatrix proj;                // [width, heads * head_dim]
    const float* mlp_norm = nullptr;  // [width]
    WeightMatrix gate;                // [ff, width] (SwiGLU) or empty
    WeightMatrix up;                  // [ff, width]
    WeightMatrix down;                // [width, ff]
    // Optional biases of the other products (llama.cpp loads each when a
    // llama file has it; HF's attention_bias and mlp_bias): null when absent.
    const float* proj_bias = nullptr;  // [width]
    const float* gate_bias = nullptr;  // [ff]
    const float* up_bias = nullptr;    // [ff]
    const float* down_bias = nullptr;  // [width]
  };
  const WeightMatrix& embed() const noexcept { return embed_; }    // [vocab, width]
  const WeightMatrix& output() const noexcept { return output_; }  // [vocab, width]: embed() when tied
  const Layer& layer(std::uint32_t i) const noexcept { return layers_[i]; }
  const float* final_norm() const noexcept { return final_norm_; }

  // A model built from parts (the architecture builders, model_builder.h):
  // `data` holds the float32 weights, `blocks` the matrices kept in their
  // file's types; the pointers point into them.
  struct Parts {
    ModelConfig config;
    std::string path;
    std::vector<float> data;
    std::vector<std::uint8_t> blocks;
    std::size_t parameters = 0;
    bool kernels = true;
    std::shared_ptr<const Vocabulary> vocab;
    WeightMatrix embed;
    WeightMatrix output;
    const float* final_norm = nullptr;
    std::vector<Layer> layers;
  };
  static std::shared_ptr<const Model> from_parts(Parts parts);

 private:
  Model() = default;
  ModelConfig config_;
  std::string path_;
  std::vector<float> data_;
  std::vector<std::uint8_t> blocks_;
  std::size_t parameters_ = 0;
  bool kernels_ = false;
  MatmulMode matmul_ = MatmulMode::kExact;
  std::shared_ptr<const Vocabulary> vocab_;
  WeightMatrix embed_;
  WeightMatrix output_;
  const float* final_norm_ = nullptr;
  std::vector<Layer> layers_;
};

}  // namespace kvevict
