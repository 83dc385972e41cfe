#include "kvevict/eval/row_schema.h"

#include <array>
#include <cstddef>

#include <nlohmann/json.hpp>

namespace kvevict {

namespace {

constexpr RowField<Metrics> kMetricFields[] = {
    {{"retainedAttentionMass", FieldType::kNumber, "share of attention (0..1)",
      "mean over steps of the attention weight on positions still held; a proxy, not model quality; rounded to 6 "
      "decimals (mean over heads of each head's unrounded ratio)",
      "", {}},
     [](const Metrics& m, const FieldInfo& f, RowVisitor& v) { v.number(f, m.retained_attention_mass); }},
    {{"heavyHitterRecall", FieldType::kNumber, "share of positions (0..1)",
      "pooled share of each step's top 32 attended positions still held; rounded to 6 decimals", "", {}},
     [](const Metrics& m, const FieldInfo& f, RowVisitor& v) { v.number(f, m.heavy_hitter_recall); }},
    {{"evictionCalls", FieldType::kInteger, "calls", "times the policy was asked to evict (summed over heads)", "",
      {}},
     [](const Metrics& m, const FieldInfo& f, RowVisitor& v) { v.integer(f, m.eviction_calls); }},
};
constexpr auto kMetricInfos = field_infos(kMetricFields);

void emit_metrics(const Metrics& m, RowVisitor& v) {
  for (std::size_t i = 0; i < kMetricInfos.size(); ++i) kMetricFields[i].emit(m, kMetricInfos[i], v);
}

constexpr RowField<RunRow> kRunFields[] = {
    {{"policy", FieldType::kString, "", "registry name of the policy", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.string(f, r.policy); }},
    {{"trace", FieldType::kString, "", "trace id (generated) or .npy path", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.string(f, r.trace); }},
    {{"budget", FieldType::kInteger, "positions", "cache budget: positions held after each eviction", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.budget); }},
    {{"params", FieldType::kObject, "", "every effective parameter of the policy, name -> integer, in registry order",
      "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.params(f, r.params); }},
    {{"steps", FieldType::kInteger, "steps", "decode steps replayed (per head)", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) {
       v.integer(f, r.totals.steps / static_cast<std::int64_t>(r.heads));
     }},
    {{"metrics", FieldType::kObject, "", "the proxy metrics of the run", "", kMetricInfos},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) {
       v.begin(f);
       emit_metrics(r.metrics, v);
       v.end(f);
     }},
    {{"evicted", FieldType::kInteger, "positions", "positions removed from the cache (summed over heads)", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, r.totals.evicted); }},
    {{"memoryBytes", FieldType::kInteger, "bytes", "the policy's per-slot state (bytes per slot x capacity) of one instance, allocated at construction", "",
      {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.integer(f, static_cast<std::int64_t>(r.memory_bytes)); }},
    {{"seconds", FieldType::kNumber, "seconds", "wall time of the run (varies run to run)", "", {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) { v.number(f, r.seconds); }},
    {{"heads", FieldType::kInteger, "heads", "attention heads in the trace, one policy instance each", "heads > 1",
      {}},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) {
       if (r.heads > 1) v.integer(f, static_cast<std::int64_t>(r.heads));
     }},
    {{"perHead", FieldType::kArray, "", "the metrics of each head, in head order", "heads > 1", kMetricInfos},
     [](const RunRow& r, const FieldInfo& f, RowVisitor& v) {
       if (r.heads <= 1) return;
       v.begin(f);
       for (const Metrics& m : r.head_metrics) {
         v.begin_element();
         emit_metrics(m, v);
         v.end_element();
       }
       v.end(f);
     }},
};
constexpr auto kRunInfos = field_infos(kRunFields);

constexpr FieldInfo kCompareInfos[] = {
    {"trace", FieldType::kString, "", "the trace every row ran on (\"\" when there are no rows)", "", {}},
    {"rows", FieldType::kArray, "", "one run row per policy and budget, ranked (see run_row_schema)", "",
     kRunInfos},
};

nlohmann::ordered_json describe(std::span<const FieldInfo> fields) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const FieldInfo& f : fields) {
    nlohmann::ordered_json d = nlohmann::ordered_json::object();
    d["name"] = f.name;
    d["type"] = field_type_name(f.type);
    if (!f.unit.empty()) d["unit"] = f.unit;
    d["description"] = f.description;
    if (!f.present_when.empty()) d["presentWhen"] = f.present_when;
    if (!f.fields.empty()) d["fields"] = describe(f.fields);
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::string_view field_type_name(FieldType type) noexcept {
  switch (type) {
    case FieldType::kString: return "string";
    case FieldType::kInteger: return "integer";
    case FieldType::kNumber: return "number";
    case FieldType::kObject: return "object";
    case FieldType::kArray: return "array";
  }
  return "unknown";
}

std::span<const FieldInfo> run_row_schema() { return kRunInfos; }

std::span<const FieldInfo> compare_schema() { return kCompareInfos; }

void for_each_field(const RunRow& row, RowVisitor& visitor) {
  for (std::size_t i = 0; i < kRunInfos.size(); ++i) kRunFields[i].emit(row, kRunInfos[i], visitor);
}

void for_each_field(const std::vector<RunRow>& rows, RowVisitor& visitor) {
  visitor.string(kCompareInfos[0], rows.empty() ? std::string() : rows.front().trace);
  visitor.begin(kCompareInfos[1]);
  for (const RunRow& r : rows) {
    visitor.begin_element();
    for_each_field(r, visitor);
    visitor.end_element();
  }
  visitor.end(kCompareInfos[1]);
}

std::string schema_json(int indent, std::span<const SchemaEntry> more) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["run"] = describe(run_row_schema());
  out["compare"] = describe(compare_schema());
  for (const SchemaEntry& entry : more) out[std::string(entry.name)] = describe(entry.fields);
  return out.dump(indent);
}

}  // namespace kvevict
