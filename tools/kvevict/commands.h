// kvevict's commands: each add_*_command registers one subcommand (its
// flags, in --help's order) on the app and returns it with the work it runs
// once parsed. The flags live in a struct the run closure owns; main.cpp
// registers every command in order, parses and runs the parsed one.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include <CLI/CLI.hpp>

#include "cli_options.h"

namespace kvevict::cli {

struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;  // the exit status; a refusal throws
};

// Every model command's --context and --matmul (ModelLoad), one value of
// each for all: main.cpp makes it, the commands bind to it.
using ModelContext = std::shared_ptr<ModelLoad>;

// trace_commands.cpp: the policies and traces.
Command add_list_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_persistence_command(CLI::App& app, const ModelContext& context);
Command add_trace_command(CLI::App& app);
Command add_simd_command(CLI::App& app);
Command add_schema_command(CLI::App& app);
Command add_vectors_command(CLI::App& app);

// compare_commands.cpp: compare and sweep, on a trace or, with --model, on a model.
Command add_compare_command(CLI::App& app, const ModelContext& context);
Command add_sweep_command(CLI::App& app, const ModelContext& context);

// eval_commands.cpp: a model evaluated.
Command add_perplexity_command(CLI::App& app, const ModelContext& context);
Command add_stream_command(CLI::App& app, const ModelContext& context);
Command add_tasks_command(CLI::App& app, const ModelContext& context);
Command add_record_command(CLI::App& app, const ModelContext& context);
Command add_logits_command(CLI::App& app, const ModelContext& context);
// choose_command.cpp: which policy, and what it costs.
Command add_choose_command(CLI::App& app, const ModelContext& context);

// model_file_commands.cpp: model files written, converted and read.
Command add_random_model_command(CLI::App& app);
Command add_convert_command(CLI::App& app);
Command add_tokenize_command(CLI::App& app);
Command add_inspect_command(CLI::App& app, const ModelContext& context);

// bench_commands.cpp: timings.
Command add_serve_bench_command(CLI::App& app, const ModelContext& context);
Command add_bench_command(CLI::App& app, const ModelContext& context);

// report_command.cpp: the HTML report.
Command add_report_command(CLI::App& app);

// llama_command.cpp: kvevict llama, run by kvevict-llama where it is built.
Command add_llama_command(CLI::App& app);

}  // namespace kvevict::cli
