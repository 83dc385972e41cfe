// The decoder (decoder.h): one sequence through a Model, its caches in a
// SequenceStore, policies per cache, prefill in chunks, and runs stepped
// together so that each weight is read once a token for all of them.
#include "kvevict/model/decoder/decoder.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>

#include <Eigen/Core>
#include <fmt/format.h>
#include <omp.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/sequence_budget.h"

namespace kvevict {

namespace {

// The most floats one pool of keys and values may hold (4 GiB).
constexpr std::uint64_t kMaxFloats = 1ULL << 30;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MatrixView = Eigen::Map<const RowMatrix>;
using VecView = Eigen::Map<const Eigen::VectorXf>;
using VecMut = Eigen::Map<Eigen::VectorXf>;

// out = rmsnorm(x) * weight, as torch computes it: x * rsqrt(mean(x^2) + eps).
void rms_norm(const float* x, const float* weight, float* out, std::uint32_t n, float eps) {
  float sum = 0.0F;
  for (std::uint32_t i = 0; i < n; ++i) sum += x[i] * x[i];
  const float scale = 1.0F / std::sqrt(sum / static_cast<float>(n) + eps);
  for (std::uint32_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

// The decode profile's stopwatch: charge(part) adds the time since the last
// mark to `part` and marks again; without a profile it does nothing.
class Lap {
 public:
  explicit Lap(DecodeProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }
  void charge(double DecodeProfile::*part) {
    if (profile_ == nullptr) return;
    const auto now = std::chrono::steady_clock::now();
    profile_->*part += std::chrono::duration<double>(now - last_).count();
    last_ = now;
  }
  void skip() {  // marks without charging (the time goes to "the rest")
    if (profile_ != nullptr) last_ = std::chrono::steady_clock::now();
  }

 private:
  DecodeProfile* profile_;
  std::chrono::steady_clock::time_point last_;
};

// y = W x for a row-major [rows, cols] matrix.
void matvec(const float* w, const float* x, float* y, std::uint32_t rows, std::uint32_t cols) {
  VecMut(y, rows).noalias() = MatrixView(w, rows, cols) * VecView(x, cols);
}

}  // namespace

struct Decoder::Impl {
  std::shared_ptr<const Model> model;
  ModelConfig cfg;
  std::uint32_t capacity = 0;
  bool own_pool = false;  // the pool is this decoder's alone

  // The keys and values (kv_store.h), and per cache what the step and its
  // policy need. Cache h = layer * kv_heads + kv_head; its query heads
  // (config().group() of them) attend over the same positions.
  std::unique_ptr<SequenceStore> store;
  struct HeadCache {
    std::vector<float> weights;              // last step's softmax (mean over the query heads), [count at that step]
    std::vector<Position> attended;          // positions those weights were over
    std::uint32_t attended_count = 0;
    std::vector<float> queries;              // last step's queries of the group, before RoPE, [group x head_dim]
    Policy* policy = nullptr;
    std::int64_t budget = 0;
  };
  std::vector<HeadCache> heads;
  std::vector<LayerBudget*> layer_budgets;   // per layer, null: none
  std::vector<std::int64_t> layer_budget_of;
  SequenceBudget* sequence = nullptr;        // every cache's, null: none
  // Identifies the tokens fed so far (prefix sharing's key, with positions).
  std::uint64_t tokens = 0;

  // Set when a step threw part-way: the heads are then out of step with each
  // other and with their policies, and only reset() makes the decoder usable.
  bool failed = false;
  std::uint32_t failed_at = 0;
  std::string failed_what;

  // Per lane of a pass through the layers (one token: step(); a chunk of
  // the prompt: prefill(); one a decoder: step_together()), [lanes x size]:
  // the residual stream, the normed input, q | k | v, the attention output,
  // the MLP's hidden units, the logits; and each lane's position and the
  // chained hash of its tokens so far.
  struct Scratch {
    std::uint32_t lanes = 0;
    std::vector<float> x, h, qkv, attn_out, ff, ff_up, logits;
    std::vector<std::uint32_t> pos;
    std::vector<std::uint64_t> hash;
    void size(const ModelConfig& c, std::uint32_t n) {
      lanes = n;
      const std::size_t d = c.head_dim();
      x.assign(std::size_t{n} * c.width, 0.0F);
      h.assign(std::size_t{n} * c.width, 0.0F);
      qkv.assign(std::size_t{n} * (c.heads + 2 * c.kv_heads) * d, 0.0F);
      attn_out.assign(std::size_t{n} * c.q_width(), 0.0F);
      ff.assign(std::size_t{n} * c.ff, 0.0F);
      if (c.mlp == MlpKind::kSwiGlu) ff_up.assign(std::size_t{n} * c.ff, 0.0F);
      logits.assign(std::size_t{n} * c.vocab, 0.0F);
      pos.assign(n, 0);
      hash.assign(n, 0);
    }
  };
  Scratch own;          // prefill_chunk lanes: step() and prefill()
  Scratch together;     // step_together()'s, grown to the largest group this decoder led
  const float* last = nullptr;  // the last token's logits
  // This decoder's logits when another decoder led its step_together(): a
  // copy, so they stay valid until this decoder steps again (the leader's
  // scratch is overwritten whenever the leader steps).
  std::vector<float> led_logits;
  // prefill_together()'s lanes (decoder and token each) when this decoder
  // leads one, and its logits when a sequence budget takes a pass a token.
  std::vector<Decoder*> together_decoders;
  std::vector<Token> together_tokens;
  std::vector<float> together_rows;
  int threads = 1;
  std::uint32_t chunk = 1;

  // One lane's attention at a time, sized once.
  std::vector<float> scores, query_weights;
  std::vector<float> raw_queries;  // this layer's queries before RoPE and scaling, [heads, head_dim]: a signal
  // The cache's new key and value as stored, copied: sealing a block may swap
  // it for an equal published one, so the policy reads its own copy.
  std::vector<float> step_key, step_value;
  std::unique_ptr<Rope> rope;  // angles for positions below the capacity tabled
  PositionMode positions = PositionMode::kOriginal;
  // kCache: one cache's held keys rotated at their indices, [capacity, head_dim].
  std::vector<float> rotated_keys;

  // Layer l's attention for one token at `pos` (its q | k | v in `qkv`, the
  // output to `out`): every KV head's cache takes the key and value, its
  // query heads attend, its policy steps and evicts; then a layer budget's
  // eviction. Returns the positions evicted.
  std::uint64_t attend(std::uint32_t l, std::uint32_t pos, std::uint64_t hash, float* qkv, float* out, Lap& lap);
  // A sequence budget's eviction once the token at `pos` has passed every
  // layer: one victim set leaves every cache. Returns the positions evicted.
  std::uint64_t evict_sequence(std::uint32_t pos, Lap& lap);
  // The budget cache h is held to (-1: none, it grows).
  std::int64_t budget_of(std::uint32_t h) const noexcept {
    if (sequence != nullptr) return sequence->budget();
    if (layer_budgets[h / cfg.kv_heads] != nullptr) return layer_budget_of[h / cfg.kv_heads];
    return heads[h].policy != nullptr ? heads[h].budget : -1;
  }

  // Whether a prefill chunk's attention in layer l may run its tokens side
  // by side (attend_chunk): no cache evicts (no policy, no layer budget), so
  // a token's attention is over every position before it and itself; and
  // the store hands out its own rows, unrotated by index (contiguous,
  // fp32, original positions), so reading them needs no shared scratch.
  bool chunk_attention(std::uint32_t l) const noexcept;
  // attend() for `n` tokens of one sequence at once: their keys and values
  // join the caches in order (the store's counts and peaks as attend()
  // leaves them), then every token's query heads attend, side by side on
  // `threads` threads -- each with attend()'s own arithmetic over the
  // positions held at its turn, so each output has attend()'s bits. The
  // last token's attention, positions and queries are kept, as attend()
  // would have left them.
  void attend_chunk(std::uint32_t l, const std::uint32_t* pos, const std::uint64_t* hash, float* qkv,
                    std::size_t qkv_width, float* out, std::size_t out_width, std::uint32_t n, int team);
  // attend_chunk's room: each thread's scores and weights, [threads x
  // capacity]; each token's positions held before it, [chunk x kv_heads].
  std::vector<float> chunk_scores, chunk_weights;
  std::vector<std::uint32_t> chunk_held;

  void empty_store() noexcept {
    store->clear();
    for (HeadCache& hc : heads) hc.attended_count = 0;
    if (own_pool) store->pool()->reset_peaks();
    tokens = 0x6B76657669637400ULL;  // "kvevict": any fixed start
  }
};

Decoder::Decoder(std::shared_ptr<const Model> model, std::uint32_t capacity)
    : Decoder(std::move(model), DecoderOptions{.capacity = capacity}) {}

Decoder::Decoder(std::shared_ptr<const Model> model, const DecoderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (!model) throw ContractError("decoder: no model");
  Impl& m = *impl_;
  m.cfg = model->config();
  m.model = std::move(model);
  std::uint32_t capacity = options.capacity;
  if (capacity == 0) capacity = m.cfg.context;
  if (capacity > m.cfg.context) {
    throw InputError(fmt::format("decoder: capacity {} is over the model's context of {} positions",
                                 capacity, m.cfg.context));
  }
  m.capacity = capacity;
  const std::uint32_t d = m.cfg.head_dim();
  const std::uint32_t caches = m.cfg.head_count();
  std::shared_ptr<BlockPool> pool = options.pool;
  if (pool) {
    if (options.block_size != 0 && options.block_size != pool->block_size()) {
      throw ParameterError(fmt::format("decoder: block_size {} differs from the shared pool's {}", options.block_size,
                                       pool->block_size()));
    }
    if (options.pool_blocks != 0) {
      throw ParameterError("decoder: pool_blocks is for a pool of the decoder's own, not a shared one");
    }
  } else if (options.block_size != 0) {
    const std::uint64_t per_cache = (std::uint64_t{capacity} + options.block_size - 1) / options.block_size;
    const std::uint64_t blocks = options.pool_blocks == 0 ? per_cache * caches : options.pool_blocks;
    if (blocks < caches) {
      throw ParameterError(fmt::format("decoder: a pool of {} blocks cannot give each of the {} caches one",
                                       blocks, caches));
    }
    if (blocks * options.block_size * d > kMaxFloats) {
      throw ParameterError(fmt::format("decoder: a pool of {} blocks of {} positions is too large", blocks,
                                       options.block_size));
    }
    pool = std::make_shared<BlockPool>(d, options.block_size, blocks, options.kv);
    m.own_pool = true;
  } else if (options.pool_blocks != 0) {
    throw ParameterError("decoder: pool_blocks needs a paged store (block_size >= 1)");
  }
  if (options.share_prefix && !pool) {
    throw ParameterError("decoder: share_prefix needs a paged store (block_size >= 1 or a shared pool)");
  }
  m.store = std::make_unique<SequenceStore>(StoreShape{m.cfg.layers, m.cfg.kv_heads, d, capacity}, std::move(pool),
                                            options.share_prefix, options.kv);
  m.heads.resize(caches);
  for (Impl::HeadCache& hc : m.heads) {
    hc.weights.assign(capacity, 0.0F);
    hc.attended.assign(capacity, 0);
    hc.queries.assign(std::size_t{m.cfg.group()} * d, 0.0F);
  }
  m.layer_budgets.assign(m.cfg.layers, nullptr);
  m.layer_budget_of.assign(m.cfg.layers, 0);
  m.empty_store();
  m.threads = options.threads > 0 ? options.threads : default_threads();
  m.chunk = options.prefill_chunk == 0 ? 64 : options.prefill_chunk;
  if (m.chunk > 4096) throw ParameterError(fmt::format("decoder: prefill_chunk {} is over 4096", m.chunk));
  m.own.size(m.cfg, m.chunk);
  m.led_logits.assign(m.cfg.vocab, 0.0F);
  m.raw_queries.assign(std::size_t{m.cfg.heads} * d, 0.0F);
  m.step_key.assign(d, 0.0F);
  m.step_value.assign(d, 0.0F);
  m.scores.assign(capacity, 0.0F);
  m.query_weights.assign(capacity, 0.0F);
  if (m.threads > 1 && m.chunk > 1) {
    m.chunk_scores.assign(std::size_t{capacity} * static_cast<std::size_t>(m.threads), 0.0F);
    m.chunk_weights.assign(m.chunk_scores.size(), 0.0F);
    m.chunk_held.assign(std::size_t{m.chunk} * m.cfg.kv_heads, 0);
  }
  // RoPE angles as the trainer makes them (rope.h), tabled for the
  // positions a cache can hold: every index, and the original positions
  // until the sequence outgrows the capacity.
  m.rope = std::make_unique<Rope>(m.cfg, capacity);
  m.positions = options.positions;
  if (m.positions == PositionMode::kCache) m.rotated_keys.assign(std::size_t{capacity} * d, 0.0F);
}

Decoder::~Decoder() = default;

const ModelConfig& Decoder::config() const noexcept { return impl_->cfg; }

void Decoder::set_policy(std::uint32_t h, Policy* policy, std::int64_t budget) {
  Impl& m = *impl_;
  if (h >= m.heads.size()) {
    throw ContractError(fmt::format("decoder: head {} is out of range (the model has {})", h,
                                    m.heads.size()));
  }
  if (fed_ != 0) throw ContractError("decoder: policies are set before the first token");
  if (policy != nullptr && budget < 1) {
    throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", policy->name(), budget));
  }
  if (policy != nullptr && m.layer_budgets[h / m.cfg.kv_heads] != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} is in layer {}, which has a layer budget", h,
                                    h / m.cfg.kv_heads));
  }
  if (policy != nullptr && m.sequence != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} is under the sequence's budget", h));
  }
  m.heads[h].policy = policy;
  m.heads[h].budget = budget;
}

void Decoder::set_layer_budget(std::uint32_t layer, LayerBudget* budget, std::int64_t layer_budget) {
  Impl& m = *impl_;
  if (layer >= m.cfg.layers) {
    throw ContractError(fmt::format("decoder: layer {} is out of range (the model has {})", layer, m.cfg.layers));
  }
  if (fed_ != 0) throw ContractError("decoder: layer budgets are set before the first token");
  if (budget != nullptr) {
    if (m.sequence != nullptr) throw ContractError(fmt::format("decoder: layer {} is under the sequence's budget", layer));
    if (budget->heads() != m.cfg.kv_heads) {
      throw ParameterError(fmt::format("decoder: the layer budget has {} heads; layer {} has {} KV heads",
                                       budget->heads(), layer, m.cfg.kv_heads));
    }
    if (layer_budget < 1) {
      throw ParameterError(fmt::format("{}: layer budget ({}) must be at least 1", budget->head(0).name(),
                                       layer_budget));
    }
    for (std::uint32_t kv = 0; kv < m.cfg.kv_heads; ++kv) {
      if (m.heads[std::size_t{layer} * m.cfg.kv_heads + kv].policy != nullptr) {
        throw ContractError(fmt::format("decoder: cache {} of layer {} has a policy of its own",
                                        layer * m.cfg.kv_heads + kv, layer));
      }
    }
  }
  m.layer_budgets[layer] = budget;
  m.layer_budget_of[layer] = layer_budget;
}

void Decoder::set_sequence_budget(SequenceBudget* budget) {
  Impl& m = *impl_;
  if (fed_ != 0) throw ContractError("decoder: a sequence budget is set before the first token");
  if (budget != nullptr) {
    if (budget->caches() != m.heads.size()) {
      throw ParameterError(fmt::format("decoder: the sequence budget has {} caches; the model has {} ({} layers x {} "
                                       "KV heads)",
                                       budget->caches(), m.heads.size(), m.cfg.layers, m.cfg.kv_heads));
    }
    for (std::uint32_t h = 0; h < m.heads.size(); ++h) {
      if (m.heads[h].policy != nullptr || m.layer_budgets[h / m.cfg.kv_heads] != nullptr) {
        throw ContractError(fmt::format("decoder: cache {} has a policy or layer budget of its own", h));
      }
    }
  }
  m.sequence = budget;
}

StoreStats Decoder::store() const noexcept { return impl_->store->stats(); }

const SequenceStore& Decoder::kv() const noexcept { return *impl_->store; }

void Decoder::drop(std::uint32_t h, std::span<const Position> positions) {
  Impl& m = *impl_;
  if (h >= m.heads.size()) {
    throw ContractError(fmt::format("decoder: cache {} is out of range (the model has {})", h, m.heads.size()));
  }
  Impl::HeadCache& hc = m.heads[h];
  if (hc.policy != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} has a policy ({}); drop() is for caches without one", h,
                                    hc.policy->name()));
  }
  if (m.layer_budgets[h / m.cfg.kv_heads] != nullptr || m.sequence != nullptr) {
    throw ContractError(fmt::format("decoder: cache {} is under a layer or sequence budget; drop() is for caches "
                                    "without one", h));
  }
  SequenceStore& store = *m.store;
  if (const auto bad = store.try_mark(h, positions)) {
    throw ContractError(fmt::format("decoder: cannot drop position {} from cache {}: {}", bad->position, h,
                                    bad->repeated ? "it is named twice" : "it is not held"));
  }
  evicted_ += store.remove_marked(h);
}

void Decoder::reset() {
  impl_->empty_store();
  fed_ = 0;
  evicted_ = 0;
  impl_->failed = false;
  impl_->failed_what.clear();
}

std::span<const Position> Decoder::held(std::uint32_t h) const noexcept {
  return impl_->store->positions(h);
}

std::pair<const float*, const float*> Decoder::held_rows(std::uint32_t h) { return impl_->store->rows(h); }

std::span<const Position> Decoder::attended(std::uint32_t h) const noexcept {
  const Impl::HeadCache& hc = impl_->heads[h];
  return {hc.attended.data(), hc.attended_count};
}

std::span<const float> Decoder::attention(std::uint32_t h) const noexcept {
  const Impl::HeadCache& hc = impl_->heads[h];
  return {hc.weights.data(), hc.attended_count};
}

std::span<const float> Decoder::queries(std::uint32_t h) const noexcept { return impl_->heads[h].queries; }

namespace {

// One KV head's query heads (`queries`, [group x d], rotated and scaled)
// over its `count` held keys and values: scores, softmax, each head's
// output to `out` ([group x d]). `mean`, when given, receives the softmax
// averaged over the group (the policy's attention row); `score` and
// `weights` are room for count floats each.
void group_attention(const float* keys, const float* values, std::uint32_t count, std::uint32_t d,
                     std::uint32_t group, const float* queries, float* out, float* score, float* weights,
                     float* mean) {
  for (std::uint32_t g = 0; g < group; ++g) {
    float* w = group == 1 && mean != nullptr ? mean : weights;
    Eigen::Map<Eigen::VectorXf> score_view(score, count);
    score_view.noalias() = MatrixView(keys, count, d) * VecView(queries + std::size_t{g} * d, d);
    const float top = score_view.maxCoeff();
    float sum = 0.0F;
    for (std::uint32_t i = 0; i < count; ++i) {
      const float e = std::exp(score[i] - top);
      w[i] = e;
      sum += e;
    }
    for (std::uint32_t i = 0; i < count; ++i) w[i] /= sum;
    VecMut(out + std::size_t{g} * d, d).noalias() = MatrixView(values, count, d).transpose() * VecView(w, count);
    if (group == 1 || mean == nullptr) continue;
    if (g == 0) {
      std::copy_n(w, count, mean);
    } else {
      for (std::uint32_t i = 0; i < count; ++i) mean[i] += w[i];
    }
  }
  if (group > 1 && mean != nullptr) {
    const auto share = static_cast<float>(group);
    for (std::uint32_t i = 0; i < count; ++i) mean[i] /= share;
  }
}

// A budget shared by several caches (a layer's LayerBudget, the sequence's
// SequenceBudget) takes cache `at`'s signals for the token at `pos`; it
// evicts later, for all of them at once.
template <class SharedBudget>
void feed_budget(SharedBudget& budget, std::size_t at, std::uint32_t pos, const StepInputs& inputs) {
  if (pos == 0) {
    budget.on_origin(at, inputs);
  } else {
    budget.on_step(at, pos, inputs);
  }
}

}  // namespace

std::uint64_t Decoder::Impl::attend(std::uint32_t l, std::uint32_t pos, std::uint64_t hash, float* qkv, float* out,
                                    Lap& lap) {
  const ModelConfig& c = cfg;
  const std::uint32_t d = c.head_dim();
  const std::uint32_t group = c.group();
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  const bool by_index = positions == PositionMode::kCache;
  std::uint64_t evicted = 0;
  // The queries as projected, for policies that model them (expected
  // attention): they are rotated and scaled in place below.
  std::copy_n(qkv, std::size_t{c.heads} * d, raw_queries.data());
  for (std::uint32_t hd = 0; hd < c.heads && !by_index; ++hd) {
    // Rotate q at this token's true position, then scale it (the trainer
    // scales q, not the scores). By index: per cache, below.
    rope->rotate(qkv + std::size_t{hd} * d, pos, scale);
  }
  const float* k_rows = qkv + std::size_t{c.heads} * d;
  const float* v_rows = k_rows + std::size_t{c.kv_heads} * d;
  Rope& rope_ref = *rope;
  LayerBudget* const shared = layer_budgets[l];
  for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
    const std::uint32_t cache = l * c.kv_heads + kv;
    HeadCache& hc = heads[cache];
    SequenceStore& st = *store;
    const std::uint32_t held = st.count(cache);  // positions held before this token
    if (by_index) {  // the group's queries sit at the index after the held positions
      for (std::uint32_t g = 0; g < group; ++g) rope_ref.rotate(qkv + std::size_t{kv * group + g} * d, held, scale);
    }
    const auto [k, v] = st.append(cache, pos);
    std::copy_n(k_rows + std::size_t{kv} * d, d, k);
    if (!by_index) rope_ref.rotate(k, pos, 1.0F);  // the key is rotated once, where it is stored
    std::copy_n(v_rows + std::size_t{kv} * d, d, v);
    st.seal(cache, hash);
    const std::uint32_t n = held + 1;
    auto [keys, values] = st.rows(cache);
    if (by_index) {  // stored before rotation: each held key turned to its index now
      std::copy_n(keys, std::size_t{n} * d, rotated_keys.data());
      for (std::uint32_t i = 0; i < n; ++i) rope_ref.rotate(rotated_keys.data() + std::size_t{i} * d, i, 1.0F);
      keys = rotated_keys.data();
    }
    // The policy reads the new key and value as stored (a quantized
    // store's read back), from its own copy.
    std::copy_n(keys + std::size_t{held} * d, d, step_key.data());
    std::copy_n(values + std::size_t{held} * d, d, step_value.data());
    // Each query head of the group: scores over the held positions and the
    // new token itself, softmax, output. The policy sees their mean.
    group_attention(keys, values, n, d, group, qkv + std::size_t{kv} * group * d, out + std::size_t{kv} * group * d,
                    scores.data(), query_weights.data(), hc.weights.data());
    std::copy_n(st.positions(cache).data(), n, hc.attended.data());
    hc.attended_count = n;
    std::copy_n(raw_queries.data() + std::size_t{kv} * group * d, std::size_t{group} * d, hc.queries.data());

    // The policy: the weights over the positions held before this token,
    // ascending, and the token's key (as stored), value and queries (before
    // RoPE, every query head of the group); then the token is admitted;
    // evict down to the budget. Position 0 exists before step 1: a policy
    // is given its signals alone (on_origin).
    lap.charge(&DecodeProfile::attention);
    const StepInputs inputs{.attention = std::span<const float>(hc.weights.data(), held),
                            .key = std::span<const float>(step_key),
                            .value = std::span<const float>(step_value),
                            .queries = std::span<const float>(hc.queries)};
    // A layer's shared budget evicts after its last head (below); the
    // sequence's once the token has passed every layer (evict_sequence).
    if (shared != nullptr || sequence != nullptr) {
      if (shared != nullptr) {
        feed_budget(*shared, kv, pos, inputs);
      } else {
        feed_budget(*sequence, cache, pos, inputs);
      }
      lap.charge(&DecodeProfile::policies);
      continue;
    }
    if (hc.policy == nullptr) continue;
    if (pos == 0) {
      hc.policy->on_origin(inputs);
      lap.charge(&DecodeProfile::policies);
      continue;
    }
    hc.policy->on_step(pos, inputs);
    if (static_cast<std::int64_t>(n) <= hc.budget) {
      lap.charge(&DecodeProfile::policies);
      continue;
    }
    st.mark(cache, hc.policy->evict(hc.budget), hc.policy->name(), pos);
    const std::uint32_t kept = n - st.remove_marked(cache);
    evicted += n - kept;
    lap.charge(&DecodeProfile::policies);
    if (static_cast<std::int64_t>(kept) > hc.budget) {
      throw ContractError(fmt::format(
          "{}: left {} positions held against a budget of {} at position {} (layer {}, KV head {})",
          hc.policy->name(), kept, hc.budget, pos, l, kv));
    }
  }
  // A budget shared by the layer's KV heads: one eviction for them all,
  // once every head has seen this step.
  if (shared != nullptr && pos != 0) {
    const std::int64_t budget = layer_budget_of[l];
    std::int64_t total = 0;
    for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) total += store->count(l * c.kv_heads + kv);
    if (total > budget) {
      shared->evict(budget);
      total = 0;
      for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
        const std::uint32_t cache = l * c.kv_heads + kv;
        const std::uint32_t n = store->count(cache);
        store->mark(cache, shared->victims(kv), shared->head(kv).name(), pos);
        const std::uint32_t kept = n - store->remove_marked(cache);
        evicted += n - kept;
        total += kept;
      }
      if (total > budget) {
        throw ContractError(fmt::format("{}: layer {} holds {} positions against a layer budget of {} at position {}",
                                        shared->head(0).name(), l, total, budget, pos));
      }
    }
  }
  if (shared != nullptr && pos != 0) lap.charge(&DecodeProfile::policies);
  return evicted;
}

std::uint64_t Decoder::Impl::evict_sequence(std::uint32_t pos, Lap& lap) {
  if (sequence == nullptr || pos == 0) return 0;
  const std::int64_t budget = sequence->budget();
  if (static_cast<std::int64_t>(store->count(0)) <= budget) return 0;
  const std::span<const Position> victims = sequence->evict(budget);
  std::uint64_t evicted = 0;
  for (std::uint32_t cache = 0; cache < heads.size(); ++cache) {
    const std::uint32_t n = store->count(cache);
    store->mark(cache, victims, sequence->cache(cache).name(), pos);
    const std::uint32_t kept = n - store->remove_marked(cache);
    evicted += n - kept;
    if (static_cast<std::int64_t>(kept) > budget) {
      throw ContractError(fmt::format("{}: cache {} holds {} positions against the sequence's budget of {} at "
                                      "position {}",
                                      sequence->cache(cache).name(), cache, kept, budget, pos));
    }
  }
  lap.charge(&DecodeProfile::policies);
  return evicted;
}

bool Decoder::Impl::chunk_attention(std::uint32_t l) const noexcept {
  if (chunk_held.empty() || layer_budgets[l] != nullptr || sequence != nullptr || positions != PositionMode::kOriginal ||
      store->format().quantized() || store->pool() != nullptr) {
    return false;
  }
  for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) {
    if (heads[l * cfg.kv_heads + kv].policy != nullptr) return false;
  }
  return true;
}

void Decoder::Impl::attend_chunk(std::uint32_t l, const std::uint32_t* pos, const std::uint64_t* hash, float* qkv,
                                 std::size_t qkv_width, float* out, std::size_t out_width, std::uint32_t n,
                                 int team) {
  const ModelConfig& c = cfg;
  const std::uint32_t d = c.head_dim();
  const std::uint32_t group = c.group();
  const float scale = 1.0F / std::sqrt(static_cast<float>(d));
  SequenceStore& st = *store;
  // In order, as attend() would: each token's queries rotated and scaled,
  // its keys and values stored (the last token's queries kept as
  // projected, for the signals).
  for (std::uint32_t i = 0; i < n; ++i) {
    float* row = qkv + i * qkv_width;
    if (i + 1 == n) std::copy_n(row, std::size_t{c.heads} * d, raw_queries.data());
    for (std::uint32_t hd = 0; hd < c.heads; ++hd) rope->rotate(row + std::size_t{hd} * d, pos[i], scale);
    const float* k_rows = row + std::size_t{c.heads} * d;
    const float* v_rows = k_rows + std::size_t{c.kv_heads} * d;
    for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
      const std::uint32_t cache = l * c.kv_heads + kv;
      chunk_held[std::size_t{i} * c.kv_heads + kv] = st.count(cache);
      const auto [k, v] = st.append(cache, pos[i]);
      std::copy_n(k_rows + std::size_t{kv} * d, d, k);
      rope->rotate(k, pos[i], 1.0F);
      std::copy_n(v_rows + std::size_t{kv} * d, d, v);
      st.seal(cache, hash[i]);
    }
  }
  // Side by side: every token x KV head, over the positions held at its turn.
  const auto tasks = static_cast<std::ptrdiff_t>(std::size_t{n} * c.kv_heads);
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
  for (std::ptrdiff_t t = 0; t < tasks; ++t) {
    const auto i = static_cast<std::uint32_t>(t / c.kv_heads);
    const auto kv = static_cast<std::uint32_t>(t % c.kv_heads);
    const std::uint32_t cache = l * c.kv_heads + kv;
    const std::uint32_t held = chunk_held[static_cast<std::size_t>(t)];
    const std::uint32_t count = held + 1;
    const bool final_token = i + 1 == n;
    HeadCache& hc = heads[cache];
    const auto [keys, values] = st.rows(cache);
    const std::size_t me = static_cast<std::size_t>(omp_get_thread_num()) * capacity;
    float* const score = chunk_scores.data() + me;
    group_attention(keys, values, count, d, group, qkv + i * qkv_width + std::size_t{kv} * group * d,
                    out + i * out_width + std::size_t{kv} * group * d, score, chunk_weights.data() + me,
                    final_token ? hc.weights.data() : nullptr);
    if (!final_token) continue;
    std::copy_n(st.positions(cache).data(), count, hc.attended.data());
    hc.attended_count = count;
    std::copy_n(raw_queries.data() + std::size_t{kv} * group * d, std::size_t{group} * d, hc.queries.data());
  }
}

namespace {

// y = W x for each of n vectors: the weight kernels, or kvevict-tiny's
// Eigen products one vector at a time (Model::uses_kernels).
void product(const Model& model, const WeightMatrix& w, const float* x, std::size_t xs, float* y, std::size_t ys,
             std::uint32_t n, int threads) {
  if (model.uses_kernels()) {
    matmul(w, x, xs, y, ys, n, threads, model.matmul_mode());
    return;
  }
  const auto* floats = reinterpret_cast<const float*>(w.data);
  for (std::uint32_t i = 0; i < n; ++i) matvec(floats, x + i * xs, y + i * ys, w.rows, w.cols);
}

// Several products of the same vectors (q, k, v; gate, up): on the kernels
// one fork of the threads for all of them (matmul_group), the same bits.
void products(const Model& model, std::initializer_list<Product> each, const float* x, std::size_t xs,
              std::uint32_t n, int threads) {
  if (model.uses_kernels()) {
    matmul_group(each.begin(), each.size(), x, xs, n, threads, model.matmul_mode());
    return;
  }
  for (const Product& p : each) product(model, *p.w, x, xs, p.y, p.y_stride, n, threads);
}

// y += b for each of n rows of `width` (rows packed), when the product has
// a bias.
void add_bias(const float* b, float* y, std::size_t width, std::uint32_t n) {
  if (b == nullptr) return;
  for (std::uint32_t i = 0; i < n; ++i) {
    float* row = y + std::size_t{i} * width;
    for (std::size_t j = 0; j < width; ++j) row[j] += b[j];
  }
}

// The final norm and the output head for the lanes a pass keeps logits of
// (Lanes::logits_stride): row r of `logits` is lane r * stride + stride -
// 1's; stride 0 computes none. A row's logits do not depend on the rows
// beside it, so a decoder's last alone is the same row, to the bit. `h` is
// scratch of the lanes' width.
void output_rows(const Model& model, const float* x, float* h, float* logits, std::uint32_t n, std::uint32_t stride,
                 int threads) {
  const ModelConfig& c = model.config();
  const std::uint32_t rows = stride == 0 ? 0 : n / stride;
  for (std::uint32_t r = 0; r < rows; ++r) {
    rms_norm(x + (std::size_t{r} * stride + stride - 1) * c.width, model.final_norm(), h + std::size_t{r} * c.width,
             c.width, c.norm_eps);
  }
  if (rows > 0) product(model, model.output(), h, c.width, logits, c.vocab, rows, threads);
}

}  // namespace

PromptLogits parse_prompt_logits(std::string_view name) {
  if (name == "all") return PromptLogits::kEvery;
  if (name == "last") return PromptLogits::kLast;
  throw ParameterError(fmt::format("prompt logits '{}' are not all or last", name));
}

struct Decoder::Lanes {
  std::span<Decoder* const> decoders;  // lane i's decoder
  std::span<const Token> tokens;       // and token
  Impl::Scratch* scratch = nullptr;
  int threads = 1;
  DecodeProfile* profile = nullptr;
  // Which lanes' logits the pass computes: every one (1), or each decoder's
  // last only (its count of lanes: decoder-major lanes of one prefill or of
  // prefill_together), or none (0). Those computed sit in order at the
  // start of the scratch's rows.
  std::uint32_t logits_stride = 1;
};

void Decoder::check_ready(std::span<const Token> tokens, const std::string& who) const {
  const Impl& m = *impl_;
  if (m.failed) {
    throw ContractError(fmt::format("decoder{}: the step at position {} failed ({}), leaving the heads' caches "
                                    "and policies out of step: call reset() and give new policies",
                                    who, m.failed_at,
                                    m.failed_what.empty() ? std::string("an exception without a message")
                                                          : m.failed_what));
  }
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const std::uint64_t pos = std::uint64_t{fed_} + i;
    if (pos >= std::numeric_limits<Position>::max()) {
      throw InputError(fmt::format("decoder{}: position {} is the last a position number holds", who, pos));
    }
    if (tokens[i] >= m.cfg.vocab) {
      throw InputError(fmt::format("decoder{}: token {} at position {} is outside the model's vocabulary of {}", who,
                                   tokens[i], pos, m.cfg.vocab));
    }
  }
  // Before anything changes, so the decoder stays usable: a sequence runs on
  // while its policies keep every cache below the capacity. A cache with a
  // policy holds at most its budget after each step (or what it holds now,
  // if more); one without grows by a position a token.
  const auto n = static_cast<std::uint64_t>(tokens.size());
  for (std::uint32_t h = 0; h < m.heads.size(); ++h) {
    const std::uint64_t count = m.store->count(h);
    std::uint64_t before_last = count + n - 1;  // held before the last token, at most
    const std::int64_t budget = m.budget_of(h);
    if (budget >= 0) before_last = std::min(before_last, std::max(count, static_cast<std::uint64_t>(budget)));
    if (before_last >= m.capacity) {
      const std::uint64_t at = std::min<std::uint64_t>(fed_ + n - 1, fed_ + (m.capacity > count ? m.capacity - count : 0));
      throw InputError(fmt::format("decoder{}: position {} is past the capacity of {} positions (cache {} is full: "
                                   "a cache without a policy, or with a budget of the capacity or more, ends there)",
                                   who, at, m.capacity, h));
    }
  }
}

std::span<const float> Decoder::step(Token token) {
  check_ready(std::span<const Token>(&token, 1), "");
  Decoder* self = this;
  Lanes lanes{std::span<Decoder* const>(&self, 1), std::span<const Token>(&token, 1), &impl_->own,
              impl_->threads, profile_};
  forward(lanes);
  return last_logits();
}

std::span<const float> Decoder::prefill(std::span<const Token> tokens, PromptLogits logits) {
  Impl& m = *impl_;
  if (tokens.empty()) return {};
  if (tokens.size() > m.chunk) {
    throw InputError(fmt::format("decoder: a prefill of {} tokens is over the chunk of {} (DecoderOptions::prefill_chunk)",
                                 tokens.size(), m.chunk));
  }
  check_ready(tokens, "");
  const std::size_t vocab = m.cfg.vocab;
  if (m.sequence != nullptr && tokens.size() > 1) {
    // The sequence's eviction after a token must come before the next
    // token's first layer: one pass a token, each token's logits kept in
    // its row (the first token's aside until the last pass, which writes
    // row 0); with kLast only the last pass computes its row.
    Decoder* self = this;
    const bool every = logits == PromptLogits::kEvery;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      Lanes one{std::span<Decoder* const>(&self, 1), tokens.subspan(i, 1), &m.own, m.threads, profile_,
                every || i + 1 == tokens.size() ? 1U : 0U};
      forward(one);
      if (every) std::copy_n(m.own.logits.data(), vocab, i == 0 ? m.led_logits.data() : m.own.logits.data() + i * vocab);
    }
    if (!every) return {m.last, vocab};
    std::copy_n(m.led_logits.data(), vocab, m.own.logits.data());
    m.last = m.own.logits.data() + (tokens.size() - 1) * vocab;
    return {m.own.logits.data(), tokens.size() * vocab};
  }
  // Every lane is this decoder: the pass takes the tokens in order.
  std::array<Decoder*, 4096> self{};
  std::fill_n(self.begin(), tokens.size(), this);
  Lanes lanes{std::span<Decoder* const>(self.data(), tokens.size()), tokens, &m.own, m.threads, profile_,
              logits == PromptLogits::kLast ? static_cast<std::uint32_t>(tokens.size()) : 1U};
  forward(lanes);
  if (logits == PromptLogits::kLast) return {m.last, vocab};
  return {m.own.logits.data(), tokens.size() * vocab};
}

void Decoder::check_together(const char* who, std::span<Decoder* const> decoders, std::span<const Token> tokens,
                             bool same_tokens) {
  for (std::size_t i = 0; i < decoders.size(); ++i) {
    if (decoders[i] == nullptr) throw ContractError(fmt::format("{}: decoder {} is null", who, i));
  }
  const Model* model = decoders[0]->impl_->model.get();
  for (std::size_t i = 0; i < decoders.size(); ++i) {
    if (decoders[i]->impl_->model.get() != model) {
      throw ContractError(fmt::format("{}: decoder {} runs another model than decoder 0", who, i));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (decoders[j] == decoders[i]) throw ContractError(fmt::format("{}: decoders {} and {} are one", who, j, i));
    }
  }
  for (std::size_t i = 0; i < decoders.size(); ++i) {
    decoders[i]->check_ready(same_tokens ? tokens : tokens.subspan(i, 1), fmt::format(" {}", i));
  }
}

void Decoder::step_together(std::span<Decoder* const> decoders, std::span<const Token> tokens) {
  if (decoders.size() != tokens.size()) {
    throw ContractError(fmt::format("step_together: {} decoders and {} tokens", decoders.size(), tokens.size()));
  }
  if (decoders.empty()) return;
  check_together("step_together", decoders, tokens, false);
  Impl& lead = *decoders[0]->impl_;
  // Grown only when this decoder leads a larger group than before.
  if (lead.together.lanes < decoders.size()) lead.together.size(lead.cfg, static_cast<std::uint32_t>(decoders.size()));
  Lanes lanes{decoders, tokens, &lead.together, lead.threads, decoders[0]->profile_};
  forward(lanes);
  // Each decoder owns its logits: the others' are copied out of the lead's
  // scratch (a vocabulary of floats each, small beside the pass).
  for (std::size_t i = 1; i < decoders.size(); ++i) {
    Impl& m = *decoders[i]->impl_;
    if (m.last == nullptr) continue;  // the pass failed before the logits
    std::copy_n(m.last, m.cfg.vocab, m.led_logits.data());
    m.last = m.led_logits.data();
  }
}

std::span<const float> Decoder::prefill_together(std::span<Decoder* const> decoders, std::span<const Token> tokens,
                                                 PromptLogits logits) {
  if (decoders.empty() || tokens.empty()) return {};
  check_together("prefill_together", decoders, tokens, true);
  Impl& lead = *decoders[0]->impl_;
  if (tokens.size() > lead.chunk) {
    throw InputError(fmt::format("prefill_together: {} tokens are over decoder 0's chunk of {} "
                                 "(DecoderOptions::prefill_chunk)",
                                 tokens.size(), lead.chunk));
  }
  const std::size_t runs = decoders.size();
  const std::size_t n = tokens.size();
  const std::size_t vocab = lead.cfg.vocab;
  bool sequence = false;
  for (Decoder* d : decoders) sequence = sequence || d->impl_->sequence != nullptr;
  // Grown only when this decoder leads a larger pass than before.
  const std::size_t widest = sequence ? runs : runs * n;
  if (lead.together.lanes < widest) lead.together.size(lead.cfg, static_cast<std::uint32_t>(widest));
  const bool every = logits == PromptLogits::kEvery;
  const std::size_t kept = every ? n : 1;  // rows returned a decoder
  const float* rows = lead.together.logits.data();
  if (sequence && n > 1) {
    // A sequence budget evicts after a token's last layer, before the next
    // token's first: a pass a token, each decoder's rows gathered (with
    // kLast the last pass's rows alone, computed by it alone).
    if (every) lead.together_rows.resize(runs * n * vocab);
    lead.together_tokens.assign(runs, 0);
    for (std::size_t j = 0; j < n; ++j) {
      std::fill(lead.together_tokens.begin(), lead.together_tokens.end(), tokens[j]);
      Lanes pass{decoders, lead.together_tokens, &lead.together, lead.threads, decoders[0]->profile_,
                 every || j + 1 == n ? 1U : 0U};
      forward(pass);
      for (std::size_t i = 0; every && i < runs; ++i) {
        std::copy_n(lead.together.logits.data() + i * vocab, vocab, lead.together_rows.data() + (i * n + j) * vocab);
      }
    }
    if (every) rows = lead.together_rows.data();
  } else {
    // Decoder-major lanes: each decoder's tokens follow each other, as a
    // prefill's do.
    lead.together_decoders.resize(runs * n);
    lead.together_tokens.resize(runs * n);
    for (std::size_t i = 0; i < runs; ++i) {
      std::fill_n(lead.together_decoders.begin() + static_cast<std::ptrdiff_t>(i * n), n, decoders[i]);
      std::copy(tokens.begin(), tokens.end(), lead.together_tokens.begin() + static_cast<std::ptrdiff_t>(i * n));
    }
    Lanes pass{lead.together_decoders, lead.together_tokens, &lead.together, lead.threads, decoders[0]->profile_,
               every ? 1U : static_cast<std::uint32_t>(n)};
    forward(pass);
  }
  // Each decoder owns its last logits (the rows are the lead's scratch).
  for (std::size_t i = 0; i < runs; ++i) {
    Impl& m = *decoders[i]->impl_;
    std::copy_n(rows + (i * kept + kept - 1) * vocab, vocab, m.led_logits.data());
    m.last = m.led_logits.data();
  }
  return {rows, runs * kept * vocab};
}

std::span<const float> Decoder::last_logits() const noexcept {
  if (impl_->last == nullptr) return {};
  return {impl_->last, impl_->cfg.vocab};
}

void Decoder::forward(Lanes& lanes) {
  const std::uint32_t n = static_cast<std::uint32_t>(lanes.tokens.size());
  Impl::Scratch& s = *lanes.scratch;
  Impl& lead = *lanes.decoders[0]->impl_;
  const ModelConfig& c = lead.cfg;
  const Model& model = *lead.model;
  const std::uint32_t width = c.width;
  const std::uint32_t d = c.head_dim();
  const std::size_t qkv_width = std::size_t{c.heads + 2 * c.kv_heads} * d;
  const int threads = lanes.threads;
  // Each lane's position and chained token hash: with the positions it
  // names a block for prefix sharing (kv_store.h), whose bytes are then
  // compared anyway. A decoder's lanes follow each other (a prefill).
  for (std::uint32_t i = 0; i < n; ++i) {
    Decoder& dec = *lanes.decoders[i];
    Impl& m = *dec.impl_;
    m.tokens = (m.tokens ^ (std::uint64_t{lanes.tokens[i]} + 1)) * 0x9E3779B97F4A7C15ULL;
    m.tokens ^= m.tokens >> 29;
    s.hash[i] = m.tokens;
    s.pos[i] = dec.fed_;
    ++dec.fed_;  // rolled back below if the pass throws: no token of it finished
  }
  const auto started = std::chrono::steady_clock::now();
  std::uint32_t lane = 0;
  try {
    for (std::uint32_t i = 0; i < n; ++i) {
      const WeightMatrix& e = model.embed();
      dequantize(e.type, e.row(lanes.tokens[i]), s.x.data() + std::size_t{i} * width, width);
    }
    Lap lap(lanes.profile);
    for (std::uint32_t l = 0; l < c.layers; ++l) {
      const Model::Layer& w = model.layer(l);
      lap.skip();
      for (std::uint32_t i = 0; i < n; ++i) {
        rms_norm(s.x.data() + std::size_t{i} * width, w.attn_norm, s.h.data() + std::size_t{i} * width, width,
                 c.norm_eps);
      }
      if (w.k.empty()) {  // one q | k | v matrix
        product(model, w.q, s.h.data(), width, s.qkv.data(), qkv_width, n, threads);
      } else {
        products(model,
                 {Product{&w.q, s.qkv.data(), qkv_width}, Product{&w.k, s.qkv.data() + w.q.rows, qkv_width},
                  Product{&w.v, s.qkv.data() + w.q.rows + w.k.rows, qkv_width}},
                 s.h.data(), width, n, threads);
      }
      if (w.qkv_bias != nullptr) {
        for (std::uint32_t i = 0; i < n; ++i) {
          float* row = s.qkv.data() + i * qkv_width;
          for (std::size_t j = 0; j < qkv_width; ++j) row[j] += w.qkv_bias[j];
        }
      }
      lap.charge(&DecodeProfile::projections);
      if (n > 1 && lanes.decoders[0] == lanes.decoders[n - 1] && lead.chunk_attention(l)) {
        // One sequence's chunk that nothing evicts from: its tokens attend side by side.
        lead.attend_chunk(l, s.pos.data(), s.hash.data(), s.qkv.data(), qkv_width, s.attn_out.data(), c.q_width(),
                          n, threads);
        lap.charge(&DecodeProfile::attention);
      } else {
        for (lane = 0; lane < n; ++lane) {
          Decoder& dec = *lanes.decoders[lane];
          dec.evicted_ += dec.impl_->attend(l, s.pos[lane], s.hash[lane], s.qkv.data() + lane * qkv_width,
                                            s.attn_out.data() + std::size_t{lane} * c.q_width(), lap);
        }
      }
      lane = 0;
      lap.skip();
      product(model, w.proj, s.attn_out.data(), c.q_width(), s.h.data(), width, n, threads);
      add_bias(w.proj_bias, s.h.data(), width, n);
      lap.charge(&DecodeProfile::projections);
      for (std::size_t j = 0; j < std::size_t{n} * width; ++j) s.x[j] += s.h[j];
      lap.skip();
      for (std::uint32_t i = 0; i < n; ++i) {
        rms_norm(s.x.data() + std::size_t{i} * width, w.mlp_norm, s.h.data() + std::size_t{i} * width, width,
                 c.norm_eps);
      }
      const auto hidden = static_cast<std::ptrdiff_t>(std::size_t{n} * c.ff);
      // A chunk's or a batch's activation is split over the products'
      // threads (each element its own, so the bits do not change); one
      // token's is too small to pay for waking them, and kvevict-tiny runs
      // on the calling thread.
      const bool split = threads > 1 && n > 1 && model.uses_kernels();
      float* const ff = s.ff.data();
      const float* const up = s.ff_up.data();
      if (c.mlp == MlpKind::kGelu) {
        product(model, w.up, s.h.data(), width, s.ff.data(), c.ff, n, threads);
        lap.charge(&DecodeProfile::projections);
#pragma omp parallel for num_threads(threads) if (split) schedule(static)
        for (std::ptrdiff_t j = 0; j < hidden; ++j) {
          const float u = ff[j];
          ff[j] = 0.5F * u * (1.0F + std::erf(u * static_cast<float>(M_SQRT1_2)));
        }
      } else {
        products(model, {Product{&w.gate, s.ff.data(), c.ff}, Product{&w.up, s.ff_up.data(), c.ff}}, s.h.data(),
                 width, n, threads);
        add_bias(w.gate_bias, s.ff.data(), c.ff, n);
        add_bias(w.up_bias, s.ff_up.data(), c.ff, n);
        lap.charge(&DecodeProfile::projections);
#pragma omp parallel for num_threads(threads) if (split) schedule(static)
        for (std::ptrdiff_t j = 0; j < hidden; ++j) {  // silu(gate) * up
          const float g = ff[j];
          ff[j] = g / (1.0F + std::exp(-g)) * up[j];
        }
      }
      lap.charge(&DecodeProfile::activation);
      product(model, w.down, s.ff.data(), c.ff, s.h.data(), width, n, threads);
      add_bias(w.down_bias, s.h.data(), width, n);
      lap.charge(&DecodeProfile::projections);
      for (std::size_t j = 0; j < std::size_t{n} * width; ++j) s.x[j] += s.h[j];
    }
    // A sequence budget evicts once its token has passed every layer (a
    // decoder with one has one lane: prefill() feeds it token by token).
    for (lane = 0; lane < n; ++lane) {
      Decoder& dec = *lanes.decoders[lane];
      dec.evicted_ += dec.impl_->evict_sequence(s.pos[lane], lap);
    }
    lane = 0;
    lap.skip();
    output_rows(model, s.x.data(), s.h.data(), s.logits.data(), n, lanes.logits_stride, threads);
    lap.charge(&DecodeProfile::projections);
  } catch (const std::exception& e) {
    // The strong guarantee would need every policy's state rolled back, which
    // the Policy interface has no way to do: a throw on head h comes after
    // heads 0 ... h-1 (caches and policies) admitted the token. Refuse instead
    // of computing from heads that disagree about what they hold.
    for (std::uint32_t i = n; i-- > 0;) lanes.decoders[i]->fed_ = s.pos[i];  // each decoder's first lane last
    for (std::uint32_t i = 0; i < n; ++i) {
      Impl& m = *lanes.decoders[i]->impl_;
      if (m.failed) continue;
      m.failed = true;
      m.failed_at = s.pos[lane < n && lanes.decoders[lane] == lanes.decoders[i] ? lane : i];
      try {
        m.failed_what = e.what();
      } catch (...) {  // keep the original exception; the refusal names the position
      }
    }
    throw;
  }
  for (std::uint32_t r = 0; lanes.logits_stride != 0 && r < n / lanes.logits_stride; ++r) {
    lanes.decoders[(r + 1) * lanes.logits_stride - 1]->impl_->last = s.logits.data() + std::size_t{r} * c.vocab;
  }
  if (lanes.profile != nullptr) {
    lanes.profile->total += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    lanes.profile->tokens += n;
  }
}

}  // namespace kvevict
