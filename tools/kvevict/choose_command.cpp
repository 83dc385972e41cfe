// kvevict choose: which policy for this model at this budget, and what it
// costs, within a time budget (docs/choosing.md). The plan, the runs and the
// ranking are the library's (kvevict/model/evaluation/choose.h); this prints
// the plan first, then the table and the one-line answer.
#include <chrono>
#include <iostream>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/model/evaluation/choose.h"
#include "output.h"

namespace kvevict::cli {

namespace {

struct ChooseArgs {
  std::string model;
  std::string text = "model/heldout-sample.txt";
  std::string policies;
  std::int64_t budget = 256;
  double minutes = 15.0;
  std::uint32_t windows = 0;
  std::uint32_t samples = 0;
  std::string granularity;
  std::string format = "table";
  RunFlags run;
};

int run_choose(const ChooseArgs& f, const ModelLoad& context) {
  Progress progress("choose", f.run, f.model);
  if (f.windows == 0 || f.samples == 0) {  // timed: done by the budget, however much is left to do
    progress.ends_by(std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(f.minutes * 60.0)));
  }
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  ChooseRequest request;
  request.budget = f.budget;
  request.minutes = f.minutes;
  request.granularity = granularity_of(f.granularity);
  request.windows = f.windows;
  request.samples = f.samples;
  if (!f.policies.empty()) request.policies = parse_policy_list(f.policies);
  request.progress = progress.fn("tokens");
  // The plan, the recommendation and the commands are printed around the
  // table; markdown, csv and json are the rows alone (json with them as fields).
  const bool human = f.format == "table";
  const auto on_plan = [&](const ChoosePlan& p) {
    if (!human) return;
    if (p.probe_seconds == 0.0) {  // fixed: --windows and --samples
      std::cout << fmt::format(
          "plan: {} of {} windows of {} positions, passkey at {} positions, {} sample{} at each of {} depths, decode "
          "speed over {} tokens\n\n",
          p.windows, p.windows_available, p.context, p.length, p.samples, p.samples == 1 ? "" : "s", p.depths,
          p.decode_tokens);
    } else {
      std::cout << fmt::format(
          "plan for {:.1f} min (from a probe of {:.1f} s): about {} of {} windows of {} positions (about {:.0f} s "
          "each with every run), passkey at {} positions, about {} sample{} at each of {} depths (about {:.0f} s "
          "each), decode speed over {} tokens; each stage stops at its share of the time\n\n",
          f.minutes, p.probe_seconds, p.windows, p.windows_available, p.context, p.window_seconds, p.length, p.samples,
          p.samples == 1 ? "" : "s", p.depths, p.sample_seconds, p.decode_tokens);
    }
    std::cout.flush();
  };
  const ChooseResult result = choose(model, text, request, on_plan, f.model, f.text);
  const JsonSource source{"choose", f.model};
  if (f.format == "json") {
    std::cout << choose_json(result, source);
    return 0;
  }
  if (f.format == "csv") {  // the ranked rows; the plan and the answer are the JSON's other members
    print_csv(std::cout, choose_json(result, source));
    return 0;
  }
  if (f.format == "markdown") {
    std::cout << choose_markdown(result);
    return 0;
  }
  std::cout << choose_markdown(result) << "\n";
  std::cout << fmt::format("full cache: passkey {:.2f}, {} KV a sequence at the context\n", result.full_cache_accuracy,
                           result.full_cache_kv_bytes >= (1U << 20)
                               ? fmt::format("{:.1f} MiB", static_cast<double>(result.full_cache_kv_bytes) / (1 << 20))
                               : fmt::format("{:.1f} KiB", static_cast<double>(result.full_cache_kv_bytes) / (1 << 10)));
  std::cout << "recommendation: " << result.recommendation << "\n";
  std::cout << fmt::format("took {:.0f} s ({} windows of {} positions, {} passkey samples at each depth). To narrow "
                           "the intervals:\n",
                           result.seconds, result.windows, result.plan.context, result.samples);
  for (const std::string& c : result.narrow) std::cout << "  " << c << "\n";
  return 0;
}

}  // namespace

Command add_choose_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<ChooseArgs>();
  auto* cmd = app.add_subcommand(
      "choose", "Which policy to run on a model at a budget, and what it costs, within a time budget: perplexity with "
                "paired intervals, passkey accuracy and decode speed for every policy, ranked, with one line that "
                "recommends (docs/choosing.md)");
  cmd->add_option("--model", f->model, "the model: .kvm, .gguf or a safetensors folder")->required();
  add_run_flags(cmd, f->run);
  cmd->add_option("--text", f->text, "the text to score and hide passkeys in")->capture_default_str();
  add_context_option(cmd, *context);
  cmd->add_option("--budget", f->budget, "positions each cache keeps")->capture_default_str();
  cmd->add_option("--policies", f->policies, "policy names, comma-separated (default: every policy)");
  cmd->add_option("--minutes", f->minutes, "the time budget, probes included")->capture_default_str();
  cmd->add_option("--windows", f->windows, "fix the perplexity windows instead of planning them from the time (0: planned)");
  cmd->add_option("--samples", f->samples, "fix the passkey samples a depth instead of planning them (0: planned; at most 100)");
  add_granularity_option(cmd, f->granularity);
  cmd->add_option("--format", f->format, "table, markdown, json or csv")
      ->check(CLI::IsMember({"table", "markdown", "json", "csv"}))
      ->capture_default_str();
  return {cmd, [f, context] { return run_choose(*f, *context); }};
}

}  // namespace kvevict::cli
