// The HTML report: its numbers equal compare's, its strips show exactly what
// the harness held, and the page is well-formed, self-contained, bounded in
// size and has data in every chart. (The browser test in tests/report/ loads
// it in headless Chromium.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/npy.h"
#include "kvevict/core/registry.h"
#include "kvevict/report/report.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

// ---- helpers ---------------------------------------------------------------

// A small tag-balance checker: every element closed in order, void elements
// and self-closing SVG elements alone, script and style bodies skipped.
// Returns "" when well-formed, else what is wrong.
std::string check_balanced(const std::string& doc) {
  static const std::vector<std::string> kVoid = {"meta", "link", "br", "hr", "img", "input", "col", "wbr"};
  std::vector<std::string> open;
  std::size_t i = 0;
  while (true) {
    const std::size_t lt = doc.find('<', i);
    if (lt == std::string::npos) break;
    if (doc.compare(lt, 4, "<!--") == 0) {
      const std::size_t end = doc.find("-->", lt);
      if (end == std::string::npos) return "unclosed comment";
      i = end + 3;
      continue;
    }
    if (doc.compare(lt, 2, "<!") == 0 || doc.compare(lt, 2, "<?") == 0) {
      i = doc.find('>', lt) + 1;
      continue;
    }
    // The tag's end, outside quotes.
    std::size_t gt = lt + 1;
    char quote = 0;
    while (gt < doc.size() && (quote != 0 || doc[gt] != '>')) {
      if (quote == 0 && (doc[gt] == '"' || doc[gt] == '\'')) {
        quote = doc[gt];
      } else if (quote != 0 && doc[gt] == quote) {
        quote = 0;
      }
      ++gt;
    }
    if (gt >= doc.size()) return "unterminated tag at " + std::to_string(lt);
    const std::string tag = doc.substr(lt + 1, gt - lt - 1);
    i = gt + 1;
    if (tag.empty()) return "empty tag at " + std::to_string(lt);
    if (tag[0] == '/') {
      const std::string name = tag.substr(1);
      if (open.empty() || open.back() != name) {
        return "</" + name + "> at " + std::to_string(lt) + " closes " + (open.empty() ? "nothing" : open.back());
      }
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(0, tag.find_first_of(" \t\n/"));
    if (tag.back() == '/' || std::find(kVoid.begin(), kVoid.end(), name) != kVoid.end()) continue;
    if (name == "script" || name == "style") {
      const std::size_t end = doc.find("</" + name + ">", i);
      if (end == std::string::npos) return "unclosed <" + name + ">";
      i = end + name.size() + 3;
      continue;
    }
    open.push_back(name);
  }
  if (!open.empty()) return "unclosed <" + open.back() + ">";
  return "";
}

std::size_t count_of(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t i = text.find(what); i != std::string::npos; i = text.find(what, i + what.size())) ++n;
  return n;
}

// Every <svg ...>...</svg> element of a document.
std::vector<std::string> svgs_of(const std::string& doc) {
  std::vector<std::string> out;
  for (std::size_t i = doc.find("<svg"); i != std::string::npos; i = doc.find("<svg", i + 1)) {
    const std::size_t end = doc.find("</svg>", i);
    out.push_back(doc.substr(i, end + 6 - i));
  }
  return out;
}

// Every URL-ish thing in a document that could fetch or link outside it.
std::vector<std::string> external_references(const std::string& doc) {
  std::vector<std::string> found;
  const std::string allowed = "http://www.w3.org/2000/svg";
  for (const std::string scheme : {"http://", "https://", "ftp://", "file:", "//cdn", "www."}) {
    for (std::size_t i = doc.find(scheme); i != std::string::npos; i = doc.find(scheme, i + 1)) {
      if (doc.compare(i, allowed.size(), allowed) == 0) continue;
      if (scheme == "www." && i >= 7 && doc.compare(i - 7, allowed.size(), allowed) == 0) continue;
      found.push_back(doc.substr(i, 40));
    }
  }
  for (const std::string attr : {" src=", " href=", "url(", "@import", "<link", "<iframe", "<img", "fetch(",
                                 "XMLHttpRequest", "import("}) {
    if (doc.find(attr) != std::string::npos) found.push_back(attr);
  }
  return found;
}

const ReportData& canonical_report() {
  static const ReportData data = build_report(ReportRequest{}, EvaluateOptions{});
  return data;
}

const std::string& canonical_html() {
  static const std::string html = render_html(canonical_report());
  return html;
}

void expect_same_rows(const std::vector<RunRow>& got, const std::vector<RunRow>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    SCOPED_TRACE(want[i].policy + " at " + std::to_string(want[i].budget));
    EXPECT_EQ(got[i].policy, want[i].policy);
    EXPECT_EQ(got[i].budget, want[i].budget);
    EXPECT_EQ(got[i].rank, want[i].rank);
    EXPECT_EQ(got[i].params, want[i].params);
    EXPECT_EQ(got[i].metrics.retained_attention_mass, want[i].metrics.retained_attention_mass);
    EXPECT_EQ(got[i].metrics.heavy_hitter_recall, want[i].metrics.heavy_hitter_recall);
    EXPECT_EQ(got[i].metrics.eviction_calls, want[i].metrics.eviction_calls);
    EXPECT_EQ(got[i].totals.total_retained_mass, want[i].totals.total_retained_mass);
    EXPECT_EQ(got[i].totals.total_heavy_hits, want[i].totals.total_heavy_hits);
    EXPECT_EQ(got[i].totals.evicted, want[i].totals.evicted);
    EXPECT_EQ(got[i].memory_bytes, want[i].memory_bytes);
    EXPECT_EQ(got[i].heads, want[i].heads);
  }
}

// A temporary folder per test, removed afterwards.
class ReportFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kvevict-report-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  static ReportData small() {
    ReportRequest request;
    request.compare.policies = {"h2o", "streaming-llm"};
    request.compare.budgets = {48, 64};
    EvaluateOptions options;
    options.steps = 150;
    return build_report(request, options);
  }

  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

  fs::path dir_;
};

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// ---- the observer --------------------------------------------------------------

TEST(StepObserver, SeesEveryStepOfEveryRunAndChangesNothing) {
  DecodeTrace trace;
  auto a = make_policy("h2o", {{"budget", 64}});
  auto b = make_policy("sliding-window", {{"budget", 100}});
  const std::vector<RunSlot> slots{{a.get(), 64}, {b.get(), 100}};
  std::vector<std::int64_t> calls(2, 0);
  std::vector<std::int64_t> victims(2, 0);
  std::vector<double> mass(2, 0.0);
  std::vector<std::vector<Position>> last(2);
  const auto observed = run_many(slots, trace, 400, {}, nullptr, [&](const StepView& v) {
    ASSERT_LT(v.run, 2U);
    EXPECT_EQ(v.step, static_cast<std::uint32_t>(calls[v.run] + 1));
    EXPECT_EQ(v.weights.size(), v.step);
    EXPECT_TRUE(std::is_sorted(v.kept.begin(), v.kept.end()));
    EXPECT_LE(std::ssize(v.kept), v.run == 0 ? 64 : 100);
    ++calls[v.run];
    victims[v.run] += std::ssize(v.victims);
    mass[v.run] += v.retained;
    last[v.run].assign(v.kept.begin(), v.kept.end());
  });
  auto a2 = make_policy("h2o", {{"budget", 64}});
  auto b2 = make_policy("sliding-window", {{"budget", 100}});
  const std::vector<RunSlot> plain_slots{{a2.get(), 64}, {b2.get(), 100}};
  const auto plain = run_many(plain_slots, trace, 400);
  for (std::size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(calls[r], 400);
    EXPECT_EQ(victims[r], observed[r].evicted);
    EXPECT_EQ(mass[r], observed[r].total_retained_mass);
    EXPECT_EQ(observed[r].total_retained_mass, plain[r].total_retained_mass);
    EXPECT_EQ(observed[r].total_heavy_hits, plain[r].total_heavy_hits);
  }
  auto again = make_policy("h2o", {{"budget", 64}});
  EXPECT_EQ(last[0], testing::held_after_run(*again, trace, 64, 400));
}

TEST(Compare, SplitIntoSpecsAndRankingEqualsCompare) {
  CompareRequest request;
  request.policies = {"h2o", "tova", "scissorhands"};
  request.budgets = {128, 64, 64, 256};
  request.overrides = {{"recentWindow", 16}};
  EvaluateOptions options;
  options.steps = 500;
  std::vector<RunRow> rows = evaluate(compare_specs(request), options);
  rank_compare_rows(rows, request.budgets);
  expect_same_rows(rows, compare(request, options));
}

// ---- the numbers ---------------------------------------------------------------

TEST(Report, MetricsEqualCompareForTheSameArguments) {
  ReportRequest request;
  request.compare.budgets = {64, 128, 256};
  request.compare.overrides = {{"h2o.recentWindow", 48}, {"sinks", 2}};
  EvaluateOptions options;
  options.steps = 600;
  const ReportData data = build_report(request, options);
  expect_same_rows(data.rows, compare(request.compare, options));
  EXPECT_EQ(data.strip_budget, 64);
  EXPECT_EQ(data.ranking_budget, 128);
  EXPECT_EQ(data.strips.size(), testing::attention_policies().size());
}

TEST(Report, CanonicalMetricsEqualTheCanonicalComparison) {
  const ReportData& data = canonical_report();
  expect_same_rows(data.rows, testing::canonical_rows());
  EXPECT_EQ(data.steps, 4095U);
  EXPECT_EQ(data.strip_budget, 256);
  EXPECT_EQ(data.command, "kvevict report --out report.html");
  ASSERT_EQ(data.policies.size(), 7U);
  ASSERT_EQ(data.strips.size(), 7U);
  ASSERT_EQ(data.mass.size(), 7U);  // the sliding window is one of them: no extra baseline
  // Every row of the page's table, as compare prints it.
  const std::string& html = canonical_html();
  for (const RunRow& r : testing::canonical_rows()) {
    EXPECT_NE(html.find(fmt::format("<td>{}</td><td>{:.6f}</td><td>{:.6f}</td><td>{}</td>", r.budget,
                                    r.metrics.retained_attention_mass, r.metrics.heavy_hitter_recall,
                                    r.metrics.eviction_calls)),
              std::string::npos)
        << r.policy << " " << r.budget;
  }
}

TEST(Report, MassOverTimeAveragesTheHarnessMeasurements) {
  ReportRequest request;
  request.compare.policies = {"tova", "h2o"};
  request.compare.budgets = {40, 80};
  EvaluateOptions options;
  options.steps = 300;
  const ReportData data = build_report(request, options);
  ASSERT_EQ(data.mass.size(), 3U);  // two policies and the baseline
  EXPECT_TRUE(data.mass.back().baseline);
  EXPECT_EQ(data.mass.back().policy, "sliding-window");
  EXPECT_EQ(data.rows.size(), 4U);  // the baseline is not a row
  for (const MassSeries& s : data.mass) {
    ASSERT_EQ(s.mass.size(), 300U);  // 300 steps, one point each
    for (std::size_t i = 0; i < 39; ++i) EXPECT_NEAR(s.mass[i], 1.0, 1e-6);  // everything fits
    if (s.baseline) continue;
    double sum = 0.0;
    for (const double m : s.mass) sum += m;
    for (const RunRow& r : data.rows) {
      if (r.policy == s.policy && r.budget == 40) {
        EXPECT_NEAR(sum, r.totals.total_retained_mass, 1e-9);
      }
    }
  }
  // Downsampled: at most mass_points points, each the mean of its steps.
  request.mass_points = 7;
  const ReportData coarse = build_report(request, options);
  const MassSeries& tova = coarse.mass.front();
  ASSERT_EQ(tova.policy, "tova");
  ASSERT_EQ(tova.mass.size(), 7U);  // buckets of ceil(300 / 7) = 43 steps, the last of 42
  double total = 0.0;
  for (std::size_t i = 0; i < 7; ++i) {
    const double first = static_cast<double>(i) * 43 + 1;
    const double last = std::min(first + 42, 300.0);
    EXPECT_EQ(tova.step[i], (first + last) / 2);
    total += tova.mass[i] * (last - first + 1);
  }
  for (const RunRow& r : coarse.rows) {
    if (r.policy == "tova" && r.budget == 40) {
      EXPECT_NEAR(total, r.totals.total_retained_mass, 1e-9);
    }
  }
}

// At one cell per step and position the strip is exactly the harness's held
// set, shaded by each weight, with each victim marked.
TEST(Report, StripIsTheHeldSetCellForCell) {
  ReportRequest request;
  request.compare.policies = {"sliding-window", "h2o"};
  request.compare.budgets = {50};
  EvaluateOptions options;
  options.steps = 200;
  const ReportData data = build_report(request, options);
  ASSERT_EQ(data.strips.size(), 2U);
  const Strip& s = data.strips.front();
  ASSERT_EQ(s.policy, "sliding-window");
  ASSERT_EQ(s.rows, 200U);
  ASSERT_EQ(s.cols, 201U);
  DecodeTrace trace;
  for (std::uint32_t t = 1; t <= 200; ++t) {
    const auto w = trace.next();
    EXPECT_EQ(s.row_of_step(t), t - 1);
    for (std::uint32_t p = 0; p <= 200; ++p) {
      const std::size_t cell = std::size_t{t - 1} * s.cols + p;
      // Held while measured at step t: the window before the step, max(0, t - 50) ... t - 1.
      const bool held = p < t && p + 50 >= t;
      if (held) {
        EXPECT_EQ(s.peak[cell], w[p]) << "step " << t << " position " << p;
      } else {
        EXPECT_LT(s.peak[cell], 0.0F) << "step " << t << " position " << p;
      }
      // Evicted at step t: position t - 50 once the budget binds.
      EXPECT_EQ(s.evicted[cell], t >= 50 && p == t - 50 ? 1 : 0) << "step " << t << " position " << p;
    }
  }
  // H2O's strip: the last row holds exactly what the harness holds after 199 steps.
  const Strip& h = data.strips.back();
  auto h2o = make_policy("h2o", {{"budget", 50}});
  DecodeTrace again;
  const std::vector<Position> held = testing::held_after_run(*h2o, again, 50, 199);
  std::vector<Position> row;
  for (std::uint32_t p = 0; p < h.cols; ++p) {
    if (h.peak[std::size_t{199} * h.cols + p] >= 0.0F) row.push_back(p);
  }
  EXPECT_EQ(row, held);
}

TEST(Report, CanonicalStripsAreBoundedAndShowSinksBandAndEvictions) {
  const ReportData& data = canonical_report();
  for (const Strip& s : data.strips) {
    SCOPED_TRACE(s.policy);
    EXPECT_EQ(s.rows, 256U);
    EXPECT_EQ(s.cols, 256U);
    EXPECT_EQ(s.budget, 256);
    EXPECT_GT(s.held_cells(), 0U);
    EXPECT_GT(s.evicted_cells(), 0U);
    // The recency band: the newest positions are held at the last step.
    EXPECT_GE(s.peak[std::size_t{255} * s.cols + s.col_of_position(4090)], 0.0F);
  }
  auto strip_of = [&](const std::string& policy) -> const Strip& {
    for (const Strip& s : data.strips) {
      if (s.policy == policy) return s;
    }
    throw std::runtime_error("no strip for " + policy);
  };
  // Sinks: StreamingLLM holds positions 0-3 to the end, the sliding window does not.
  const Strip& streaming = strip_of("streaming-llm");
  const Strip& window = strip_of("sliding-window");
  EXPECT_EQ(streaming.level(255, 0), kStripLevels - 1);  // 0.06, the strongest shade
  EXPECT_EQ(window.level(255, 0), -1);
  // The sliding window holds one contiguous run of about budget / 16 columns.
  std::size_t held = 0;
  for (std::uint32_t c = 0; c < window.cols; ++c) held += window.peak[std::size_t{255} * window.cols + c] >= 0.0F;
  EXPECT_GE(held, 16U);
  EXPECT_LE(held, 18U);
}

TEST(Report, MultiHeadNpyTracesAverageTheMassAndStripHeadZero) {
  const fs::path dir = fs::temp_directory_path() / "kvevict-report-heads";
  fs::create_directories(dir);
  const fs::path file = dir / "two-heads.npy";
  {
    const std::uint32_t n = 121;
    std::string header = fmt::format("{{'descr': '<f4', 'fortran_order': False, 'shape': (2, {}, {}), }}", n, n);
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::ofstream out(file, std::ios::binary);
    out << std::string("\x93NUMPY\x01\x00", 8);
    out.put(static_cast<char>(header.size() & 0xFF));
    out.put(static_cast<char>(header.size() >> 8));
    out << header;
    for (const char* id : {"decode-4096", "stale-spike-4096"}) {
      auto trace = open_trace(id);
      std::vector<float> row(n, 0.0F);
      out.write(reinterpret_cast<const char*>(row.data()), n * 4);
      for (std::uint32_t t = 1; t < n; ++t) {
        const auto w = trace->next();
        std::fill(row.begin(), row.end(), 0.0F);
        std::copy(w.begin(), w.end(), row.begin());
        out.write(reinterpret_cast<const char*>(row.data()), n * 4);
      }
    }
  }
  ReportRequest request;
  request.compare.policies = {"h2o", "sliding-window"};
  request.compare.budgets = {40, 60};
  EvaluateOptions options;
  options.trace = file.string();
  const ReportData data = build_report(request, options);
  expect_same_rows(data.rows, compare(request.compare, options));
  EXPECT_EQ(data.heads, 2U);
  EXPECT_EQ(data.steps, 120U);
  double sum = 0.0;
  for (const double m : data.mass.front().mass) sum += m;
  for (const RunRow& r : data.rows) {
    if (r.policy == "h2o" && r.budget == 40) {
      EXPECT_NEAR(sum, r.totals.total_retained_mass / 2.0, 1e-9);  // summed over heads
    }
  }
  // Head 0 is the canonical prefix: its strip equals the generated trace's.
  EvaluateOptions generated;
  generated.steps = 120;
  const ReportData plain = build_report(request, generated);
  EXPECT_EQ(data.strips.front().peak, plain.strips.front().peak);
  EXPECT_EQ(data.strips.front().evicted, plain.strips.front().evicted);
  const std::string html = render_html(data);
  EXPECT_NE(html.find("strips show head 0"), std::string::npos);
  EXPECT_NE(data.command.find("--trace " + file.string()), std::string::npos);
  fs::remove_all(dir);
}

TEST(Report, RefusesBadRequests) {
  EvaluateOptions options;
  options.steps = 50;
  ReportRequest unknown;
  unknown.compare.policies = {"lru"};
  EXPECT_THROW(build_report(unknown, options), ParameterError);
  ReportRequest strip;
  strip.compare.budgets = {16, 32};
  strip.strip_budget = 20;
  try {
    build_report(strip, options);
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "report: the strip budget 20 is not one of the budgets (16, 32)");
  }
  ReportRequest no_budgets;
  no_budgets.compare.budgets = {};
  EXPECT_THROW(build_report(no_budgets, options), ParameterError);
  EvaluateOptions bad_trace;
  bad_trace.trace = "nope";
  EXPECT_THROW(build_report(ReportRequest{}, bad_trace), InputError);
  ReportRequest dup;
  dup.compare.policies = {"h2o", "h2o", "tova"};
  dup.compare.budgets = {48};
  EXPECT_EQ(build_report(dup, options).policies, (std::vector<std::string>{"h2o", "tova"}));
}

// ---- the page -------------------------------------------------------------------

TEST(ReportHtml, IsWellFormed) {
  const std::string& html = canonical_html();
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0U);
  EXPECT_EQ(check_balanced(html), "");
  EXPECT_EQ(check_balanced("<p><b>x</p></b>"), "</p> at 7 closes b");  // the checker checks
  EXPECT_EQ(check_balanced("<div><svg><path d=\"a>b\"/></svg>"), "unclosed <div>");
}

TEST(ReportHtml, HasNoExternalReference) {
  EXPECT_EQ(external_references(canonical_html()), std::vector<std::string>{});
  EXPECT_EQ(count_of(canonical_html(), "http"), 0U);  // inline SVG needs no namespace
  EXPECT_EQ(external_references("<img src=\"https://x.org/a.png\">").size(), 3U);  // the check checks
  for (const Chart& c : render_charts(canonical_report(), true)) {
    EXPECT_EQ(external_references(c.svg), std::vector<std::string>{}) << c.name;
    EXPECT_EQ(count_of(c.svg, "http://www.w3.org/2000/svg"), 1U) << c.name;
  }
}

TEST(ReportHtml, EveryChartHasData) {
  const std::string& html = canonical_html();
  const std::vector<std::string> svgs = svgs_of(html);
  ASSERT_EQ(svgs.size(), 10U);  // mass over time, 7 strips, 2 budget charts
  for (const std::string& svg : svgs) {
    const std::size_t g = svg.find("<g class=\"data\"");
    ASSERT_NE(g, std::string::npos) << svg.substr(0, 120);
    const std::string data = svg.substr(g, svg.find("</g>", g) - g);
    if (svg.find("class=\"chart strip\"") != std::string::npos) {
      EXPECT_GE(count_of(data, "<path"), 2U) << svg.substr(0, 120);  // shades and evictions
      EXPECT_NE(data.find("class=\"evicted\""), std::string::npos);
      EXPECT_GT(count_of(data, "M"), 500U);
    } else {
      EXPECT_GE(count_of(data, "<polyline"), 7U) << svg.substr(0, 120);  // a line per policy
      for (std::size_t i = data.find("points=\""); i != std::string::npos; i = data.find("points=\"", i + 1)) {
        EXPECT_GE(count_of(data.substr(i, data.find('"', i + 8) - i), ","), 3U);
      }
    }
    EXPECT_NE(svg.find("<title>"), std::string::npos);
  }
  // Every policy in every view.
  for (const PolicyInfo* info : testing::attention_policies()) {
    EXPECT_NE(html.find("data-chart=\"strip-" + info->name + "-256\""), std::string::npos) << info->name;
    EXPECT_GE(count_of(html, "class=\"series\" data-policy=\"" + info->name + "\""), 3U) << info->name;
    EXPECT_GE(count_of(html, "<td class=\"policy\"><span class=\"swatch\" style=\"background:"), 21U);
  }
  // The sliding window dashed, the proxy note, the downsampling note, axis labels, units.
  EXPECT_NE(html.find("data-policy=\"sliding-window\" fill=\"none\" stroke=\"#555555\" stroke-width=\"2\" "
                      "stroke-linejoin=\"round\" stroke-dasharray=\"6 4\""),
            std::string::npos);
  EXPECT_NE(html.find("Both metrics are proxies."), std::string::npos);
  EXPECT_NE(html.find("<strong>Downsampled.</strong> Each strip draws 4095 steps × 4096 positions as 256 × 256 cells"),
            std::string::npos);
  for (const std::string label : {"decode step", "position (token index)", "budget (positions held, log scale)",
                                  "retained attention mass (share, 0–1)", "heavy-hitter recall (share, 0–1)"}) {
    EXPECT_NE(html.find(label), std::string::npos) << label;
  }
  EXPECT_NE(html.find("data-ready"), std::string::npos);
}

TEST(ReportHtml, StaysSmallForTheCanonicalTrace) {
  // 7 policies x 4095 steps: bounded by the downsampling, far under 5 MB.
  EXPECT_LT(canonical_html().size(), 5U * 1024 * 1024);
  EXPECT_LT(canonical_html().size(), 1U * 1024 * 1024);
}

// The charts in docs/images/ (embedded in README.md and the policy pages) are
// what `make charts` makes today.
TEST(ReportHtml, CommittedChartsAreCurrent) {
  const fs::path dir = testing::source_dir() / "docs" / "images";
  if (!fs::is_directory(dir)) GTEST_SKIP() << dir << " is not there";
  std::size_t checked = 0;
  for (const Chart& c : render_charts(canonical_report(), true)) {
    const fs::path file = dir / (c.name + ".svg");
    if (!fs::exists(file)) continue;
    EXPECT_EQ(read(file), "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n" + c.svg)
        << file << " is stale: run `make charts`";
    ++checked;
  }
  EXPECT_GE(checked, 5U) << "expected the committed charts in " << dir;
}

TEST(ReportHtml, IsDeterministic) {
  EXPECT_EQ(render_html(build_report(ReportRequest{}, EvaluateOptions{})), canonical_html());
}

// ---- writing ------------------------------------------------------------------

TEST_F(ReportFiles, WritesThePageAndEachChartAsAnSvgFile) {
  const ReportData data = small();
  const auto written = write_report(data, {dir_ / "r.html", dir_ / "svg", false});
  ASSERT_EQ(written.size(), 1U + 5U);  // the page, mass, 2 strips, 2 budget charts
  EXPECT_EQ(files(), (std::vector<std::string>{"mass-over-time.svg", "r.html", "recall-vs-budget.svg",
                                               "retained-mass-vs-budget.svg", "strip-h2o-48.svg",
                                               "strip-streaming-llm-48.svg", "svg"}));
  // The page names the command that makes it, files and all.
  ReportData made = data;
  const std::size_t out = made.command.rfind(" --out report.html");
  ASSERT_NE(out, std::string::npos) << made.command;
  made.command = made.command.substr(0, out) + " --out " + (dir_ / "r.html").string() + " --svg " +
                 (dir_ / "svg").string();
  EXPECT_EQ(read(dir_ / "r.html"), render_html(made));
  EXPECT_NE(read(dir_ / "r.html").find("Made by <code>" + made.command + "</code>"), std::string::npos);
  for (const auto& [file, bytes] : written) {
    const std::string text = read(file);
    EXPECT_EQ(text.size(), bytes);
    EXPECT_EQ(check_balanced(text), "") << file;
    if (file.extension() == ".svg") {
      EXPECT_EQ(text.rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0U);
    }
  }
}

TEST_F(ReportFiles, RefusesToReplaceWithoutOverwrite) {
  const ReportData data = small();
  {
    std::ofstream(dir_ / "r.html") << "keep me";
  }
  try {
    write_report(data, {dir_ / "r.html", std::nullopt, false});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), (dir_ / "r.html").string() + ": already exists (pass --force to replace it)");
  }
  EXPECT_EQ(read(dir_ / "r.html"), "keep me");
  // An existing SVG stops everything before anything is written.
  fs::create_directories(dir_ / "svg");
  {
    std::ofstream(dir_ / "svg" / "strip-h2o-48.svg") << "keep me too";
  }
  EXPECT_THROW(write_report(data, {dir_ / "new.html", dir_ / "svg", false}), InputError);
  EXPECT_FALSE(fs::exists(dir_ / "new.html"));
  EXPECT_EQ(read(dir_ / "svg" / "strip-h2o-48.svg"), "keep me too");
  write_report(data, {dir_ / "r.html", dir_ / "svg", true});
  const std::string page = read(dir_ / "r.html");
  EXPECT_NE(page, "keep me");
  EXPECT_NE(page.find(" --svg " + (dir_ / "svg").string() + " --force</code>"), std::string::npos);
  EXPECT_EQ(std::count_if(fs::directory_iterator(dir_ / "svg"), fs::directory_iterator{},
                          [](const fs::directory_entry& e) { return e.path().extension() == ".tmp"; }),
            0);
}

TEST_F(ReportFiles, UnwritableTargetsFailCleanly) {
  const ReportData data = small();
  try {
    write_report(data, {dir_ / "missing" / "r.html", std::nullopt, false});
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be written: the folder"), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_report(data, {dir_, std::nullopt, true}), InputError);  // a folder
  {
    std::ofstream(dir_ / "plain") << "x";
  }
  EXPECT_THROW(write_report(data, {dir_ / "r.html", dir_ / "plain", false}), InputError);  // --svg on a file
  EXPECT_EQ(files(), std::vector<std::string>{"plain"});  // nothing half-written, no .tmp
  // A missing --svg folder is created, but not when the page is refused first.
  EXPECT_THROW(write_report(data, {dir_ / "missing" / "r.html", dir_ / "svgs", false}), InputError);
  EXPECT_FALSE(fs::exists(dir_ / "svgs"));
}

}  // namespace
}  // namespace kvevict
