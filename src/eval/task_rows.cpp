#include "kvevict/eval/task_rows.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "eval/envelope.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/row_schema.h"

namespace kvevict {

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names{"passkey", "multikey", "multivalue", "vartrack", "copy"};
  return names;
}

std::size_t task_index(std::string_view task) {
  const auto it = std::find(task_names().begin(), task_names().end(), task);
  if (it == task_names().end()) {
    throw InputError(fmt::format("unknown task '{}' (known: {})", task, fmt::join(task_names(), ", ")));
  }
  return static_cast<std::size_t>(it - task_names().begin());
}

std::string_view moment_name(Moment m) {
  switch (m) {
    case Moment::full: return "full";
    case Moment::decode: return "decode";
    case Moment::prefill: return "prefill";
    case Moment::prefill_query: return "prefill-query";
  }
  return "?";
}

Moment parse_moment(std::string_view name) {
  for (const Moment m : {Moment::decode, Moment::prefill, Moment::prefill_query}) {
    if (name == moment_name(m)) return m;
  }
  throw InputError(fmt::format("unknown moment '{}' (known: decode, prefill, prefill-query)", name));
}

namespace {

std::string label(const TaskRow& r) { return r.policy.empty() ? std::string("full") : r.policy; }

}  // namespace

namespace {

constexpr FieldInfo kTaskInfos[] = {
    {"task", FieldType::kString, "", "the task: passkey, multikey, multivalue, vartrack or copy", "", {}},
    {"policy", FieldType::kString, "", "registry name of the policy, or full for the full cache", "", {}},
    {"budget", FieldType::kInteger, "positions", "positions each cache keeps (0: the full cache)", "", {}},
    {"moment", FieldType::kString, "", "when the policy evicts: decode, prefill, prefill-query, or full", "", {}},
    {"length", FieldType::kInteger, "tokens", "the prompt's length", "", {}},
    {"depth", FieldType::kNumber, "share (0..1)", "where in the prompt the needle lies", "", {}},
    {"samples", FieldType::kInteger, "samples", "prompts asked", "", {}},
    {"correct", FieldType::kInteger, "samples", "answered exactly", "", {}},
    {"accuracy", FieldType::kNumber, "share (0..1)", "correct / samples", "", {}},
    {"accuracy_low", FieldType::kNumber, "share (0..1)", "low end of the Wilson 95 % interval", "", {}},
    {"accuracy_high", FieldType::kNumber, "share (0..1)", "high end of the Wilson 95 % interval", "", {}},
    {"evicted", FieldType::kInteger, "positions", "positions removed over the cell's samples, every cache", "", {}},
    {"kvPrecision", FieldType::kString, "", "the precision keys and values were stored at", "", {}},
    {"kvResidual", FieldType::kInteger, "positions", "the residual window kept at fp32", "", {}},
    {"bytesPerPosition", FieldType::kNumber, "bytes", "bytes one stored position costs, key and value", "", {}},
    {"granularity", FieldType::kString, "", "which caches shared a budget: layer or sequence",
     "--granularity layer or sequence given", {}},
};

}  // namespace

std::span<const FieldInfo> task_row_schema() { return kTaskInfos; }

std::string tasks_json(const std::vector<TaskRow>& rows, const JsonSource& source) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const TaskRow& r : rows) {
    out.push_back({{"task", r.task},
                   {"policy", label(r)},
                   {"budget", r.budget},
                   {"moment", moment_name(r.moment)},
                   {"length", r.length},
                   {"depth", r.depth},
                   {"samples", r.samples},
                   {"correct", r.correct},
                   {"accuracy", r.accuracy},
                   {"accuracy_low", r.low},
                   {"accuracy_high", r.high},
                   {"evicted", r.evicted},
                   {"kvPrecision", r.kv_precision},
                   {"kvResidual", r.kv_residual},
                   {"bytesPerPosition", r.bytes_per_position}});
    if (!r.granularity.empty()) out.back()["granularity"] = r.granularity;
  }
  return detail::envelope(source, std::move(out)).dump(2) + "\n";
}

namespace {
bool any_granularity(const std::vector<TaskRow>& rows) {
  return std::any_of(rows.begin(), rows.end(), [](const TaskRow& r) { return !r.granularity.empty(); });
}
}  // namespace

std::string tasks_markdown(const std::vector<TaskRow>& rows) {
  // One line per task x length x policy x budget x moment, a column per depth.
  std::vector<double> depths;
  for (const TaskRow& r : rows) {
    if (std::find(depths.begin(), depths.end(), r.depth) == depths.end()) depths.push_back(r.depth);
  }
  std::sort(depths.begin(), depths.end());
  // The store's precision gets a column when it is not fp32 (one run has one).
  const bool quantized = std::any_of(rows.begin(), rows.end(), [](const TaskRow& r) { return r.kv_precision != "fp32"; });
  // And the granularity when a budget was shared (one run has one).
  const bool granular = any_granularity(rows);
  using Key = std::tuple<std::string, std::uint32_t, std::string, std::int64_t, std::string>;
  std::vector<Key> order;
  std::map<Key, std::map<double, const TaskRow*>> grid;
  for (const TaskRow& r : rows) {
    const Key k{r.task, r.length, label(r), r.budget, std::string(moment_name(r.moment))};
    if (grid.find(k) == grid.end()) order.push_back(k);
    grid[k][r.depth] = &r;
  }
  std::string out = "| task | length | policy | budget | moment |";
  if (quantized) out += " KV |";
  if (granular) out += " granularity |";
  for (const double d : depths) out += fmt::format(" depth {:.0f} % |", d * 100.0);
  out += " mean | 95 % interval |\n|---|---:|---|---:|---|";
  if (quantized) out += "---|";
  if (granular) out += "---|";
  for (std::size_t i = 0; i < depths.size(); ++i) out += "---:|";
  out += "---:|---|\n";
  for (const Key& k : order) {
    const auto& cells = grid[k];
    std::uint64_t correct = 0, n = 0;  // summed over rows: 64 bits cannot wrap
    out += fmt::format("| {} | {} | {} | {} | {} |", std::get<0>(k), std::get<1>(k), std::get<2>(k),
                       std::get<3>(k) == 0 ? std::string("—") : std::to_string(std::get<3>(k)), std::get<4>(k));
    if (quantized) {
      const TaskRow& any = *cells.begin()->second;
      out += any.kv_residual == 0 ? fmt::format(" {} |", any.kv_precision)
                                  : fmt::format(" {} (residual {}) |", any.kv_precision, any.kv_residual);
    }
    if (granular) {
      const TaskRow& any = *cells.begin()->second;
      out += fmt::format(" {} |", !any.granularity.empty() ? any.granularity : any.policy.empty() ? "—" : "head");
    }
    for (const double d : depths) {
      const auto it = cells.find(d);
      if (it == cells.end()) {
        out += " |";
        continue;
      }
      out += fmt::format(" {:.2f} |", it->second->accuracy);
      correct += it->second->correct;
      n += it->second->samples;
    }
    const auto [low, high] = wilson_interval(correct, n);
    out += fmt::format(" **{:.2f}** | {:.2f} … {:.2f} |\n", n == 0 ? 0.0 : static_cast<double>(correct) / static_cast<double>(n), low, high);
  }
  return out;
}

namespace {

// One row's fields, each checked for its type and range: nlohmann's get<>
// would wrap -1 into an unsigned field and take 2.5 as 2.
class RowReader {
 public:
  explicit RowReader(const nlohmann::json& row) : row_(row) {
    if (!row_.is_object()) throw InputError("not an object");
  }

  const nlohmann::json& field(const char* name) const {
    if (!row_.contains(name)) throw InputError(fmt::format("no '{}'", name));
    return row_.at(name);
  }

  std::string text(const char* name) const {
    const nlohmann::json& v = field(name);
    if (!v.is_string()) throw InputError(fmt::format("'{}' must be a string, not {}", name, v.dump()));
    std::string out = v.get<std::string>();
    if (out.empty()) throw InputError(fmt::format("'{}' is empty", name));
    return out;
  }

  std::uint64_t count(const char* name, std::uint64_t lo, std::uint64_t hi) const {
    const nlohmann::json& v = field(name);
    if (!v.is_number_integer()) throw InputError(fmt::format("'{}' must be a whole number, not {}", name, v.dump()));
    if (v.is_number_unsigned() ? v.get<std::uint64_t>() < lo || v.get<std::uint64_t>() > hi
                               : v.get<std::int64_t>() < 0 || static_cast<std::uint64_t>(v.get<std::int64_t>()) < lo ||
                                     static_cast<std::uint64_t>(v.get<std::int64_t>()) > hi) {
      throw InputError(fmt::format("'{}' ({}) must be in {} ... {}", name, v.dump(), lo, hi));
    }
    return v.is_number_unsigned() ? v.get<std::uint64_t>() : static_cast<std::uint64_t>(v.get<std::int64_t>());
  }

  double fraction(const char* name) const {
    const nlohmann::json& v = field(name);
    if (!v.is_number()) throw InputError(fmt::format("'{}' must be a number, not {}", name, v.dump()));
    const double d = v.get<double>();
    if (!(d >= 0.0 && d <= 1.0)) throw InputError(fmt::format("'{}' ({}) must be in 0 ... 1", name, v.dump()));
    return d;
  }

 private:
  const nlohmann::json& row_;
};

constexpr std::uint64_t kMaxU32 = 0xFFFFFFFFU;
// The largest budget any policy takes (core/policies/common.h's bound).
constexpr std::uint64_t kMaxRowBudget = std::uint64_t{1} << 24;

TaskRow read_row(const nlohmann::json& r) {
  const RowReader in(r);
  TaskRow row;
  row.task = in.text("task");
  task_index(row.task);
  const std::string policy = in.text("policy");
  if (policy != "full") {
    const auto known = policies();
    if (std::none_of(known.begin(), known.end(), [&](const PolicyInfo* p) { return p->name == policy; })) {
      std::vector<std::string> names{"full"};
      for (const PolicyInfo* p : known) names.push_back(p->name);
      throw InputError(fmt::format("unknown policy '{}' (known: {})", policy, fmt::join(names, ", ")));
    }
  }
  const std::string moment = in.text("moment");
  const bool full = policy == "full";
  row.policy = full ? std::string() : policy;
  row.moment = moment == "full" ? Moment::full : parse_moment(moment);
  if (full != (row.moment == Moment::full)) {
    throw InputError(fmt::format("policy '{}' with moment '{}': the full cache's rows (and only they) have moment "
                                 "'full'",
                                 policy, moment));
  }
  const std::uint64_t budget = in.count("budget", 0, kMaxRowBudget);
  if (full != (budget == 0)) {
    throw InputError(fmt::format("policy '{}' with budget {}: the full cache's rows have budget 0, a policy's at "
                                 "least 1",
                                 policy, budget));
  }
  row.budget = static_cast<std::int64_t>(budget);
  row.length = static_cast<std::uint32_t>(in.count("length", 1, kMaxU32));
  row.depth = in.fraction("depth");
  row.samples = static_cast<std::uint32_t>(in.count("samples", 1, kMaxU32));
  row.correct = static_cast<std::uint32_t>(in.count("correct", 0, row.samples));
  row.evicted = in.count("evicted", 0, std::numeric_limits<std::uint64_t>::max());
  // The store's fields came later: a file without them was fp32.
  if (r.contains("kvPrecision")) {
    row.kv_precision = in.text("kvPrecision");
    if (row.kv_precision != "fp32" && row.kv_precision != "fp16" && row.kv_precision != "int8" &&
        row.kv_precision != "int4") {
      throw InputError(fmt::format("'kvPrecision' ('{}') is not fp32, fp16, int8 or int4", row.kv_precision));
    }
    row.kv_residual = static_cast<std::uint32_t>(in.count("kvResidual", 0, kMaxU32));
    const nlohmann::json& b = in.field("bytesPerPosition");
    if (!b.is_number() || !(b.get<double>() >= 0.0)) {
      throw InputError(fmt::format("'bytesPerPosition' must be a number at least 0, not {}", b.dump()));
    }
    row.bytes_per_position = b.get<double>();
  }
  if (r.contains("granularity")) {
    row.granularity = in.text("granularity");
    if (row.granularity != "layer" && row.granularity != "sequence") {
      throw InputError(fmt::format("'granularity' ('{}') is not layer or sequence", row.granularity));
    }
  }
  return row;
}

}  // namespace

std::vector<TaskRow> read_task_rows(std::string_view json, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON ({})", source, e.what()));
  }
  // The tool's document, {"command": "tasks", "model", "rows": [...]}; or the
  // bare array of rows tasks wrote before every command printed that shape,
  // so files written then still chart.
  if (doc.is_object() && doc.contains("rows") && doc.contains("command") && doc.at("command") == "tasks") {
    nlohmann::json rows = std::move(doc.at("rows"));
    doc = std::move(rows);
  }
  if (!doc.is_array()) {
    throw InputError(fmt::format("{}: expected the rows of kvevict tasks --format json ({{\"command\": \"tasks\", "
                                 "\"rows\": [...]}})",
                                 source));
  }
  std::vector<TaskRow> rows;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    TaskRow row;
    try {
      row = read_row(doc[i]);
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: row {}: {}", source, i, e.what()));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: row {}: {}", source, i, e.what()));
    }
    row.accuracy = static_cast<double>(row.correct) / row.samples;
    std::tie(row.low, row.high) = wilson_interval(row.correct, row.samples);
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<TaskRow> read_task_rows_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (std::filesystem::is_directory(file, ec)) throw InputError(fmt::format("{}: is a folder, not a JSON file", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", file.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return read_task_rows(text, file.string());
}

}  // namespace kvevict
