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
  // Rule: sinks + recent_window < budget.
};

class H2O final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 13;  // position 4 + score 8 + scratch 1

  explicit H2O(const H2OParams& params = {});

  std::string_view name() const noexcept override { return "h2o"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }

  // Cumulative score of a held position, -1 when it is not held.
  double score_of(std::int64_t pos) const noexcept;
  const H2OParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  H2OParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<double> scores_;
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
  // The lowest score over the next eviction's search range, found by the
  // decode step's pass (so the eviction need not scan for it again).
  detail::VictimHint<double> hint_;
};

}  // namespace kvevict
