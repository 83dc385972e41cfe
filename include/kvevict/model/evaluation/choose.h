// kvevict choose (docs/choosing.md): which policy to run on this model at
// this budget, and what it costs -- an answer within a time budget.
//
// 1. The plan. A probe times the work on this machine: the text's first 64
//    positions through every run (the full cache and each policy, stepped
//    together as perplexity steps them). The budget is then split -- about
//    60 % perplexity windows, 30 % passkey samples at two needle depths, the
//    rest decode speed -- and the plan says how many windows and samples
//    should fit, and their lengths: the context, or shorter where two windows
//    (one round of samples) would not fit (on_plan). The runs stop at their
//    deadlines (ModelRunOptions::deadline): the plan's counts are estimates,
//    the result's `windows` and `samples` what ran. A fixed plan (`windows`,
//    `samples`) runs no probe and no deadline: the same rows on every machine.
// 2. The runs: perplexity with intervals paired by window for every policy at
//    the budget; passkey accuracy at two depths while the cache is evicting
//    (the decode moment); decode tokens/s at a cache of `budget` positions;
//    the KV bytes one sequence holds at the budget.
// 3. The ranking, by extra bits per byte, and one line that recommends the
//    first and says why, naming the policies its interval does not set it
//    apart from; and the commands that would narrow the intervals.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/harness.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/paged.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

struct ChooseRequest {
  std::int64_t budget = 256;           // positions each cache keeps (1 ... context - 1)
  std::vector<std::string> policies;   // empty: every policy the granularity can run
  double minutes = 15.0;               // the time budget, probes included
  PagedOptions granularity{};          // head (default) or sequence
  // The plan fixed instead of timed (0: planned from the probes, which run
  // only then): windows of the text, passkey samples a depth. A fixed plan
  // makes the same rows on every machine.
  std::uint32_t windows = 0;
  std::uint32_t samples = 0;
  ProgressFn progress;                 // (done, total) tokens of each stage: the probes, then the runs
};

struct ChoosePlan {
  double probe_seconds = 0.0;           // the probe
  double window_seconds = 0.0;          // one window through every run (estimated)
  double sample_seconds = 0.0;          // one passkey sample through every run (estimated)
  std::uint32_t windows = 0;            // perplexity windows planned
  std::uint32_t windows_available = 0;  // in the text
  std::uint32_t context = 0;            // positions a window
  std::uint32_t length = 0;             // passkey sample length (positions)
  std::uint32_t depths = 2;
  std::uint32_t samples = 0;            // passkey samples a depth
  std::uint32_t decode_tokens = 0;      // timed a run, at a cache of `budget`
  double planned_seconds = 0.0;         // the estimate, probes included
};

struct ChooseRow {
  std::string policy;
  std::int64_t budget = 0;
  int rank = 0;                   // 1: fewest extra bits per byte
  double extra_bits_per_byte = 0.0;
  double extra_low = 0.0, extra_high = 0.0;
  bool has_interval = false;
  std::uint32_t correct = 0, samples = 0;  // passkey, both depths together
  double accuracy = 0.0;
  double tokens_per_second = 0.0;          // decode at a cache of `budget`
  std::uint64_t kv_bytes = 0;              // one sequence at the budget: every cache, keys and values
};

struct ChooseResult {
  ChoosePlan plan;
  std::vector<ChooseRow> rows;       // ranked
  double full_cache_accuracy = 0.0;  // passkey with the full cache
  double full_cache_tokens_per_second = 0.0;
  std::uint64_t full_cache_kv_bytes = 0;  // a window's worth, at the context
  std::string recommendation;        // one line
  std::vector<std::string> narrow;   // commands that would narrow the intervals
  std::uint32_t windows = 0;         // perplexity windows read (of plan.context positions)
  std::uint32_t samples = 0;         // passkey samples a depth answered
  double seconds = 0.0;              // the whole run, probes included
};

// Throws ParameterError for a budget outside 1 ... context - 1, an unknown
// policy, a time budget below 0.1 minute or above a day, and InputError for
// a text too short for two windows.
// `on_plan` is called once the plan is made, before the runs. `model_label`
// and `text_label` name the files in the narrowing commands.
ChooseResult choose(const std::shared_ptr<const Model>& model, std::span<const std::uint8_t> text,
                    const ChooseRequest& request, const std::function<void(const ChoosePlan&)>& on_plan = {},
                    const std::string& model_label = "MODEL", const std::string& text_label = "TEXT");

// The result as the command's document (kvevict/eval/json.h): {"command":
// "choose", "model", "rows": [ranked rows], "plan": {...}, "fullCache":
// {...}, "recommendation", "narrow": [...], "windows", "samples",
// "seconds"}; and the rows as a markdown table.
std::string choose_json(const ChooseResult& result, const JsonSource& source);
// The fields of a row and the members after them (`kvevict schema`).
std::span<const FieldInfo> choose_row_schema();
std::span<const FieldInfo> choose_extra_schema();
std::string choose_markdown(const ChooseResult& result);

}  // namespace kvevict
