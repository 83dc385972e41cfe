#include "kvevict/core/policies/knorm.h"

#include <algorithm>

#include "policies/describe.h"
#include "policies/kernels.h"

namespace kvevict {

KNorm::KNorm(const KeyScoredParams& params) : KeyScoredPolicy("KNorm", params, /*keeps_keys=*/false) {}

void KNorm::fill_scores() const noexcept {
  for (std::size_t i = 0; i < kept_; ++i) score_[i] = -squared_norms_[i];
}

void KNorm::mark_victims(std::size_t needed) noexcept {
  // -a < -b exactly when a > b (no squared norm is NaN or -0), so the
  // reference's first minimum of -||k||^2 is the first maximum of ||k||^2.
  const SlotRange range = evictable();
  const std::size_t evictable_slots = range.end > range.first ? range.end - range.first : 0;
  const std::size_t count = std::min(needed, evictable_slots);
  for (std::size_t chosen = 0; chosen < count; ++chosen) {
    const std::size_t best = detail::first_max(squared_norms_.data(), range.first, range.end);
    marked_[best] = 1;
    // Below every squared norm: never the maximum again. The slot is dropped
    // by the compaction that follows, with its value.
    squared_norms_[best] = -1.0;
  }
}

namespace detail {
const PolicyInfo& knorm_info() {
  static const PolicyInfo info = describe<KNorm, KeyScoredParams>(
      "knorm", "KNorm",
      "Reads each new key, not attention: the held key with the largest L2 norm goes.",
      {{"budget", &KeyScoredParams::budget, "positions held after each eviction"},
       {"headDim", &KeyScoredParams::head_dim, "floats in a key (the model's head size)"},
       {"sinks", &KeyScoredParams::sinks, "first positions that are never evicted (0: the paper's KNorm)"},
       {"recentWindow", &KeyScoredParams::recent_window,
        "newest held positions that are never evicted (0: the paper's KNorm)"}},
      {query1<KNorm>("keyNormOf", [](const KNorm& p, std::int64_t pos) { return p.key_norm_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict
