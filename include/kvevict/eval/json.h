// JSON text of results, shaped exactly like the tool's output, so the tool,
// the C API and the bindings cannot drift apart. Every command prints one
// shape, the envelope: {"command", "model", "rows": [...]}, then the few
// members a command has per result rather than per row (compare's "trace").
// The rows' fields, their order and types come from the row schema
// (kvevict/eval/row_schema.h), which `kvevict schema` exports.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvevict/eval/bench.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/persistence.h"

namespace kvevict {

// The envelope's first two members: which command printed the document, and
// on which model.
struct JsonSource {
  std::string command;               // the subcommand as typed: "perplexity", "compare", "llama stream"
  std::optional<std::string> model;  // the model as given; none (null) for a command on a trace or no model
};

// A member after "rows": its key and its value as JSON text.
using JsonMember = std::pair<std::string, std::string>;

// {"command", "model", "rows": <rows>, then `extra` in order}: the one shape
// of every command's JSON. `rows` is a JSON array as text; indent < 0 gives
// one line. For writers outside the library (kvevict-llama's own rows).
std::string envelope_json(const JsonSource& source, std::string_view rows, const std::vector<JsonMember>& extra = {},
                          int indent = 2);

// One run row alone: {"policy", "trace", "budget", "params", "steps",
// "metrics": {"retainedAttentionMass", "heavyHitterRecall", "evictionCalls"},
// "evicted", "memoryBytes", "seconds"}; indent < 0 gives one line.
std::string run_json(const RunRow& row, int indent = 2);

// A trace command's document (run, compare, sweep): {"command", "model":
// null, "rows": [run rows], "trace"}.
std::string rows_json(const std::vector<RunRow>& rows, std::string_view command, int indent = 2);

class RowVisitor;
// A JSON array of `count` objects, object i built from walk(i, visitor) --
// for rows described by a schema of another layer (the model's perplexity
// rows), so they are written by the same builder as the run rows.
std::string objects_json(std::size_t count, const std::function<void(std::size_t, RowVisitor&)>& walk,
                         int indent = 2);

// kvevict list: a row per registered policy, {"name", "summary", "params":
// [{"name", "default", "help"}]}.
std::string policies_json(int indent = 2);

// kvevict simd: a row per target compiled or supported, {"target",
// "compiled", "supported", "active"}.
std::string simd_json(const std::vector<std::string>& compiled, const std::vector<std::string>& supported,
                      const std::string& active, int indent = 2);

// kvevict persistence: a row per lag, {"lag", "important", "persisted",
// "share", "baseRate"}; `source.model` is the model whose attention was
// measured, none for a trace.
std::string persistence_json(const std::vector<PersistenceRow>& rows, const JsonSource& source, int indent = 2);

// kvevict bench (the policies' steps): a row per policy x budget, then
// "simdTarget", "readBandwidthGBps", "parallelReadBandwidthGBps", "bank":
// [...], "compareSharedSeconds", "compareSharedCpuSeconds", "compareThreads",
// "compareSeparateSeconds".
std::string bench_json(const BenchReport& report, int indent = 2);

}  // namespace kvevict
