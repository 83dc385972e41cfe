#include "output.h"

#include "kvevict/report/report.h"

#include <algorithm>
#include <ostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

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

void print_cells(std::ostream& out, const std::vector<std::vector<std::string>>& cells,
                 const std::string& format, std::size_t left_columns) {
  if (format == "csv") {
    for (const auto& r : cells) {
      std::string line;
      for (std::size_t i = 0; i < r.size(); ++i) line += (i ? "," : "") + r[i];
      out << line << '\n';
    }
    return;
  }
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
}  // namespace

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
                bool ranked, const std::vector<std::string>& extra_param_columns) {
  std::vector<std::string> header;
  if (ranked) header.push_back("rank");
  header.push_back("policy");
  for (const auto& p : extra_param_columns) header.push_back(p);
  for (const char* h : {"budget", "retained mass", "heavy-hitter recall", "eviction calls",
                        "memory bytes"}) {
    header.push_back(h);
  }

  if (format == "csv") {
    std::string cols = "policy,trace,budget";
    for (const auto& p : extra_param_columns) cols += "," + p;
    out << cols << ",retainedAttentionMass,heavyHitterRecall,evictionCalls,evicted,memoryBytes,seconds,params\n";
    for (const RunRow& r : rows) {
      std::string extra;
      for (const auto& p : extra_param_columns) extra += fmt::format(",{}", param_value(r.params, p));
      out << fmt::format("{},{},{}{},{:.6f},{:.6f},{},{},{},{:.6f},\"{}\"\n", r.policy, r.trace,
                         r.budget, extra, r.metrics.retained_attention_mass,
                         r.metrics.heavy_hitter_recall, r.metrics.eviction_calls, r.totals.evicted,
                         r.memory_bytes, r.seconds, params_text(r.params));
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
  // CSV was written above with more columns than the table shows.
  print_cells(out, cells, format, (ranked ? 2U : 1U) + extra_param_columns.size());
}

void print_simd(std::ostream& out, const std::vector<std::string>& compiled, const std::vector<std::string>& supported,
                const std::string& active, const std::string& format) {
  if (format == "json") {
    out << nlohmann::ordered_json{{"compiled", compiled}, {"supported", supported}, {"active", active}}.dump(2) << '\n';
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

static nlohmann::ordered_json spread_json(const Spread& s) {
  return {{"min", s.min}, {"median", s.median}, {"max", s.max}};
}

void print_bench(std::ostream& out, const BenchReport& r, const std::string& format) {
  if (format == "json") {
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const BenchRow& b : r.rows) {
      rows.push_back({{"policy", b.policy}, {"budget", b.budget}, {"nsPerStep", b.ns_per_step},
                      {"attentionBytes", b.attention_bytes}, {"gbPerSecond", b.gb_per_s},
                      {"floorNs", b.floor_ns}, {"ratioToFloor", b.ratio_to_floor},
                      {"nsPerStepSpread", spread_json(b.step_ns)}, {"ratioSpread", spread_json(b.ratio)}});
    }
    nlohmann::ordered_json bank = nlohmann::ordered_json::array();
    for (const BankBenchRow& b : r.bank) {
      bank.push_back({{"policy", b.policy}, {"instances", b.instances}, {"budget", b.budget}, {"threads", b.threads},
                      {"msPerStep", b.ms_per_step}, {"attentionGBps", b.attention_gb_s},
                      {"touchedGBps", b.touched_gb_s}, {"sameSizeReadGBps", b.same_size_bandwidth_gb_s},
                      {"shareOfBandwidth", b.share_of_bandwidth}, {"shareSpread", spread_json(b.share)},
                      {"separateMsPerStep", b.separate_ms_per_step}});
    }
    nlohmann::ordered_json doc = {{"simdTarget", r.simd_target},
                                  {"readBandwidthGBps", r.read_bandwidth_gb_s},
                                  {"parallelReadBandwidthGBps", r.parallel_bandwidth_gb_s},
                                  {"rows", rows}, {"bank", bank},
                                  {"compareSharedSeconds", r.compare_shared_seconds},
                                  {"compareSharedCpuSeconds", r.compare_shared_cpu_seconds},
                                  {"compareThreads", r.compare_threads},
                                  {"compareSeparateSeconds", r.compare_separate_seconds}};
    out << doc.dump(2) << '\n';
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


void print_decode_bench(std::ostream& out, const std::vector<DecodeBenchRow>& rows, const std::string& format) {
  if (format == "json") {
    out << decode_bench_json(rows) << '\n';
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
           "the full cache's decode, a batch over its runs one at a time; the shares come from profiled passes: "
           "matrices = the weight products and norms, attention = RoPE, storing the key and value, scores, softmax "
           "and the values' weighted sum, policies = their steps, evictions and the store's removals)\n";
  }
}

void print_perplexity(std::ostream& out, const std::vector<PerplexityRow>& rows, const std::string& format,
                      const std::vector<std::string>& extra) {
  if (format == "json") {
    out << perplexity_json(rows) << '\n';
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

void print_stream(std::ostream& out, const std::vector<StreamRow>& rows, const std::string& format) {
  if (format == "json") {
    out << stream_json(rows) << '\n';
    return;
  }
  std::vector<std::vector<std::string>> cells;
  if (format == "csv") {
    cells.push_back({"policy", "budget", "positions", "segment begin", "segment end", "predictions", "bytes",
                     "bits per byte"});
    for (const StreamRow& r : rows) {
      for (const StreamSegment& s : r.segments) {
        cells.push_back({stream_label(r), r.budget == 0 ? "-" : std::to_string(r.budget),
                         std::string(position_mode_name(r.positions)), std::to_string(s.begin), std::to_string(s.end),
                         std::to_string(s.predictions), std::to_string(s.bytes), fmt::format("{:.4f}", s.bits_per_byte())});
      }
    }
    print_cells(out, cells, format, 3);
    return;
  }
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

void print_sinks(std::ostream& out, const std::vector<SinkShare>& shares, const std::string& format) {
  if (format == "json") {
    out << stream_json({}, shares) << '\n';
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

void print_serve(std::ostream& out, const std::vector<ServeRow>& rows, const std::string& format) {
  if (format == "json") {
    out << serve_json(rows) << '\n';
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

void print_persistence(std::ostream& out, const std::vector<PersistenceRow>& rows,
                       const std::string& format) {
  if (format == "json") {
    nlohmann::ordered_json doc = nlohmann::ordered_json::array();
    for (const PersistenceRow& r : rows) {
      doc.push_back({{"lag", r.lag}, {"important", r.important}, {"persisted", r.persisted},
                     {"share", r.share}, {"baseRate", r.base_rate}});
    }
    out << doc.dump(2) << '\n';
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
