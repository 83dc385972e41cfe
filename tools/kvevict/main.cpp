// kvevict -- the command-line tool. Parsing and printing only: every decision
// is made by the library, where the bindings reach it too. This file builds
// the app, registers the commands (commands.h, one file per family) in
// --help's order, refuses what does not parse and runs the parsed command.
#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/params.h"
#include "kvevict/core/simd.h"

namespace {

using namespace kvevict;

// A flag the command does not have, as typed: named, with the command's
// nearest flag (the parser alone says "--policy is required" for --polcy, or
// lists it among "arguments not expected").
std::optional<std::string> unknown_flag(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  CLI::App* sub = nullptr;
  try {
    sub = app.get_subcommand(argv[1]);
  } catch (const CLI::OptionNotFound&) {
    return std::nullopt;
  }
  std::vector<std::string> flags;
  for (const CLI::Option* opt : sub->get_options()) {
    for (const std::string& n : opt->get_lnames()) flags.push_back("--" + n);
  }
  const auto has = [&](const std::string& f) { return std::find(flags.begin(), flags.end(), f) != flags.end(); };
  for (int i = 2; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg.size() < 3 || arg.substr(0, 2) != "--") continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (has(name)) continue;
    std::string near = nearest_name(name, flags);
    // One list flag for another command's one-value flag, and the reverse.
    for (const auto& [a, b] : {std::pair<const char*, const char*>{"--policy", "--policies"}, {"--policies", "--policy"},
                               {"--budget", "--budgets"}, {"--budgets", "--budget"}}) {
      if (near.empty() && name == a && has(b)) near = b;
    }
    return fmt::format("'{}' is not a flag of 'kvevict {}'{} (kvevict {} --help)", name, sub->get_name(),
                       near.empty() ? "" : fmt::format(": did you mean '{}'?", near), sub->get_name());
  }
  return std::nullopt;
}

// Values checked as the command line is parsed: a value a flag does not take
// is a usage error (exit 2), as the manual says, not a refusal after it.
void check_values(CLI::App& app) {
  // parse_integer_list's reason ("value 2 of '256,abc' ('abc') is not an
  // integer"), without the name it was given here: the parser names the flag.
  const auto list_problem = [](const ParameterError& e) {
    const std::string what = e.what();
    const std::string_view prefix = "a list: ";
    return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
  };
  const CLI::Validator integers(
      [list_problem](std::string& value) -> std::string {
        try {
          (void)parse_integer_list(value, "a list");
        } catch (const ParameterError& e) {
          return list_problem(e);
        }
        return {};
      },
      "INT[,INT...]", "integers");
  const CLI::Validator budgets(
      [list_problem](std::string& value) -> std::string {
        if (value.find_first_not_of(" ") == std::string::npos) return "the budget is empty: give a number of positions";
        try {
          for (const std::int64_t b : parse_integer_list(value, "a list")) {
            if (b < 1) return fmt::format("{} is not a budget: a cache keeps at least 1 position", b);
          }
        } catch (const ParameterError& e) {
          return list_problem(e);
        }
        return {};
      },
      "N[,N...]", "budgets");
  for (CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    for (CLI::Option* opt : sub->get_options()) {
      const std::string name = opt->get_name();
      if (name == "--budget" || name == "--budgets") {
        opt->check(budgets);
      } else if (name == "--lags" || name == "--sequences" || name == "--chunk" || name == "--lengths" ||
                 name == "--threads" || name == "--kv-memory" || (name == "--tokens" && sub->get_name() == "logits")) {
        opt->check(integers);
      } else if (name == "--context" && sub->get_name() != "random-model") {
        opt->check(CLI::Range(2U, 1U << 24).description(""));
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "kvevict: KV-cache eviction policies for LLM decoding, measured on reproducible traces.\n"
      "Retained attention mass and heavy-hitter recall are proxies for model quality."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "kvevict 0.1.0");
  app.footer(
      "Exit status: 0 done; 2 a usage error, the command line does not parse (an unknown command or flag, a "
      "missing flag or value, a value not one a flag takes); 1 anything refused after that (an unknown policy or "
      "trace, a parameter outside its rule, a file missing or malformed) or work that fails (a vector). Either "
      "way the reason is one line on stderr: kvevict: error: ...");

  // Every model command's --context.
  const cli::ModelContext model_context = std::make_shared<cli::ModelLoad>();
  // In --help's order.
  const std::vector<cli::Command> commands = {
      cli::add_list_command(app),
      cli::add_run_command(app),
      cli::add_compare_command(app, model_context),
      cli::add_perplexity_command(app, model_context),
      cli::add_stream_command(app, model_context),
      cli::add_serve_bench_command(app, model_context),
      cli::add_tasks_command(app, model_context),
      cli::add_choose_command(app, model_context),
      cli::add_record_command(app, model_context),
      cli::add_persistence_command(app, model_context),
      cli::add_sweep_command(app, model_context),
      cli::add_trace_command(app),
      cli::add_bench_command(app, model_context),
      cli::add_report_command(app),
      cli::add_simd_command(app),
      cli::add_schema_command(app),
      cli::add_random_model_command(app),
      cli::add_convert_command(app),
      cli::add_logits_command(app, model_context),
      cli::add_tokenize_command(app),
      cli::add_inspect_command(app, model_context),
      cli::add_vectors_command(app),
      cli::add_llama_command(app),
  };

  check_values(app);

  // A first word that names no command is refused here, with the nearest
  // one, before the parser reports it as an unexpected argument.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
    }
    if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
      const std::string near = nearest_name(argv[1], names);
      return cli::usage_error(fmt::format("'{}' is not a kvevict command{} (kvevict --help lists them)", argv[1],
                                          near.empty() ? "" : fmt::format(": did you mean '{}'?", near)));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here too, with exit 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (const std::optional<std::string> flag = unknown_flag(app, argc, argv)) return cli::usage_error(*flag);
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    return cli::usage_error(fmt::format("{} (kvevict {}--help)", e.what(),
                                        chosen.empty() ? "" : chosen.front()->get_name() + " "));
  }

  try {
    // Every command runs its kernels at the target KVEVICT_SIMD names, if set;
    // a target the CPU lacks is refused here, before any work.
    simd::select_from_environment();
    for (const cli::Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const std::exception& e) {
    std::cerr << "kvevict: error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
