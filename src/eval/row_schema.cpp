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

// The envelope every command prints (kvevict/eval/json.h).
constexpr FieldInfo kEnvelopeInfos[] = {
    {"command", FieldType::kString, "",
     "the command that printed the document: the subcommand as typed (\"compare\", \"llama stream\"), the same with "
     "or without the flags that change its rows",
     "", {}},
    {"model", FieldType::kString, "",
     "the model the command ran, as given (--model, or the binding's model's path); null for a command on a trace "
     "or on no model",
     "", {}},
    {"rows", FieldType::kArray, "", "the command's rows, each with the fields its entry of this schema lists", "",
     {}},
};

constexpr FieldInfo kCompareExtraInfos[] = {
    {"trace", FieldType::kString, "", "the trace every row ran on (\"\" when there are no rows)", "", {}},
};

// ---- the evaluation layer's other commands ----------------------------------

constexpr FieldInfo kPolicyParamInfos[] = {
    {"name", FieldType::kString, "", "the parameter's name (--set NAME=VALUE)", "", {}},
    {"default", FieldType::kInteger, "", "its value when not set", "", {}},
    {"help", FieldType::kString, "", "what it does", "", {}},
};
constexpr FieldInfo kListInfos[] = {
    {"name", FieldType::kString, "", "registry name of the policy", "", {}},
    {"summary", FieldType::kString, "", "one line: what it keeps", "", {}},
    {"params", FieldType::kArray, "", "its parameters, in registry order", "", kPolicyParamInfos},
};

constexpr FieldInfo kSimdInfos[] = {
    {"target", FieldType::kString, "", "a SIMD target: baseline, sse4, avx2 or avx512", "", {}},
    {"compiled", FieldType::kBoolean, "", "this build holds kernels for it", "", {}},
    {"supported", FieldType::kBoolean, "", "this CPU runs it", "", {}},
    {"active", FieldType::kBoolean, "", "the kernels run at it (the best compiled and supported, or KVEVICT_SIMD's)",
     "", {}},
};

constexpr FieldInfo kPersistenceInfos[] = {
    {"lag", FieldType::kInteger, "steps", "the lag k", "", {}},
    {"important", FieldType::kInteger, "positions",
     "positions above fair share (weight > 1/t) at step t, pooled over every t with t + k in the trace", "", {}},
    {"persisted", FieldType::kInteger, "positions", "of those, still above fair share at t + k", "", {}},
    {"share", FieldType::kNumber, "share (0..1)", "persisted / important, pooled over steps, then heads", "", {}},
    {"baseRate", FieldType::kNumber, "share (0..1)",
     "the chance level: the mean share of held positions above fair share at a step", "", {}},
};

constexpr FieldInfo kSpreadInfos[] = {
    {"min", FieldType::kNumber, "", "the least round", "", {}},
    {"median", FieldType::kNumber, "", "the median round", "", {}},
    {"max", FieldType::kNumber, "", "the greatest round", "", {}},
};
constexpr FieldInfo kBenchInfos[] = {
    {"policy", FieldType::kString, "", "the policy (with its parameters when the item set them)", "", {}},
    {"budget", FieldType::kInteger, "positions", "cache budget", "", {}},
    {"nsPerStep", FieldType::kNumber, "ns", "one decode step and its eviction, attention given (median round)", "",
     {}},
    {"attentionBytes", FieldType::kNumber, "bytes", "bytes the policy must read a step", "", {}},
    {"gbPerSecond", FieldType::kNumber, "GB/s", "attentionBytes over nsPerStep", "", {}},
    {"floorNs", FieldType::kNumber, "ns", "a plain sum over one attention row from the same pool (median round)", "",
     {}},
    {"ratioToFloor", FieldType::kNumber, "", "nsPerStep over floorNs, the median round (1 = memory speed)", "", {}},
    {"nsPerStepSpread", FieldType::kObject, "ns", "nsPerStep over the rounds", "", kSpreadInfos},
    {"ratioSpread", FieldType::kObject, "", "each round's steps over its own floor", "", kSpreadInfos},
};
constexpr FieldInfo kBankInfos[] = {
    {"policy", FieldType::kString, "", "the policy", "", {}},
    {"instances", FieldType::kInteger, "caches", "instances in the bank", "", {}},
    {"budget", FieldType::kInteger, "positions", "each instance's budget", "", {}},
    {"threads", FieldType::kInteger, "threads", "threads stepping the bank", "", {}},
    {"msPerStep", FieldType::kNumber, "ms", "one step of every instance (median round)", "", {}},
    {"attentionGBps", FieldType::kNumber, "GB/s", "attention bytes a step over its time", "", {}},
    {"touchedGBps", FieldType::kNumber, "GB/s", "attention, slot positions and state read and written, over the time",
     "", {}},
    {"sameSizeReadGBps", FieldType::kNumber, "GB/s", "a parallel read of as many bytes (median round)", "", {}},
    {"shareOfBandwidth", FieldType::kNumber, "share", "the bytes a step must read per second over sameSizeReadGBps",
     "", {}},
    {"shareSpread", FieldType::kObject, "share", "shareOfBandwidth over the rounds", "", kSpreadInfos},
    {"separateMsPerStep", FieldType::kNumber, "ms", "the same instances as separate policy objects, every core", "",
     {}},
};
constexpr FieldInfo kBenchExtraInfos[] = {
    {"simdTarget", FieldType::kString, "", "the SIMD target the kernels ran", "", {}},
    {"readBandwidthGBps", FieldType::kNumber, "GB/s", "streaming read bandwidth of one thread", "", {}},
    {"parallelReadBandwidthGBps", FieldType::kNumber, "GB/s", "streaming read bandwidth of every thread", "", {}},
    {"bank", FieldType::kArray, "", "the banks: many instances stepped as one structure of arrays", "", kBankInfos},
    {"compareSharedSeconds", FieldType::kNumber, "seconds", "canonical compare, one pass over the trace (wall; 0: "
     "--no-compare)", "", {}},
    {"compareSharedCpuSeconds", FieldType::kNumber, "seconds", "the same pass's CPU time, every thread", "", {}},
    {"compareThreads", FieldType::kInteger, "threads", "threads the pass's runs were spread over", "", {}},
    {"compareSeparateSeconds", FieldType::kNumber, "seconds", "the same runs one by one on one thread (wall)", "",
     {}},
};

// The schema document's own rows (kvevict schema).
constexpr FieldInfo kSchemaInfos[] = {
    {"command", FieldType::kString, "", "the envelope's command value", "", {}},
    {"variant", FieldType::kString, "", "\"\" or the flag whose rows these are (\"--model\", \"--sinks\")", "", {}},
    {"model", FieldType::kString, "", "what the envelope's model holds: \"path\" or \"null\"", "", {}},
    {"rows", FieldType::kArray, "", "a row's fields in output order: name, type, unit?, description, presentWhen?, "
     "fields?", "", {}},
    {"extra", FieldType::kArray, "", "the members after rows, described the same way", "", {}},
};
constexpr FieldInfo kSchemaExtraInfos[] = {
    {"envelope", FieldType::kArray, "", "the envelope's own three members, described the same way", "", {}},
};

constexpr CommandSchema kEvalCommands[] = {
    {"list", "", "null", kListInfos, {}},
    {"run", "", "null", kRunInfos, kCompareExtraInfos},
    {"compare", "", "null", kRunInfos, kCompareExtraInfos},
    {"sweep", "", "null", kRunInfos, kCompareExtraInfos},
    {"persistence", "", "null", kPersistenceInfos, {}},
    {"persistence", "--model", "path", kPersistenceInfos, {}},
    {"bench", "", "null", kBenchInfos, kBenchExtraInfos},
    {"simd", "", "null", kSimdInfos, {}},
    {"schema", "", "null", kSchemaInfos, kSchemaExtraInfos},
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
    case FieldType::kBoolean: return "boolean";
  }
  return "unknown";
}

std::span<const FieldInfo> run_row_schema() { return kRunInfos; }

std::span<const FieldInfo> compare_extra_schema() { return kCompareExtraInfos; }

std::span<const FieldInfo> envelope_schema() { return kEnvelopeInfos; }

std::span<const CommandSchema> eval_command_schemas() { return kEvalCommands; }

void for_each_field(const RunRow& row, RowVisitor& visitor) {
  for (std::size_t i = 0; i < kRunInfos.size(); ++i) kRunFields[i].emit(row, kRunInfos[i], visitor);
}

void for_each_field(const std::vector<RunRow>& rows, std::string_view command, RowVisitor& visitor) {
  visitor.string(kEnvelopeInfos[0], std::string(command));
  visitor.null(kEnvelopeInfos[1]);
  visitor.begin(kEnvelopeInfos[2]);
  for (const RunRow& r : rows) {
    visitor.begin_element();
    for_each_field(r, visitor);
    visitor.end_element();
  }
  visitor.end(kEnvelopeInfos[2]);
  visitor.string(kCompareExtraInfos[0], rows.empty() ? std::string() : rows.front().trace);
}

std::string schema_json(std::span<const CommandSchema> commands, int indent) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const CommandSchema& c : commands) {
    rows.push_back({{"command", c.command},
                    {"variant", c.variant},
                    {"model", c.model},
                    {"rows", describe(c.rows)},
                    {"extra", describe(c.extra)}});
  }
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["command"] = "schema";
  out["model"] = nullptr;
  out["rows"] = std::move(rows);
  out["envelope"] = describe(envelope_schema());
  return out.dump(indent);
}

}  // namespace kvevict
