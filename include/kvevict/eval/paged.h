// Paged evaluation (docs/paged.md): the tool's and the bindings' --block-size,
// --start-blocks, --recent-blocks, --block-score and --granularity (with
// --layer-budget its older spelling of `layer`), applied to every run of an
// evaluation (run, compare, sweep) and of a model's commands.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/core/block_evictor.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/sequence_budget.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/metrics.h"
#include "kvevict/eval/trace.h"
#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict {

struct RunSpec;
struct RunRow;
struct EvaluateOptions;

// Which caches share one budget and its victims (docs/paged.md,
// "Granularity"):
//   head      each cache (a layer's KV head) its own policy and budget;
//   layer     a layer's KV heads budget x heads positions together (LayerBudget);
//   sequence  every cache of the sequence -- all layers, all KV heads -- holds
//             the same `budget` positions, one victim set for all
//             (SequenceBudget): the granularity llama.cpp's cells and vLLM's
//             block tables impose.
enum class Granularity { kHead, kLayer, kSequence };

// "head", "layer" or "sequence"; anything else is refused (ParameterError
// naming --granularity and the three).
Granularity parse_granularity(std::string_view name);
std::string_view granularity_name(Granularity granularity) noexcept;

struct PagedOptions {
  // Block mode when >= 1: each run's policy is driven by a BlockEvictor with
  // budget / block_size blocks (the budget must be a whole number of blocks).
  std::int64_t block_size = 0;
  std::int64_t start_blocks = 0;
  std::int64_t recent_blocks = 0;
  BlockScore block_score = BlockScore::kSum;
  // Layer mode: the trace's heads share budget x heads positions (LayerBudget),
  // each head keeping at least head_floor (-1: the default floor).
  bool layer_budget = false;
  std::int64_t head_floor = -1;
  // Sequence mode: every cache of a sequence holds the same positions, at
  // most budget of them (SequenceBudget).
  bool sequence_budget = false;

  bool blocks() const noexcept { return block_size != 0; }
  bool active() const noexcept { return blocks() || layer_budget || sequence_budget; }
  Granularity granularity() const noexcept {
    return sequence_budget ? Granularity::kSequence : layer_budget ? Granularity::kLayer : Granularity::kHead;
  }
  void set_granularity(Granularity g) noexcept {
    layer_budget = g == Granularity::kLayer;
    sequence_budget = g == Granularity::kSequence;
  }
};

// A block size the caller gave explicitly: block_size 0 means "no blocks"
// only when left out, so a given 0 (or less) is refused like any size
// below 1. Throws ParameterError "NAME (value) must be at least 1".
std::int64_t given_block_size(std::int64_t value, std::string_view name);

// Throws ParameterError naming the option when the options break a rule
// (block size below 1 with another block option given, two modes at once).
void check_paged(const PagedOptions& paged);

// Layer mode's shared budget: budget x heads positions. Throws ParameterError
// naming --budget when the product would be above LayerBudget's largest
// layer budget (checked by division: a huge budget cannot wrap it), and
// --head-floor when the floors of all heads would not fit in it.
std::int64_t layer_budget_of(std::int64_t budget, std::int64_t heads, const PagedOptions& paged);

// The policy a run steps: `info`'s policy itself, or, in block mode, a
// Policy whose evict(budget) evicts whole blocks through a BlockEvictor
// (budget / block_size blocks). Throws ParameterError for a budget that is
// not a whole number of blocks.
std::unique_ptr<Policy> make_run_policy(const std::string& policy, const ParamMap& params, std::int64_t budget,
                                        const PagedOptions& paged);

// Replays one layer's heads (one trace each, stepped in lock step) through
// `lb`, evicting together once they hold more than `layer_budget`: each head's
// totals, measured before each eviction as the harness measures them (budget:
// layer_budget / heads). Throws ContractError for a victim not held or the
// budget not met.
// `signals`, when not empty, gives each head's key, value and queries (one
// per head, as run_many's StepSignals).
std::vector<RunTotals> run_layer(LayerBudget& lb, std::int64_t layer_budget, std::span<Trace* const> heads,
                                 std::uint32_t steps, const ProgressFn& progress = {},
                                 std::span<StepSignals* const> signals = {});

// The same for a sequence: the heads (one trace each, every cache of the
// sequence) stepped in lock step through `sb`, which evicts one victim set
// from them all once they hold more than `budget` positions each (budget in
// each head's totals). Throws ContractError for a victim not held or the
// budget not met.
std::vector<RunTotals> run_sequence(SequenceBudget& sb, std::int64_t budget, std::span<Trace* const> heads,
                                    std::uint32_t steps, const ProgressFn& progress = {},
                                    std::span<StepSignals* const> signals = {});

namespace detail {
// evaluate() in layer or sequence mode: every head of the trace stepped in
// lock step and evicted together (rows as evaluate() makes them).
std::vector<RunRow> evaluate_shared(const std::vector<RunSpec>& specs, const EvaluateOptions& options);
}  // namespace detail

}  // namespace kvevict
