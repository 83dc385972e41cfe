#include "kvevict/json.h"

#include <nlohmann/json.hpp>

namespace kvevict {

namespace {
nlohmann::ordered_json row_object(const RunRow& row) {
  nlohmann::ordered_json params = nlohmann::ordered_json::object();
  for (const auto& [k, v] : row.params) params[k] = v;
  nlohmann::ordered_json metrics = {{"retainedAttentionMass", row.metrics.retained_attention_mass},
                                    {"heavyHitterRecall", row.metrics.heavy_hitter_recall},
                                    {"evictionCalls", row.metrics.eviction_calls}};
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["policy"] = row.policy;
  out["trace"] = row.trace;
  out["budget"] = row.budget;
  out["params"] = params;
  out["steps"] = row.totals.steps / static_cast<std::int64_t>(row.heads);
  out["metrics"] = metrics;
  out["evicted"] = row.totals.evicted;
  out["memoryBytes"] = row.memory_bytes;
  out["seconds"] = row.seconds;
  if (row.heads > 1) {
    out["heads"] = row.heads;
    nlohmann::ordered_json per_head = nlohmann::ordered_json::array();
    for (const Metrics& m : row.head_metrics) {
      per_head.push_back({{"retainedAttentionMass", m.retained_attention_mass},
                          {"heavyHitterRecall", m.heavy_hitter_recall},
                          {"evictionCalls", m.eviction_calls}});
    }
    out["perHead"] = per_head;
  }
  return out;
}
}  // namespace

std::string run_json(const RunRow& row, int indent) { return row_object(row).dump(indent); }

std::string rows_json(const std::vector<RunRow>& rows, int indent) {
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  out["trace"] = rows.empty() ? "" : rows.front().trace;
  out["rows"] = nlohmann::ordered_json::array();
  for (const RunRow& r : rows) out["rows"].push_back(row_object(r));
  return out.dump(indent);
}

}  // namespace kvevict
