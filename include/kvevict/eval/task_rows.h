// Results of retrieval tasks (kvevict tasks, docs/tasks.md): one row per
// task x length x needle depth x policy x budget x moment, with exact-match
// accuracy and its Wilson interval. The rows live in the evaluation layer so
// that the report can chart them without the model; the model layer
// (kvevict/model/evaluation/tasks.h) produces them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kvevict/eval/intervals.h"  // wilson_interval
#include "kvevict/eval/json.h"
#include "kvevict/eval/row_schema.h"

namespace kvevict {

enum class Moment { full, decode, prefill, prefill_query };
std::string_view moment_name(Moment m);    // "full", "decode", "prefill", "prefill-query"
Moment parse_moment(std::string_view name);  // InputError naming the choices

struct TaskRow {
  std::string task;
  std::string policy;  // empty for the full cache
  std::int64_t budget = 0;
  Moment moment = Moment::full;
  std::uint32_t length = 0;
  double depth = 0.0;
  std::uint32_t samples = 0;
  std::uint32_t correct = 0;
  double accuracy = 0.0;
  double low = 0.0;   // Wilson 95 % interval
  double high = 0.0;
  std::uint64_t evicted = 0;  // positions removed over the cell's samples, every cache
  // The store's precision (model/kv_precision.h), its residual window and
  // the bytes a stored position costs; fp32 when a file has none.
  std::string kv_precision = "fp32";
  std::uint32_t kv_residual = 0;
  double bytes_per_position = 0.0;
  // Which caches shared a budget (eval/paged.h): "layer" or "sequence";
  // empty for head, each cache its own (a field, a CSV column and a markdown
  // column only when some row has one).
  std::string granularity;
};

// The command's document (kvevict/eval/json.h): {"command", "model", "rows":
// [{"task", "policy", "budget", "moment", "length", "depth", "samples",
// "correct", "accuracy", "accuracy_low", "accuracy_high", "evicted",
// "kvPrecision", "kvResidual", "bytesPerPosition", "granularity"?}]} (the
// tool's CSV is made from its rows, one value a cell); and a markdown table
// of accuracy by depth, one line per task x length x policy x budget x
// moment.
std::string tasks_json(const std::vector<TaskRow>& rows, const JsonSource& source);
// The fields of a row, in output order (`kvevict schema`).
std::span<const FieldInfo> task_row_schema();
std::string tasks_markdown(const std::vector<TaskRow>& rows);

// The retrieval tasks kvevict tasks builds (model/tasks.h): passkey,
// multikey, multivalue, vartrack, copy.
const std::vector<std::string>& task_names();
// The index of `task` in task_names(); InputError "unknown task 'X' (known:
// ...)" for any other name.
std::size_t task_index(std::string_view task);

// The rows back from tasks_json's output (or from the bare array of rows
// tasks printed before the envelope); `source` names the input in the
// InputError a malformed document gets (one line, naming the row and field).
// Every field is checked: a known task, "full" or a registered policy, a
// moment, whole numbers in range (samples 1 ... 2^32 - 1, correct <= samples,
// a budget of 0 for the full cache and 1 ... 2^24 for a policy), a depth in
// 0 ... 1.
std::vector<TaskRow> read_task_rows(std::string_view json, const std::string& source);
// The same from a file (InputError naming it when it cannot be read).
std::vector<TaskRow> read_task_rows_file(const std::filesystem::path& file);

}  // namespace kvevict
