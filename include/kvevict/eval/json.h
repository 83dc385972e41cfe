// JSON text of results, shaped exactly like the tool's output, so the tool,
// the C API and the bindings cannot drift apart. The fields, their order and
// types come from the row schema (kvevict/eval/row_schema.h).
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "kvevict/eval/evaluate.h"

namespace kvevict {

// {"policy", "trace", "budget", "params", "steps", "metrics":
//  {"retainedAttentionMass", "heavyHitterRecall", "evictionCalls"},
//  "evicted", "memoryBytes", "seconds"}; indent < 0 gives one line.
std::string run_json(const RunRow& row, int indent = 2);

// {"trace", "rows": [run objects]}
std::string rows_json(const std::vector<RunRow>& rows, int indent = 2);

class RowVisitor;
// A JSON array of `count` objects, object i built from walk(i, visitor) --
// for rows described by a schema of another layer (the model's perplexity
// rows), so they are written by the same builder as the run rows.
std::string objects_json(std::size_t count, const std::function<void(std::size_t, RowVisitor&)>& walk,
                         int indent = 2);

}  // namespace kvevict
