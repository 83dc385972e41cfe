#include "kvevict/core/policies/keydiff.h"

#include <algorithm>
#include <cmath>

#include "policies/common.h"
#include "policies/describe.h"
#include "policies/key_signals.h"

namespace kvevict {

KeyDiff::KeyDiff(const KeyScoredParams& params) : KeyScoredPolicy("KeyDiff", params, /*keeps_keys=*/true) {
  anchor_.resize(dim_);
}

void KeyDiff::fill_scores() const noexcept {
  // The anchor: every held observed key normalised, added slot by slot in
  // float64. The sum, not kvpress's mean: the cosine is the same, and the sum
  // needs no division. A zero key has no direction and adds nothing.
  std::fill(anchor_.begin(), anchor_.end(), 0.0);
  for (std::size_t i = 0; i < kept_; ++i) {
    if (observed_[i] == 0 || squared_norms_[i] == 0.0) continue;
    const double norm = std::sqrt(squared_norms_[i]);
    const float* k = key(i);
    for (std::size_t c = 0; c < dim_; ++c) anchor_[c] += static_cast<double>(k[c]) / norm;
  }
  double anchor_squared = 0.0;
  for (const double a : anchor_) anchor_squared += a * a;
  const double anchor_norm = std::sqrt(anchor_squared);
  for (std::size_t i = 0; i < kept_; ++i) {
    if (observed_[i] == 0 || squared_norms_[i] == 0.0 || anchor_norm == 0.0) {
      score_[i] = -0.0;  // no direction: a cosine of 0
      continue;
    }
    const double cosine = detail::dot64(key(i), anchor_.data(), dim_) / (std::sqrt(squared_norms_[i]) * anchor_norm);
    score_[i] = -cosine;
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
