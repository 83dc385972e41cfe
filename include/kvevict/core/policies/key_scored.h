// What the key-aware policies that score each held key on its own share
// (KNorm, KeyDiff; docs/signals.md): the held positions with their keys'
// squared norms (and, where the score needs them, the keys), position 0
// unobserved until on_origin gives its key, sinks and a recent window that
// are never evicted, and the reference eviction -- one score per held slot,
// computed once per evict() call, then a repeated strict argmin over the
// evictable slots (ties to the lower position). evict() hands the choice to
// mark_victims(): the reference here, exact fast paths in KNorm and KeyDiff.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct KeyScoredParams {
  std::int64_t budget = 512;
  std::int64_t head_dim = 128;     // floats in a key
  std::int64_t sinks = 0;          // positions < sinks are never evicted
  std::int64_t recent_window = 0;  // newest held positions never evicted
  // Rules: budget >= 1, 1 <= headDim <= 4096, sinks >= 0, recentWindow >= 0,
  // sinks + recentWindow < budget.
};

class KeyScoredPolicy : public Policy {
 public:
  static constexpr Signals kSignals = kSignalKey;
  Signals signals() const noexcept override { return kSignals; }
  // Refused: the weights alone are not what these policies score.
  void on_decode_step(std::int64_t pos, Attention attn) override;
  void on_step(std::int64_t pos, const StepInputs& in) override;
  void on_origin(const StepInputs& in) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return kept_; }

  // The score interface (policy.h): the score evict() would use now,
  // +infinity for a protected slot.
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

  const KeyScoredParams& params() const noexcept { return params_; }
  // ||k|| of a held, observed position; -1 otherwise.
  double key_norm_of(std::int64_t pos) const noexcept;

 protected:
  // keeps_units: also keep each held key divided by its norm in float64
  // (units_), computed once when the key is admitted.
  KeyScoredPolicy(std::string_view title, const KeyScoredParams& params, bool keeps_keys, bool keeps_units = false);
  // Fills score_[0, kept_) with every held slot's score (the lowest goes);
  // unobserved slots may hold anything: they are never candidates.
  virtual void fill_scores() const noexcept = 0;
  bool is_protected(std::size_t slot) const noexcept;
  // The evictable slots [first, end): exactly the slots is_protected() is
  // false for. Position 0 (the only one that can be unobserved) and the
  // positions below `sinks` are a prefix of the ascending slots, the recent
  // window a suffix, so what is left is one contiguous range (first >= end:
  // none).
  struct SlotRange {
    std::size_t first;
    std::size_t end;
  };
  SlotRange evictable() const noexcept;
  // Marks in marked_ the `needed` slots evict() drops (fewer when only
  // protected slots are left). The reference: fill_scores() once, then a
  // repeated strict argmin of score_ over every slot that is neither marked
  // nor protected (ties to the lower slot). A subclass that overrides it
  // must mark exactly these slots.
  virtual void mark_victims(std::size_t needed) noexcept;
  const float* key(std::size_t slot) const noexcept { return keys_.data() + slot * dim_; }

  std::string_view title_;
  KeyScoredParams params_;
  std::size_t dim_;
  std::size_t capacity_;
  std::size_t kept_ = 0;
  bool stepped_ = false;
  std::vector<Position> positions_;
  std::vector<double> squared_norms_;
  std::vector<std::uint8_t> observed_;
  std::vector<float> keys_;  // [capacity, head_dim] when the score reads the keys; else empty
  // [capacity, head_dim] when kept: (double)k[c] / ||k|| for an observed key
  // with ||k|| > 0 (the float64 sqrt of its squared norm), zeros otherwise.
  std::vector<double> units_;
  mutable std::vector<double> score_;  // scratch, filled by fill_scores() (queries too)
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;

 private:
  // The key's squared norm, after the checks of check_step_signals (a
  // refused key changes nothing).
  double checked_squared_norm(const StepInputs& in) const;
  void admit(std::size_t slot, std::span<const float> key, double squared) noexcept;
  std::size_t compact_marked() noexcept;
};

}  // namespace kvevict
