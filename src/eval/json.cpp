#include "kvevict/eval/json.h"

#include <algorithm>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/envelope.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/row_schema.h"

namespace kvevict {

namespace {
// Builds the JSON document from the row schema's walk (row_schema.h): the
// keys, their order and presence all come from there. Containers are built on
// a stack by value and moved into their parent when they close.
class JsonBuilder final : public RowVisitor {
 public:
  nlohmann::ordered_json take() { return std::move(stack_.front()); }

  void string(const FieldInfo& f, const std::string& value) override { put(f, value); }
  void integer(const FieldInfo& f, std::int64_t value) override { put(f, value); }
  void number(const FieldInfo& f, double value) override { put(f, value); }
  void null(const FieldInfo& f) override { put(f, nullptr); }
  void params(const FieldInfo& f, const ParamMap& params) override {
    nlohmann::ordered_json object = nlohmann::ordered_json::object();
    for (const auto& [k, v] : params) object[k] = v;
    put(f, std::move(object));
  }
  void begin(const FieldInfo& f) override {
    stack_.push_back(f.type == FieldType::kArray ? nlohmann::ordered_json::array()
                                                 : nlohmann::ordered_json::object());
  }
  void end(const FieldInfo& f) override { put(f, pop()); }
  void begin_element() override { stack_.push_back(nlohmann::ordered_json::object()); }
  void end_element() override {
    nlohmann::ordered_json element = pop();
    stack_.back().push_back(std::move(element));
  }

 private:
  void put(const FieldInfo& f, nlohmann::ordered_json value) {
    stack_.back()[std::string(f.name)] = std::move(value);
  }
  nlohmann::ordered_json pop() {
    nlohmann::ordered_json top = std::move(stack_.back());
    stack_.pop_back();
    return top;
  }
  std::vector<nlohmann::ordered_json> stack_{nlohmann::ordered_json::object()};
};
}  // namespace

std::string run_json(const RunRow& row, int indent) {
  JsonBuilder builder;
  for_each_field(row, builder);
  return builder.take().dump(indent);
}

std::string rows_json(const std::vector<RunRow>& rows, std::string_view command, int indent) {
  JsonBuilder builder;
  for_each_field(rows, command, builder);
  return builder.take().dump(indent);
}

std::string objects_json(std::size_t count, const std::function<void(std::size_t, RowVisitor&)>& walk,
                         int indent) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (std::size_t i = 0; i < count; ++i) {
    JsonBuilder builder;
    walk(i, builder);
    out.push_back(builder.take());
  }
  return out.dump(indent);
}

std::string envelope_json(const JsonSource& source, std::string_view rows, const std::vector<JsonMember>& extra,
                          int indent) {
  nlohmann::ordered_json out = detail::envelope(source, nlohmann::ordered_json::parse(rows));
  for (const auto& [key, value] : extra) out[key] = nlohmann::ordered_json::parse(value);
  return out.dump(indent);
}

std::string policies_json(int indent) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const PolicyInfo* info : policies()) {
    nlohmann::ordered_json params = nlohmann::ordered_json::array();
    for (const auto& p : info->params) {
      params.push_back({{"name", p.name}, {"default", p.default_value}, {"help", p.help}});
    }
    rows.push_back({{"name", info->name}, {"summary", info->summary}, {"params", params}});
  }
  return detail::envelope({"list", std::nullopt}, std::move(rows)).dump(indent);
}

std::string simd_json(const std::vector<std::string>& compiled, const std::vector<std::string>& supported,
                      const std::string& active, int indent) {
  // Every target either list names, in the order the build lists them.
  std::vector<std::string> targets = compiled;
  for (const std::string& t : supported) {
    if (std::find(targets.begin(), targets.end(), t) == targets.end()) targets.push_back(t);
  }
  const auto has = [](const std::vector<std::string>& v, const std::string& t) {
    return std::find(v.begin(), v.end(), t) != v.end();
  };
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const std::string& t : targets) {
    rows.push_back({{"target", t}, {"compiled", has(compiled, t)}, {"supported", has(supported, t)},
                    {"active", t == active}});
  }
  return detail::envelope({"simd", std::nullopt}, std::move(rows)).dump(indent);
}

std::string persistence_json(const std::vector<PersistenceRow>& rows, const JsonSource& source, int indent) {
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const PersistenceRow& r : rows) {
    list.push_back({{"lag", r.lag}, {"important", r.important}, {"persisted", r.persisted}, {"share", r.share},
                    {"baseRate", r.base_rate}});
  }
  return detail::envelope(source, std::move(list)).dump(indent);
}

namespace {
nlohmann::ordered_json spread_json(const Spread& s) { return {{"min", s.min}, {"median", s.median}, {"max", s.max}}; }
}  // namespace

std::string bench_json(const BenchReport& r, int indent) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const BenchRow& b : r.rows) {
    rows.push_back({{"policy", b.policy}, {"budget", b.budget}, {"nsPerStep", b.ns_per_step},
                    {"attentionBytes", b.attention_bytes}, {"gbPerSecond", b.gb_per_s}, {"floorNs", b.floor_ns},
                    {"ratioToFloor", b.ratio_to_floor}, {"nsPerStepSpread", spread_json(b.step_ns)},
                    {"ratioSpread", spread_json(b.ratio)}});
  }
  nlohmann::ordered_json bank = nlohmann::ordered_json::array();
  for (const BankBenchRow& b : r.bank) {
    bank.push_back({{"policy", b.policy}, {"instances", b.instances}, {"budget", b.budget}, {"threads", b.threads},
                    {"msPerStep", b.ms_per_step}, {"attentionGBps", b.attention_gb_s},
                    {"touchedGBps", b.touched_gb_s}, {"sameSizeReadGBps", b.same_size_bandwidth_gb_s},
                    {"shareOfBandwidth", b.share_of_bandwidth}, {"shareSpread", spread_json(b.share)},
                    {"separateMsPerStep", b.separate_ms_per_step}});
  }
  nlohmann::ordered_json doc = detail::envelope({"bench", std::nullopt}, std::move(rows));
  doc["simdTarget"] = r.simd_target;
  doc["readBandwidthGBps"] = r.read_bandwidth_gb_s;
  doc["parallelReadBandwidthGBps"] = r.parallel_bandwidth_gb_s;
  doc["bank"] = std::move(bank);
  doc["compareSharedSeconds"] = r.compare_shared_seconds;
  doc["compareSharedCpuSeconds"] = r.compare_shared_cpu_seconds;
  doc["compareThreads"] = r.compare_threads;
  doc["compareSeparateSeconds"] = r.compare_separate_seconds;
  return doc.dump(indent);
}

}  // namespace kvevict
