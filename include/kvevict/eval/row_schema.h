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
  kArray,   // of objects whose members are `fields`
};

// "string", "integer", "number", "object", "array": JSON Schema's words.
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

// The compare document: {"trace", "rows": [run rows]}.
std::span<const FieldInfo> compare_schema();

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

// Walks the compare document in compare_schema() order: "trace" (the first
// row's, "" when there are none), then "rows" as an array whose elements are
// walked as above.
void for_each_field(const std::vector<RunRow>& rows, RowVisitor& visitor);

// One named document of the exported schema.
struct SchemaEntry {
  std::string_view name;
  std::span<const FieldInfo> fields;
};

// The schema as JSON text: {"run": [field...], "compare": [field...]}, then
// `more` in order (the model layer adds its perplexity row, see
// kvevict/model/evaluation/perplexity_rows.h), each field {"name", "type", "unit"?,
// "description", "presentWhen"?, "fields"?}.
std::string schema_json(int indent = 2, std::span<const SchemaEntry> more = {});

}  // namespace kvevict
