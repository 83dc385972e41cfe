// JSON text of results, shaped exactly like the tool's output, so the tool,
// the C API and the bindings cannot drift apart. The fields, their order and
// types come from the row schema (kvevict/eval/row_schema.h).
#pragma once

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

}  // namespace kvevict
