#include "kvevict/core/policies/keydiff.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "policies/common.h"
#include "policies/describe.h"
#include "policies/kernels.h"
#include "policies/key_signals.h"

namespace kvevict {

KeyDiff::KeyDiff(const KeyScoredParams& params)
    : KeyScoredPolicy("KeyDiff", params, /*keeps_keys=*/true, /*keeps_units=*/true) {
  anchor_.resize(dim_);
}

void KeyDiff::fill_scores() const noexcept {
  // The anchor: every held observed key normalised, added slot by slot in
  // float64. The sum, not kvpress's mean: the cosine is the same, and the sum
  // needs no division. A zero key has no direction and adds nothing.
  // score_ holds each slot's norm first (0: adds nothing, scores 0).
  for (std::size_t i = 0; i < kept_; ++i) {
    score_[i] = observed_[i] == 0 || squared_norms_[i] == 0.0 ? 0.0 : std::sqrt(squared_norms_[i]);
  }
  std::fill(anchor_.begin(), anchor_.end(), 0.0);
  // Each key's quotients k[c] / ||k|| were divided once, when it was admitted
  // (units_): the same correctly rounded quotients, added in the same order.
  detail::add_rows(units_.data(), kept_, dim_, score_.data(), anchor_.data());
  double anchor_squared = 0.0;
  for (const double a : anchor_) anchor_squared += a * a;
  const double anchor_norm = std::sqrt(anchor_squared);
  const double* a = anchor_.data();
  const auto finish = [&](std::size_t i, double dot) {
    // no direction: a cosine of 0
    score_[i] = score_[i] == 0.0 || anchor_norm == 0.0 ? -0.0 : -(dot / (score_[i] * anchor_norm));
  };
  // The dot products in channel order, eight slots' independent sums at once.
  constexpr std::size_t kSlots = 8;
  std::size_t i = 0;
  for (; i + kSlots <= kept_; i += kSlots) {
    const float* k = key(i);
    double dot[kSlots] = {};
    for (std::size_t c = 0; c < dim_; ++c) {
      for (std::size_t j = 0; j < kSlots; ++j) dot[j] += static_cast<double>(k[j * dim_ + c]) * a[c];
    }
    for (std::size_t j = 0; j < kSlots; ++j) finish(i + j, dot[j]);
  }
  for (; i < kept_; ++i) finish(i, detail::dot64(key(i), a, dim_));
}

void KeyDiff::mark_victims(std::size_t needed) noexcept {
  fill_scores();  // once per call, before the first victim
  const SlotRange range = evictable();
  const std::size_t evictable_slots = range.end > range.first ? range.end - range.first : 0;
  const std::size_t count = std::min(needed, evictable_slots);
  for (std::size_t chosen = 0; chosen < count; ++chosen) {
    // Scores are finite (never NaN): the vector minimum is the scalar one,
    // and -0 == +0 as in the reference's strict comparison.
    const std::size_t best = detail::first_min(score_.data(), range.first, range.end);
    marked_[best] = 1;
    score_[best] = std::numeric_limits<double>::infinity();  // above every score: never chosen again
  }
}

double KeyDiff::cosine_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot || observed_[slot] == 0) return -2.0;
  fill_scores();
  return -score_[slot] + 0.0;  // + 0.0: a cosine of 0 reads 0, not -0
}

namespace detail {
const PolicyInfo& keydiff_info() {
  static const PolicyInfo info = describe<KeyDiff, KeyScoredParams>(
      "keydiff", "KeyDiff",
      "Reads each new key, not attention: the held key most like the keys' mean direction goes.",
      {{"budget", &KeyScoredParams::budget, "positions held after each eviction"},
       {"headDim", &KeyScoredParams::head_dim, "floats in a key (the model's head size)"},
       {"sinks", &KeyScoredParams::sinks, "first positions that are never evicted (0: the paper's KeyDiff)"},
       {"recentWindow", &KeyScoredParams::recent_window,
        "newest held positions that are never evicted (0: the paper's KeyDiff)"}},
      {query1<KeyDiff>("cosineOf",
                       [](const KeyDiff& p, std::int64_t pos) { return p.cosine_of(pos); }),
       query1<KeyDiff>("keyNormOf", [](const KeyDiff& p, std::int64_t pos) { return p.key_norm_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict
