// Scissorhands (Liu et al., NeurIPS 2023, arXiv:2305.17118): a position earns a
// vote on each step its attention beats its fair share 1/len(attn); outside the
// recent window, the fewest votes goes. See docs/policies/scissorhands.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policies/victim_hint.h"
#include "kvevict/core/policy.h"

namespace kvevict {

struct ScissorhandsParams {
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;  // newest held positions never evicted
  // The paper's amortised schedule and attention sinks. The defaults are the
  // spec's behaviour (and keep every vector and canonical number unchanged).
  std::int64_t history_window = 0;  // votes count over the last w observed steps; 0 = all
                                    // (at most 4096, and its vote bits at most 256 MiB:
                                    // 8 * ceil(w / 64) * (budget + 1) <= 2^28)
  std::int64_t drop_amount = 1;     // an eviction drops max(needed, drop_amount) positions
  std::int64_t sinks = 0;           // positions < sinks are never evicted
  // 1: rank by the vote rate -- votes divided by the steps that scored the
  // position -- instead of the count, which favours the oldest positions (as
  // H2O's normalize=1 does for sums). 0 (the default) is the spec's rule.
  // Not with a history window, the paper's own bound on the same bias.
  std::int64_t normalize = 0;
  // Rule: sinks + recent_window < budget, so the votes always have a choice;
  // normalize is 0 or 1, and 0 when historyWindow > 0.
};

class Scissorhands final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 9;  // position 4 + votes 4 + scratch 1
  // normalize=1 adds a step count (4) and the eviction's ranks (8) a slot.
  static constexpr std::size_t kNormalizedBytesPerSlot = kBytesPerSlot + 12;
  // Longest history window: its vote bits cost history_window / 8 bytes a slot.
  static constexpr std::int64_t kMaxHistoryWindow = 4096;

  explicit Scissorhands(const ScissorhandsParams& params = {});

  std::string_view name() const noexcept override { return "scissorhands"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }
  std::size_t memory_bytes() const noexcept override {
    return capacity_ * ((params_.normalize != 0 ? kNormalizedBytesPerSlot : kBytesPerSlot) + 8 * history_words_);
  }

  // Votes of a held position (within the history window), -1 when not held.
  std::int64_t votes_of(std::int64_t pos) const noexcept;
  // The score a held position is ranked by -- its votes, or with normalize=1
  // votes / steps scored -- or -1 when it is not held.
  double rank_of(std::int64_t pos) const noexcept;
  const ScissorhandsParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  // normalize=1: the vote rates of the slots [first, end), in ranks_.
  const double* rates(std::size_t first, std::size_t end);
  void move_slots(std::size_t to, std::size_t from, std::size_t n) noexcept;

  ScissorhandsParams params_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  std::vector<Position> positions_;
  std::vector<std::uint32_t> votes_;
  std::vector<std::uint8_t> marked_;
  // normalize=1: the steps that scored each slot, and an eviction's rates.
  std::vector<std::uint32_t> steps_;
  std::vector<double> ranks_;
  std::vector<Position> victims_;
  // With a history window: per slot, one bit per observed step in a ring of
  // history_window bits (history_words_ 64-bit words), set when it voted.
  std::size_t history_words_ = 0;
  std::vector<std::uint64_t> history_;
  std::uint64_t observed_steps_ = 0;
  // The fewest votes over the next eviction's search range, found by the
  // decode step's single pass (so the eviction need not scan for it again).
  detail::VictimHint<std::uint32_t> hint_;
};

}  // namespace kvevict
