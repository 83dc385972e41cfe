// The one description of a result row (one policy at one budget on one
// trace): its fields in output order, each with its JSON name, type, unit and
// meaning, and a walk over a RunRow in that order. The tool's JSON
// (run_json/rows_json), the Python dicts and the Node objects are all built by
// walking this description, so a field is added or renamed here, once, and
// every output follows; the description itself is exported (`kvevict schema`,
// kvevict.row_schema(), rowSchema()) so users can read it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/evaluate.h"

namespace kvevict {

enum class FieldType {
  kString,
  kInteger,
  kNumber,
  kObject,  // with `fields`: fixed members; without: keys are data (params: name -> integer)
  kArray,   // of objects whose members are `fields` (without: elements described in words)
  kBoolean,
};

// "string", "integer", "number", "object", "array", "boolean": JSON Schema's
// words.
std::string_view field_type_name(FieldType type) noexcept;

struct FieldInfo {
  std::string_view name;  // the JSON key (camelCase)
  FieldType type;
  std::string_view unit;  // "" when the value has none
  std::string_view description;
  // Empty when always present; otherwise when the field appears.
  std::string_view present_when;
  std::span<const FieldInfo> fields;  // members of an object / of each array element
};

// A field's description and how to read it from a T, side by side in one
// entry, so the name and the accessor cannot drift apart. The emitter decides
// presence too; `present_when` says the same in words for the exported schema.
class RowVisitor;
template <class T>
struct RowField {
  FieldInfo info;
  void (*emit)(const T& from, const FieldInfo& info, RowVisitor& visitor);
};

// The FieldInfo half of a table of RowFields, for the exported description.
template <class T, std::size_t N>
constexpr std::array<FieldInfo, N> field_infos(const RowField<T> (&fields)[N]) {
  std::array<FieldInfo, N> out{};
  for (std::size_t i = 0; i < N; ++i) out[i] = fields[i].info;
  return out;
}

// The run row's top-level fields, in output order.
std::span<const FieldInfo> run_row_schema();

// The member run, compare and sweep (on a trace) add after their rows:
// "trace".
std::span<const FieldInfo> compare_extra_schema();

// Receives one row's values in schema order. Containers come as begin/end
// pairs: an object with fixed members (metrics), an array (perHead) whose
// elements each come as begin_element/end_element around their members, and
// params, which is an object whose keys are data and so comes whole.
class RowVisitor {
 public:
  virtual ~RowVisitor() = default;
  virtual void string(const FieldInfo& field, const std::string& value) = 0;
  // Every integer of a row is a count well inside int64 (memory bytes and the
  // head count are held as uint64 but never near 2^63).
  virtual void integer(const FieldInfo& field, std::int64_t value) = 0;
  virtual void number(const FieldInfo& field, double value) = 0;
  // A field that is present but has no value for this row (the full cache's
  // policy and budget in a perplexity row): JSON null, Python None.
  virtual void null(const FieldInfo& field) = 0;
  virtual void params(const FieldInfo& field, const ParamMap& params) = 0;
  virtual void begin(const FieldInfo& field) = 0;  // kObject with members, or kArray
  virtual void end(const FieldInfo& field) = 0;
  virtual void begin_element() = 0;  // one object of a kArray
  virtual void end_element() = 0;
};

// Walks `row` field by field in run_row_schema() order, skipping the fields
// whose present_when does not hold (heads and perHead appear only when the
// trace has more than one head).
void for_each_field(const RunRow& row, RowVisitor& visitor);

// Walks a trace command's whole document (run, compare, sweep), the envelope
// (envelope_schema()) in order: "command", "model" (null: a trace), "rows" as
// an array whose elements are walked as above, then "trace" (the first row's,
// "" when there are none).
void for_each_field(const std::vector<RunRow>& rows, std::string_view command, RowVisitor& visitor);


// One command's JSON as `kvevict schema` describes it. Every command prints
// one envelope, {"command", "model", "rows": [...]} and then `extra` in order
// (envelope_schema(), kvevict/eval/json.h); a command whose rows differ with a
// flag (compare on a trace and with --model) has an entry per variant.
struct CommandSchema {
  std::string_view command;  // the envelope's "command" value
  std::string_view variant;  // "" or the flag that gives these rows ("--model", "--sinks")
  // What the envelope's "model" holds: "path" (the model as given) or "null".
  std::string_view model;
  std::span<const FieldInfo> rows;   // one row's fields, in output order
  std::span<const FieldInfo> extra;  // the members after "rows", in order
};

// The envelope's three members: command, model, rows.
std::span<const FieldInfo> envelope_schema();

// The commands of the evaluation layer: run, compare, sweep (on a trace),
// list, simd, persistence (on a trace) and bench (the policies' steps).
std::span<const CommandSchema> eval_command_schemas();

// The schema as JSON text, itself an envelope (`kvevict schema`):
// {"command": "schema", "model": null, "rows": [{"command", "variant",
// "model", "rows": [field...], "extra": [field...]} per entry of `commands`],
// "envelope": [field...]}, each field {"name", "type", "unit"?,
// "description", "presentWhen"?, "fields"?}.
std::string schema_json(std::span<const CommandSchema> commands, int indent = 2);

}  // namespace kvevict
