// The harness (spec/domain.md §2): replays a trace through one or more policies,
// measures retained mass and heavy-hitter recall before each policy acts, and
// polices the contract (every victim valid and held, the budget met).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "kvevict/eval/metrics.h"
#include "kvevict/core/policy.h"
#include "kvevict/eval/trace.h"

namespace kvevict {

// Called after each step with (step, total steps); may be empty.
using ProgressFn = std::function<void(std::uint32_t, std::uint32_t)>;

// What an observer sees at the end of each step of each run, after the
// policy has acted: the step's weights, the positions the harness holds now
// (after this step's eviction, ascending, including `step` itself unless it
// was evicted), the victims of this step (ascending; empty when the budget
// did not bind) and the step's retained mass as measured (before the policy
// acted). The spans are valid only during the call.
struct StepView {
  std::size_t run = 0;        // index into `runs`
  std::uint64_t head = 0;     // set by evaluate() for multi-head traces
  std::uint32_t step = 0;     // t = 1 ... steps
  std::span<const float> weights;
  std::span<const Position> kept;
  std::span<const Position> victims;
  double retained = 0.0;
};

// Called for every run at every step; may be empty (then it costs nothing).
using StepObserver = std::function<void(const StepView&)>;

// Each position's key, value and queries for one head, beside the trace's
// weights (recorded files: eval/signal_files.h). With a source, the harness
// gives every run position 0's signals through on_origin before step 1 and
// step t through on_step(t, inputs) with the attention row -- for an
// attention policy exactly on_decode_step(t, attention).
class StepSignals {
 public:
  virtual ~StepSignals() = default;
  // Position `pos`'s signals (attention left empty); the spans stay valid
  // until the next call. Throws InputError naming the file on bad data.
  virtual StepInputs at(std::uint32_t pos) = 0;
};

struct RunSlot {
  Policy* policy = nullptr;
  std::int64_t budget = 0;
};

// Runs every (policy, budget) over one pass of the trace: each step is
// generated once and its top-32 set computed once, whatever the number of runs.
// `max_steps` truncates to a prefix (checked against the trace). Throws
// ParameterError for a budget < 1 and ContractError when a policy breaks the
// contract (naming the policy, the victim and the step).
// `seconds`, when given, receives each run's own time (its policy and metric
// work, not the shared trace generation). `observe`, when given, sees every
// run's every step (StepView) and changes nothing; its time is not counted.
// `signals`, when given, supplies each position's key, value and queries
// (StepSignals above); without it every step is on_decode_step(t, attention).
std::vector<RunTotals> run_many(std::span<const RunSlot> runs, Trace& trace,
                                std::optional<std::int64_t> max_steps = std::nullopt,
                                const ProgressFn& progress = {},
                                std::vector<double>* seconds = nullptr,
                                const StepObserver& observe = {},
                                StepSignals* signals = nullptr);

// One policy, one budget.
RunTotals run(Policy& policy, Trace& trace, std::int64_t budget,
              std::optional<std::int64_t> max_steps = std::nullopt);

}  // namespace kvevict
