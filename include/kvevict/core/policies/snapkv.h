// SnapKV (Li et al., NeurIPS 2024, arXiv:2404.14469), adapted to decode time:
// score each position by the attention it got over the last `obsWindow` steps,
// max-pool the scores over neighbouring held positions, and evict the lowest
// outside the recent window. See docs/policies/snapkv.md.
//
// PyramidKV (pyramidkv.h) reuses this engine with a per-layer share.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct SnapKVParams {
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;  // < budget
  std::int64_t obs_window = 16;     // steps of attention each position remembers, >= 1
  std::int64_t pool_kernel = 7;     // odd width of the max-pool; 1 disables pooling
};

namespace detail {

// The SnapKV mechanism with a capacity and name chosen by its owner.
class SnapKVCore {
 public:
  SnapKVCore(const char* title, const SnapKVParams& params, std::size_t capacity);

  void on_decode_step(std::int64_t pos, Attention attn);
  // Evicts down to `target` held positions.
  std::span<const Position> evict_to(std::size_t target);
  std::size_t kept_count() const noexcept { return kept_; }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t memory_bytes() const noexcept;
  double window_score_of(std::int64_t pos) const noexcept;
  // The score interface (policy.h): the pooled window sum; the recent window protected.
  std::size_t scores(std::span<Position> positions, std::span<double> scores);
  void remove(std::span<const Position> victims);

 private:
  // Removes the marked slots, keeping their rings for the next positions.
  std::span<const Position> compact_marked();
  double window_sum(std::size_t slot) const noexcept;

  const char* title_;
  std::size_t recent_window_;
  std::size_t obs_window_;
  std::size_t pool_radius_;
  std::size_t capacity_;
  std::int64_t budget_;
  std::size_t kept_ = 0;
  std::size_t cursor_ = 0;
  std::vector<Position> positions_;
  // Ring cell c of ring r at [c * capacity_ + r]: one row per ring cell, so
  // the sums vectorise across rings. A ring never moves: ring_slot_[i] names
  // the ring of the i-th held position; [kept_, capacity_) names free rings.
  std::vector<float> history_;
  std::vector<std::uint32_t> ring_slot_;
  std::vector<std::uint32_t> freed_;  // scratch: the victims' rings
  std::vector<double> sums_;
  std::vector<double> pooled_;
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
};

// Throws ParameterError when a SnapKV-family parameter breaks a rule.
void validate_snapkv_params(const char* title, const SnapKVParams& params);

}  // namespace detail

class SnapKV final : public Policy {
 public:
  explicit SnapKV(const SnapKVParams& params = {});

  std::string_view name() const noexcept override { return "snapkv"; }
  void on_decode_step(std::int64_t pos, Attention attn) override { core_.on_decode_step(pos, attn); }
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return core_.kept_count(); }
  std::size_t memory_bytes() const noexcept override { return core_.memory_bytes(); }

  // Unpooled sum of the position's remembered weights, -1 when not held.
  double window_score_of(std::int64_t pos) const noexcept { return core_.window_score_of(pos); }
  const SnapKVParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  SnapKVParams params_;
  detail::SnapKVCore core_;
};

}  // namespace kvevict
