// The policies and traces: list, run, persistence, trace, simd, schema and
// vectors (compare and sweep, which also run a model: compare_commands.cpp).
#include <cstdint>
#include <filesystem>
#include <iostream>
#include <limits>
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
#include "kvevict/core/simd.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/npy.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/eval/trace.h"
#include "kvevict/eval/vectors.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/command_schema.h"
#include "kvevict/model/evaluation/perplexity_rows.h"
#include "output.h"

namespace kvevict::cli {

namespace {

int run_list(const std::string& format) {
  if (format == "json") {
    std::cout << policies_json() << '\n';
    return 0;
  }
  std::vector<std::vector<std::string>> cells{{"policy", "parameters (defaults)", "summary"}};
  for (const PolicyInfo* info : policies()) {
    std::string params;
    for (const auto& p : info->params) {
      params += fmt::format("{}{}={}", params.empty() ? "" : " ", p.name, p.default_value);
    }
    cells.push_back({info->name, params, info->summary});
  }
  cli::print_aligned(std::cout, cells);
  return 0;
}

struct RunArgs {
  std::string policy;
  std::optional<std::int64_t> budget;
  std::vector<std::string> sets;
  std::string trace = "decode-4096";
  std::optional<std::int64_t> steps;
  std::string format = "table";
  SignalFiles signals;
  PagedFlags paged;
};

int run_run(const RunArgs& f) {
  ParamMap params = parse_sets(f.sets);
  std::int64_t budget = find_policy(f.policy).effective(params).front().second;
  for (const auto& [k, v] : params) {
    if (k == "budget") budget = v;
  }
  if (f.budget) budget = *f.budget;
  EvaluateOptions options = options_of(f.trace, f.steps, "run");
  options.paged = paged_of(f.paged);
  options.signals = f.signals;
  const std::vector<RunRow> rows = evaluate({{f.policy, params, budget}}, options);
  if (f.format == "json" || f.format == "csv") {
    cli::print_rows(std::cout, rows, f.format, "run", false);
  } else {
    cli::print_run_table(std::cout, rows.front());
  }
  return 0;
}

struct PersistenceArgs {
  std::string trace = "decode-4096";
  std::string lags = "1,4,16,64,256";
  std::string format = "table";
  std::string model;
  std::string text;
  std::optional<std::uint32_t> layer;
};

int run_persistence(const PersistenceArgs& f, const CLI::App* cmd, const ModelLoad& context) {
  std::vector<std::unique_ptr<Trace>> heads;
  std::vector<Trace*> views;
  if (!f.model.empty()) {
    if (cmd->count("--trace") > 0) throw ParameterError("give --trace or --model, not both");
    const auto model = open_model(f.model, context);
    for (auto& h : record_heads(*model, read_model_text(f.text))) heads.push_back(std::move(h));
    if (f.layer) {
      if (*f.layer >= model->config().layers) {
        throw ParameterError(fmt::format("--layer {}: the model has layers 0 ... {}", *f.layer,
                                         model->config().layers - 1));
      }
      for (std::uint32_t hd = 0; hd < model->config().kv_heads; ++hd) {
        views.push_back(heads[*f.layer * model->config().kv_heads + hd].get());
      }
    }
  } else {
    heads = open_trace_heads(f.trace);
  }
  if (views.empty()) {
    for (const auto& h : heads) views.push_back(h.get());
  }
  std::vector<std::uint32_t> lags;
  for (const std::int64_t k : parse_integer_list(f.lags, "--lags")) {
    if (k < 1 || k > std::numeric_limits<std::uint32_t>::max()) {
      throw ParameterError(fmt::format("--lags: {} is not a positive lag", k));
    }
    lags.push_back(static_cast<std::uint32_t>(k));
  }
  cli::print_persistence(std::cout, persistence(views, lags), f.format,
                         {"persistence", f.model.empty() ? std::nullopt : std::optional<std::string>(f.model)});
  return 0;
}

struct TraceArgs {
  std::string trace = "decode-4096";
  std::optional<std::int64_t> steps;
  bool hash = false;
  std::string out;
  bool force = false;
};

int run_trace(const TraceArgs& f) {
  const auto heads = open_trace_heads(f.trace);
  const std::uint32_t steps = f.steps ? checked_steps(*heads.front(), *f.steps) : heads.front()->steps();
  if (!f.out.empty()) {
    if (heads.size() != 1) throw InputError("--out writes one head; this trace has several");
    write_npy_trace(*heads.front(), steps, f.out, f.force);
    std::cerr << fmt::format("wrote {} steps of {} to {}\n", steps, f.trace, f.out);
  }
  if (f.hash) {
    for (const auto& head : heads) std::cout << trace_hash(*head, steps) << '\n';
  } else if (f.out.empty()) {
    std::cout << fmt::format("trace {}: {} positions, {} decode steps, {} head(s) (use --hash for the parity hash)\n",
                             f.trace, heads.front()->length(), heads.front()->steps(), heads.size());
  }
  return 0;
}

int run_vectors_command(const std::vector<std::string>& files) {
  std::vector<std::filesystem::path> paths(files.begin(), files.end());
  const VectorReport report = run_vectors(paths);
  for (const VectorFailure& f : report.failures) std::cout << describe(f) << '\n';
  std::cout << fmt::format("{} passed, {} failed\n", report.passed, report.failed);
  return report.failed == 0 ? 0 : 1;
}

}  // namespace

Command add_list_command(CLI::App& app) {
  auto format = std::make_shared<std::string>("table");
  auto* cmd = app.add_subcommand("list", "List the policies, their parameters and defaults");
  cmd->add_option("--format", *format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  return {cmd, [format] { return run_list(*format); }};
}

Command add_run_command(CLI::App& app) {
  auto f = std::make_shared<RunArgs>();
  auto* cmd = app.add_subcommand("run", "Replay a trace through one policy at one budget");
  cmd->add_option("--policy", f->policy, "policy name (see `kvevict list`)")->required();
  cmd->add_option("--budget", f->budget, "positions held after each eviction (default: the policy's, 512)");
  cmd->add_option("--set", f->sets, "parameter as KEY=VALUE, e.g. recentWindow=64 (repeatable)");
  add_trace_options(cmd, f->trace, f->steps);
  add_signal_options(cmd, f->signals);
  add_paged_options(cmd, f->paged, false);
  cmd->add_option("--format", f->format, "table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))->capture_default_str();
  return {cmd, [f] { return run_run(*f); }};
}

Command add_persistence_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<PersistenceArgs>();
  auto* cmd = app.add_subcommand(
      "persistence", "Persistence of importance: of the positions above fair share at step t, the share "
                     "still above it at t + k");
  cmd->add_option("--trace", f->trace, "generated trace id or FILE.npy")->capture_default_str();
  auto* model_opt = cmd->add_option(
      "--model", f->model, "instead of --trace: this model's (.kvm, .gguf, safetensors) full-cache attention over --text");
  add_context_option(cmd, *context, model_opt);
  cmd->add_option("--text", f->text, "with --model: the text (its first context-length bytes)")->needs(model_opt);
  model_opt->needs("--text");
  cmd->add_option("--layer", f->layer, "with --model: only this layer's heads")->needs(model_opt);
  cmd->add_option("--lags", f->lags, "comma-separated lags k")->capture_default_str();
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  return {cmd, [f, cmd, context] { return run_persistence(*f, cmd, *context); }};
}

Command add_trace_command(CLI::App& app) {
  auto f = std::make_shared<TraceArgs>();
  auto* cmd = app.add_subcommand(
      "trace", "Inspect or export a trace. Generated ids: decode-4096, stale-spike-4096, "
               "recalled-fact-4096; or a FILE.npy of recorded attention ([N, N] or [H, N, N])");
  add_trace_options(cmd, f->trace, f->steps);
  cmd->add_flag("--hash", f->hash, "print the FNV-1a parity hash of the steps as a decimal number (one per head)");
  cmd->add_option("--out", f->out, "write the trace as an [N, N] float32 .npy (row t = step t's weights)");
  cmd->add_flag("--force", f->force, "with --out: replace an existing file");
  return {cmd, [f] { return run_trace(*f); }};
}

Command add_simd_command(CLI::App& app) {
  auto format = std::make_shared<std::string>("table");
  auto* cmd = app.add_subcommand(
      "simd", "Show the SIMD targets this build holds, those the CPU runs, and the one in use "
              "(set KVEVICT_SIMD=baseline|sse4|avx2|avx512|avx512-vnni to narrow it)");
  cmd->add_option("--format", *format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))->capture_default_str();
  return {cmd, [format] {
            cli::print_simd(std::cout, simd::compiled_targets(), simd::supported_targets(), simd::active_target(),
                            *format);
            return 0;
          }};
}

Command add_schema_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "schema", "Print, as JSON, the one shape every command's JSON has ({\"command\", \"model\", \"rows\": [...]}, "
                "then a few per-result members) and, for each command, its rows' fields and those members: name, "
                "type, unit, description, in output order");
  return {cmd, [] {
            std::cout << result_schema_json() << '\n';
            return 0;
          }};
}

Command add_vectors_command(CLI::App& app) {
  auto paths = std::make_shared<std::vector<std::string>>();
  auto* cmd = app.add_subcommand("vectors", "Replay test-vector files or folders of *.vectors.json");
  cmd->add_option("paths", *paths, "files or folders")->required();
  return {cmd, [paths] { return run_vectors_command(*paths); }};
}

}  // namespace kvevict::cli
