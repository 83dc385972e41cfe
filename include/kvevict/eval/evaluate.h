// Evaluations the tool and the bindings share: one run, a comparison of
// policies across budgets, a sweep of one parameter. Each evaluation makes a
// single pass over the trace and feeds every run from it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvevict/eval/harness.h"
#include "kvevict/eval/metrics.h"
#include "kvevict/eval/paged.h"
#include "kvevict/eval/signal_files.h"
#include "kvevict/core/params.h"

namespace kvevict {

// The canonical sweep (spec/domain.md §4).
inline constexpr std::int64_t kCanonicalBudgets[] = {256, 512, 1024};

struct RunSpec {
  std::string policy;
  ParamMap params;       // given parameters; `budget` is set from `budget` below
  std::int64_t budget = 512;
};

struct RunRow {
  std::string policy;
  std::string trace;
  std::int64_t budget = 0;
  ParamMap params;  // every effective parameter
  // Summed over heads (an .npy trace of H heads runs one instance per head).
  RunTotals totals;
  // Mean over heads of each head's unrounded ratio, then round6; eviction
  // calls summed. For one head: exactly metrics_of(totals).
  Metrics metrics;
  std::uint64_t heads = 1;
  std::vector<Metrics> head_metrics;  // one per head when heads > 1
  std::uint64_t memory_bytes = 0;
  double seconds = 0.0;
  int rank = 0;  // compare only: 1 = most retained mass at the ranking budget; ties share
};

struct EvaluateOptions {
  std::string trace = "decode-4096";  // a generated id, or a path to an .npy file
  std::optional<std::int64_t> steps;  // all when empty
  ProgressFn progress;
  // Sees every step of every run (StepView::run indexes the specs given to
  // evaluate(); StepView::head the trace head). Empty: no cost.
  StepObserver observe;
  // Block or layer-budget eviction for every run (docs/paged.md); off by default.
  PagedOptions paged;
  // Keys, values and queries recorded beside an .npy trace
  // (eval/signal_files.h): with them the key-aware policies replay too, each
  // given position 0's signals by on_origin and every step's by on_step, and
  // their headDim and groups are read from the files unless set. A policy
  // that reads a signal not given is refused naming it and its flag.
  SignalFiles signals;
};

// Builds every policy first (so a bad parameter fails before any work), then
// runs them all in one pass. Rows come back in the order of `specs`.
std::vector<RunRow> evaluate(const std::vector<RunSpec>& specs, const EvaluateOptions& options);

// Compare: every policy at every budget. `overrides` holds "policy.key" ->
// value pairs; a key may also be given without a policy prefix to mean every
// policy that has it. Rows are ranked by retained mass at the middle budget
// (higher first), each policy's rows by ascending budget.
struct CompareRequest {
  std::vector<std::string> policies;  // empty: the whole registry
  std::vector<std::int64_t> budgets{std::begin(kCanonicalBudgets), std::end(kCanonicalBudgets)};
  ParamMap overrides;                 // keys "policy.param" or "param"
  // Leave out the policy x budget pairs a policy's rules refuse (Scissorhands'
  // window at a budget it does not fit), each named in compare_specs'
  // `skipped`, instead of refusing the whole comparison.
  bool skip_refused = false;
};
std::vector<RunRow> compare(const CompareRequest& request, const EvaluateOptions& options);

// compare() in its two halves, for callers that observe the pass (the
// report): the runs it makes, in order (policy-major, ascending budget, the
// overrides resolved and checked), and the ranking it applies to evaluate()'s
// rows. compare(r, o) == rank_compare_rows(evaluate(compare_specs(r), o), budgets).
std::vector<RunSpec> compare_specs(const CompareRequest& request, std::vector<std::string>* skipped = nullptr);
void rank_compare_rows(std::vector<RunRow>& rows, const std::vector<std::int64_t>& budgets);

// The budget whose retained mass ranks a comparison: the middle one of the
// sorted budgets (the lower middle for an even count).
std::int64_t ranking_budget(std::vector<std::int64_t> budgets);

// Sweep: one policy, one parameter over several values, at each budget.
// Rows in order value-major, budget-minor.
struct SweepRequest {
  std::string policy;
  std::string param;
  std::vector<std::int64_t> values;
  std::vector<std::int64_t> budgets{std::begin(kCanonicalBudgets), std::end(kCanonicalBudgets)};
  ParamMap params;  // other fixed parameters
  // Leave out the value x budget pairs the policy's rules refuse (a
  // recentWindow of 96 at budget 64), each named in `skipped`, instead of
  // stopping at the first; a sweep that leaves nothing to run still fails.
  bool skip_refused = false;
};
std::vector<RunRow> sweep(const SweepRequest& request, const EvaluateOptions& options);
// The runs a sweep makes, in its row order (the parameter and the values
// checked; sweep --model runs them through the model).
// With skip_refused, the pairs left out are appended to *skipped (when given),
// one line each: "recentWindow=96 at budget 64: <the rule's message>".
std::vector<RunSpec> sweep_specs(const SweepRequest& request, std::vector<std::string>* skipped = nullptr);

}  // namespace kvevict
