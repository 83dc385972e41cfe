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
  // Rules: budget >= 1; 1 <= headDim <= 1024, even when ropeBase > 0;
  // 1 <= groups <= 64; sinks, recentWindow >= 0 and sinks + recentWindow <
  // budget; 1 <= queryWindow <= 65536; 1 <= futurePositions <= 2^24;
  // ropeBase 0 or >= 2; covariance and valueNorm 0 or 1.
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
  // headDim) and one head's statistics (8 x (headDim^2 + 4 headDim)).
  std::size_t memory_bytes() const noexcept override;

  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

  const ExpectedAttentionParams& params() const noexcept { return params_; }

  // Introspection (vectors, tests), each computed from the state now:
  // the expected logit query head `head` pays to a held observed position
  // (mu'.k / sqrt(d) + k'Sigma'k / 2d); NaN when not held or unobserved.
  double logit_of(std::int64_t pos, std::int64_t head) const noexcept;
  // The score evict() would use (softmax averaged over the heads, times ||v||);
  // -1 when not held, unobserved or a sink (sinks are not scored).
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
  // Fills score_ for every scored slot (and logit_ with the last head's logits).
  void fill_scores() const noexcept;
  double logit(std::size_t slot) const noexcept;
  void logits4(std::size_t slot, double* out) const noexcept;
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
  mutable std::vector<double> kcov_;   // head_dim: a centred query
};

}  // namespace kvevict
