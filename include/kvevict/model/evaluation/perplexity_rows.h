// The one description of a perplexity row (kvevict perplexity and compare
// --model, Python's perplexity()/compare_model(), Node's perplexity()/
// compareModel()): its fields in output order with their JSON names, types,
// units and meaning, and a walk over a PerplexityRow in that order. The
// tool's JSON, the Python dicts and the Node objects are all built by walking
// it (the RowVisitor of kvevict/eval/row_schema.h), so a field is added or
// renamed here, once; `kvevict schema` exports it as "perplexity".
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/evaluation/perplexity.h"

namespace kvevict {

// The perplexity row's fields, in output order.
std::span<const FieldInfo> perplexity_row_schema();

// Walks `row` in perplexity_row_schema() order, skipping the fields whose
// present_when does not hold for it; the full cache's policy, budget, rank
// and proxies are present as nulls.
void for_each_field(const PerplexityRow& row, RowVisitor& visitor);

// The command's document (kvevict/eval/json.h): {"command", "model", "rows":
// [row objects]} -- perplexity, compare --model and sweep --model print it
// (indent < 0: one line).
std::string perplexity_json(const std::vector<PerplexityRow>& rows, const JsonSource& source, int indent = 2);

}  // namespace kvevict
