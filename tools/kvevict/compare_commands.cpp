// compare and sweep: the policies replayed on a trace or, with --model,
// evicting for real in a model over a text. One command each; the run picks
// the path by --model.
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/eval/signal_files.h"
#include "kvevict/eval/threads.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "output.h"

namespace kvevict::cli {

namespace {

struct CompareArgs {
  std::string policies = "all";
  std::string budgets = "256,512,1024";
  std::vector<std::string> sets;
  std::string trace = "decode-4096";
  std::optional<std::int64_t> steps;
  std::string format = "table";
  PagedFlags paged;
  SignalFiles signals;
  bool skip_refused = false;
  ModelFlags on;
  RunFlags run;
  std::uint32_t prefill = 0;
  std::uint32_t window = 32;
};

int run_compare_model(const CompareArgs& f, const CLI::App* cmd, const ModelLoad& context) {
  check_model_source(cmd, f.signals);
  CompareRequest request;
  request.policies = model_compare_policies(f.policies);
  request.budgets = parse_integer_list(cmd->count("--budgets") > 0 ? f.budgets : "64,128,256,512", "--budgets");
  request.overrides = parse_sets(f.sets);
  request.skip_refused = f.skip_refused;
  print_skipped("compare", request);
  const Progress progress("compare", f.run, f.on.model);
  const auto model = open_model(f.on.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.on.text);
  ModelRunOptions options;
  options.max_windows = f.on.windows;
  options.paged = paged_of(f.paged);
  options.prefill = f.prefill;
  options.prefill_window = f.window;
  options.kv = kv_of(f.on.kv);
  options.progress = progress.fn("tokens");
  const std::vector<PerplexityRow> rows = compare_model(*model, text, request, options);
  cli::print_perplexity(std::cout, rows, f.format, {"compare", f.on.model});
  if (f.format == "table") {
    std::cout << fmt::format(
        "\nranked by perplexity at budget {}; {} predictions over {} of {}. {}\n",
        ranking_budget(request.budgets), rows.front().predictions, f.on.text, model->path(),
        f.prefill > 0
            ? fmt::format("Each window's first {} bytes read with the full cache, then compressed once to the "
                          "budget from the last {} attention rows; only the bytes after them are scored.",
                          f.prefill, f.window)
            : fmt::format("Retained mass and recall: the same policy replayed on the model's full-cache "
                          "attention, mean over its {} caches.",
                          model->config().head_count()));
  }
  return 0;
}

int run_compare_trace(const CompareArgs& f) {
  CompareRequest request;
  request.policies = replay_policy_list(f.policies, f.signals);
  request.budgets = parse_integer_list(f.budgets, "--budgets");
  request.overrides = parse_sets(f.sets);
  request.skip_refused = f.skip_refused;
  print_skipped("compare", request);
  use_threads(f.run.threads);
  EvaluateOptions options = options_of(f.trace, f.steps, "compare");
  options.paged = paged_of(f.paged);
  options.signals = f.signals;
  const std::vector<RunRow> rows = compare(request, options);
  cli::print_rows(std::cout, rows, f.format, "compare", true);
  if (f.format == "table") {
    std::cout << fmt::format(
        "\nranked by retained mass at budget {}; {} steps of {}. Both metrics are proxies: "
        "attention kept, not model quality.\n",
        ranking_budget(request.budgets),
        rows.front().totals.steps / static_cast<std::int64_t>(rows.front().heads), rows.front().trace);
  }
  return 0;
}

struct SweepArgs {
  std::string policy;
  std::string param;
  std::string budgets = "256,512,1024";
  std::vector<std::string> sets;
  std::string trace = "decode-4096";
  std::optional<std::int64_t> steps;
  std::string format = "table";
  bool skip_refused = false;
  SignalFiles signals;
  ModelFlags on;
  RunFlags run;
};

int run_sweep(const SweepArgs& f, const CLI::App* cmd, const ModelLoad& context) {
  SweepRequest request;
  request.policy = find_policy(f.policy).name;
  const std::size_t eq = f.param.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw ParameterError(fmt::format("--param '{}' is not KEY=V1,V2,...", f.param));
  }
  request.param = f.param.substr(0, eq);
  request.values = parse_integer_list(f.param.substr(eq + 1), request.param);
  request.budgets = parse_integer_list(cmd->count("--budgets") > 0 || !f.on.given() ? f.budgets : "64,128,256",
                                       "--budgets");
  request.params = parse_sets(f.sets);
  request.skip_refused = f.skip_refused;
  std::vector<std::string> skipped;
  const std::vector<RunSpec> specs = sweep_specs(request, &skipped);
  for (const std::string& line : skipped) std::cerr << "sweep: skipped " << line << '\n';
  std::vector<std::string> extra;
  if (request.param != "budget") extra.push_back(request.param);
  if (f.on.given()) {
    check_model_source(cmd, f.signals);
    const Progress progress("sweep", f.run, f.on.model);
    const auto model = open_model(f.on.model, context);
    const std::vector<std::uint8_t> text = read_model_text(f.on.text);
    ModelRunOptions options;
    options.max_windows = f.on.windows;
    options.kv = kv_of(f.on.kv);
    options.progress = progress.fn("tokens");
    cli::print_perplexity(std::cout, perplexity(*model, text, specs, options), f.format, {"sweep", f.on.model},
                          extra);
    return 0;
  }
  use_threads(f.run.threads);
  EvaluateOptions options = options_of(f.trace, f.steps, "sweep");
  options.signals = f.signals;
  cli::print_rows(std::cout, evaluate(specs, options), f.format, "sweep", false, extra);
  return 0;
}

}  // namespace

Command add_compare_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<CompareArgs>();
  auto* cmd = app.add_subcommand(
      "compare", "Every chosen policy at every budget, ranked by retained mass at the middle budget");
  cmd->add_option("--policies", f->policies,
                  "comma-separated names, or all: the policies the source can feed (a trace: the seven attention "
                  "and positional ones; with --keys, nine; with --values and --queries too, all ten); with --model, "
                  "the seven: name knorm, keydiff or expected-attention to add them")
      ->capture_default_str();
  cmd->add_option("--budgets", f->budgets,
                  "comma-separated budgets (default: 256,512,1024 on a trace; 64,128,256,512 with --model)");
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  add_paged_options(cmd, f->paged);
  add_trace_options(cmd, f->trace, f->steps);
  add_signal_options(cmd, f->signals);
  cmd->add_flag("--skip-refused", f->skip_refused,
                "leave out the policy x budget pairs a policy's rules refuse (e.g. Scissorhands' window at a small "
                "budget), each named on stderr, instead of refusing the comparison");
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  add_run_flags(cmd, f->run);
  add_model_options(cmd, f->on,
                    "rank by perplexity of this model (.kvm, .gguf or a safetensors folder) evicting for real, with "
                    "the proxies on its own attention (budgets default to 64,128,256,512)",
                    *context);
  cmd->add_option("--prefill", f->prefill,
                  "with --model: read each window's first N bytes with the full cache, compress once to the "
                  "budget, score the rest (no proxies); 0 = evict while decoding")
      ->needs("--model");
  cmd->add_option("--window", f->window, "with --prefill: attention rows the compression scores from")
      ->needs("--prefill")->capture_default_str();
  return {cmd, [f, cmd, context] { return f->on.given() ? run_compare_model(*f, cmd, *context) : run_compare_trace(*f); }};
}

Command add_sweep_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<SweepArgs>();
  auto* cmd = app.add_subcommand("sweep", "One policy, one parameter over a list of values, at each budget");
  cmd->add_option("--policy", f->policy, "policy name")->required();
  cmd->add_option("--param", f->param, "KEY=V1,V2,... e.g. recentWindow=16,32,64")->required();
  cmd->add_option("--budgets", f->budgets, "comma-separated budgets")->capture_default_str();
  cmd->add_option("--set", f->sets, "other parameters as KEY=VALUE (repeatable)");
  cmd->add_flag("--skip-refused", f->skip_refused,
                "leave out the value x budget pairs the policy's rules refuse (e.g. a recentWindow not below the "
                "budget), each named on stderr, instead of stopping at the first");
  add_trace_options(cmd, f->trace, f->steps);
  add_signal_options(cmd, f->signals);
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  add_run_flags(cmd, f->run);
  add_model_options(cmd, f->on,
                    "sweep on this model (.kvm, .gguf or a safetensors folder) evicting for real: perplexity rows "
                    "over --text with their paired intervals (budgets default to 64,128,256)",
                    *context);
  return {cmd, [f, cmd, context] { return run_sweep(*f, cmd, *context); }};
}

}  // namespace kvevict::cli
