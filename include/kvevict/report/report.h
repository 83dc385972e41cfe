// The report: one self-contained HTML page (inline SVG, a little plain
// JavaScript, nothing fetched) showing what each policy kept on a trace --
// the metrics table, retained mass over the decode, a strip per policy
// (decode steps against positions: what is held, shaded by the attention it
// receives, with evictions marked) and both metrics against the budget. Each
// chart can also be written as its own SVG file.
//
// The data come from one pass of the harness (run_many with a StepObserver)
// over exactly the runs compare() makes, so the table equals `kvevict compare`
// for the same arguments.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/task_rows.h"
#include "kvevict/eval/files.h"

namespace kvevict {

struct ReportRequest {
  CompareRequest compare;  // policies (empty: the whole registry), budgets, overrides
  // The budget of the strips and of the mass-over-time chart: one of the
  // budgets; the smallest when empty.
  std::optional<std::int64_t> strip_budget;
  // Bounds that keep the page small whatever the trace length: the strips are
  // downsampled to at most strip_rows step buckets x strip_cols position
  // buckets, the mass curves to at most mass_points points.
  std::uint32_t strip_rows = 256;
  std::uint32_t strip_cols = 256;
  std::uint32_t mass_points = 1000;
};

// Retained mass per step, averaged over buckets of consecutive steps (and
// over heads).
struct MassSeries {
  std::string policy;
  bool baseline = false;       // the sliding window, run only as the baseline
  std::vector<double> step;    // each bucket's middle step
  std::vector<double> mass;    // mean retained mass over the bucket's steps
};

// Shades of a strip cell: level i covers weights below kStripLevelEdges[i]
// (and at or above the previous edge); the last level everything above.
inline constexpr int kStripLevels = 8;
inline constexpr double kStripLevelEdges[kStripLevels - 1] = {3e-5, 1e-4, 3e-4, 1e-3,
                                                              3e-3, 1e-2, 3e-2};

// One run's held set over the decode as a raster: row r is a bucket of
// consecutive decode steps, column c a bucket of consecutive positions.
struct Strip {
  std::string policy;
  std::int64_t budget = 0;
  std::uint32_t steps = 0;      // rows cover steps 1 ... steps
  std::uint32_t positions = 0;  // columns cover positions 0 ... positions - 1
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  // rows x cols, row-major. `peak`: the largest weight a held position in the
  // cell received at one of the cell's steps (measured as the harness does,
  // before the policy acts); -1 when nothing in the cell was held.
  std::vector<float> peak;
  // 1 when a position in the cell was evicted at one of the cell's steps.
  std::vector<std::uint8_t> evicted;

  std::uint32_t row_of_step(std::uint32_t t) const noexcept;
  std::uint32_t col_of_position(std::uint32_t p) const noexcept;
  std::uint32_t first_step_of_row(std::uint32_t r) const noexcept;      // r <= rows
  std::uint32_t first_position_of_col(std::uint32_t c) const noexcept;  // c <= cols
  // -1: nothing held; 0 ... kStripLevels-1: shade; kStripLevels: evicted.
  int level(std::uint32_t r, std::uint32_t c) const noexcept;
  std::size_t held_cells() const noexcept;
  std::size_t evicted_cells() const noexcept;
};

int strip_level_of(double weight) noexcept;

struct ReportData {
  std::string trace;
  std::uint32_t steps = 0;
  std::uint64_t heads = 1;
  std::vector<std::string> policies;   // as requested, duplicates dropped
  std::vector<std::int64_t> budgets;   // ascending, unique
  std::int64_t ranking_budget = 0;
  std::int64_t strip_budget = 0;
  std::vector<RunRow> rows;            // exactly compare()'s rows, ranked
  std::vector<MassSeries> mass;        // per policy at strip_budget, then the baseline if added
  std::vector<Strip> strips;           // per policy at strip_budget (head 0)
  std::string command;                 // the kvevict command line that makes this report
  // Retrieval-task results to chart beside the trace (kvevict tasks --format
  // json, read with read_task_rows); empty: no task section.
  std::vector<TaskRow> tasks;
  std::string tasks_source;            // where they came from, named on the page
};

// One pass over the trace. Throws as compare() does (unknown policy or trace,
// bad parameters), and ParameterError when strip_budget is not a budget.
ReportData build_report(const ReportRequest& request, const EvaluateOptions& options);

struct Chart {
  std::string name;   // file stem: "mass-over-time", "strip-h2o-256", "retained-mass-vs-budget", ...
  std::string title;
  std::string svg;    // one <svg> element
};

// Every chart: the mass over time, a strip per policy, retained mass and
// recall against the budget. `standalone` adds the XML namespace so the SVG
// stands alone as a file.
std::vector<Chart> render_charts(const ReportData& data, bool standalone);

// The task charts: a needle heatmap (depth x length, accuracy over the
// tasks) per policy and moment at the smallest budget, after the full
// cache's, then accuracy against the budget per moment (mean over tasks,
// lengths and depths; the full cache a dashed level). Empty without rows.
std::vector<Chart> render_task_charts(const std::vector<TaskRow>& rows, bool standalone);

// A line chart of numbers against numbers in the report's style, for
// results the report page does not hold (the stream's bits per byte against
// the position, docs/streaming.md): one line a series, coloured by its key as
// the report colours a policy, dashed when asked, and a dashed vertical
// marker at `marker_x` when given (the model's context).
struct ChartSeries {
  std::string key;    // picks the colour: a policy's name, or any text
  std::string label;  // the legend's words
  bool dashed = false;
  std::vector<std::pair<double, double>> points;
};
struct LineChartRequest {
  std::string name;  // file stem
  std::string title;
  std::string subtitle;
  std::string x_label;
  std::string y_label;
  std::vector<ChartSeries> series;
  std::optional<double> marker_x;
  std::string marker_label;
};
Chart render_line_chart(const LineChartRequest& request, bool standalone);

// The whole page.
std::string render_html(const ReportData& data);

struct ReportOutput {
  std::filesystem::path html;                  // empty: no page
  std::optional<std::filesystem::path> svg_dir;  // created when missing
  bool overwrite = false;
};

// Checks every target before writing any, then writes the page and the SVG
// files. Returns the paths written with their sizes in bytes.
std::vector<std::pair<std::filesystem::path, std::uintmax_t>> write_report(
    const ReportData& data, const ReportOutput& output);

}  // namespace kvevict
