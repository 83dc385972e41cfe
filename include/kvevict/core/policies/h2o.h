// H2O, Heavy-Hitter Oracle (Zhang et al., NeurIPS 2023, arXiv:2306.14048):
// each position accumulates the attention it receives; outside the recent
// window, the lowest cumulative score goes. See docs/policies/h2o.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policies/victim_hint.h"
#include "kvevict/core/policy.h"

namespace kvevict {

struct H2OParams {
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;  // newest held positions never evicted
  std::int64_t sinks = 0;           // positions < sinks are never evicted (0: the spec's H2O)
  // 1: rank by the mean weight -- the cumulative score divided by the steps
  // that scored the position (kvpress's ObservedAttention, OpenVINO GenAI's
  // NORM_SUM) -- instead of the sum, which favours the oldest positions.
  // 0 (the default) is the spec's H2O, exact to the catalogue.
  std::int64_t normalize = 0;
  // Rule: sinks + recent_window < budget; normalize is 0 or 1.
};

class H2O final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 13;  // position 4 + score 8 + scratch 1
  // normalize=1 adds a step count (4) and the eviction's ranks (8) a slot.
  static constexpr std::size_t kNormalizedBytesPerSlot = kBytesPerSlot + 12;

  explicit H2O(const H2OParams& params = {});

  std::string_view name() const noexcept override { return "h2o"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override {
    return capacity_ * (params_.normalize != 0 ? kNormalizedBytesPerSlot : kBytesPerSlot);
  }

  // The score a held position is ranked by -- cumulative, or with normalize=1
  // cumulative / steps scored -- or -1 when it is not held.
  double score_of(std::int64_t pos) const noexcept;
  const H2OParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  // The slots [first, end) ranked for an eviction: the sums themselves, or
  // with normalize=1 the rates written into ranks_.
  const double* ranks(std::size_t first, std::size_t end);
  void compact_marked();

  H2OParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<double> scores_;
  std::vector<std::uint8_t> marked_;
  // normalize=1: the steps that scored each slot, and the ranks an eviction
  // compares (rate = score / steps), computed over its search range.
  std::vector<std::uint32_t> steps_;
  std::vector<double> ranks_;
  std::vector<Position> victims_;
  // The lowest score over the next eviction's search range, found by the
  // decode step's pass (so the eviction need not scan for it again); unused
  // with normalize=1, whose ranks change with every step's count.
  detail::VictimHint<double> hint_;
};

}  // namespace kvevict
