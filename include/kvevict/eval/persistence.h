// The persistence-of-importance statistic (Scissorhands, Liu et al. 2023,
// section 3): of the positions whose attention beats their fair share at step
// t, what share still beats it at step t + k? Scissorhands is sound where this
// stays high for large k. Measured on any trace, head by head.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kvevict/eval/trace.h"

namespace kvevict {

struct PersistenceRow {
  std::uint32_t lag = 0;          // k
  std::uint64_t important = 0;    // pooled |S_t| over every t with t + k in the trace
  std::uint64_t persisted = 0;    // of those, still above fair share at t + k
  double share = 0.0;             // persisted / important (pooled over steps, then heads)
  // The chance level: the mean share of held positions above fair share at a
  // step -- what `share` would be if importance were redrawn every step.
  double base_rate = 0.0;
};

// One row per lag (ascending, each 1 ... steps - 1) over every head; each head
// weighs equally. "Above fair share" at step t is weight > 1/t over the t
// positions 0 ... t-1 (the full cache: nothing evicted). Throws
// ParameterError for an empty or out-of-range lag list.
std::vector<PersistenceRow> persistence(std::span<Trace* const> heads,
                                        std::vector<std::uint32_t> lags);

}  // namespace kvevict
