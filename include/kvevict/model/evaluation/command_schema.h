// Every command's JSON described in one place: `kvevict schema` prints this
// list, the bindings export it (row_schema(), rowSchema()), and
// tests/schema/agreement_test.py checks each command's actual output against
// it, key by key. The descriptions live beside their writers (row_schema.cpp,
// perplexity_rows.cpp, serve_bench.cpp, stream.cpp, task_rows.cpp,
// choose.cpp); this file lists them in --help's order and describes the rows
// whose writers lie outside the library's schema (bench --model's, and
// kvevict-llama's perplexity rows).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"
#include "kvevict/model/serving/decode_bench.h"

namespace kvevict {

// Every command with JSON output, the evaluation layer's among them, in
// --help's order, a variant where a flag changes the rows.
std::span<const CommandSchema> command_schemas();

// schema_json(command_schemas()): the `kvevict schema` document.
std::string result_schema_json(int indent = 2);

// bench --model's document: {"command": "bench", "model", "rows":
// [decode_bench_json's rows]}.
std::string decode_bench_document(const std::vector<DecodeBenchRow>& rows, const JsonSource& source, int indent = 2);

}  // namespace kvevict
