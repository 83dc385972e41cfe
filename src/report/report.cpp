#include "kvevict/report/report.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <memory>
#include <system_error>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/npy.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/trace.h"

namespace kvevict {

// ---- strips ----------------------------------------------------------------

std::uint32_t Strip::row_of_step(std::uint32_t t) const noexcept {
  return static_cast<std::uint32_t>((std::uint64_t{t} - 1) * rows / steps);
}

std::uint32_t Strip::col_of_position(std::uint32_t p) const noexcept {
  return static_cast<std::uint32_t>(std::uint64_t{p} * cols / positions);
}

std::uint32_t Strip::first_step_of_row(std::uint32_t r) const noexcept {
  // The smallest t with (t - 1) * rows / steps >= r.
  return static_cast<std::uint32_t>((std::uint64_t{r} * steps + rows - 1) / rows + 1);
}

std::uint32_t Strip::first_position_of_col(std::uint32_t c) const noexcept {
  return static_cast<std::uint32_t>((std::uint64_t{c} * positions + cols - 1) / cols);
}

int strip_level_of(double weight) noexcept {
  int level = 0;
  while (level < kStripLevels - 1 && weight >= kStripLevelEdges[level]) ++level;
  return level;
}

int Strip::level(std::uint32_t r, std::uint32_t c) const noexcept {
  const std::size_t i = std::size_t{r} * cols + c;
  if (evicted[i] != 0) return kStripLevels;
  if (peak[i] < 0.0F) return -1;
  return strip_level_of(static_cast<double>(peak[i]));
}

std::size_t Strip::held_cells() const noexcept {
  return static_cast<std::size_t>(std::count_if(peak.begin(), peak.end(), [](float v) { return v >= 0.0F; }));
}

std::size_t Strip::evicted_cells() const noexcept {
  return static_cast<std::size_t>(std::count(evicted.begin(), evicted.end(), std::uint8_t{1}));
}

namespace {

std::string join_budgets(const std::vector<std::int64_t>& budgets, std::string_view sep = ",") {
  std::string out;
  for (const std::int64_t b : budgets) out += (out.empty() ? "" : std::string(sep)) + std::to_string(b);
  return out;
}

std::string command_of(const ReportRequest& request, const ReportData& data,
                       const EvaluateOptions& options, bool all_policies) {
  std::string cmd = "kvevict report";
  if (options.trace != "decode-4096") cmd += " --trace " + options.trace;
  if (options.steps) cmd += fmt::format(" --steps {}", *options.steps);
  if (!all_policies) {
    std::string names;
    for (const std::string& p : data.policies) names += (names.empty() ? "" : ",") + p;
    cmd += " --policies " + names;
  }
  const std::vector<std::int64_t> canonical(std::begin(kCanonicalBudgets), std::end(kCanonicalBudgets));
  if (data.budgets != canonical) cmd += " --budgets " + join_budgets(data.budgets);
  for (const auto& [key, value] : request.compare.overrides) cmd += fmt::format(" --set {}={}", key, value);
  if (data.strip_budget != data.budgets.front()) cmd += fmt::format(" --strip-budget {}", data.strip_budget);
  return cmd + " --out report.html";
}

}  // namespace

ReportData build_report(const ReportRequest& request, const EvaluateOptions& options) {
  ReportData data;
  CompareRequest cmp = request.compare;
  if (cmp.policies.empty()) {
    data.policies = policy_names(kSignalAttention);  // a trace has attention only
  } else {
    for (const std::string& name : cmp.policies) {
      const std::string canonical = find_policy(name).name;
      if (std::find(data.policies.begin(), data.policies.end(), canonical) == data.policies.end()) {
        data.policies.push_back(canonical);
      }
    }
  }
  cmp.policies = data.policies;
  if (cmp.budgets.empty()) throw ParameterError("report: the budget list is empty");
  data.budgets = cmp.budgets;
  std::sort(data.budgets.begin(), data.budgets.end());
  data.budgets.erase(std::unique(data.budgets.begin(), data.budgets.end()), data.budgets.end());
  data.ranking_budget = ranking_budget(data.budgets);
  data.strip_budget = request.strip_budget.value_or(data.budgets.front());
  if (std::find(data.budgets.begin(), data.budgets.end(), data.strip_budget) == data.budgets.end()) {
    throw ParameterError(fmt::format("report: the strip budget {} is not one of the budgets ({})",
                                     data.strip_budget, join_budgets(data.budgets, ", ")));
  }
  if (request.strip_rows < 1 || request.strip_cols < 1 || request.mass_points < 1) {
    throw ParameterError("report: strip rows, strip columns and mass points must be at least 1");
  }

  std::vector<RunSpec> specs = compare_specs(cmp);
  const std::size_t compared = specs.size();
  const bool add_baseline =
      std::find(data.policies.begin(), data.policies.end(), "sliding-window") == data.policies.end();
  if (add_baseline) specs.push_back({"sliding-window", {}, data.strip_budget});

  // The trace's shape, to size the strips before the pass (evaluate opens
  // it again; a generated trace or an .npy header is cheap to open).
  {
    const std::vector<std::unique_ptr<Trace>> heads = open_trace_heads(options.trace);
    data.trace = options.trace;
    data.heads = heads.size();
    data.steps = options.steps ? checked_steps(*heads.front(), *options.steps) : heads.front()->steps();
  }
  if (data.steps < 1) throw InputError(fmt::format("trace {} has no decode steps", options.trace));

  // Observed runs: every policy at the strip budget, then the baseline.
  std::vector<int> slot_of(specs.size(), -1);
  std::vector<std::string> observed;
  for (const std::string& name : data.policies) {
    for (std::size_t i = 0; i < compared; ++i) {
      if (specs[i].policy == name && specs[i].budget == data.strip_budget) {
        slot_of[i] = static_cast<int>(observed.size());
        observed.push_back(name);
      }
    }
  }
  if (add_baseline) {
    slot_of.back() = static_cast<int>(observed.size());
    observed.push_back("sliding-window");
  }

  const std::uint32_t bucket = (data.steps + request.mass_points - 1) / request.mass_points;
  const std::uint32_t points = (data.steps + bucket - 1) / bucket;
  std::vector<std::vector<double>> mass_sum(observed.size(), std::vector<double>(points, 0.0));

  std::vector<Strip> strips(data.policies.size());
  std::vector<std::vector<Position>> previous(data.policies.size(), std::vector<Position>{0});
  for (std::size_t k = 0; k < strips.size(); ++k) {
    Strip& s = strips[k];
    s.policy = observed[k];
    s.budget = data.strip_budget;
    s.steps = data.steps;
    s.positions = data.steps + 1;
    s.rows = std::min(data.steps, request.strip_rows);
    s.cols = std::min(s.positions, request.strip_cols);
    s.peak.assign(std::size_t{s.rows} * s.cols, -1.0F);
    s.evicted.assign(std::size_t{s.rows} * s.cols, 0);
  }

  EvaluateOptions opts = options;
  opts.observe = [&](const StepView& view) {
    if (options.observe) options.observe(view);
    const int slot = slot_of[view.run];
    if (slot < 0) return;
    const auto k = static_cast<std::size_t>(slot);
    mass_sum[k][(view.step - 1) / bucket] += view.retained;
    if (view.head != 0 || k >= strips.size()) return;
    Strip& s = strips[k];
    const std::size_t row = std::size_t{s.row_of_step(view.step)} * s.cols;
    // What the harness measured at this step: the held set before the policy
    // acted, i.e. the held set after the previous step.
    for (const Position p : previous[k]) {
      float& cell = s.peak[row + s.col_of_position(p)];
      cell = std::max(cell, view.weights[p]);
    }
    for (const Position v : view.victims) s.evicted[row + s.col_of_position(v)] = 1;
    previous[k].assign(view.kept.begin(), view.kept.end());
  };
  std::vector<RunRow> rows = evaluate(specs, opts);
  rows.resize(compared);  // the baseline run is not a row of the comparison
  rank_compare_rows(rows, data.budgets);
  data.rows = std::move(rows);

  for (std::size_t k = 0; k < observed.size(); ++k) {
    MassSeries series;
    series.policy = observed[k];
    series.baseline = add_baseline && k + 1 == observed.size();
    for (std::uint32_t i = 0; i < points; ++i) {
      const std::uint32_t first = i * bucket + 1;
      const std::uint32_t last = std::min(first + bucket - 1, data.steps);
      const double n = static_cast<double>(last - first + 1) * static_cast<double>(data.heads);
      series.step.push_back((first + last) / 2.0);
      series.mass.push_back(mass_sum[k][i] / n);
    }
    data.mass.push_back(std::move(series));
  }
  data.strips = std::move(strips);
  const std::vector<std::string> registry = policy_names(kSignalAttention);
  data.command = command_of(request, data, options, data.policies == registry);
  return data;
}

// ---- rendering ----------------------------------------------------------------

namespace {

constexpr const char* kFont =
    "system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif";
constexpr const char* kEvictedColour = "#e4572e";
constexpr const char* kFutureColour = "#ececec";
// Light to dark: the attention a held position receives.
constexpr const char* kLevelColours[kStripLevels] = {"#c6dbef", "#a5c8e4", "#7fb2da", "#5b9bcf",
                                                     "#3a82c0", "#1f66a8", "#0c4a8a", "#08275a"};
constexpr const char* kLevelLabels[kStripLevels - 1] = {"3e-5", "1e-4", "3e-4", "1e-3",
                                                        "3e-3", "1e-2", "3e-2"};

std::string esc(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string colour_of(std::string_view policy) {
  static const std::map<std::string, std::string, std::less<>> known{
      {"scissorhands", "#e69f00"}, {"h2o", "#0072b2"},  {"streaming-llm", "#009e73"},
      {"sliding-window", "#555555"}, {"tova", "#cc79a7"}, {"snapkv", "#d55e00"},
      {"pyramidkv", "#56b4e9"}, {"full", "#222222"}};
  if (const auto it = known.find(policy); it != known.end()) return it->second;
  static const char* extra[] = {"#7f3c8d", "#11a579", "#3969ac", "#f2b701", "#e73f74", "#80ba5a"};
  std::size_t h = 0;
  for (const char c : policy) h = h * 31 + static_cast<unsigned char>(c);
  return extra[h % std::size(extra)];
}

// A compact number for coordinates.
std::string num(double v) {
  std::string s = fmt::format("{:.1f}", v);
  if (s.size() > 2 && s.compare(s.size() - 2, 2, ".0") == 0) s.resize(s.size() - 2);
  if (s == "-0") s = "0";
  return s;
}

struct Rect {
  double x, y, w, h;
};

struct Tick {
  double value;
  std::string label;
};

// Round numbers (1, 2, 5 x 10^k) covering [lo, hi], about `target` of them.
std::vector<Tick> nice_ticks(double lo, double hi, int target) {
  std::vector<Tick> ticks;
  if (!(hi > lo)) {
    ticks.push_back({lo, fmt::format("{:g}", lo)});
    return ticks;
  }
  const double raw = (hi - lo) / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0}) {
    step = m * mag;
    if (step >= raw) break;
  }
  const int decimals = step >= 1.0 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  for (double v = std::ceil(lo / step - 1e-9) * step; v <= hi + step * 1e-9; v += step) {
    const double r = std::round(v / step) * step + 0.0;  // + 0.0: no "-0"
    ticks.push_back({r, fmt::format("{:.{}f}", r, decimals)});
  }
  return ticks;
}

std::string svg_open(const std::string& chart, const std::string& cls, double w, double h,
                     bool standalone, const std::string& title, const std::string& extra = "") {
  std::string out = fmt::format(
      "<svg{} class=\"chart {}\" data-chart=\"{}\" viewBox=\"0 0 {} {}\" width=\"{}\" height=\"{}\" "
      "font-family=\"{}\" font-size=\"13\" fill=\"#222\" role=\"img\"{}>\n<title>{}</title>\n"
      "<rect class=\"background\" x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"#fff\"/>\n",
      standalone ? " xmlns=\"http://www.w3.org/2000/svg\"" : "", cls, chart, num(w), num(h), num(w),
      num(h), kFont, extra, esc(title), num(w), num(h));
  return out;
}

void heading(std::string& out, double x, double y, const std::string& title, const std::string& subtitle) {
  out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"15\" font-weight=\"600\">{}</text>\n", num(x),
                     num(y), esc(title));
  if (!subtitle.empty()) {
    out += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#555\">{}</text>\n", num(x),
                       num(y + 17), esc(subtitle));
  }
}

// Grid, ticks, the frame's left and bottom edges and both axis labels.
// `xmap`/`ymap` map a value to a pixel.
template <typename XMap, typename YMap>
void axes(std::string& out, const Rect& f, const std::vector<Tick>& xt, const std::vector<Tick>& yt,
          XMap xmap, YMap ymap, const std::string& xlabel, const std::string& ylabel, bool grid,
          int tick_font = 12) {
  out += fmt::format("<g class=\"axes\" font-size=\"{}\">\n", tick_font);
  for (const Tick& t : yt) {
    const double y = ymap(t.value);
    if (grid) {
      out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e6e6e6\"/>\n", num(f.x),
                         num(f.x + f.w), num(y), num(y));
    }
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n", num(f.x - 5),
                       num(f.x), num(y), num(y));
    out += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.32em\" text-anchor=\"end\">{}</text>\n",
                       num(f.x - 8), num(y), esc(t.label));
  }
  for (const Tick& t : xt) {
    const double x = xmap(t.value);
    if (grid) {
      out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#e6e6e6\"/>\n", num(x),
                         num(x), num(f.y), num(f.y + f.h));
    }
    out += fmt::format("<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#444\"/>\n", num(x), num(x),
                       num(f.y + f.h), num(f.y + f.h + 5));
    out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", num(x),
                       num(f.y + f.h + 19), esc(t.label));
  }
  out += fmt::format("<path d=\"M{} {}V{}H{}\" fill=\"none\" stroke=\"#444\"/>\n", num(f.x), num(f.y),
                     num(f.y + f.h), num(f.x + f.w));
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
                     num(f.x + f.w / 2), num(f.y + f.h + 40), esc(xlabel));
  out += fmt::format(
      "<text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
      num(f.x - 50), num(f.y + f.h / 2), esc(ylabel));
  out += "</g>\n";
}

struct Line {
  std::string policy;
  std::string label;
  bool dashed = false;
  std::vector<std::pair<double, double>> points;  // data values
  std::vector<std::string> point_titles;          // markers when not empty
};

void legend(std::string& out, double x, double y, const std::vector<Line>& lines) {
  out += "<g class=\"legend\" font-size=\"13\">\n";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const Line& l = lines[i];
    const double ly = y + static_cast<double>(i) * 21;
    out += fmt::format(
        "<g class=\"legend-item\" data-policy=\"{}\"><title>click to hide or show {}</title>"
        "<rect x=\"{}\" y=\"{}\" width=\"150\" height=\"19\" fill=\"#fff\" fill-opacity=\"0\"/>"
        "<line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"{}\" stroke-width=\"3\"{}/>"
        "<text x=\"{}\" y=\"{}\" dy=\"0.32em\">{}</text></g>\n",
        esc(l.policy), esc(l.policy), num(x - 2), num(ly - 9), num(x), num(x + 26), num(ly), num(ly),
        colour_of(l.policy), l.dashed ? " stroke-dasharray=\"6 4\"" : "", num(x + 33), num(ly),
        esc(l.label));
  }
  out += "</g>\n";
}

template <typename XMap, typename YMap>
void draw_lines(std::string& out, const std::vector<Line>& lines, XMap xmap, YMap ymap) {
  out += "<g class=\"data\">\n";
  for (const Line& l : lines) {
    std::string pts;
    for (const auto& [x, y] : l.points) {
      if (!pts.empty()) pts += ' ';
      pts += num(xmap(x));
      pts += ',';
      pts += num(ymap(y));
    }
    out += fmt::format(
        "<polyline class=\"series\" data-policy=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" "
        "stroke-linejoin=\"round\"{} points=\"{}\"/>\n",
        esc(l.policy), colour_of(l.policy), l.dashed ? "2" : "1.8",
        l.dashed ? " stroke-dasharray=\"6 4\"" : "", pts);
    for (std::size_t i = 0; i < l.point_titles.size() && i < l.points.size(); ++i) {
      out += fmt::format(
          "<circle data-policy=\"{}\" cx=\"{}\" cy=\"{}\" r=\"3.5\" fill=\"{}\"><title>{}</title></circle>\n",
          esc(l.policy), num(xmap(l.points[i].first)), num(ymap(l.points[i].second)),
          colour_of(l.policy), esc(l.point_titles[i]));
    }
  }
  out += "</g>\n";
}

// Policies whose values equal an earlier policy's: "pyramidkv" -> "snapkv".
std::map<std::string, std::string> same_as(const std::vector<std::pair<std::string, std::vector<double>>>& values) {
  std::map<std::string, std::string> out;
  for (std::size_t i = 0; i < values.size(); ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (values[i].second == values[j].second && !out.contains(values[j].first)) {
        out[values[i].first] = values[j].first;
        break;
      }
    }
  }
  return out;
}

Chart mass_chart(const ReportData& data, bool standalone) {
  constexpr double W = 1000;
  constexpr double H = 420;
  const Rect f{78, 58, 680, 310};
  const double x0 = 0;
  const double x1 = data.steps;
  double lo = 1.0;
  for (const MassSeries& s : data.mass) {
    for (const double m : s.mass) lo = std::min(lo, m);
  }
  lo = std::max(0.0, std::floor(lo * 10 - 1e-9) / 10);
  const double hi = 1.0;
  auto xmap = [&](double v) { return f.x + (v - x0) / (x1 - x0 > 0 ? x1 - x0 : 1) * f.w; };
  auto ymap = [&](double v) { return f.y + f.h - (v - lo) / (hi - lo) * f.h; };

  std::vector<std::pair<std::string, std::vector<double>>> values;
  for (const MassSeries& s : data.mass) values.emplace_back(s.policy, s.mass);
  const auto same = same_as(values);
  std::vector<Line> lines;
  for (const MassSeries& s : data.mass) {
    Line l;
    l.policy = s.policy;
    l.dashed = s.policy == "sliding-window";
    l.label = s.policy + (l.dashed ? " (baseline)" : "");
    if (const auto it = same.find(s.policy); it != same.end()) l.label += " = " + it->second;
    for (std::size_t i = 0; i < s.step.size(); ++i) l.points.emplace_back(s.step[i], s.mass[i]);
    if (l.points.size() == 1) l.point_titles.push_back(fmt::format("{}: {:.6f}", s.policy, s.mass.front()));
    lines.push_back(std::move(l));
  }
  // Dashed baseline first, so the policies draw over it.
  std::stable_partition(lines.begin(), lines.end(), [](const Line& l) { return l.dashed; });

  const std::uint32_t bucket = data.mass.empty() || data.mass.front().step.size() < 2
                                   ? data.steps
                                   : (data.steps + static_cast<std::uint32_t>(data.mass.front().step.size()) - 1) /
                                         static_cast<std::uint32_t>(data.mass.front().step.size());
  Chart c;
  c.name = "mass-over-time";
  c.title = fmt::format("Retained attention mass over the decode, budget {}", data.strip_budget);
  c.svg = svg_open(c.name, "line-chart", W, H, standalone, c.title,
                   fmt::format(" data-px=\"{}\" data-py=\"{}\" data-pw=\"{}\" data-ph=\"{}\" data-x0=\"{}\" "
                               "data-x1=\"{}\"",
                               num(f.x), num(f.y), num(f.w), num(f.h), num(x0), num(x1)));
  heading(c.svg, 14, 22, c.title,
          fmt::format("{} · share of each step's attention on held positions · each point the mean of {} "
                      "step{}",
                      data.trace, bucket, bucket == 1 ? "" : "s"));
  axes(c.svg, f, nice_ticks(x0, x1, 8), nice_ticks(lo, hi, 6), xmap, ymap, "decode step",
       "retained attention mass (share, 0–1)", true);
  draw_lines(c.svg, lines, xmap, ymap);
  c.svg += fmt::format(
      "<line class=\"cursor\" x1=\"0\" x2=\"0\" y1=\"{}\" y2=\"{}\" stroke=\"#888\" stroke-dasharray=\"3 3\" "
      "visibility=\"hidden\"/>\n",
      num(f.y), num(f.y + f.h));
  legend(c.svg, f.x + f.w + 24, f.y + 8, lines);
  c.svg += "</svg>\n";
  return c;
}

Chart budget_chart(const ReportData& data, bool standalone, bool recall) {
  constexpr double W = 600;
  constexpr double H = 420;
  const Rect f{78, 58, 320, 290};
  const double b0 = std::log2(static_cast<double>(data.budgets.front()));
  const double b1 = std::log2(static_cast<double>(data.budgets.back()));
  const double pad = b1 > b0 ? (b1 - b0) * 0.08 : 1.0;
  const double x0 = b0 - pad;
  const double x1 = b1 + pad;
  double lo = 1.0;
  double hi = 0.0;
  auto value_of = [&](const RunRow& r) {
    return recall ? r.metrics.heavy_hitter_recall : r.metrics.retained_attention_mass;
  };
  for (const RunRow& r : data.rows) {
    lo = std::min(lo, value_of(r));
    hi = std::max(hi, value_of(r));
  }
  const double span = std::max(hi - lo, 0.02);
  lo = std::max(0.0, lo - span * 0.08);
  hi = std::min(1.0, hi + span * 0.08);
  if (hi <= lo) hi = lo + 0.01;
  auto xmap = [&](double v) { return f.x + (v - x0) / (x1 - x0) * f.w; };
  auto ymap = [&](double v) { return f.y + f.h - (v - lo) / (hi - lo) * f.h; };

  std::vector<Line> lines;
  std::vector<std::pair<std::string, std::vector<double>>> values;
  for (const std::string& policy : data.policies) {
    Line l;
    l.policy = policy;
    l.dashed = policy == "sliding-window";
    l.label = policy;
    std::vector<double> v;
    for (const std::int64_t b : data.budgets) {
      for (const RunRow& r : data.rows) {
        if (r.policy != policy || r.budget != b) continue;
        l.points.emplace_back(std::log2(static_cast<double>(b)), value_of(r));
        l.point_titles.push_back(fmt::format("{} at budget {}: {:.6f}", policy, b, value_of(r)));
        v.push_back(value_of(r));
      }
    }
    values.emplace_back(policy, v);
    lines.push_back(std::move(l));
  }
  const auto same = same_as(values);
  for (Line& l : lines) {
    if (const auto it = same.find(l.policy); it != same.end()) l.label += " = " + it->second;
  }
  std::stable_partition(lines.begin(), lines.end(), [](const Line& l) { return l.dashed; });

  std::vector<Tick> xt;
  for (const std::int64_t b : data.budgets) xt.push_back({std::log2(static_cast<double>(b)), std::to_string(b)});
  Chart c;
  c.name = recall ? "recall-vs-budget" : "retained-mass-vs-budget";
  c.title = recall ? "Heavy-hitter recall against the budget" : "Retained attention mass against the budget";
  c.svg = svg_open(c.name, "line-chart", W, H, standalone, c.title);
  heading(c.svg, 14, 22, c.title,
          recall ? fmt::format("{} · share of each step's top 32 positions held, pooled", data.trace)
                 : fmt::format("{} · mean share of each step's attention on held positions", data.trace));
  axes(c.svg, f, xt, nice_ticks(lo, hi, 6), xmap, ymap, "budget (positions held, log scale)",
       recall ? "heavy-hitter recall (share, 0–1)" : "retained attention mass (share, 0–1)", true);
  draw_lines(c.svg, lines, xmap, ymap);
  legend(c.svg, f.x + f.w + 22, f.y + 8, lines);
  c.svg += "</svg>\n";
  return c;
}

Chart strip_chart(const ReportData& data, const Strip& s, bool standalone) {
  constexpr double W = 450;
  constexpr double H = 540;
  const Rect f{72, 58, 360, 360};
  auto xmap = [&](double p) { return f.x + p / s.positions * f.w; };
  auto ymap = [&](double t) { return f.y + (t - 1) / s.steps * f.h; };

  Chart c;
  c.name = fmt::format("strip-{}-{}", s.policy, s.budget);
  c.title = fmt::format("{} at budget {}: what is held at each step", s.policy, s.budget);
  c.svg = svg_open(c.name, "strip", W, H, standalone, c.title,
                   fmt::format(" data-policy=\"{}\" data-steps=\"{}\" data-positions=\"{}\" data-rows=\"{}\" "
                               "data-cols=\"{}\" data-px=\"{}\" data-py=\"{}\" data-pw=\"{}\" data-ph=\"{}\"",
                               esc(s.policy), s.steps, s.positions, s.rows, s.cols, num(f.x), num(f.y),
                               num(f.w), num(f.h)));
  const double steps_per_row = static_cast<double>(s.steps) / s.rows;
  const double positions_per_col = static_cast<double>(s.positions) / s.cols;
  heading(c.svg, 14, 22, fmt::format("{} · budget {}", s.policy, s.budget),
          fmt::format("{}{} · each cell ≈ {:.3g} steps × {:.3g} positions", data.trace,
                      data.heads > 1 ? " (head 0)" : "", steps_per_row, positions_per_col));
  // Not generated yet (position > step), and the plot's white background.
  c.svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"#fff\" stroke=\"#bbb\"/>\n",
                       num(f.x), num(f.y), num(f.w), num(f.h));
  c.svg += fmt::format("<path d=\"M{} {}L{} {}L{} {}Z\" fill=\"{}\"/>\n", num(xmap(1)), num(f.y),
                       num(f.x + f.w), num(f.y), num(f.x + f.w), num(f.y + f.h), kFutureColour);

  // One path per shade: a horizontal stroke per run of equal cells in a row.
  std::vector<std::string> paths(kStripLevels + 1);
  for (std::uint32_t r = 0; r < s.rows; ++r) {
    std::uint32_t c0 = 0;
    while (c0 < s.cols) {
      const int lv = s.level(r, c0);
      std::uint32_t c1 = c0 + 1;
      while (c1 < s.cols && s.level(r, c1) == lv) ++c1;
      if (lv >= 0) {
        fmt::format_to(std::back_inserter(paths[static_cast<std::size_t>(lv)]), "M{} {}.5h{}", c0, r, c1 - c0);
      }
      c0 = c1;
    }
  }
  c.svg += fmt::format(
      "<g class=\"data\" transform=\"translate({} {}) scale({} {})\" fill=\"none\" stroke-width=\"1\" "
      "shape-rendering=\"crispEdges\">\n",
      num(f.x), num(f.y), fmt::format("{:.6g}", f.w / s.cols), fmt::format("{:.6g}", f.h / s.rows));
  for (int lv = 0; lv <= kStripLevels; ++lv) {
    const std::string& d = paths[static_cast<std::size_t>(lv)];
    if (d.empty()) continue;
    c.svg += fmt::format("<path class=\"{}\" stroke=\"{}\" d=\"{}\"/>\n",
                         lv == kStripLevels ? "evicted" : fmt::format("level{}", lv),
                         lv == kStripLevels ? kEvictedColour : kLevelColours[lv], d);
  }
  c.svg += "</g>\n";
  axes(c.svg, f, nice_ticks(0, s.positions, 5), nice_ticks(1, s.steps, 8),
       [&](double p) { return xmap(p); }, [&](double t) { return ymap(t); }, "position (token index)",
       "decode step (time runs down)", false, 13);

  // The key: shades, then the marks.
  const double ky = f.y + f.h + 62;
  c.svg += "<g class=\"key\" font-size=\"12\">\n";
  c.svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"13\">attention a held position received (largest in cell)</text>\n",
                       num(f.x - 50), num(ky - 6));
  constexpr double sw = 40;
  for (int lv = 0; lv < kStripLevels; ++lv) {
    c.svg += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"12\" fill=\"{}\"/>\n",
                         num(f.x - 50 + lv * sw), num(ky), num(sw), kLevelColours[lv]);
    if (lv > 0) {
      c.svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                           num(f.x - 50 + lv * sw), num(ky + 25), kLevelLabels[lv - 1]);
    }
  }
  const double my = ky + 34;
  const double mx = f.x - 50;
  c.svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">evicted at these steps</text>\n",
      num(mx), num(my), kEvictedColour, num(mx + 19), num(my + 10));
  c.svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"#fff\" stroke=\"#999\"/><text x=\"{}\" y=\"{}\">not held</text>\n",
      num(mx + 165), num(my), num(mx + 184), num(my + 10));
  c.svg += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"14\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">not generated yet</text>\n",
      num(mx + 255), num(my), kFutureColour, num(mx + 274), num(my + 10));
  c.svg += "</g>\n</svg>\n";
  return c;
}

}  // namespace

namespace {

// Accuracy to colour: red (0) through yellow to green (1).
std::string accuracy_colour(double a) {
  const double t = std::clamp(a, 0.0, 1.0);
  const auto mix = [](double x, double y, double u) { return static_cast<int>(std::lround(x + (y - x) * u)); };
  int r = 0, g = 0, b = 0;
  if (t < 0.5) {
    r = mix(215, 254, t * 2);
    g = mix(48, 224, t * 2);
    b = mix(39, 139, t * 2);
  } else {
    r = mix(254, 26, (t - 0.5) * 2);
    g = mix(224, 152, (t - 0.5) * 2);
    b = mix(139, 80, (t - 0.5) * 2);
  }
  return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
}

std::string task_label(const TaskRow& r) {
  return r.policy.empty() ? std::string("full cache")
                          : fmt::format("{} · {} · budget {}", r.policy, moment_name(r.moment), r.budget);
}

Chart heatmap_chart(const std::vector<const TaskRow*>& rows, const std::vector<std::uint32_t>& lengths,
                    const std::vector<double>& depths, bool standalone) {
  const TaskRow& first = *rows.front();
  const double cell_w = 70, cell_h = 34;
  const Rect f{92, 64, cell_w * static_cast<double>(lengths.size()), cell_h * static_cast<double>(depths.size())};
  const double W = std::max(f.x + f.w + 30, 400.0), H = f.y + f.h + 64;
  Chart c;
  c.name = first.policy.empty() ? "needles-full"
                                : fmt::format("needles-{}-{}-{}", first.policy, moment_name(first.moment), first.budget);
  c.title = "Needle accuracy: " + task_label(first);
  c.svg = svg_open(c.name, "heatmap", W, H, standalone, c.title);
  heading(c.svg, 14, 22, task_label(first), "exact match by needle depth and sample length");
  c.svg += "<g class=\"data\" font-size=\"12\">\n";
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    for (std::size_t j = 0; j < depths.size(); ++j) {
      std::uint64_t correct = 0, n = 0;  // summed over rows: 64 bits cannot wrap
      for (const TaskRow* r : rows) {
        if (r->length == lengths[i] && r->depth == depths[j]) {
          correct += r->correct;
          n += r->samples;
        }
      }
      const double x = f.x + cell_w * static_cast<double>(i), y = f.y + cell_h * static_cast<double>(j);
      if (n == 0) continue;
      const double a = static_cast<double>(correct) / static_cast<double>(n);
      c.svg += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#fff\"><title>length {}, "
          "depth {:.0f} %: {} of {} correct</title></rect>\n<text x=\"{}\" y=\"{}\" dy=\"0.32em\" "
          "text-anchor=\"middle\">{:.2f}</text>\n",
          num(x), num(y), num(cell_w), num(cell_h), accuracy_colour(a), lengths[i], depths[j] * 100, correct, n,
          num(x + cell_w / 2), num(y + cell_h / 2), a);
    }
  }
  c.svg += "</g>\n<g class=\"axes\" font-size=\"12\">\n";
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    c.svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                         num(f.x + cell_w * (static_cast<double>(i) + 0.5)), num(f.y + f.h + 18), lengths[i]);
  }
  for (std::size_t j = 0; j < depths.size(); ++j) {
    c.svg += fmt::format("<text x=\"{}\" y=\"{}\" dy=\"0.32em\" text-anchor=\"end\">{:.0f} %</text>\n",
                         num(f.x - 8), num(f.y + cell_h * (static_cast<double>(j) + 0.5)), depths[j] * 100);
  }
  c.svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" font-size=\"13\">sample length (bytes)</text>\n",
                       num(f.x + f.w / 2), num(f.y + f.h + 40));
  c.svg += fmt::format(
      "<text transform=\"translate({} {}) rotate(-90)\" text-anchor=\"middle\" font-size=\"13\">needle depth</text>\n",
      num(f.x - 62), num(f.y + f.h / 2));
  c.svg += "</g>\n</svg>\n";
  return c;
}

Chart task_budget_chart(const std::vector<TaskRow>& rows, Moment moment, bool standalone) {
  constexpr double W = 600;
  constexpr double H = 420;
  const Rect f{78, 58, 320, 290};
  std::vector<std::int64_t> budgets;
  std::vector<std::string> policies;
  std::uint64_t full_correct = 0, full_n = 0;  // summed over rows: 64 bits cannot wrap
  for (const TaskRow& r : rows) {
    if (r.policy.empty()) {
      full_correct += r.correct;
      full_n += r.samples;
      continue;
    }
    if (r.moment != moment) continue;
    if (std::find(budgets.begin(), budgets.end(), r.budget) == budgets.end()) budgets.push_back(r.budget);
    if (std::find(policies.begin(), policies.end(), r.policy) == policies.end()) policies.push_back(r.policy);
  }
  std::sort(budgets.begin(), budgets.end());
  const double b0 = std::log2(static_cast<double>(budgets.front()));
  const double b1 = std::log2(static_cast<double>(budgets.back()));
  const double pad = b1 > b0 ? (b1 - b0) * 0.08 : 1.0;
  const double x0 = b0 - pad, x1 = b1 + pad;
  auto xmap = [&](double v) { return f.x + (v - x0) / (x1 - x0) * f.w; };
  auto ymap = [&](double v) { return f.y + f.h - v * f.h; };
  std::vector<Line> lines;
  if (full_n > 0) {
    const double a = static_cast<double>(full_correct) / static_cast<double>(full_n);
    Line l;
    l.policy = "full";
    l.label = "full cache";
    l.dashed = true;
    l.points = {{x0, a}, {x1, a}};
    lines.push_back(std::move(l));
  }
  for (const std::string& policy : policies) {
    Line l;
    l.policy = policy;
    l.label = policy;
    for (const std::int64_t b : budgets) {
      std::uint64_t correct = 0, n = 0;
      for (const TaskRow& r : rows) {
        if (r.policy == policy && r.budget == b && r.moment == moment) {
          correct += r.correct;
          n += r.samples;
        }
      }
      if (n == 0) continue;
      const double a = static_cast<double>(correct) / static_cast<double>(n);
      const auto [lo, hi] = wilson_interval(correct, n);
      l.points.emplace_back(std::log2(static_cast<double>(b)), a);
      l.point_titles.push_back(
          fmt::format("{} at budget {}: {} of {} correct ({:.2f}, 95 % {:.2f} … {:.2f})", policy, b, correct, n, a, lo, hi));
    }
    lines.push_back(std::move(l));
  }
  std::vector<Tick> xt;
  for (const std::int64_t b : budgets) xt.push_back({std::log2(static_cast<double>(b)), std::to_string(b)});
  Chart c;
  c.name = fmt::format("task-accuracy-vs-budget-{}", moment_name(moment));
  c.title = fmt::format("Task accuracy against the budget ({})", moment_name(moment));
  c.svg = svg_open(c.name, "line-chart", W, H, standalone, c.title);
  heading(c.svg, 14, 22, c.title, "exact match, pooled over tasks, lengths and depths");
  axes(c.svg, f, xt, nice_ticks(0.0, 1.0, 5), xmap, ymap, "budget (positions per cache, log scale)",
       "accuracy (exact match, 0–1)", true);
  draw_lines(c.svg, lines, xmap, ymap);
  legend(c.svg, f.x + f.w + 22, f.y + 8, lines);
  c.svg += "</svg>\n";
  return c;
}

}  // namespace

std::vector<Chart> render_task_charts(const std::vector<TaskRow>& rows, bool standalone) {
  std::vector<Chart> charts;
  if (rows.empty()) return charts;
  std::vector<std::uint32_t> lengths;
  std::vector<double> depths;
  std::vector<std::int64_t> budgets;
  std::vector<Moment> moments;
  for (const TaskRow& r : rows) {
    if (std::find(lengths.begin(), lengths.end(), r.length) == lengths.end()) lengths.push_back(r.length);
    if (std::find(depths.begin(), depths.end(), r.depth) == depths.end()) depths.push_back(r.depth);
    if (r.policy.empty()) continue;
    if (std::find(budgets.begin(), budgets.end(), r.budget) == budgets.end()) budgets.push_back(r.budget);
    if (std::find(moments.begin(), moments.end(), r.moment) == moments.end()) moments.push_back(r.moment);
  }
  std::sort(lengths.begin(), lengths.end());
  std::sort(depths.begin(), depths.end());
  std::sort(moments.begin(), moments.end());
  // The heatmaps: the full cache, then each policy x moment at the smallest budget.
  std::vector<std::vector<const TaskRow*>> maps(1);
  for (const TaskRow& r : rows) {
    if (r.policy.empty()) maps.front().push_back(&r);
  }
  const std::int64_t smallest = budgets.empty() ? 0 : *std::min_element(budgets.begin(), budgets.end());
  for (const TaskRow& r : rows) {
    if (r.policy.empty() || r.budget != smallest) continue;
    auto it = std::find_if(maps.begin() + 1, maps.end(), [&](const auto& m) {
      return m.front()->policy == r.policy && m.front()->moment == r.moment;
    });
    if (it == maps.end()) {
      maps.emplace_back();
      it = maps.end() - 1;
    }
    it->push_back(&r);
  }
  for (const auto& m : maps) {
    if (!m.empty()) charts.push_back(heatmap_chart(m, lengths, depths, standalone));
  }
  if (!budgets.empty()) {
    for (const Moment moment : moments) charts.push_back(task_budget_chart(rows, moment, standalone));
  }
  return charts;
}

Chart render_line_chart(const LineChartRequest& request, bool standalone) {
  constexpr double W = 1040;
  // Tall enough for the legend: one 21-pixel row a series beside the frame.
  const double H = std::max(440.0, 58 + 8 + 21.0 * static_cast<double>(request.series.size()) + 12);
  const Rect f{78, 58, 620, 320};
  double x0 = 0, x1 = 1, lo = 0, hi = 1;
  bool any = false;
  for (const ChartSeries& s : request.series) {
    for (const auto& [x, y] : s.points) {
      if (!any) {
        x1 = x;
        lo = hi = y;
        any = true;
      }
      x1 = std::max(x1, x);
      lo = std::min(lo, y);
      hi = std::max(hi, y);
    }
  }
  if (request.marker_x) x1 = std::max(x1, *request.marker_x);
  const double pad = hi > lo ? (hi - lo) * 0.05 : 0.5;
  lo -= pad;
  hi += pad;
  auto xmap = [&](double v) { return f.x + (v - x0) / (x1 > x0 ? x1 - x0 : 1) * f.w; };
  auto ymap = [&](double v) { return f.y + f.h - (v - lo) / (hi - lo) * f.h; };
  std::vector<Line> lines;
  for (const ChartSeries& s : request.series) {
    Line l;
    l.policy = s.key;
    l.label = s.label;
    l.dashed = s.dashed;
    l.points = s.points;
    lines.push_back(std::move(l));
  }
  Chart c;
  c.name = request.name;
  c.title = request.title;
  c.svg = svg_open(c.name, "line-chart", W, H, standalone, c.title);
  heading(c.svg, 14, 22, c.title, request.subtitle);
  std::vector<Tick> yt = nice_ticks(lo, hi, 6);
  std::erase_if(yt, [&](const Tick& t) { return t.value < lo || t.value > hi; });
  axes(c.svg, f, nice_ticks(x0, x1, 8), yt, xmap, ymap, request.x_label, request.y_label, true);
  if (request.marker_x) {
    const double x = xmap(*request.marker_x);
    c.svg += fmt::format(
        "<g class=\"marker\"><line x1=\"{}\" x2=\"{}\" y1=\"{}\" y2=\"{}\" stroke=\"#888\" "
        "stroke-dasharray=\"4 3\"/><text x=\"{}\" y=\"{}\" font-size=\"12\" fill=\"#555\">{}</text></g>\n",
        num(x), num(x), num(f.y), num(f.y + f.h), num(x + 4), num(f.y + 12), esc(request.marker_label));
  }
  draw_lines(c.svg, lines, xmap, ymap);
  legend(c.svg, f.x + f.w + 24, f.y + 8, lines);
  c.svg += "</svg>\n";
  return c;
}

std::vector<Chart> render_charts(const ReportData& data, bool standalone) {
  std::vector<Chart> charts;
  charts.push_back(mass_chart(data, standalone));
  for (const Strip& s : data.strips) charts.push_back(strip_chart(data, s, standalone));
  charts.push_back(budget_chart(data, standalone, false));
  charts.push_back(budget_chart(data, standalone, true));
  return charts;
}

namespace {

constexpr const char* kStyle = R"(
*{box-sizing:border-box}
body{margin:0;background:#f4f5f7;color:#1d1d1f;font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1380px;margin:0 auto;padding:18px 24px 40px}
h1{font-size:25px;margin:6px 0 2px}
h2{font-size:19px;margin:0 0 6px}
.sub{color:#555;margin:0 0 10px}
section{background:#fff;border:1px solid #dcdfe4;border-radius:8px;padding:14px 18px 16px;margin:16px 0}
.note{background:#fff7df;border-left:4px solid #e0a800;padding:8px 12px;margin:10px 0;border-radius:0 6px 6px 0}
code{background:#f0f1f3;padding:1px 5px;border-radius:4px;font-size:13px}
table{border-collapse:collapse;font-variant-numeric:tabular-nums;font-size:14px}
th,td{padding:3px 12px;border-bottom:1px solid #eceef1;text-align:right;white-space:nowrap}
th{background:#f6f7f9;font-weight:600}
td.policy,th.policy{text-align:left}
tr.first td{border-top:1px solid #c9ccd1}
.swatch{display:inline-block;width:11px;height:11px;border-radius:2px;margin-right:7px;vertical-align:-1px}
svg.chart{display:block;max-width:100%;height:auto}
.legend-item{cursor:pointer}
.off{opacity:.12}
.grid{display:grid;gap:14px}
.strips{grid-template-columns:repeat(auto-fill,minmax(400px,1fr))}
.pair{grid-template-columns:repeat(auto-fit,minmax(480px,1fr))}
.readout{font-size:13px;color:#333;min-height:1.6em;margin:4px 0 0;font-variant-numeric:tabular-nums}
.caption{color:#444;font-size:14px;max-width:1100px}
ul{margin:4px 0 4px 0;padding-left:22px}
)";

constexpr const char* kHeadScript =
    "window.kvevictErrors=[];window.onerror=function(m){window.kvevictErrors.push(String(m));"
    "if(document.body){document.body.setAttribute('data-ready','error');}};";

constexpr const char* kScript = R"JS((function(){
var body=document.body;
function point(svg,e){var p=svg.createSVGPoint();p.x=e.clientX;p.y=e.clientY;return p.matrixTransform(svg.getScreenCTM().inverse());}
function num(svg,k){return parseFloat(svg.getAttribute('data-'+k));}
try{
  // Legend: click a policy to hide or show it in every line chart.
  var items=document.querySelectorAll('.legend-item[data-policy]');
  for(var i=0;i<items.length;i++){items[i].addEventListener('click',function(){
    var p=this.getAttribute('data-policy');var off=!this.classList.contains('off');
    var els=document.querySelectorAll('.line-chart [data-policy="'+p+'"]');
    for(var j=0;j<els.length;j++){els[j].classList.toggle('off',off);}
  });}
  // Mass over time: the values under the pointer.
  var data=JSON.parse(document.getElementById('mass-data').textContent);
  var mass=document.querySelector('svg[data-chart="mass-over-time"]');
  var out=document.getElementById('mass-readout');var cursor=mass.querySelector('.cursor');
  mass.addEventListener('mousemove',function(e){
    var q=point(mass,e);var px=num(mass,'px'),pw=num(mass,'pw');
    if(q.x<px||q.x>px+pw||data.step.length===0){cursor.setAttribute('visibility','hidden');return;}
    var s=num(mass,'x0')+(q.x-px)/pw*(num(mass,'x1')-num(mass,'x0'));
    var k=0;for(var i=1;i<data.step.length;i++){if(Math.abs(data.step[i]-s)<Math.abs(data.step[k]-s)){k=i;}}
    var x=px+(data.step[k]-num(mass,'x0'))/(num(mass,'x1')-num(mass,'x0'))*pw;
    cursor.setAttribute('x1',x);cursor.setAttribute('x2',x);cursor.setAttribute('visibility','visible');
    var rows=data.series.map(function(r){return [r.policy,r.mass[k]];}).sort(function(a,b){return b[1]-a[1];});
    out.textContent='around step '+Math.round(data.step[k])+': '+rows.map(function(r){return r[0]+' '+r[1].toFixed(3);}).join(' · ');
  });
  mass.addEventListener('mouseleave',function(){cursor.setAttribute('visibility','hidden');});
  // Strips: which steps and positions the cell under the pointer covers.
  var strips=document.querySelectorAll('svg.strip');var sout=document.getElementById('strip-readout');
  for(var n=0;n<strips.length;n++){(function(svg){svg.addEventListener('mousemove',function(e){
    var q=point(svg,e);var px=num(svg,'px'),py=num(svg,'py'),pw=num(svg,'pw'),ph=num(svg,'ph');
    if(q.x<px||q.x>=px+pw||q.y<py||q.y>=py+ph){return;}
    var rows=num(svg,'rows'),cols=num(svg,'cols'),steps=num(svg,'steps'),pos=num(svg,'positions');
    var r=Math.floor((q.y-py)/ph*rows),c=Math.floor((q.x-px)/pw*cols);
    var t0=Math.ceil(r*steps/rows)+1,t1=Math.ceil((r+1)*steps/rows);
    var p0=Math.ceil(c*pos/cols),p1=Math.ceil((c+1)*pos/cols)-1;
    sout.textContent=svg.getAttribute('data-policy')+': steps '+t0+'–'+t1+', positions '+p0+'–'+p1;
  });})(strips[n]);}
  // Every chart drew something.
  var charts=document.querySelectorAll('svg.chart');var drawn=0;
  for(var c=0;c<charts.length;c++){var g=charts[c].querySelector('.data');var b=g?g.getBBox():null;
    var ok=b!==null&&(b.width>0||b.height>0);charts[c].setAttribute('data-rendered',ok?'yes':'no');if(ok){drawn++;}}
  body.setAttribute('data-charts',String(charts.length));
  body.setAttribute('data-rendered-charts',String(drawn));
  body.setAttribute('data-ready',window.kvevictErrors.length===0?'ok':'error');
}catch(err){window.kvevictErrors.push(String(err));body.setAttribute('data-ready','error');body.setAttribute('data-error',String(err));}
})();
)JS";

std::string fixed6(double v) { return fmt::format("{:.6f}", v); }

std::string metrics_table(const ReportData& data) {
  std::string out =
      "<table class=\"metrics\">\n<thead><tr><th>rank</th><th class=\"policy\">policy</th><th>budget</th>"
      "<th>retained mass</th><th>heavy-hitter recall</th><th>eviction calls</th><th>evicted</th>"
      "<th>memory bytes</th></tr></thead>\n<tbody>\n";
  std::string previous;
  for (const RunRow& r : data.rows) {
    const bool first = r.policy != previous;
    previous = r.policy;
    out += fmt::format(
        "<tr{} data-policy=\"{}\"><td>{}</td><td class=\"policy\"><span class=\"swatch\" style=\"background:{}\"></span>{}</td>"
        "<td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
        first ? " class=\"first\"" : "", esc(r.policy), first ? std::to_string(r.rank) : "",
        colour_of(r.policy), esc(r.policy), r.budget, fixed6(r.metrics.retained_attention_mass),
        fixed6(r.metrics.heavy_hitter_recall), r.metrics.eviction_calls, r.totals.evicted, r.memory_bytes);
  }
  out += "</tbody>\n</table>\n";
  return out;
}

std::string mass_json(const ReportData& data) {
  std::string out = "{\"step\":[";
  if (!data.mass.empty()) {
    const auto& steps = data.mass.front().step;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      if (i > 0) out += ',';
      out += num(steps[i]);
    }
  }
  out += "],\"series\":[";
  for (std::size_t k = 0; k < data.mass.size(); ++k) {
    out += fmt::format("{}{{\"policy\":\"{}\",\"mass\":[", k ? "," : "", data.mass[k].policy);
    for (std::size_t i = 0; i < data.mass[k].mass.size(); ++i) {
      out += fmt::format("{}{:.4f}", i ? "," : "", data.mass[k].mass[i]);
    }
    out += "]}";
  }
  out += "]}";
  // Inside <script>: never let the data close the element.
  std::string safe;
  for (const char c : out) {
    if (c == '<') {
      safe += "\\u003c";
    } else {
      safe += c;
    }
  }
  return safe;
}

}  // namespace

std::string render_html(const ReportData& data) {
  const std::vector<Chart> charts = render_charts(data, false);
  const bool generated = !is_npy_id(data.trace);
  std::string policies;
  for (const std::string& p : data.policies) policies += (policies.empty() ? "" : ", ") + p;
  const bool baseline = !data.mass.empty() && data.mass.back().baseline;

  std::string h;
  h.reserve(1 << 21);
  h += "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
       "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  h += fmt::format("<title>kvevict report: {}</title>\n", esc(data.trace));
  h += fmt::format("<style>{}</style>\n<script>{}</script>\n</head>\n<body>\n<main>\n", kStyle, kHeadScript);

  h += "<h1>kvevict report</h1>\n";
  h += fmt::format(
      "<p class=\"sub\">Trace <code>{}</code>: {} decode steps{} · {} polic{} ({}) · budgets {} · strips and "
      "mass over time at budget {}.<br>Made by <code>{}</code>.</p>\n",
      esc(data.trace), data.steps,
      data.heads > 1 ? fmt::format(", {} heads", data.heads) : std::string(), data.policies.size(),
      data.policies.size() == 1 ? "y" : "ies", esc(policies), esc(join_budgets(data.budgets, ", ")),
      data.strip_budget, esc(data.command));
  h += "<p class=\"note\"><strong>Both metrics are proxies.</strong> Retained attention mass and heavy-hitter "
       "recall measure how much of the model's attention a policy kept, not the quality of the model's "
       "output (perplexity, task accuracy). Two policies with equal numbers can still produce different "
       "text.</p>\n";

  // 1. The table.
  h += "<section id=\"metrics\">\n<h2>Metrics</h2>\n";
  h += fmt::format(
      "<p class=\"caption\">Every policy at every budget, ranked by retained mass at budget {} (equal masses "
      "share a rank) — the same rows as <code>kvevict compare</code> with these arguments. "
      "<em>Retained mass</em>: the mean share of each step's attention that fell on held positions. "
      "<em>Heavy-hitter recall</em>: the share of each step's 32 most-attended positions that were held, "
      "pooled over the decode. <em>Memory bytes</em>: the policy's per-slot state for one instance.{}</p>\n",
      data.ranking_budget,
      data.heads > 1 ? fmt::format(" With {} heads the metrics are the mean of each head's ratio and the counts "
                                   "are summed over heads.",
                                   data.heads)
                     : std::string());
  h += metrics_table(data);
  h += "</section>\n";

  // 2. Mass over time.
  h += "<section id=\"mass\">\n<h2>Retained mass over the decode</h2>\n";
  h += fmt::format(
      "<p class=\"caption\">At budget {}, one line per policy; the sliding window is the dashed baseline{}. "
      "Until step {} every position fits and every line is at 1. Click a legend entry to hide or show a "
      "policy; point at the chart to read the values.</p>\n",
      data.strip_budget, baseline ? " (run for reference, not one of the compared policies)" : "",
      data.strip_budget);
  h += charts.front().svg;
  h += "<p class=\"readout\" id=\"mass-readout\"></p>\n";
  h += fmt::format("<script type=\"application/json\" id=\"mass-data\">{}</script>\n", mass_json(data));
  h += "</section>\n";

  // 3. Strips.
  h += "<section id=\"strips\">\n<h2>What each policy holds</h2>\n";
  h += fmt::format(
      "<p class=\"caption\">At budget {}: decode steps run down, positions run across. A cell is coloured when "
      "the policy held a position in it while those steps were measured, shaded by the largest attention "
      "weight a held position in the cell received (log scale, light to dark); red marks cells where a "
      "position was evicted; white is generated but not held; grey is not generated yet.{}</p>\n",
      data.strip_budget,
      data.heads > 1 ? " The trace has several heads: the strips show head 0." : "");
  if (generated) {
    h += "<ul class=\"caption\"><li><strong>Sinks</strong>: positions 0–3, a thin dark column at the far left "
         "wherever a policy keeps them.</li><li><strong>Recency band</strong>: the dark diagonal edge at the right of "
         "each row — the newest 64 positions, which take most of the attention.</li><li><strong>Heavy-hitter "
         "epochs</strong>: dark vertical segments; the trace redraws its 32 heavy hitters at step 128 and at "
         "every multiple of 512, so they start and stop in horizontal bands.</li></ul>\n";
  }
  h += "<div class=\"grid strips\">\n";
  for (std::size_t i = 1; i + 2 < charts.size(); ++i) h += "<div>" + charts[i].svg + "</div>\n";
  h += "</div>\n<p class=\"readout\" id=\"strip-readout\"></p>\n</section>\n";

  // 4. Metrics against the budget.
  h += "<section id=\"budgets\">\n<h2>Both metrics against the budget</h2>\n";
  h += "<p class=\"caption\">One curve per policy, a point per budget (log scale); the sliding window dashed. "
       "Point at a marker for its value. Policies whose values coincide are named after the first (“= "
       "snapkv”).</p>\n<div class=\"grid pair\">\n";
  h += "<div>" + charts[charts.size() - 2].svg + "</div>\n<div>" + charts.back().svg + "</div>\n</div>\n</section>\n";

  // 5. Retrieval tasks, when given.
  if (!data.tasks.empty()) {
    const std::vector<Chart> task_charts = render_task_charts(data.tasks, false);
    h += "<section id=\"tasks\">\n<h2>Retrieval tasks on a real model</h2>\n";
    h += fmt::format(
        "<p class=\"caption\">From <code>{}</code> (<code>kvevict tasks --format json</code>): greedy exact match "
        "of the answer, the model's caches compressed by each policy. The heatmaps show accuracy by needle depth "
        "(rows) and sample length (columns) — the full cache's first, then each policy and moment at the smallest "
        "budget; the curves pool tasks, lengths and depths against the budget, the full cache dashed. Point at "
        "a cell or marker for its counts. See docs/tasks.md for the tasks and the moments.</p>\n",
        esc(data.tasks_source));
    h += "<div class=\"grid strips\">\n";
    for (const Chart& c : task_charts) {
      if (c.name.rfind("needles-", 0) == 0) h += "<div>" + c.svg + "</div>\n";
    }
    h += "</div>\n<div class=\"grid pair\">\n";
    for (const Chart& c : task_charts) {
      if (c.name.rfind("task-accuracy", 0) == 0) h += "<div>" + c.svg + "</div>\n";
    }
    h += "</div>\n</section>\n";
  }

  // 6. About.
  std::size_t cells = 0;
  for (const Strip& s : data.strips) cells += std::size_t{s.rows} * s.cols;
  const Strip* first = data.strips.empty() ? nullptr : &data.strips.front();
  const std::size_t points = data.mass.empty() ? 0 : data.mass.front().step.size();
  h += "<section id=\"about\">\n<h2>About this page</h2>\n<ul class=\"caption\">\n";
  if (first != nullptr) {
    h += fmt::format(
        "<li><strong>Downsampled.</strong> Each strip draws {} steps × {} positions as {} × {} cells (about "
        "{:.3g} steps × {:.3g} positions each){}, rather than millions of elements; a cell's shade is the "
        "largest weight in it, and a cell is red when any of its positions was evicted during its steps. "
        "The mass-over-time curves have {} points, each the mean over about {:.3g} steps. The table and the "
        "budget charts are exact.</li>\n",
        first->steps, first->positions, first->rows, first->cols,
        static_cast<double>(first->steps) / first->rows, static_cast<double>(first->positions) / first->cols,
        first->rows == first->steps && first->cols == first->positions ? " — here one cell per step and position"
                                                                        : "",
        points, points == 0 ? 0.0 : static_cast<double>(data.steps) / static_cast<double>(points));
  }
  h += "<li>Self-contained: inline SVG and a little plain JavaScript; nothing is fetched, so the page works "
       "offline. <code>kvevict report ... --svg DIR</code> writes each chart as its own SVG file.</li>\n";
  std::size_t runs = 0;
  for (std::size_t i = 1; i + 2 < charts.size(); ++i) {
    const std::string& svg = charts[i].svg;
    const std::size_t from = svg.find("<g class=\"data\"");
    const std::size_t to = svg.find("</g>", from);
    runs += static_cast<std::size_t>(std::count(svg.begin() + static_cast<std::ptrdiff_t>(from),
                                                svg.begin() + static_cast<std::ptrdiff_t>(to), 'M'));
  }
  h += fmt::format("<li>{} charts; the {} strips have {} cells in all, drawn as {} runs of equal cells (one "
                   "horizontal stroke each).</li>\n",
                   charts.size(), data.strips.size(), cells, runs);
  h += "</ul>\n</section>\n</main>\n";
  h += fmt::format("<script>{}</script>\n</body>\n</html>\n", kScript);
  return h;
}

// ---- writing ------------------------------------------------------------------

namespace {
[[noreturn]] void refuse(const std::filesystem::path& file, const std::string& what) {
  throw InputError(fmt::format("{}: {}", file.string(), what));
}
}  // namespace

std::vector<std::pair<std::filesystem::path, std::uintmax_t>> write_report(const ReportData& data,
                                                                           const ReportOutput& output) {
  std::vector<std::pair<std::filesystem::path, std::string>> files;
  if (!output.html.empty()) {
    // The page's "Made by" line is the command that makes this page: the
    // request's flags, then the files it reads and writes.
    ReportData made = data;
    const std::string placeholder = " --out report.html";
    if (made.command.size() >= placeholder.size() &&
        made.command.compare(made.command.size() - placeholder.size(), placeholder.size(), placeholder) == 0) {
      made.command.resize(made.command.size() - placeholder.size());
      if (!data.tasks_source.empty()) made.command += " --tasks " + data.tasks_source;
      made.command += " --out " + output.html.string();
      if (output.svg_dir) made.command += " --svg " + output.svg_dir->string();
      if (output.overwrite) made.command += " --force";
    }
    files.emplace_back(output.html, render_html(made));
  }
  if (output.svg_dir) {
    // "charts/" and "charts" name one folder: compare parents without the trailing separator.
    std::filesystem::path dir = *output.svg_dir;
    if (!dir.has_filename() && dir.has_parent_path()) dir = dir.parent_path();
    std::error_code ec;
    if (std::filesystem::exists(dir, ec) && !std::filesystem::is_directory(dir, ec)) {
      refuse(dir, "is not a folder (--svg names the folder for the SVG files)");
    }
    std::vector<Chart> charts = render_charts(data, true);
    for (Chart& c : render_task_charts(data.tasks, true)) charts.push_back(std::move(c));
    for (Chart& c : charts) {
      files.emplace_back(dir / (c.name + ".svg"), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + std::move(c.svg));
    }
    if (!std::filesystem::exists(dir, ec)) {
      // Check the others first, so a refusal creates nothing.
      for (const auto& [file, content] : files) {
        if (file.parent_path() != dir) check_output_file(file, output.overwrite);
      }
      std::filesystem::create_directories(dir, ec);
      if (ec) refuse(dir, fmt::format("cannot be created: {}", ec.message()));
    }
  }
  for (const auto& [file, content] : files) check_output_file(file, output.overwrite);
  std::vector<std::pair<std::filesystem::path, std::uintmax_t>> written;
  for (const auto& [file, content] : files) {
    write_file_atomically(file, content, output.overwrite);
    written.emplace_back(file, content.size());
  }
  return written;
}

}  // namespace kvevict
