#include "kvevict/eval/metrics.h"

#include <cmath>

namespace kvevict {

double round6(double x) noexcept {
  if (!std::isfinite(x)) return x;
  return std::floor(x * 1e6 + 0.5) / 1e6;
}

Metrics metrics_of(const RunTotals& t) noexcept {
  Metrics m;
  m.retained_attention_mass =
      t.steps == 0 ? 0.0 : round6(t.total_retained_mass / static_cast<double>(t.steps));
  m.heavy_hitter_recall =
      t.total_heavy_possible == 0
          ? 0.0
          : round6(static_cast<double>(t.total_heavy_hits) /
                   static_cast<double>(t.total_heavy_possible));
  m.eviction_calls = t.eviction_calls;
  return m;
}

}  // namespace kvevict
