// The two quality proxies of spec/domain.md §3. They measure how much of the
// model's attention a policy kept, not how good the model's output is.
#pragma once

#include <cstdint>

namespace kvevict {

// Raw accumulators of one harness run (spec/domain.md §2 step 9).
struct RunTotals {
  std::int64_t steps = 0;
  std::int64_t budget = 0;
  double total_retained_mass = 0.0;
  std::int64_t total_heavy_hits = 0;
  std::int64_t total_heavy_possible = 0;
  std::int64_t eviction_calls = 0;
  std::int64_t evicted = 0;
};

struct Metrics {
  double retained_attention_mass = 0.0;  // mean share of attention on held positions
  double heavy_hitter_recall = 0.0;      // pooled share of each step's top 32 held
  std::int64_t eviction_calls = 0;
};

// floor(x * 1e6 + 0.5) / 1e6: half-up, not banker's rounding; non-finite
// values pass through.
double round6(double x) noexcept;

Metrics metrics_of(const RunTotals& totals) noexcept;

}  // namespace kvevict
