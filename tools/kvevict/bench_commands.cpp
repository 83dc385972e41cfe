// Timings: serve-bench (sequences decoding together over one block pool) and
// bench (the policies' decode steps, or with --model a decoder's).
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "cli_options.h"
#include "commands.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/simd.h"
#include "kvevict/eval/bench.h"
#include "kvevict/model/decoder/rope.h"
#include "kvevict/model/serving/decode_bench.h"
#include "kvevict/model/serving/serve_bench.h"
#include "output.h"

namespace kvevict::cli {

namespace {

struct ServeBenchArgs {
  std::string model;
  std::string text;
  std::string sequences = "4";
  std::string policies = "none";
  std::int64_t budget = 128;
  std::string modes = "token";
  std::string sharing = "on";
  bool no_sharing = false;
  std::string chunks = "0";
  std::uint32_t prefix = 512;
  std::uint32_t tokens = 0;
  std::uint32_t prompt = 0;
  std::uint32_t window = 32;
  std::int64_t block_size = 16;
  std::uint64_t pool = 0;
  std::vector<std::string> sets;
  std::string granularity;
  std::string format = "table";
  RunFlags run;
  std::string positions = "original";
};

int run_serve_bench(const ServeBenchArgs& f, const CLI::App* cmd, const ModelLoad& context) {
  std::vector<std::uint32_t> sequences;
  for (const std::int64_t n : parse_integer_list(f.sequences, "--sequences")) {
    if (n < 1 || n > 4096) throw ParameterError(fmt::format("--sequences: {} is not 1 ... 4096", n));
    sequences.push_back(static_cast<std::uint32_t>(n));
  }
  const std::vector<std::string> policies = serve_policy_names(f.policies);
  std::vector<bool> sharing;
  if (f.no_sharing) {
    if (cmd->count("--sharing") > 0) throw ParameterError("give --sharing or --no-prefix-sharing, not both");
    sharing.push_back(false);
  } else {
    for (const std::string& v : split_list(f.sharing, "--sharing")) {
      if (v != "on" && v != "off") throw ParameterError(fmt::format("--sharing: '{}' is not on or off", v));
      sharing.push_back(v == "on");
    }
  }
  std::vector<std::uint32_t> chunks;
  for (const std::int64_t c : parse_integer_list(f.chunks, "--chunk")) {
    if (c < 0 || c > std::int64_t{1} << 20) throw ParameterError(fmt::format("--chunk: {} is not a chunk size", c));
    chunks.push_back(static_cast<std::uint32_t>(c));
  }
  if (f.block_size < 1 || f.block_size > std::int64_t{1} << 20) {
    throw ParameterError(fmt::format("--block-size ({}) must be 1 ... 1048576", f.block_size));
  }
  const Progress progress("serve-bench", f.run, f.model);
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  ServeBenchRequest request;
  request.runs = serve_runs(sequences, policies, f.budget, split_list(f.modes, "--modes"), sharing, chunks);
  request.shared_prefix = f.prefix;
  request.tokens = f.tokens;
  request.positions = parse_position_mode(f.positions);
  request.prompt = f.prompt;
  request.window = f.window;
  request.block_size = static_cast<std::uint32_t>(f.block_size);
  request.pool_blocks = f.pool;
  request.overrides = parse_sets(f.sets);
  request.granularity = granularity_of(f.granularity).granularity();
  request.progress = progress.fn("ticks");
  cli::print_serve(std::cout, serve_bench(model, text, request), f.format, {"serve-bench", f.model});
  return 0;
}

struct BenchArgs {
  std::string format = "table";
  std::string budgets = "512,4096";
  std::string policies = "all";
  double seconds = 0.25;
  bool no_compare = false;
  std::string simd;
  std::int64_t bank_instances = 16384;
  std::int64_t bank_budget = 1024;
  std::string model;
  std::string text = "model/heldout-sample.txt";
  std::uint32_t tokens = 1024;
  int rounds = 5;
  std::uint32_t prompt = 0;
  std::uint32_t chunk = 256;
  std::string prompt_logits = "all";
  std::string threads = "0";
  bool together = false;
};

// bench --model: a decoder timed over a text.
int run_bench_model(const BenchArgs& f, const CLI::App* cmd, const ModelLoad& context) {
  if (cmd->get_option("--bank-instances")->count() > 0 || cmd->get_option("--bank-budget")->count() > 0 ||
      f.no_compare || cmd->get_option("--seconds")->count() > 0) {
    throw ParameterError("bench --model times a decoder: --seconds, --no-compare and --bank-* do not apply");
  }
  const auto model = open_model(f.model, context);
  const std::vector<std::uint8_t> text = read_model_text(f.text);
  DecodeBenchRequest request;
  request.tokens = f.tokens;
  request.rounds = f.rounds;
  request.prompt = f.prompt;
  request.prefill_chunk = f.chunk;
  request.prompt_logits = parse_prompt_logits(f.prompt_logits);
  request.together = f.together;
  request.threads.clear();
  for (const std::int64_t t : parse_integer_list(f.threads, "--threads")) {
    if (t < 0 || t > 1024) throw ParameterError(fmt::format("--threads: {} is not in 0 ... 1024 (0: every core)", t));
    request.threads.push_back(static_cast<int>(t));
  }
  const std::vector<std::int64_t> budgets = cmd->get_option("--budgets")->count() > 0
                                                ? parse_integer_list(f.budgets, "--budgets")
                                                : std::vector<std::int64_t>{128};
  // "none": the full cache alone.
  const std::vector<std::string> names = cmd->get_option("--policies")->count() == 0
                                             ? std::vector<std::string>{"h2o", "scissorhands", "snapkv", "sliding-window"}
                                         : f.policies == "none" ? std::vector<std::string>{}
                                                                : parse_policy_list(f.policies);
  for (const std::string& name : names) {
    for (const std::int64_t b : budgets) request.runs.push_back({name, {}, b});
  }
  if (!f.simd.empty()) simd::select_target(f.simd);
  request.on_start = [&](std::uint32_t tokens) {
    std::cerr << fmt::format("bench: {} runs x {} thread count(s) x {} rounds (each timed, then profiled{}), "
                             "{} tokens a pass after a prompt of {}\n",
                             request.runs.size() + 1, request.threads.size(), f.rounds,
                             f.together ? "; and all together" : "", tokens, f.prompt);
  };
  cli::print_decode_bench(std::cout, bench_decoder(model, text, request), f.format, {"bench", f.model});
  return 0;
}

// bench without --model: the policies' decode steps and the banks.
int run_bench_policies(const BenchArgs& f, const CLI::App* cmd) {
  for (const char* flag :
       {"--text", "--tokens", "--rounds", "--prompt", "--prefill-chunk", "--prompt-logits", "--threads", "--together"}) {
    if (cmd->get_option(flag)->count() > 0) {
      throw ParameterError("bench: --text, --tokens, --rounds, --prompt, --prefill-chunk, --prompt-logits, --threads "
                           "and --together need --model");
    }
  }
  if (f.format == "csv") {
    // Steps and banks are rows of two shapes, and the compare's times none.
    throw ParameterError("bench: --format csv needs --model (the policies' report is two tables and the compare's "
                         "times: --format json holds them all)");
  }
  BenchOptions options;
  options.budgets = parse_integer_list(f.budgets, "--budgets");
  // Items with parameters ("expected-attention:evictEvery=8") go to the
  // library as written; the rest through the registry's list ("all").
  for (const std::string& item : split_list(f.policies, "--policies")) {
    if (item.find(':') != std::string::npos) {
      options.policies.push_back(item);
    } else {
      for (std::string& name : parse_policy_list(item)) options.policies.push_back(std::move(name));
    }
  }
  options.seconds_per_case = f.seconds;
  options.include_compare = !f.no_compare;
  options.bank_instances = f.bank_instances;
  options.bank_budget = f.bank_budget;
  options.progress = [](const std::string& what) { std::cerr << "bench: " << what << '\n'; };
  if (!f.simd.empty()) simd::select_target(f.simd);
  const BenchReport r = run_bench(options);
  cli::print_bench(std::cout, r, f.format);
  return 0;
}

}  // namespace

Command add_serve_bench_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<ServeBenchArgs>();
  auto* cmd = app.add_subcommand(
      "serve-bench",
      "Sequences decoding together over one block pool (docs/serving.md): peak blocks, blocks saved by prefix "
      "sharing, positions held, evictions and tokens per second, per run");
  cmd->add_option("--model", f->model, kModelHelp)->required();
  add_run_flags(cmd, f->run);
  add_context_option(cmd, *context);
  cmd->add_option("--text", f->text, "the bytes the sequences read, e.g. model/heldout-sample.txt")->required();
  cmd->add_option("--sequences", f->sequences, "sequence counts, comma-separated (one run each)")->capture_default_str();
  cmd->add_option("--shared-prefix", f->prefix, "tokens every sequence starts with (the text's first ones; bytes for kvevict-tiny)")
      ->capture_default_str();
  cmd->add_option("--tokens", f->tokens,
                  "tokens each sequence reads, its capacity (0 = the model's context); past the context when every "
                  "run evicts while decoding (the pool then sized for the context)");
  cmd->add_option("--positions", f->positions,
                  "where kept keys sit in rotary space: original (their tokens' positions) or cache (their index "
                  "among the positions held)")
      ->capture_default_str();
  cmd->add_option("--policy", f->policies, "policy names, comma-separated, all (all ten), or none (the full cache)")
      ->capture_default_str();
  cmd->add_option("--budget", f->budget, "positions each cache keeps")->capture_default_str();
  cmd->add_option("--modes", f->modes, "token, block or token,block: evict positions or whole blocks")
      ->capture_default_str();
  cmd->add_option("--sharing", f->sharing, "on, off or on,off: prefix sharing of equal full blocks")
      ->capture_default_str();
  cmd->add_flag("--no-prefix-sharing", f->no_sharing, "the same as --sharing off");
  cmd->add_option("--chunk", f->chunks,
                  "0 (evict while decoding) or chunk sizes, comma-separated: read the prompt in chunks, compressing "
                  "after each (a chunk equal to the prompt is one-shot compression)")
      ->capture_default_str();
  cmd->add_option("--prompt", f->prompt, "with --chunk: tokens of each sequence read as the prompt (0 = all)");
  cmd->add_option("--window", f->window, "with --chunk: attention rows each compression scores from")
      ->capture_default_str();
  cmd->add_option("--block-size", f->block_size, "positions per pool block")->capture_default_str();
  cmd->add_option("--pool-blocks", f->pool, "blocks in the pool (0 = every cache of every sequence at capacity)");
  cmd->add_option("--set", f->sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  add_granularity_option(cmd, f->granularity);
  cmd->add_option("--format", f->format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  return {cmd, [f, cmd, context] { return run_serve_bench(*f, cmd, *context); }};
}

Command add_bench_command(CLI::App& app, const ModelContext& context) {
  auto f = std::make_shared<BenchArgs>();
  auto* cmd = app.add_subcommand(
      "bench", "Time every policy's decode step against a memory-read bandwidth baseline");
  cmd->add_option("--format", f->format, "table, json or markdown; with --model also csv")
      ->check(CLI::IsMember({"table", "json", "markdown", "csv"}))->capture_default_str();
  cmd->add_option("--budgets", f->budgets, "comma-separated budgets")->capture_default_str();
  cmd->add_option("--policies", f->policies,
                  "comma-separated names (or name:key=value[:key=value] items, each parameter set), or all (all "
                  "ten); the bank benchmark times the banks among them (scissorhands, h2o, tova, sliding-window, "
                  "streaming-llm); with --model, none for the full cache alone")
      ->capture_default_str();
  cmd->add_option("--seconds", f->seconds, "timed seconds per policy and budget")
      ->check(CLI::Range(0.01, 60.0))->capture_default_str();
  cmd->add_flag("--no-compare", f->no_compare, "skip timing the canonical compare");
  cmd->add_option("--simd", f->simd,
                  "run the kernels at this SIMD target: baseline, sse4, avx2, avx512, avx512-vnni (default: $KVEVICT_SIMD, "
                  "else the best the CPU runs)");
  cmd->add_option("--bank-instances", f->bank_instances, "instances in the bank benchmark (0 skips it)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  cmd->add_option("--bank-budget", f->bank_budget, "budget of each bank instance")
      ->check(CLI::Range(std::int64_t{33}, std::int64_t{1} << 16))->capture_default_str();
  auto* model_opt = cmd->add_option(
      "--model", f->model,
      "instead: decode a text with a model (.kvm, .gguf, safetensors), full cache and each --policies at each "
      "--budgets (default 128), and report tokens per second and where a step's time goes");
  add_context_option(cmd, *context, model_opt);
  cmd->add_option("--text", f->text, "with --model: the text to decode")->capture_default_str();
  cmd->add_option("--tokens", f->tokens, "with --model: tokens decoded a pass (at most the text and the context)")
      ->check(CLI::Range(1U, 1U << 20))->capture_default_str();
  cmd->add_option("--rounds", f->rounds, "with --model: passes a run (the median is reported)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  cmd->add_option("--prompt", f->prompt,
                  "with --model: tokens prefilled (in chunks) before the timed decode, and a prefill row timing them")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", f->chunk, "with --model: tokens a prefill pass takes at once (1 ... 4096)")
      ->check(CLI::Range(1U, 4096U))->capture_default_str();
  cmd->add_option("--prompt-logits", f->prompt_logits,
                  "with --model: the prompt's logits computed: all (every token's, as perplexity scores them) or "
                  "last (the last token's only, as a server needs; llama.cpp's default)")
      ->check(CLI::IsMember({"all", "last"}))->capture_default_str();
  cmd->add_option("--threads", f->threads, "with --model: comma-separated thread counts, each timed (0: every core)")
      ->capture_default_str();
  cmd->add_flag("--together", f->together,
                "with --model: and a row stepping every run together as one batch (one weight read a token)");
  return {cmd, [f, cmd, model_opt, context] {
            return model_opt->count() > 0 ? run_bench_model(*f, cmd, *context) : run_bench_policies(*f, cmd);
          }};
}

}  // namespace kvevict::cli
