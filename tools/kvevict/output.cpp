#include "output.h"

#include "kvevict/report/report.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <ostream>
#include <set>
#include <string_view>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kvevict/eval/json.h"
#include "kvevict/model/evaluation/command_schema.h"
#include "kvevict/model/evaluation/perplexity_rows.h"

namespace kvevict::cli {

namespace {
std::string params_text(const ParamMap& params) {
  std::string s;
  for (const auto& [k, v] : params) s += fmt::format("{}{}={}", s.empty() ? "" : " ", k, v);
  return s;
}

std::int64_t param_value(const ParamMap& params, const std::string& key) {
  for (const auto& [k, v] : params) {
    if (k == key) return v;
  }
  return 0;
}

// Table or Markdown: cells made for a reader (signs, units, ranges, "-" for
// none). CSV never comes here: it is built from the command's JSON
// (print_csv), one value a cell.
void print_cells(std::ostream& out, const std::vector<std::vector<std::string>>& cells,
                 const std::string& format, std::size_t left_columns) {
  if (format == "markdown") {
    auto md_line = [&](const std::vector<std::string>& c) {
      std::string s = "|";
      for (const auto& x : c) s += " " + x + " |";
      return s;
    };
    out << md_line(cells[0]) << '\n';
    std::string sep = "|";
    for (std::size_t i = 0; i < cells[0].size(); ++i) sep += i < left_columns ? "---|" : "---:|";
    out << sep << '\n';
    for (std::size_t i = 1; i < cells.size(); ++i) out << md_line(cells[i]) << '\n';
    return;
  }
  print_aligned(out, cells);
}

// ---- CSV: the JSON rows, one value a cell ----------------------------------
// A command's CSV is built from the JSON text the same command prints with
// --format json (the library's *_json, most walking the row schema), never
// from the table's cells, so the two carry the same values and the same
// fields: a column per scalar field, named by its JSON key; an object's
// members flattened as KEY.MEMBER (params.recentWindow, metrics.heavyHitterRecall);
// arrays left to JSON (perHead), except the one a command prints a line per
// element of (stream's segments, as segments.begin, ...).

// RFC 4180: a cell holding a comma, a quote or a line break is quoted, its
// quotes doubled.
std::string csv_cell(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// A JSON scalar as its cell: no value (null, or a number JSON cannot hold)
// empty; a number exactly as the JSON prints it (full precision, no sign,
// separator or unit); true and false as JSON writes them.
std::string csv_value(const nlohmann::ordered_json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_cell(v.get_ref<const std::string&>());
  if (v.is_number_float() && !std::isfinite(v.get<double>())) return "";
  return v.dump();
}

using CsvLine = std::vector<std::pair<std::string, const nlohmann::ordered_json*>>;

void flatten(const nlohmann::ordered_json& object, const std::string& prefix, CsvLine& line) {
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string name = prefix.empty() ? it.key() : prefix + "." + it.key();
    if (it.value().is_object()) {
      flatten(it.value(), name, line);
    } else if (!it.value().is_array()) {
      line.emplace_back(name, &it.value());
    }
  }
}

// The header: every name any line has, in the order the lines agree on.
// Rows leave out fields that do not apply to them (a policy's params, a
// field present only for some rows), so no one line need hold them all;
// each line orders its own, and a column goes as early as those orders
// allow, ties by first appearance (a topological sort).
std::vector<std::string> csv_header(const std::vector<CsvLine>& lines) {
  std::vector<std::string> names;
  std::map<std::string, std::size_t> index;
  std::vector<std::set<std::size_t>> after;
  std::vector<std::size_t> before;  // how many columns must come first
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  for (const CsvLine& line : lines) {
    std::size_t previous = kNone;
    for (const auto& cell : line) {
      auto [it, added] = index.try_emplace(cell.first, names.size());
      if (added) {
        names.push_back(cell.first);
        after.emplace_back();
        before.push_back(0);
      }
      if (previous != kNone && after[previous].insert(it->second).second) {
        ++before[it->second];
      }
      previous = it->second;
    }
  }
  std::vector<std::string> header;
  std::vector<bool> placed(names.size(), false);
  std::set<std::size_t> ready;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (before[i] == 0) ready.insert(i);
  }
  while (!ready.empty()) {
    const std::size_t i = *ready.begin();
    ready.erase(ready.begin());
    header.push_back(names[i]);
    placed[i] = true;
    for (const std::size_t j : after[i]) {
      if (--before[j] == 0) ready.insert(j);
    }
  }
  // Lines that disagree (no row of the library's does): the rest by first appearance.
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (!placed[i]) header.push_back(names[i]);
  }
  return header;
}

void print_csv_rows(std::ostream& out, const nlohmann::ordered_json& rows, std::string_view expand) {
  std::vector<CsvLine> lines;
  for (const nlohmann::ordered_json& row : rows) {
    CsvLine line;
    flatten(row, "", line);
    const auto inner = expand.empty() ? row.end() : row.find(std::string(expand));
    if (inner == row.end() || !inner->is_array() || inner->empty()) {
      lines.push_back(std::move(line));
      continue;
    }
    for (const nlohmann::ordered_json& element : *inner) {
      CsvLine per = line;
      if (element.is_object()) flatten(element, std::string(expand), per);
      lines.push_back(std::move(per));
    }
  }
  if (lines.empty()) return;  // no rows: nothing names the columns
  const std::vector<std::string> header = csv_header(lines);
  std::string text;
  for (std::size_t i = 0; i < header.size(); ++i) {
    if (i > 0) text += ',';
    text += csv_cell(header[i]);
  }
  out << text << '\n';
  for (const CsvLine& line : lines) {
    std::map<std::string_view, const nlohmann::ordered_json*> value;
    for (const auto& [name, v] : line) value.emplace(name, v);
    text.clear();
    for (std::size_t i = 0; i < header.size(); ++i) {
      if (i > 0) text += ',';
      const auto it = value.find(header[i]);
      if (it != value.end()) text += csv_value(*it->second);
    }
    out << text << '\n';
  }
}

// Every command's JSON is the envelope (kvevict/eval/json.h): its rows are
// the CSV's lines; the members after them (compare's trace, choose's plan) are
// per result, not per row, and stay in the JSON.
void print_csv_json(std::ostream& out, const nlohmann::ordered_json& doc, std::string_view expand) {
  const auto it = doc.find("rows");
  if (it != doc.end()) print_csv_rows(out, *it, expand);
}
}  // namespace

void print_csv(std::ostream& out, std::string_view json, std::string_view expand) {
  print_csv_json(out, nlohmann::ordered_json::parse(json), expand);
}

void print_aligned(std::ostream& out, const std::vector<std::vector<std::string>>& cells) {
  std::vector<std::size_t> width;
  for (const auto& r : cells) {
    width.resize(std::max(width.size(), r.size()));
    for (std::size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : cells) {
    std::string line;
    for (std::size_t i = 0; i < r.size(); ++i) {
      line += i + 1 == r.size() ? r[i] : fmt::format("{:<{}}  ", r[i], width[i]);
    }
    out << line << '\n';
  }
}

void print_run_table(std::ostream& out, const RunRow& row) {
  print_aligned(out, {{"policy", row.policy},
                      {"trace", row.trace},
                      {"budget", std::to_string(row.budget)},
                      {"params", params_text(row.params)},
                      {"steps", std::to_string(row.totals.steps / static_cast<std::int64_t>(row.heads))},
                      {"heads", std::to_string(row.heads)},
                      {"retained attention mass", fmt::format("{:.6f}", row.metrics.retained_attention_mass)},
                      {"heavy-hitter recall", fmt::format("{:.6f}", row.metrics.heavy_hitter_recall)},
                      {"eviction calls", std::to_string(row.metrics.eviction_calls)},
                      {"evicted", std::to_string(row.totals.evicted)},
                      {"memory bytes", std::to_string(row.memory_bytes)},
                      {"seconds", fmt::format("{:.3f}", row.seconds)}});
  out << "(both metrics are proxies: attention kept, not model quality)\n";
}

void print_rows(std::ostream& out, const std::vector<RunRow>& rows, const std::string& format,
                const std::string& command, bool ranked, const std::vector<std::string>& extra_param_columns) {
  std::vector<std::string> header;
  if (ranked) header.push_back("rank");
  header.push_back("policy");
  for (const auto& p : extra_param_columns) header.push_back(p);
  for (const char* h : {"budget", "retained mass", "heavy-hitter recall", "eviction calls",
                        "memory bytes"}) {
    header.push_back(h);
  }

  if (format == "json" || format == "csv") {
    const std::string json = rows_json(rows, command, format == "json" ? 2 : -1);
    if (format == "json") {
      out << json << '\n';
    } else {
      print_csv(out, json);
    }
    return;
  }

  std::vector<std::vector<std::string>> cells{header};
  for (const RunRow& r : rows) {
    std::vector<std::string> line;
    if (ranked) line.push_back(std::to_string(r.rank));
    line.push_back(r.policy);
    for (const auto& p : extra_param_columns) line.push_back(std::to_string(param_value(r.params, p)));
    line.push_back(std::to_string(r.budget));
    line.push_back(fmt::format("{:.6f}", r.metrics.retained_attention_mass));
    line.push_back(fmt::format("{:.6f}", r.metrics.heavy_hitter_recall));
    line.push_back(std::to_string(r.metrics.eviction_calls));
    line.push_back(std::to_string(r.memory_bytes));
    cells.push_back(std::move(line));
  }
  print_cells(out, cells, format, (ranked ? 2U : 1U) + extra_param_columns.size());
}

void print_simd(std::ostream& out, const std::vector<std::string>& compiled, const std::vector<std::string>& supported,
                const std::string& active, const std::string& format) {
  if (format == "json") {
    out << simd_json(compiled, supported, active) << '\n';
    return;
  }
  const auto join = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
  };
  out << "compiled:  " << join(compiled) << '\n' << "supported: " << join(supported) << '\n'
      << "active:    " << active << '\n';
}

void print_bench(std::ostream& out, const BenchReport& r, const std::string& format) {
  if (format == "json") {
    out << bench_json(r) << '\n';
    return;
  }
  out << fmt::format("SIMD target: {}\n\n", r.simd_target);
  std::vector<std::vector<std::string>> cells{{"policy", "budget", "ns/step", "ns/step min-max", "attention bytes/step",
                                               "GB/s", "floor ns", "x floor", "x floor min-max"}};
  for (const BenchRow& b : r.rows) {
    cells.push_back({b.policy, std::to_string(b.budget), fmt::format("{:.0f}", b.ns_per_step),
                     fmt::format("{:.0f}-{:.0f}", b.step_ns.min, b.step_ns.max),
                     fmt::format("{:.0f}", b.attention_bytes), fmt::format("{:.2f}", b.gb_per_s),
                     fmt::format("{:.0f}", b.floor_ns), fmt::format("{:.2f}", b.ratio_to_floor),
                     fmt::format("{:.2f}-{:.2f}", b.ratio.min, b.ratio.max)});
  }
  print_cells(out, cells, format, 1);
  out << fmt::format("\nfloor = a plain sum over the step's attention row, read from the same 64 MiB pool; policy and "
                     "floor in 7 alternating rounds of thread CPU time, each round's ratio its own steps over its own "
                     "floor: the median round, and the rounds' range; streaming read bandwidth, one thread: {:.2f} GB/s\n",
                     r.read_bandwidth_gb_s);
  if (!r.bank.empty()) {
    out << fmt::format("\nbank (structure of arrays, slot-addressed, {} threads); parallel read bandwidth {:.2f} GB/s\n",
                       r.bank.front().threads, r.parallel_bandwidth_gb_s);
    std::vector<std::vector<std::string>> bank{{"policy", "instances", "budget", "ms/step", "attention GB/s",
                                                "touched GB/s", "same-size read GB/s", "of bandwidth",
                                                "of bandwidth min-max", "separate ms/step", "bank speed-up"}};
    for (const BankBenchRow& b : r.bank) {
      bank.push_back({b.policy, std::to_string(b.instances), std::to_string(b.budget),
                      fmt::format("{:.2f}", b.ms_per_step), fmt::format("{:.2f}", b.attention_gb_s),
                      fmt::format("{:.2f}", b.touched_gb_s), fmt::format("{:.2f}", b.same_size_bandwidth_gb_s),
                      fmt::format("{:.0f}%", 100 * b.share_of_bandwidth),
                      fmt::format("{:.0f}-{:.0f}%", 100 * b.share.min, 100 * b.share.max),
                      fmt::format("{:.2f}", b.separate_ms_per_step),
                      fmt::format("{:.2f}x", b.separate_ms_per_step / b.ms_per_step)});
    }
    print_cells(out, bank, format, 1);
    out << "(touched = attention read + slot positions read + state read and written; of bandwidth = the bytes a "
           "step must read (attention, slot positions, state), over its step time, against a parallel read of as "
           "many bytes timed right after each of 5 bank rounds: the median round, and the range; 100% = a step no "
           "slower than reading its inputs)\n";
  }
  if (r.compare_shared_seconds > 0) {
    out << fmt::format("canonical compare (21 runs): {:.3f} s wall and {:.3f} s of CPU in one pass over the trace "
                       "({} threads), {:.3f} s run by run on one thread ({:.2f}x the pass's wall time)\n",
                       r.compare_shared_seconds, r.compare_shared_cpu_seconds, r.compare_threads,
                       r.compare_separate_seconds, r.compare_separate_seconds / r.compare_shared_seconds);
  }
}


void print_decode_bench(std::ostream& out, const std::vector<DecodeBenchRow>& rows, const std::string& format,
                        const JsonSource& source) {
  if (format == "json") {
    out << decode_bench_document(rows, source) << '\n';
    return;
  }
  if (format == "csv") {
    print_csv(out, decode_bench_document(rows, source, -1));
    return;
  }
  const auto pct = [](double x) { return fmt::format("{:.1f}%", 100.0 * x); };
  const auto rate = [](double x) { return x >= 100.0 ? fmt::format("{:.0f}", x) : fmt::format("{:.1f}", x); };
  std::vector<std::vector<std::string>> cells{{"mode", "policy", "budget", "threads", "runs", "prompt", "tokens",
                                               "tokens/s", "rounds' range", "ms/token", "floor tokens/s", "of floor",
                                               "speed-up", "matrices", "activation", "attention", "policies", "other"}};
  for (const DecodeBenchRow& r : rows) {
    const bool decode = r.mode == "decode";
    cells.push_back({r.mode, r.policy, r.budget == 0 ? "-" : std::to_string(r.budget), std::to_string(r.threads),
                     std::to_string(r.runs), std::to_string(r.prompt), std::to_string(r.tokens),
                     rate(r.tokens_per_second),
                     fmt::format("{}-{}", rate(r.tokens_per_second_min), rate(r.tokens_per_second_max)),
                     fmt::format("{:.3f}", 1e3 / r.tokens_per_second), rate(r.floor_tokens_per_second),
                     fmt::format("{:.2f}", r.of_floor), decode ? "-" : fmt::format("{:.2f}x", r.speedup),
                     decode ? pct(r.projections) : "-", decode ? pct(r.activation) : "-",
                     decode ? pct(r.attention) : "-", decode ? pct(r.policies) : "-", decode ? pct(r.other) : "-"});
  }
  print_cells(out, cells, format, 2);
  if (format == "table") {
    out << "\n(wall time; tokens/s is the median of the timed passes (a together row counts every run's tokens); "
           "floor = the weights' bytes a token over the read bandwidth of as many threads; speed-up: a prefill over "
           "the full cache's decode, a batch over its runs one at a time, the prompts fed together several tokens a "
           "pass over the same stepped together a token a pass; the shares come from profiled passes: "
           "matrices = the weight products and norms, attention = RoPE, storing the key and value, scores, softmax "
           "and the values' weighted sum, policies = their steps, evictions and the store's removals)\n";
  }
}

void print_perplexity(std::ostream& out, const std::vector<PerplexityRow>& rows, const std::string& format,
                      const JsonSource& source, const std::vector<std::string>& extra) {
  if (format == "json") {
    out << perplexity_json(rows, source) << '\n';
    return;
  }
  if (format == "csv") {  // a sweep's parameter is its params.KEY column
    print_csv(out, perplexity_json(rows, source, -1));
    return;
  }
  const bool ranked = !rows.empty() && rows.front().ranked;
  const bool store = !rows.empty() && rows.front().store_measured;
  const bool proxy = std::any_of(rows.begin(), rows.end(), [](const PerplexityRow& r) { return r.has_proxy; });
  const bool blocks = std::any_of(rows.begin(), rows.end(), [](const PerplexityRow& r) { return r.block_size != 0; });
  const bool interval = std::any_of(rows.begin(), rows.end(), [](const PerplexityRow& r) { return r.has_extra_interval; });
  const bool quantized =
      std::any_of(rows.begin(), rows.end(), [](const PerplexityRow& r) { return r.kv_precision != "fp32"; });
  const bool memory = std::any_of(rows.begin(), rows.end(), [](const PerplexityRow& r) { return r.memory_bytes > 0; });
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header;
  if (ranked) header.push_back("rank");
  if (memory) header.push_back("memory a cache");
  header.push_back("policy");
  header.push_back("budget");
  for (const std::string& p : extra) header.push_back(p);
  for (const char* h : {"perplexity", "bits per byte", "extra bits per byte"}) header.push_back(h);
  if (interval) header.push_back("95 % interval (paired by window)");
  if (proxy) {
    header.push_back("retained mass");
    header.push_back("heavy-hitter recall");
  }
  header.push_back("evicted");
  if (blocks) header.push_back(fmt::format("peak blocks of {}", rows.front().block_size));
  if (store) header.push_back("peak positions");
  if (quantized) {
    header.push_back("KV precision");
    header.push_back("bytes a position");
    header.push_back("peak bytes a cache");
  }
  cells.push_back(header);
  for (const PerplexityRow& r : rows) {
    std::vector<std::string> line;
    if (ranked) line.push_back(r.policy.empty() ? "-" : std::to_string(r.rank));
    if (memory) line.push_back(r.memory_bytes == 0 ? "-" : fmt::format("{} KiB", r.memory_bytes / 1024.0));
    line.push_back(r.policy.empty() ? "full cache" : r.policy);
    line.push_back(r.budget == 0 ? "-" : std::to_string(r.budget));
    for (const std::string& p : extra) {
      const auto it = std::find_if(r.params.begin(), r.params.end(), [&](const auto& kv) { return kv.first == p; });
      line.push_back(it == r.params.end() ? "-" : std::to_string(it->second));
    }
    line.push_back(fmt::format("{:.4f}", r.perplexity));
    line.push_back(fmt::format("{:.4f}", r.bits_per_byte));
    const bool full = r.policy.empty() && r.kv_precision == "fp32";  // the reference
    line.push_back(full ? "-" : fmt::format("{:+.4f}", r.extra_bits_per_byte));
    if (interval) {
      line.push_back(full || !r.has_extra_interval ? "-"
                                                   : fmt::format("{:+.4f} … {:+.4f}", r.extra_low, r.extra_high));
    }
    if (proxy) {
      line.push_back(r.has_proxy ? fmt::format("{:.6f}", r.proxy.retained_attention_mass) : "-");
      line.push_back(r.has_proxy ? fmt::format("{:.6f}", r.proxy.heavy_hitter_recall) : "-");
    }
    line.push_back(std::to_string(r.evicted));
    if (blocks) line.push_back(std::to_string(r.peak_blocks));
    if (store) line.push_back(std::to_string(r.peak_positions));
    if (quantized) {
      line.push_back(r.kv_residual == 0 ? r.kv_precision
                                        : fmt::format("{} (residual {})", r.kv_precision, r.kv_residual));
      line.push_back(fmt::format("{:.1f}", r.bytes_per_position));
      line.push_back(std::to_string(r.peak_cache_bytes));
    }
    cells.push_back(std::move(line));
  }
  print_cells(out, cells, format, (ranked ? 2 : 1) + (memory ? 1 : 0));
}

void print_stream(std::ostream& out, const std::vector<StreamRow>& rows, const std::string& format,
                  const JsonSource& source) {
  if (format == "json") {
    out << stream_json(rows, source) << '\n';
    return;
  }
  if (format == "csv") {  // a line per row and segment
    print_csv(out, stream_json(rows, source), "segments");
    return;
  }
  std::vector<std::vector<std::string>> cells;
  // Spans that double: segments [0,1), [1,2), [2,4), [4,8), ... of the longest run.
  std::size_t segments = 0;
  std::uint64_t length = 0, last = 0;
  for (const StreamRow& r : rows) {
    segments = std::max(segments, r.segments.size());
    last = std::max(last, r.tokens);
    if (!r.segments.empty()) length = r.segments.front().end - r.segments.front().begin;
  }
  std::vector<std::pair<std::size_t, std::size_t>> spans;
  for (std::size_t first = 0, size = 1; first < segments; first += size, size = first) {
    spans.emplace_back(first, std::min(first + size, segments));
  }
  std::vector<std::string> header{"policy", "budget", "positions"};
  for (const auto& [a, b] : spans) header.push_back(fmt::format("{}–{}", a * length, std::min(b * length, last)));
  for (const char* h : {"whole run", "tokens", "peak held"}) header.push_back(h);
  cells.push_back(header);
  for (const StreamRow& r : rows) {
    std::vector<std::string> line{stream_label(r), r.budget == 0 ? "-" : std::to_string(r.budget),
                                  std::string(position_mode_name(r.positions))};
    for (const auto& [a, b] : spans) {
      const double bits = stream_span_bits_per_byte(r, a, b);
      line.push_back(bits < 0 ? "-" : fmt::format("{:.3f}", bits));
    }
    line.push_back(fmt::format("{:.4f}", r.bits_per_byte));
    line.push_back(std::to_string(r.tokens));
    line.push_back(std::to_string(r.peak_positions));
    cells.push_back(std::move(line));
  }
  print_cells(out, cells, format, 3);
}

std::string stream_chart_svg(const std::vector<StreamRow>& rows, std::uint32_t context, const std::string& model) {
  LineChartRequest chart;
  chart.name = "stream";
  chart.title = "Bits per byte along the stream";
  chart.subtitle = fmt::format("{} · each point one segment of {} tokens · dashed: original positions, solid: "
                               "positions in the cache",
                               model,
                               rows.empty() || rows.front().segments.empty()
                                   ? 0
                                   : rows.front().segments.front().end - rows.front().segments.front().begin);
  chart.x_label = "position in the stream (tokens)";
  chart.y_label = "bits per byte";
  chart.marker_x = context;
  chart.marker_label = fmt::format("context ({})", context);
  for (const StreamRow& r : rows) {
    ChartSeries series;
    const std::string label = stream_label(r);
    series.key = r.policy.empty() ? "full" : label;
    series.dashed = r.positions == PositionMode::kOriginal && !r.policy.empty();
    series.label = r.policy.empty() || r.policy == "recompute"
                       ? label
                       : fmt::format("{} {} ({})", label, r.budget, position_mode_name(r.positions));
    for (const StreamSegment& seg : r.segments) {
      if (seg.predictions == 0) continue;
      series.points.emplace_back(0.5 * static_cast<double>(seg.begin + seg.end), seg.bits_per_byte());
    }
    chart.series.push_back(std::move(series));
  }
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + render_line_chart(chart, true).svg;
}

void print_sinks(std::ostream& out, const std::vector<SinkShare>& shares, const std::string& format,
                 const JsonSource& source) {
  if (format == "json") {
    out << sinks_json(shares, source) << '\n';
    return;
  }
  if (format == "csv") {
    print_csv(out, sinks_json(shares, source));
    return;
  }
  std::vector<std::vector<std::string>> cells{{"layer", "first position", "spread evenly", "first four",
                                               "spread evenly (four)"}};
  for (const SinkShare& s : shares) {
    cells.push_back({std::to_string(s.layer), fmt::format("{:.4f}", s.first), fmt::format("{:.4f}", s.even_first),
                     fmt::format("{:.4f}", s.first_four), fmt::format("{:.4f}", s.even_first_four)});
  }
  print_cells(out, cells, format, 1);
}

void print_serve(std::ostream& out, const std::vector<ServeRow>& rows, const std::string& format,
                 const JsonSource& source) {
  if (format == "json") {
    out << serve_json(rows, source) << '\n';
    return;
  }
  if (format == "csv") {
    print_csv(out, serve_json(rows, source, -1));
    return;
  }
  const bool chunked = std::any_of(rows.begin(), rows.end(), [](const ServeRow& r) { return r.run.chunk != 0; });
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header{"policy", "mode", "sharing", "budget", "sequences"};
  if (chunked) header.push_back("chunk");
  for (const char* h : {"peak blocks", "saved by sharing", "copied", "peak positions", "peak per cache",
                        "evicted", "tokens/s"}) {
    header.push_back(h);
  }
  cells.push_back(header);
  for (const ServeRow& r : rows) {
    const bool full = r.run.policy.empty();
    std::vector<std::string> line{full ? "full cache" : r.run.policy,
                                  full ? "full" : r.run.chunk != 0 ? "chunked" : r.run.blocks ? "block" : "token",
                                  r.run.share_prefix ? "on" : "off", full ? "-" : std::to_string(r.run.budget),
                                  std::to_string(r.run.sequences)};
    if (chunked) line.push_back(r.run.chunk == 0 ? "-" : std::to_string(r.run.chunk));
    line.push_back(std::to_string(r.peak_blocks));
    line.push_back(std::to_string(r.blocks_saved));
    line.push_back(std::to_string(r.copied_blocks));
    line.push_back(std::to_string(r.peak_positions));
    line.push_back(std::to_string(r.peak_cache_positions));
    line.push_back(std::to_string(r.evicted));
    line.push_back(fmt::format("{:.0f}", r.tokens_per_second));
    cells.push_back(std::move(line));
  }
  print_cells(out, cells, format, 3);
}

void print_persistence(std::ostream& out, const std::vector<PersistenceRow>& rows, const std::string& format,
                       const JsonSource& source) {
  if (format == "json") {
    out << persistence_json(rows, source) << '\n';
    return;
  }
  if (format == "csv") {
    print_csv(out, persistence_json(rows, source, -1));
    return;
  }
  std::vector<std::vector<std::string>> cells{
      {"lag k", "above fair share at t", "still above at t+k", "share persisting", "chance level"}};
  for (const PersistenceRow& r : rows) {
    cells.push_back({std::to_string(r.lag), std::to_string(r.important), std::to_string(r.persisted),
                     fmt::format("{:.4f}", r.share), fmt::format("{:.4f}", r.base_rate)});
  }
  print_cells(out, cells, format, 0);
}

}  // namespace kvevict::cli
