#include "kvevict/core/policies/knorm.h"

#include "policies/describe.h"

namespace kvevict {

KNorm::KNorm(const KeyScoredParams& params) : KeyScoredPolicy("KNorm", params, /*keeps_keys=*/false) {}

void KNorm::fill_scores() const noexcept {
  for (std::size_t i = 0; i < kept_; ++i) score_[i] = -squared_norms_[i];
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
