#include "kvevict/eval/task_rows.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"

namespace kvevict {

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

std::string tasks_json(const std::vector<TaskRow>& rows) {
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
                   {"evicted", r.evicted}});
  }
  return out.dump(2) + "\n";
}

std::string tasks_csv(const std::vector<TaskRow>& rows) {
  std::string out = "task,policy,budget,moment,length,depth,samples,correct,accuracy,accuracy_low,accuracy_high,evicted\n";
  for (const TaskRow& r : rows) {
    out += fmt::format("{},{},{},{},{},{:.4f},{},{},{:.4f},{:.4f},{:.4f},{}\n", r.task, label(r), r.budget,
                       moment_name(r.moment), r.length, r.depth, r.samples, r.correct, r.accuracy, r.low, r.high,
                       r.evicted);
  }
  return out;
}

std::string tasks_markdown(const std::vector<TaskRow>& rows) {
  // One line per task x length x policy x budget x moment, a column per depth.
  std::vector<double> depths;
  for (const TaskRow& r : rows) {
    if (std::find(depths.begin(), depths.end(), r.depth) == depths.end()) depths.push_back(r.depth);
  }
  std::sort(depths.begin(), depths.end());
  using Key = std::tuple<std::string, std::uint32_t, std::string, std::int64_t, std::string>;
  std::vector<Key> order;
  std::map<Key, std::map<double, const TaskRow*>> grid;
  for (const TaskRow& r : rows) {
    const Key k{r.task, r.length, label(r), r.budget, std::string(moment_name(r.moment))};
    if (grid.find(k) == grid.end()) order.push_back(k);
    grid[k][r.depth] = &r;
  }
  std::string out = "| task | length | policy | budget | moment |";
  for (const double d : depths) out += fmt::format(" depth {:.0f} % |", d * 100.0);
  out += " mean | 95 % interval |\n|---|---:|---|---:|---|";
  for (std::size_t i = 0; i < depths.size(); ++i) out += "---:|";
  out += "---:|---|\n";
  for (const Key& k : order) {
    const auto& cells = grid[k];
    std::uint32_t correct = 0, n = 0;
    out += fmt::format("| {} | {} | {} | {} | {} |", std::get<0>(k), std::get<1>(k), std::get<2>(k),
                       std::get<3>(k) == 0 ? std::string("—") : std::to_string(std::get<3>(k)), std::get<4>(k));
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
    out += fmt::format(" **{:.2f}** | {:.2f} … {:.2f} |\n", n == 0 ? 0.0 : static_cast<double>(correct) / n, low, high);
  }
  return out;
}

std::vector<TaskRow> read_task_rows(std::string_view json, const std::string& source) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON ({})", source, e.what()));
  }
  if (!doc.is_array()) throw InputError(fmt::format("{}: expected an array of task rows (kvevict tasks --format json)", source));
  std::vector<TaskRow> rows;
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const nlohmann::json& r = doc[i];
    auto field = [&](const char* name) -> const nlohmann::json& {
      if (!r.is_object() || !r.contains(name)) throw InputError(fmt::format("no '{}'", name));
      return r.at(name);
    };
    TaskRow row;
    try {
      row.task = field("task").get<std::string>();
      const std::string policy = field("policy").get<std::string>();
      row.policy = policy == "full" ? std::string() : policy;
      row.budget = field("budget").get<std::int64_t>();
      const std::string moment = field("moment").get<std::string>();
      row.moment = moment == "full" ? Moment::full : parse_moment(moment);
      row.length = field("length").get<std::uint32_t>();
      row.depth = field("depth").get<double>();
      row.samples = field("samples").get<std::uint32_t>();
      row.correct = field("correct").get<std::uint32_t>();
      row.evicted = field("evicted").get<std::uint64_t>();
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: row {}: {}", source, i, e.what()));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: row {}: {}", source, i, e.what()));
    }
    if (row.samples == 0 || row.correct > row.samples) {
      throw InputError(fmt::format("{}: row {}: {} correct of {} samples", source, i, row.correct, row.samples));
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
