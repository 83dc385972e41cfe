// A model evaluated: perplexity, stream, tasks, record and logits.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
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
#include "kvevict/eval/npy.h"
#include "kvevict/eval/task_rows.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "kvevict/model/evaluation/stream.h"
#include "kvevict/model/evaluation/tasks.h"
#include "kvevict/model/vocab/vocab.h"
#include "output.h"

namespace kvevict::cli {

namespace {

struct PerplexityArgs {
  std::string model;
  std::string text;
  std::string policies;
  std::string budgets;
  std::vector<std::string> sets;
  std::uint32_t windows = 0;
  std::string format = "table";
  RunFlags run;
  std::uint32_t prefill = 0;
  std::uint32_t window = 32;
  PagedFlags paged;
  KvFlags kv;
  std::string memory;
};

// --policy's runs at --budget, or at each policy's own default budget.
std::vector<RunSpec> perplexity_specs(const PerplexityArgs& f) {
  CompareRequest request;
  request.policies = parse_policy_list(f.policies);
  request.overrides = parse_sets(f.sets);
  request.budgets.clear();
  if (!f.budgets.empty()) {
    request.budgets = parse_integer_list(f.budgets, "--budget");
  } else {
    for (const std::string& name : request.policies) {
      const ParamMap defaults = find_policy(name).effective({});
      request.budgets.push_back(defaults.front().second);
    }
    std::sort(request.budgets.begin(), request.budgets.end());
    request.budgets.erase(std::unique(request.budgets.begin(), request.budgets.end()), request.budgets.end());
  }
  return compare_specs(request);
}

int run_perplexity(const PerplexityArgs& f, const ModelLoad& context) {
  const Progress progress("perplexity", f.run, f.model);
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  std::vector<RunSpec> specs;
  if (!f.policies.empty()) {
    specs = perplexity_specs(f);
  } else if (!f.budgets.empty() || !f.sets.empty() || !f.memory.empty()) {
    throw ParameterError("--budget, --set and --kv-memory need --policy (without it only the full cache is scored)");
  }
  ModelRunOptions options;
  options.max_windows = f.windows;
  options.paged = paged_of(f.paged);
  options.prefill = f.prefill;
  options.prefill_window = f.window;
  options.progress = progress.fn("tokens");
  if (!f.memory.empty()) {
    MemoryRequest request;
    request.policies = parse_policy_list(f.policies);
    request.overrides = parse_sets(f.sets);
    for (const std::int64_t m : parse_integer_list(f.memory, "--kv-memory")) {
      if (m < 1) throw ParameterError(fmt::format("--kv-memory: {} bytes is not a memory budget", m));
      request.memories.push_back(m);
    }
    request.formats = kv_list_of(f.kv);
    cli::print_perplexity(std::cout, perplexity_at_memory(*model, text, request, options), f.format,
                          {"perplexity", f.model});
    return 0;
  }
  options.kv = kv_of(f.kv);
  const std::vector<PerplexityRow> rows = perplexity(*model, text, specs, options);
  cli::print_perplexity(std::cout, rows, f.format, {"perplexity", f.model});
  return 0;
}

struct StreamArgs {
  std::string model;
  std::string text;
  std::string policies = "default";
  std::string budgets = "256,512";
  std::vector<std::string> sets;
  std::string positions = "original,cache";
  std::uint32_t tokens = 0;
  std::uint32_t segment = 0;
  bool no_full = false;
  std::uint32_t recompute = 0;
  std::uint32_t recompute_tokens = 0;
  bool sinks = false;
  std::string svg;
  bool force = false;
  std::string format = "table";
  RunFlags run;
  KvFlags kv;
  std::string granularity;
};

int run_stream(const StreamArgs& f, const ModelLoad& context) {
  const Progress progress("stream", f.run, f.model);
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  if (f.sinks) {
    cli::print_sinks(std::cout, sink_shares(*model, text, f.tokens), f.format, {"stream", f.model});
    return 0;
  }
  StreamRequest request;
  const std::vector<std::int64_t> budgets = parse_integer_list(f.budgets, "--budget");
  if (!f.policies.empty() && f.policies != "none") {
    request.specs = stream_specs(f.policies, budgets, parse_sets(f.sets));
  }
  request.positions.clear();
  for (const std::string& p : split_list(f.positions, "--positions")) {
    request.positions.push_back(parse_position_mode(p));
  }
  request.full_cache = !f.no_full;
  request.tokens = f.tokens;
  request.segment = f.segment;
  request.recompute_window = f.recompute;
  request.recompute_tokens = f.recompute_tokens;
  if (f.recompute > 0 && f.recompute_tokens == 0) {
    throw ParameterError("--recompute needs --recompute-tokens N: it costs N x the window steps");
  }
  ModelRunOptions options;
  options.kv = kv_of(f.kv);
  options.paged = granularity_of(f.granularity);
  options.progress = progress.fn("tokens");
  if (!f.svg.empty()) check_output_file(f.svg, f.force);  // before the work, not after
  const std::vector<StreamRow> rows = stream_perplexity(*model, text, request, options);
  if (std::any_of(rows.begin(), rows.end(), [](const StreamRow& r) { return r.past_trained_context; })) {
    std::fprintf(stderr,
                 "stream: note: runs with original positions went past the %u positions the model was trained "
                 "on, to rotary angles it never saw\n",
                 model->config().trained_context);
  }
  cli::print_stream(std::cout, rows, f.format, {"stream", f.model});
  if (!f.svg.empty()) {
    write_file_atomically(f.svg, cli::stream_chart_svg(rows, model->config().context, f.model), f.force);
  }
  return 0;
}

struct TasksArgs {
  std::string model;
  std::string text;
  std::string names = "passkey";
  std::string lengths = "1024";
  std::string policies = "all";
  std::string budgets = "128";
  std::string moments = "decode";
  std::vector<std::string> sets;
  std::uint32_t depths = 5;
  std::uint32_t samples = 20;
  std::uint32_t seed = 1;
  std::uint32_t window = 32;
  std::uint32_t chunk = 0;
  std::string format = "markdown";
  RunFlags run;
  KvFlags kv;
  std::string granularity;
};

int run_tasks_command(const TasksArgs& f, const ModelLoad& context) {
  const Progress progress("tasks", f.run, f.model);
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  TaskRequest request;
  request.tasks.clear();
  if (f.names == "all") {
    request.tasks = task_names();
  } else {
    for (const std::string& t : split_list(f.names, "--tasks")) request.tasks.push_back(t);
  }
  request.lengths.clear();
  for (const std::int64_t l : parse_integer_list(f.lengths, "--lengths")) {
    if (l < 1 || l > std::int64_t{1} << 20) throw ParameterError(fmt::format("--lengths: {} is not a length", l));
    request.lengths.push_back(static_cast<std::uint32_t>(l));
  }
  if (f.policies == "none") {
    request.budgets.clear();
  } else {
    request.policies = parse_policy_list(f.policies);
    request.budgets = parse_integer_list(f.budgets, "--budgets");
  }
  request.moments.clear();
  for (const std::string& m : split_list(f.moments, "--moments")) request.moments.push_back(parse_moment(m));
  request.overrides = parse_sets(f.sets);
  request.depths = f.depths;
  request.samples = f.samples;
  request.seed = f.seed;
  request.window = f.window;
  request.chunk = f.chunk;
  ModelRunOptions options;
  options.kv = kv_of(f.kv);
  options.paged = granularity_of(f.granularity);
  options.progress = progress.fn("tokens");
  const std::vector<TaskRow> rows = run_tasks(model, text, request, options);
  const JsonSource source{"tasks", f.model};
  if (f.format == "json") {
    std::cout << tasks_json(rows, source);
  } else if (f.format == "csv") {
    cli::print_csv(std::cout, tasks_json(rows, source));  // the JSON's keys and values, as every command's CSV
  } else {
    std::cout << tasks_markdown(rows);
  }
  return 0;
}

struct RecordArgs {
  std::string model;
  std::string text;
  std::string out;
  std::uint32_t tokens = 0;
  bool force = false;
  RunFlags run;
  RecordFiles files;
};

int run_record(RecordArgs& f, const ModelLoad& context) {
  const Progress progress("record", f.run, f.model);
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  f.files.attention = f.out;
  f.files.overwrite = f.force;
  const std::uint32_t n = record_signals(*model, text, f.files, f.tokens, progress.fn("tokens"));
  const ModelConfig& c = model->config();
  const bool bytes = model->vocabulary().kind() == Vocabulary::Kind::kBytes;
  std::cerr << fmt::format("wrote {}: [{}, {}, {}] float32 ({} layers x {} KV heads, {} {} of {})\n", f.out,
                           c.head_count(), n, n, c.layers, c.kv_heads, n,
                           bytes ? "bytes" : "tokens (BOS included where the model adds it)", f.text);
  const std::pair<const std::filesystem::path*, std::uint32_t> more[] = {
      {&f.files.keys, c.head_dim()}, {&f.files.values, c.head_dim()}, {&f.files.queries, c.group() * c.head_dim()}};
  for (const auto& [file, width] : more) {
    if (!file->empty()) {
      std::cerr << fmt::format("wrote {}: [{}, {}, {}] float32\n", file->string(), c.head_count(), n, width);
    }
  }
  return 0;
}

struct LogitsArgs {
  std::string model, tokens, out, policy;
  std::int64_t budget = 0;
  std::vector<std::string> sets;
  bool force = false;
  RunFlags run;
};

int run_logits(const LogitsArgs& f, const ModelLoad& context) {
  check_output_file(f.out, f.force);  // before the work
  const Progress progress("logits", f.run, f.model);
  const auto model = open_model(f.model, context);
  std::vector<Token> tokens;
  for (const std::int64_t t : parse_integer_list(f.tokens, "--tokens")) {
    if (t < 0 || t >= std::int64_t{model->config().vocab}) {
      throw InputError(fmt::format("--tokens: {} is outside the model's vocabulary of {}", t, model->config().vocab));
    }
    tokens.push_back(static_cast<Token>(t));
  }
  std::optional<RunSpec> spec;
  if (!f.policy.empty()) {
    ParamMap params = parse_sets(f.sets);
    std::int64_t budget = f.budget;
    if (budget == 0) budget = find_policy(f.policy).effective(params).front().second;
    spec = RunSpec{f.policy, params, budget};
  }
  const std::vector<float> logits = model_logits(*model, tokens, spec ? &*spec : nullptr, progress.fn("tokens"));
  const std::uint64_t shape[] = {tokens.size(), model->config().vocab};
  write_npy_floats(shape, logits, f.out, f.force);
  std::cerr << fmt::format("wrote {} ([{}, {}] float32)\n", f.out, tokens.size(), model->config().vocab);
  return 0;
}

}  // namespace

Command add_perplexity_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<PerplexityArgs>();
  auto* cmd = app.add_subcommand(
      "perplexity",
      "Perplexity of a model (.kvm, .gguf or a safetensors folder) over a text with every layer and head "
      "evicting through a policy, "
      "beside the full cache's");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  cmd->add_option("--text", f->text, "the text to score (tokenized by the model's own tokenizer), e.g. model/heldout-sample.txt")->required();
  add_context_option(cmd, *context);
  cmd->add_option("--policy", f->policies,
                  "policy names, comma-separated, or all (all ten; default: the full cache only)");
  cmd->add_option("--budget", f->budgets, "budgets, comma-separated (default: each policy's)");
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  cmd->add_option("--max-windows", f->windows, "use only the first N context windows (0 = all)");
  cmd->add_option("--prefill", f->prefill,
                  "read each window's first N bytes with the full cache, compress once to the budget, score the "
                  "rest; 0 = evict while decoding");
  cmd->add_option("--window", f->window, "with --prefill: attention rows the compression scores from")
      ->needs("--prefill")->capture_default_str();
  add_paged_options(cmd, f->paged);
  add_kv_options(cmd, f->kv);
  cmd->add_option("--kv-memory", f->memory,
                  "bytes a cache may hold, comma-separated: each --policy runs at every --kv-precision (a list here) "
                  "with the most positions that fit, beside the fp32 full cache: floor((bytes - R x (8d - b)) / b), "
                  "b the bytes a stored position costs, d the head size, R the --kv-residual window's rows kept at "
                  "fp32 (int4: 32); floor(bytes / 8d) when R is longer than that cache can hold, which keeps every "
                  "row at fp32")
      ->excludes("--budget");
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  return {cmd, [f, context] { return run_perplexity(*f, *context); }};
}

Command add_stream_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<StreamArgs>();
  auto* cmd = app.add_subcommand(
      "stream",
      "A long text read as one sequence, past the model's context, with every cache held at its budget: bits per "
      "byte by segment of the stream, for each policy with keys at their original positions or at their index in "
      "the cache (docs/streaming.md)");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  cmd->add_option("--text", f->text, "the text to stream, e.g. build/heldout-split.txt (make heldout)")->required();
  add_context_option(cmd, *context);
  cmd->add_option("--policy", f->policies,
                  "NAME or NAME:KEY=VALUE[:KEY=VALUE], comma-separated; default: sliding-window, "
                  "streaming-llm:sinks=1, streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv")
      ->capture_default_str();
  cmd->add_option("--budget", f->budgets, "positions a cache holds, comma-separated")->capture_default_str();
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  cmd->add_option("--positions", f->positions,
                  "where kept keys sit in rotary space, comma-separated: original (their tokens' positions) or "
                  "cache (their index among the positions held)")
      ->capture_default_str();
  cmd->add_option("--tokens", f->tokens, "tokens of the stream, BOS included (0 = the whole text)");
  cmd->add_option("--segment", f->segment, "tokens a segment of the report (0 = the model's context)");
  cmd->add_flag("--no-full-cache", f->no_full, "leave out the full cache (which stops at the context)");
  cmd->add_option("--recompute", f->recompute,
                  "also StreamingLLM's baseline: each token predicted by a cache rebuilt over the N tokens before it "
                  "(N steps a token)");
  cmd->add_option("--recompute-tokens", f->recompute_tokens, "with --recompute: over the stream's first N tokens")
      ->needs("--recompute");
  cmd->add_flag("--sinks", f->sinks,
                "print instead the share of attention the first position and the first four draw, by layer, on the "
                "full cache over the first context of the text");
  add_granularity_option(cmd, f->granularity);
  cmd->add_option("--svg", f->svg, "also write the chart of bits per byte along the stream to this SVG file");
  cmd->add_flag("--force", f->force, "with --svg: replace the file if it exists");
  add_kv_options(cmd, f->kv);
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  return {cmd, [f, context] { return run_stream(*f, *context); }};
}

Command add_tasks_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<TasksArgs>();
  auto* cmd = app.add_subcommand(
      "tasks",
      "Retrieval tasks (passkey, multikey, multivalue, vartrack, copy) answered by a model (.kvm, .gguf or a "
      "safetensors folder) with "
      "greedy decoding while its cache is compressed: exact-match accuracy by policy, budget, moment, length "
      "and needle depth");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  add_context_option(cmd, *context);
  cmd->add_option("--text", f->text, "filler text the needles are hidden in, e.g. model/heldout-sample.txt")
      ->required();
  cmd->add_option("--tasks", f->names, "comma-separated: passkey, multikey, multivalue, vartrack, copy, or all")
      ->capture_default_str();
  cmd->add_option("--lengths", f->lengths,
                  "sample lengths in positions (bytes for kvevict-tiny, tokens for a model with a tokenizer), "
                  "comma-separated (at most the model's context)")
      ->capture_default_str();
  cmd->add_option("--policies", f->policies,
                  "comma-separated names, all (all ten, the key-aware three too), or none (the full cache only)")
      ->capture_default_str();
  cmd->add_option("--budgets", f->budgets, "comma-separated budgets (positions per cache)")->capture_default_str();
  cmd->add_option("--moments", f->moments,
                  "when the cache is compressed: decode (token by token), prefill (once, before the question), "
                  "prefill-query (once, after it); comma-separated")
      ->capture_default_str();
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  cmd->add_option("--depths", f->depths, "needle depths per length, spread evenly")
      ->check(CLI::Range(1U, 100U))->capture_default_str();
  cmd->add_option("--samples", f->samples, "samples per task x length x depth")
      ->check(CLI::Range(1U, 100000U))->capture_default_str();
  cmd->add_option("--seed", f->seed, "samples are reproducible from this seed")->capture_default_str();
  cmd->add_option("--window", f->window, "prefill moments: attention rows the compression scores from")
      ->check(CLI::Range(1U, 1U << 20))->capture_default_str();
  cmd->add_option("--chunk", f->chunk,
                  "prefill moments: read the prompt in chunks of N bytes, compressing after each (0 = once)")
      ->check(CLI::Range(0U, 1U << 20))->capture_default_str();
  add_granularity_option(cmd, f->granularity);
  add_kv_options(cmd, f->kv);
  cmd->add_option("--format", f->format, "markdown, json or csv")
      ->check(CLI::IsMember({"markdown", "json", "csv"}))->capture_default_str();
  return {cmd, [f, context] { return run_tasks_command(*f, *context); }};
}

Command add_record_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<RecordArgs>();
  auto* cmd = app.add_subcommand(
      "record", "Record a model's full-cache attention over a text as an [layers x heads, N, N] .npy trace "
                "that run, compare and report replay with --trace FILE.npy; with --keys, --values and --queries, "
                "the signals the decoder gives the key-aware policies beside it, which run and compare replay "
                "with the same flags");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  add_context_option(cmd, *context);
  cmd->add_option("--text", f->text, "the text, tokenized by the model's own tokenizer; its first N tokens are "
                                     "recorded")->required();
  cmd->add_option("--out", f->out, "the attention .npy file to write, [layers x heads, N, N]")->required();
  cmd->add_option("--tokens", f->tokens, "N: tokens to record, BOS included where the model adds it (default and most: the model's context)");
  cmd->add_option("--keys", f->files.keys,
                  "also write each cache's keys as stored (after RoPE), [layers x heads, N, headDim] float32, for "
                  "run/compare --keys");
  cmd->add_option("--values", f->files.values, "also write each cache's values, [layers x heads, N, headDim]");
  cmd->add_option("--queries", f->files.queries,
                  "also write each cache's queries before RoPE (its query heads, head-major), "
                  "[layers x heads, N, groups x headDim]");
  cmd->add_flag("--force", f->force, "replace existing files");
  return {cmd, [f, context] { return run_record(*f, *context); }};
}

Command add_logits_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<LogitsArgs>();
  auto* cmd = app.add_subcommand(
      "logits", "Write a model's logits after each of the given tokens as an [n, vocab] float32 .npy (with the full "
                "cache, or a policy evicting on every cache)");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  cmd->add_option("--tokens", f->tokens, "token ids, comma-separated, fed as given (no BOS added)")->required();
  cmd->add_option("--out", f->out, "the .npy file to write")->required();
  cmd->add_option("--policy", f->policy, "a policy on every cache (default: the full cache)");
  cmd->add_option("--budget", f->budget, "with --policy: positions each cache keeps")->needs("--policy");
  cmd->add_option("--param", f->sets, "with --policy: KEY=VALUE (repeatable)")->needs("--policy");
  cmd->add_flag("--force", f->force, "replace an existing file");
  add_context_option(cmd, *context);
  return {cmd, [f, context] { return run_logits(*f, *context); }};
}

}  // namespace kvevict::cli
