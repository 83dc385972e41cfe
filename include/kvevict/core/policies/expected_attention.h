// Expected Attention (Devoto, Jeblick, Jégou, "Expected Attention: KV Cache
// Compression by Estimating Attention from Future Queries Distribution",
// 2025, arXiv:2510.00636; kvpress's ExpectedAttentionPress): the future
// queries are modelled as a Gaussian -- the mean and covariance of the recent
// queries (before RoPE), rotated by RoPE averaged over the next
// `futurePositions` positions -- and each held key is scored by the softmax
// of its expected logit, averaged over the cache's query heads and scaled by
// its value's norm. The lowest expected attention goes. Reads the key, the
// value and the queries -- never the weights -- so an engine with fused
// attention can run it. See docs/policies/expected-attention.md.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct ExpectedAttentionParams {
  std::int64_t budget = 512;
  std::int64_t head_dim = 128;          // floats in a key, a value and one query head
  std::int64_t groups = 1;              // query heads sharing the cache (grouped-query attention)
  std::int64_t sinks = 4;               // positions < sinks: never evicted, their queries not modelled (kvpress n_sink)
  std::int64_t recent_window = 0;       // newest held positions never evicted (0: as published)
  std::int64_t query_window = 128;      // the last queries (of positions >= sinks) the Gaussian is fitted to
  std::int64_t future_positions = 512;  // RoPE averaged over positions next ... next + futurePositions - 1
  std::int64_t rope_base = 10000;       // the model's RoPE base (GPT-NeoX layout); 0: no RoPE, no rotation
  std::int64_t covariance = 1;          // 1: the logit's covariance term (kvpress use_covariance)
  std::int64_t value_norm = 1;          // 1: scale by ||v|| (kvpress use_vnorm)
  // 1: the Gaussian is fitted and every held key scored afresh at every
  // eviction (the published rule). k > 1: it is refitted at the first
  // scoring call (an evict() that evicts, or scores()) and then at every k-th
  // one; between refits each held key keeps the logits the last fit gave it,
  // a key admitted since is given its logits under that fit (the same mean,
  // covariance and averaged rotation), and the softmax, the mean over the
  // heads and the value norm are taken over the keys held now -- so every
  // eviction still leaves at most `budget`, and a refit costs what an
  // eviction costs at k = 1.
  std::int64_t evict_every = 1;
  // Rules: budget >= 1; 1 <= headDim <= 1024, even when ropeBase > 0;
  // 1 <= groups <= 64; sinks, recentWindow >= 0 and sinks + recentWindow <
  // budget; 1 <= queryWindow <= 65536; 1 <= futurePositions <= 2^24;
  // ropeBase 0 or >= 2; covariance and valueNorm 0 or 1; 1 <= evictEvery <=
  // 65536.
};

class ExpectedAttention final : public Policy {
 public:
  static constexpr Signals kSignals = kSignalKey | kSignalValue | kSignalQueries;

  explicit ExpectedAttention(const ExpectedAttentionParams& params = {});
  std::string_view name() const noexcept override { return "expected-attention"; }
  Signals signals() const noexcept override { return kSignals; }

  // Refused: the weights alone are not what this policy scores.
  void on_decode_step(std::int64_t pos, Attention attn) override;
  void on_step(std::int64_t pos, const StepInputs& in) override;
  void on_origin(const StepInputs& in) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  // Per slot: position 4 + key 4 x headDim + value norm 8 + observed 1 +
  // scratch 1 + score 8 + logit 8; the query ring (4 x queryWindow x groups x
  // headDim); one head's statistics and the rotation (8 x (headDim^2 + 8
  // headDim)); a tile of 16 keys (8 x 16 x headDim). With evictEvery > 1,
  // also per slot the last fit's logits (8 x groups) and a flag (1), and
  // every head's fit (8 x groups x (headDim + headDim^2 with covariance)).
  std::size_t memory_bytes() const noexcept override;

  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

  const ExpectedAttentionParams& params() const noexcept { return params_; }

  // Introspection (vectors, tests), each computed from the state now:
  // the expected logit query head `head` pays to a held observed position
  // (mu'.k / sqrt(d) + k'Sigma'k / 2d); NaN when not held or unobserved.
  double logit_of(std::int64_t pos, std::int64_t head) const noexcept;
  // The score the next evict() would use (softmax averaged over the heads,
  // times ||v||; with evictEvery > 1, from the last fit's logits unless that
  // call refits); -1 when not held, unobserved or a sink (sinks are not scored).
  double score_of(std::int64_t pos) const noexcept;
  // Queries the Gaussian is fitted to now (at most queryWindow).
  std::int64_t modelled_queries() const noexcept { return static_cast<std::int64_t>(ring_count_); }

 private:
  void check_signals(const StepInputs& in) const;
  void admit(std::size_t slot, std::int64_t pos, const StepInputs& in) noexcept;
  bool is_protected(std::size_t slot) const noexcept;
  bool is_scored(std::size_t slot) const noexcept;
  std::size_t first_scored() const noexcept;
  // The rotated mean and covariance of query head `head` into mean_r_ and cov_
  // (rope_cos_/rope_sin_ must hold the averaged rotation for the newest position).
  void head_statistics(std::size_t head) const noexcept;
  void average_rotation() const noexcept;
  // Fills score_ for every scored slot from a fresh fit (and logit_ with the
  // last head's softmax weights).
  void fill_scores() const noexcept;
  // evictEvery > 1: score_ from the cached logits, refitting them all first
  // when `refit`, else giving the keys admitted since the fit theirs.
  void cached_scores(bool refit) const noexcept;
  // Whether the next scoring call refits (always, with evictEvery = 1).
  bool refit_due() const noexcept { return !fitted_ || since_fit_ >= static_cast<std::uint64_t>(params_.evict_every); }
  // A scoring call: score_ as that call must see it (and the fit counted).
  void score_call();
  // Logits of slots [from, to) under mean_r_ and cov_ into out[from, to).
  void logits(std::size_t from, std::size_t to, const double* mean, const double* cov, double* out) const noexcept;
  // Adds head's softmax over z[first, kept) into score_[first, kept).
  void add_softmax(const double* z, std::size_t first) const noexcept;
  // score_[first, kept) /= groups, times ||v|| when valueNorm.
  void finish_scores(std::size_t first) const noexcept;
  std::size_t compact_marked() noexcept;

  ExpectedAttentionParams params_;
  std::size_t dim_;
  std::size_t groups_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  bool stepped_ = false;
  std::vector<Position> positions_;
  std::vector<float> keys_;            // [capacity, head_dim]
  std::vector<double> value_norms_;    // ||v|| per slot
  std::vector<std::uint8_t> observed_;
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
  // The last queryWindow queries of positions >= sinks, a ring of
  // [queryWindow, groups x head_dim], oldest at ring_start_.
  std::vector<float> ring_;
  std::size_t ring_start_ = 0;
  std::size_t ring_count_ = 0;
  // Scratch, sized at construction.
  mutable std::vector<double> score_;
  mutable std::vector<double> logit_;
  mutable std::vector<double> rope_cos_;  // the averaged rotation, head_dim / 2 pairs
  mutable std::vector<double> rope_sin_;
  mutable std::vector<double> mean_;
  mutable std::vector<double> mean_r_;
  mutable std::vector<double> cov_;    // head_dim x head_dim, rotated in place
  mutable std::vector<double> kcov_;   // 4 x head_dim: four centred queries
  std::vector<double> rope_theta_;     // theta_i, head_dim / 2 (fixed by the params)
  std::vector<double> rope_ratio_;     // the Dirichlet kernel's scale, head_dim / 2
  mutable std::vector<double> tile_;   // kKeyTile x head_dim: keys transposed for the logits kernel
  // evictEvery > 1: the last fit and the logits it gave each slot.
  bool cached_ = false;
  bool fitted_ = false;
  std::uint64_t since_fit_ = 0;               // scoring calls since the last refit, that one included
  mutable std::vector<double> fit_mean_;      // [groups, head_dim]: each head's rotated mean
  mutable std::vector<double> fit_cov_;       // [groups, head_dim^2]: each head's rotated covariance
  mutable std::vector<double> fit_logit_;     // [groups, capacity]: each slot's logit under the fit
  mutable std::vector<std::uint8_t> has_logit_;  // per slot: fit_logit_ holds its logits
};

}  // namespace kvevict
