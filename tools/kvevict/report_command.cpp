// report: the self-contained HTML report of a trace's comparison.
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/files.h"
#include "kvevict/eval/task_rows.h"
#include "kvevict/report/report.h"

namespace kvevict::cli {

namespace {

struct ReportArgs {
  std::string policies = "all";
  std::string budgets = "256,512,1024";
  std::vector<std::string> sets;
  std::string trace = "decode-4096";
  std::optional<std::int64_t> steps;
  std::optional<std::int64_t> strip_budget;
  std::string out;
  std::string svg;
  bool force = false;
  std::string tasks;
};

int run_report(const ReportArgs& f) {
  ReportRequest request;
  if (f.policies.find_first_not_of(" ,") == std::string::npos) {
    throw ParameterError("--policies: the policy list is empty (name at least one policy, or all)");
  }
  request.compare.policies = parse_policy_list(f.policies, kSignalAttention, kTraceSource);
  request.compare.budgets = parse_integer_list(f.budgets, "--budgets");
  request.compare.overrides = parse_sets(f.sets);
  request.strip_budget = f.strip_budget;
  ReportOutput output;
  output.html = f.out;
  if (!f.svg.empty()) output.svg_dir = f.svg;
  output.overwrite = f.force;
  check_output_file(output.html, output.overwrite);  // before the work, not after
  std::vector<TaskRow> task_rows;
  if (!f.tasks.empty()) task_rows = read_task_rows_file(f.tasks);  // before the work too
  ReportData data = build_report(request, options_of(f.trace, f.steps, "report"));
  data.tasks = std::move(task_rows);
  data.tasks_source = f.tasks;
  for (const auto& [file, bytes] : write_report(data, output)) {
    std::cerr << fmt::format("wrote {} ({} bytes)\n", file.string(), bytes);
  }
  return 0;
}

}  // namespace

Command add_report_command(CLI::App& app) {
  auto f = std::make_shared<ReportArgs>();
  auto* cmd = app.add_subcommand(
      "report", "Write a self-contained HTML report: the metrics, retained mass over the decode, what "
                "each policy holds at each step, and both metrics against the budget");
  cmd->add_option("--policies", f->policies, "comma-separated names, or all (the seven a trace feeds)")
      ->capture_default_str();
  cmd->add_option("--budgets", f->budgets, "comma-separated budgets")->capture_default_str();
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  add_trace_options(cmd, f->trace, f->steps);
  cmd->add_option("--strip-budget", f->strip_budget,
                  "budget of the strips and the mass-over-time chart, one of --budgets (default: the smallest)");
  cmd->add_option("--out", f->out, "the HTML file to write")->required();
  cmd->add_option("--svg", f->svg, "also write each chart as its own SVG file into this folder");
  cmd->add_flag("--force", f->force, "replace existing files");
  cmd->add_option("--tasks", f->tasks,
                  "also chart retrieval-task results: a file written by kvevict tasks --format json "
                  "(needle heatmaps, accuracy against the budget)");
  return {cmd, [f] { return run_report(*f); }};
}

}  // namespace kvevict::cli
