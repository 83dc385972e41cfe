// A small byte-level transformer (model/FORMAT.md) run token by token with a
// real KV cache per layer and KV head. When a KV head has a policy, the policy
// sees exactly what the harness would give it -- the softmax weights over the
// positions that cache still holds, ascending (with grouped-query attention,
// the mean of its query heads' weights: one decision per cache, as an engine
// must make it) -- and the positions it names are physically removed from
// that cache's keys and values. Positions stay
// absolute: a key is rotated (RoPE) at its token's true position when it is
// stored and never moved again.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

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

  std::uint32_t head_dim() const noexcept { return width / heads; }
  // Query heads that share one KV head.
  std::uint32_t group() const noexcept { return heads / kv_heads; }
  // Layers x KV heads: the number of caches, and so of policy instances, a
  // decoder runs. "Head h" in the decoder's API is cache h = layer * kv_heads + kv_head.
  std::uint32_t head_count() const noexcept { return layers * kv_heads; }
};

// Weights read from a .kvm file. Immutable once loaded; one Model may serve
// many Decoders (one per thread) at once.
class Model {
 public:
  // Reads and checks the whole file: magic, version, sizes, every tensor's
  // name and shape, the CRC-32 and that nothing follows it. Throws InputError
  // naming the file and what is wrong.
  static std::shared_ptr<const Model> load(const std::filesystem::path& file);
  // The same checks on a file's bytes already in memory; `file` names it in errors.
  static std::shared_ptr<const Model> parse(std::vector<char> bytes, const std::string& file);

  const ModelConfig& config() const noexcept { return config_; }
  const std::string& path() const noexcept { return path_; }
  std::size_t parameter_count() const noexcept { return data_.size(); }

  struct Layer {
    const float* attn_norm;  // [width]
    const float* qkv;        // [(heads + 2 * kv_heads) * head_dim, width], rows q | k | v
    const float* proj;       // [width, width]
    const float* mlp_norm;   // [width]
    const float* up;         // [ff, width]
    const float* down;       // [width, ff]
  };
  const float* embed() const noexcept { return embed_; }  // [vocab, width], tied output
  const Layer& layer(std::uint32_t i) const noexcept { return layers_[i]; }
  const float* final_norm() const noexcept { return final_norm_; }

 private:
  Model() = default;
  ModelConfig config_;
  std::string path_;
  std::vector<float> data_;
  const float* embed_ = nullptr;
  const float* final_norm_ = nullptr;
  std::vector<Layer> layers_;
};

// One sequence through the model. All buffers are sized at construction for
// `capacity` positions (at most the model's context), so step() never
// allocates; a policy's own buffers are its own.
class Decoder {
 public:
  explicit Decoder(std::shared_ptr<const Model> model, std::uint32_t capacity = 0);
  ~Decoder();
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  // Gives cache `h` (= layer * kv_heads + kv_head) a policy and the budget it is
  // held to; null removes it. Only before the first step.
  void set_policy(std::uint32_t h, Policy* policy, std::int64_t budget);

  // Feeds the next token (position = tokens fed so far) and returns the
  // logits for the token after it; valid until the next call. Throws
  // InputError past the capacity (changing nothing), ContractError when a
  // policy breaks the contract (a victim not held, or the budget not met),
  // and whatever a policy throws. A step that throws after it has begun
  // leaves the heads out of step (those before the failure have admitted the
  // token, and their policies cannot be rolled back), so every later step
  // throws ContractError, naming the failed one, until reset().
  std::span<const float> step(std::uint8_t token);

  // Removes `positions` (each held, no repeats, any order) from cache `h`'s
  // keys and values at once: compression after a prefill. Only for a cache
  // without a policy (a policy's state would no longer match what is held);
  // throws ContractError naming the first bad position, changing nothing.
  void drop(std::uint32_t h, std::span<const Position> positions);

  // Back to an empty cache, usable again after a failed step (policies are
  // not reset: give new ones).
  void reset();

  std::uint32_t position() const noexcept { return fed_; }  // tokens fed so far
  const ModelConfig& config() const noexcept;

  // Positions cache `h` holds now, ascending (after this step's eviction).
  std::span<const Position> held(std::uint32_t h) const noexcept;
  // The positions cache `h` was attended over on the last step (ascending,
  // the newest token last) and the softmax weights given to them (the mean
  // over the cache's query heads).
  std::span<const Position> attended(std::uint32_t h) const noexcept;
  std::span<const float> attention(std::uint32_t h) const noexcept;
  // Positions removed from all heads so far.
  std::uint64_t evicted() const noexcept { return evicted_; }

 private:
  std::span<const float> advance(std::uint8_t token);  // step()'s work, once checked

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::uint32_t fed_ = 0;
  std::uint64_t evicted_ = 0;
};

}  // namespace kvevict
