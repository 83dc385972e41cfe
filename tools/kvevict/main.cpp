// kvevict -- the command-line tool. Parsing and printing only: every decision
// is made by the library, where the bindings reach it too.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <iostream>
#include <limits>
#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "kvevict/eval/bench.h"
#include "kvevict/model/decode_bench.h"
#include "kvevict/core/simd.h"
#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/json.h"
#include "kvevict/model/inspect.h"
#include "kvevict/model/model.h"
#include "kvevict/model/model_writer.h"
#include "kvevict/model/vocab.h"
#include "kvevict/eval/npy.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/perplexity.h"
#include "kvevict/model/tasks.h"
#include "kvevict/model/stream.h"
#include "kvevict/eval/persistence.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/perplexity_rows.h"
#include "kvevict/report/report.h"
#include "kvevict/eval/threads.h"
#include "kvevict/eval/trace.h"
#include "kvevict/eval/vectors.h"
#include "output.h"

namespace {

// What a trace replay can feed: attention rows, no keys.
constexpr std::string_view kTraceSource = "a trace (attention weights only)";

using namespace kvevict;

// Progress on stderr for long evaluations, only when a person is watching.
ProgressFn progress_for(const std::string& what) {
  if (isatty(STDERR_FILENO) == 0) return {};
  return [what](std::uint32_t step, std::uint32_t total) {
    if (step % 128 == 0 || step == total) {
      std::fprintf(stderr, "\r%s: step %u/%u", what.c_str(), step, total);
      if (step == total) std::fprintf(stderr, "\r\033[K");
    }
  };
}

// --threads and --progress, on every command that runs a model.
struct RunFlags {
  int threads = 0;
  std::string progress = "auto";
};

void add_run_flags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("--threads", f.threads,
                  "threads for the runs and the weight products (0: every core; more than the cores is capped, "
                  "with a note)")
      ->capture_default_str();
  cmd->add_option("--progress", f.progress,
                  "progress on stderr: auto (one line redrawn on a terminal, plain lines otherwise), lines, off")
      ->check(CLI::IsMember({"auto", "lines", "off"}))->capture_default_str();
}

std::string clock_of(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

// Progress of a model's work (minutes, not seconds), on stderr: what is
// done, its rate and the time left -- one line redrawn on a terminal (shown
// at once, while the model loads), a plain line every tenth of the way or
// 10 s otherwise (logs, CI). Also sets --threads.
class Progress {
 public:
  Progress(std::string what, const RunFlags& flags, const std::string& model)
      : what_(std::move(what)),
        mode_(flags.progress == "auto" ? (isatty(STDERR_FILENO) != 0 ? "tty" : "lines") : flags.progress) {
    std::string note;
    threads_ = use_threads(flags.threads, &note);
    if (!note.empty()) std::cerr << fmt::format("{}: note: {}\n", what_, note);
    // On a terminal a line at once, redrawn by the first progress (plain
    // lines start with the first unit done: a refusal stays one line).
    if (mode_ == "tty") {
      std::fprintf(stderr, "\r%s: loading %s (%d thread%s)\033[K", what_.c_str(), model.c_str(), threads_,
                   threads_ == 1 ? "" : "s");
    }
  }

  // The library's (done, total) in `unit`s; with `tokens_per_unit`, the
  // tokens they stand for (about: a text's last window is shorter) and
  // tokens/s too.
  ProgressFn fn(const std::string& unit, double tokens_per_unit = 0.0) const {
    if (mode_ == "off") return {};
    struct State {
      std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
      std::chrono::steady_clock::time_point last_line{};
      std::uint32_t last_tenth = 0;
    };
    auto state = std::make_shared<State>();
    return [what = what_, tty = mode_ == "tty", unit, tokens_per_unit, state](std::uint32_t done, std::uint32_t total) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - state->start).count();
      std::string line = fmt::format("{}: {}/{} {} ({:.0f}%)", what, done, total, unit,
                                     100.0 * done / std::max<std::uint32_t>(total, 1));
      if (tokens_per_unit > 0.0) {
        line += fmt::format(", ~{:.0f} tokens", done * tokens_per_unit);
        if (elapsed > 0.0) line += fmt::format(" at {:.0f} tokens/s", done * tokens_per_unit / elapsed);
      }
      if (done > 0 && done < total) line += fmt::format(", {} left", clock_of(elapsed * (total - done) / done));
      if (done == total) line += fmt::format(", {} in all", clock_of(elapsed));
      if (tty) {
        std::fprintf(stderr, "\r%s\033[K", line.c_str());
        if (done == total) std::fprintf(stderr, "\r\033[K");
        return;
      }
      const auto tenth = static_cast<std::uint32_t>(std::uint64_t{done} * 10 / std::max<std::uint32_t>(total, 1));
      if (tenth != state->last_tenth || done == total || now - state->last_line > std::chrono::seconds(10)) {
        state->last_tenth = tenth;
        state->last_line = now;
        std::fprintf(stderr, "%s\n", line.c_str());
      }
    };
  }

  int threads() const noexcept { return threads_; }

 private:
  std::string what_;
  std::string mode_;
  int threads_ = 1;
};

ParamMap parse_sets(const std::vector<std::string>& sets) {
  ParamMap params;
  for (const std::string& s : sets) {
    const auto [key, value] = parse_assignment(s);
    set_param(params, key, value);
  }
  return params;
}

EvaluateOptions options_of(const std::string& trace, std::optional<std::int64_t> steps,
                           const std::string& what) {
  EvaluateOptions options;
  options.trace = trace;
  options.steps = steps;
  options.progress = progress_for(what);
  return options;
}

void add_trace_options(CLI::App* cmd, std::string& trace, std::optional<std::int64_t>& steps) {
  cmd->add_option("--trace", trace, "generated trace id or FILE.npy (see `kvevict trace --help`)")
      ->capture_default_str();
  cmd->add_option("--steps", steps, "replay only the first N decode steps");
}

// --keys, --values, --queries: the signals recorded beside an .npy trace
// (kvevict record), for the key-aware policies; checked by the library.
void add_signal_options(CLI::App* cmd, SignalFiles& f) {
  cmd->add_option("--keys", f.keys,
                  "with --trace FILE.npy: the keys recorded beside it, [H, N, headDim] (kvevict record --keys); "
                  "replays the key-aware policies (knorm, keydiff; with --values and --queries, those that read them). "
                  "The attention file stays required: the "
                  "metrics are measured on it");
  cmd->add_option("--values", f.values, "with --trace FILE.npy: the values recorded beside it, [H, N, headDim]");
  cmd->add_option("--queries", f.queries,
                  "with --trace FILE.npy: the queries (before RoPE) recorded beside it, [H, N, groups x headDim]");
}

// --block-size, --start-blocks, --recent-blocks, --block-score, --layer-budget,
// --head-floor (docs/paged.md); parsed here, checked by the library.
struct PagedFlags {
  std::optional<std::int64_t> block_size;  // left out: token-level eviction; given: at least 1
  std::int64_t start_blocks = 0;
  std::int64_t recent_blocks = 0;
  std::string block_score = "sum";
  bool layer_budget = false;
  std::int64_t head_floor = -1;
};

// `model`: the command runs a model (with --model, or always), so the help
// says what the flags do to its decoder; run replays traces only.
void add_paged_options(CLI::App* cmd, PagedFlags& f, bool model = true) {
  cmd->add_option("--block-size", f.block_size,
                  std::string("evict whole blocks of N positions (paged KV cache") +
                      (model ? "; with a model the decoder runs on a paged store of N-position blocks" : "") +
                      "); the budget must be a whole number of blocks");
  cmd->add_option("--start-blocks", f.start_blocks, "with --block-size: the first N blocks are never evicted");
  cmd->add_option("--recent-blocks", f.recent_blocks,
                  "with --block-size: the last N full blocks are never evicted (the partial block never is)");
  cmd->add_option("--block-score", f.block_score, "with --block-size: a block's score from its positions' "
                                                  "scores: sum, mean, max or normsum (each over its steps held)");
  cmd->add_flag("--layer-budget", f.layer_budget,
                std::string("a layer's heads (a trace's heads") + (model ? "; a model's KV heads per layer" : "") +
                    ") share budget x heads positions; the lowest-scoring across heads go");
  cmd->add_option("--head-floor", f.head_floor,
                  "with --layer-budget: the fewest positions a head keeps (default: a fifth of the fair share)");
}

// --kv-precision and --kv-residual (docs/paged.md "Fewer bits a position");
// checked by the library against the model.
struct KvFlags {
  std::string precision = "fp32";
  std::optional<std::int64_t> residual;
};

CLI::Option* add_kv_options(CLI::App* cmd, KvFlags& f, const std::string& needs = "") {
  auto* p = cmd->add_option("--kv-precision", f.precision,
                            std::string(needs.empty() ? "" : "with --model: ") +
                                "store keys and values as fp32, fp16, int8 (per token) or int4 (KIVI: keys per "
                                "channel over groups, values per token)");
  p->capture_default_str();
  auto* r = cmd->add_option("--kv-residual", f.residual,
                            "newest positions kept at fp32 until N have arrived, then quantized together (int4: the "
                            "key group; default 32 for int4, 0 otherwise)");
  if (!needs.empty()) {
    p->needs(needs);
    r->needs(needs);
  }
  return p;
}

KvFormat kv_of(const KvFlags& f) {
  KvFormat kv;
  kv.precision = parse_precision(f.precision);
  if (f.residual) {
    // -1 is the library's "the precision's default"; a user who gives a
    // residual gives a window, so every negative value is refused.
    if (*f.residual < 0) throw ParameterError(fmt::format("--kv-residual ({}) must be at least 0", *f.residual));
    kv.residual = *f.residual;
  }
  return kv;
}

// --kv-memory's precisions: a comma-separated list, --kv-residual applied to
// each quantized one.
std::vector<KvFormat> kv_list_of(const KvFlags& f) {
  std::vector<KvFormat> out;
  for (const std::string& name : split_list(f.precision, "--kv-precision")) {
    KvFlags one = f;
    one.precision = name;
    if (parse_precision(name) == KvPrecision::kFp32) one.residual.reset();
    out.push_back(kv_of(one));
  }
  return out;
}

// compare's and sweep's --model, --text, --max-windows and the precision
// flags: the run over the real model instead of a trace.
struct ModelFlags {
  std::string model;
  std::string text;
  std::uint32_t windows = 0;
  KvFlags kv;
  bool given() const noexcept { return !model.empty(); }
};

void add_model_options(CLI::App* cmd, ModelFlags& f, const std::string& model_help, std::uint32_t& context) {
  auto* model = cmd->add_option("--model", f.model, model_help);
  cmd->add_option("--context", context,
                  "with --model: positions to run it at (default: its trained context, at most 4096)")
      ->needs(model);
  cmd->add_option("--text", f.text, "with --model: the text to score (tokenized by the model's own tokenizer)")
      ->needs(model);
  model->needs("--text");
  cmd->add_option("--max-windows", f.windows, "with --model: use only the first N context windows (0 = all)")
      ->needs(model);
  add_kv_options(cmd, f.kv, "--model");
}

// --model runs the model; a trace and recorded signals replay one: refuse both at once.
void check_model_source(const CLI::App* cmd, const SignalFiles& signals) {
  if (cmd->count("--trace") + cmd->count("--steps") > 0) {
    throw ParameterError("--trace and --steps replay a trace; --model runs the model over --text (give one or the other)");
  }
  if (!signals.empty()) {
    throw ParameterError("--keys, --values and --queries replay a recorded trace; --model runs the model, whose "
                         "decoder gives the policies their keys itself (give one or the other)");
  }
}

// Every model command's --context: the positions to run a model at (its
// trained context, or the first 4096 of a longer one, when not given).
void add_context_option(CLI::App* cmd, std::uint32_t& context) {
  cmd->add_option("--context", context,
                  "positions to run the model at: its windows' length and its caches' capacity (default: the "
                  "model's trained context, at most 4096)");
}

std::shared_ptr<const Model> open_model(const std::string& path, std::uint32_t context) {
  ModelOptions options;
  options.context = context;
  auto model = Model::load(path, options);
  const ModelConfig& c = model->config();
  if (context == 0 && c.context < c.trained_context) {
    std::cerr << fmt::format("kvevict: note: running {} at {} of its {} trained positions (--context to change)\n",
                             path, c.context, c.trained_context);
  }
  return model;
}

PagedOptions paged_of(const PagedFlags& f) {
  PagedOptions p;
  if (f.block_size) p.block_size = given_block_size(*f.block_size, "--block-size");
  p.start_blocks = f.start_blocks;
  p.recent_blocks = f.recent_blocks;
  p.block_score = parse_block_score(f.block_score);
  p.layer_budget = f.layer_budget;
  p.head_floor = f.head_floor;
  check_paged(p);
  return p;
}

// Exit status of a usage error: the command line does not parse (the
// README's "The tool" and --help's footer say so). What the library refuses
// after that exits 1.
constexpr int kUsageExit = 2;

// A usage error is one line on stderr, as every other refusal is, though the
// argument parser's own messages may span lines.
int usage_error(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  while (!message.empty() && message.back() == ' ') message.pop_back();
  std::cerr << "kvevict: error: " << message << '\n';
  return kUsageExit;
}

// compare --skip-refused: each pair left out, on stderr, before the work.
void print_skipped(const std::string& command, const CompareRequest& request) {
  if (!request.skip_refused) return;
  std::vector<std::string> skipped;
  (void)compare_specs(request, &skipped);
  for (const std::string& line : skipped) std::cerr << command << ": skipped " << line << '\n';
}

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

// A model command's text, read by the library: a missing held-out split
// says how to make it; a text that is not UTF-8 is scored as the bytes it is,
// with a warning (the model was trained on text).
std::vector<std::uint8_t> read_model_text(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::path(path).filename() == "heldout-split.txt" && !std::filesystem::exists(path, ec)) {
    throw InputError(fmt::format("{}: does not exist: `make heldout` writes it (or use model/heldout-sample.txt, its "
                                 "first 16 KiB)",
                                 path));
  }
  std::vector<std::uint8_t> text = read_text(path);
  if (const std::optional<std::size_t> bad = first_invalid_utf8(text)) {
    std::cerr << fmt::format("kvevict: warning: {} is not UTF-8 text (byte {} at offset {} starts no valid "
                             "character): it is scored as the bytes it is\n",
                             path, static_cast<int>(text[*bad]), *bad);
  }
  return text;
}

int cmd_list(const std::string& format) {
  if (format == "json") {
    nlohmann::json out = nlohmann::json::array();
    for (const PolicyInfo* info : policies()) {
      nlohmann::json params = nlohmann::json::array();
      for (const auto& p : info->params) {
        params.push_back({{"name", p.name}, {"default", p.default_value}, {"help", p.help}});
      }
      out.push_back({{"name", info->name}, {"summary", info->summary}, {"params", params}});
    }
    std::cout << out.dump(2) << '\n';
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

}  // namespace

// The model files every model command takes.
constexpr const char* kModelHelp =
    "the model: kvevict's .kvm (e.g. model/kvevict-tiny.kvm), a GGUF file, or a safetensors folder (config.json, "
    "model.safetensors, tokenizer.json) of a llama, qwen2 or mistral model (docs/models.md)";

int main(int argc, char** argv) {
  std::uint32_t model_context = 0;  // every model command's --context
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

  // list
  std::string list_format = "table";
  auto* list = app.add_subcommand("list", "List the policies, their parameters and defaults");
  list->add_option("--format", list_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))->capture_default_str();

  // run
  std::string run_policy;
  std::optional<std::int64_t> run_budget;
  std::vector<std::string> run_sets;
  std::string run_trace = "decode-4096";
  std::optional<std::int64_t> run_steps;
  std::string run_format = "table";
  auto* run_cmd = app.add_subcommand("run", "Replay a trace through one policy at one budget");
  run_cmd->add_option("--policy", run_policy, "policy name (see `kvevict list`)")->required();
  run_cmd->add_option("--budget", run_budget, "positions held after each eviction (default: the policy's, 512)");
  run_cmd->add_option("--set", run_sets, "parameter as KEY=VALUE, e.g. recentWindow=64 (repeatable)");
  add_trace_options(run_cmd, run_trace, run_steps);
  SignalFiles run_signals;
  add_signal_options(run_cmd, run_signals);
  PagedFlags run_paged;
  add_paged_options(run_cmd, run_paged, false);
  run_cmd->add_option("--format", run_format, "table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))->capture_default_str();

  // compare
  std::string cmp_policies = "all";
  std::string cmp_budgets = "256,512,1024";
  std::vector<std::string> cmp_sets;
  std::string cmp_trace = "decode-4096";
  std::optional<std::int64_t> cmp_steps;
  std::string cmp_format = "table";
  auto* cmp = app.add_subcommand(
      "compare", "Every chosen policy at every budget, ranked by retained mass at the middle budget");
  cmp->add_option("--policies", cmp_policies,
                  "comma-separated names, or all: the policies the source can feed (a trace: the seven attention "
                  "and positional ones; with --keys, nine; with --values and --queries too, all ten); with --model, "
                  "the seven: name knorm, keydiff or expected-attention to add them")
      ->capture_default_str();
  cmp->add_option("--budgets", cmp_budgets,
                  "comma-separated budgets (default: 256,512,1024 on a trace; 64,128,256,512 with --model)");
  cmp->add_option("--set", cmp_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  PagedFlags cmp_paged;
  add_paged_options(cmp, cmp_paged);
  add_trace_options(cmp, cmp_trace, cmp_steps);
  SignalFiles cmp_signals;
  add_signal_options(cmp, cmp_signals);
  bool cmp_skip_refused = false;
  cmp->add_flag("--skip-refused", cmp_skip_refused,
                "leave out the policy x budget pairs a policy's rules refuse (e.g. Scissorhands' window at a small "
                "budget), each named on stderr, instead of refusing the comparison");
  cmp->add_option("--format", cmp_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  ModelFlags cmp_on;
  RunFlags cmp_run;
  add_run_flags(cmp, cmp_run);
  add_model_options(cmp, cmp_on,
                    "rank by perplexity of this model (.kvm, .gguf or a safetensors folder) evicting for real, with "
                    "the proxies on its own attention (budgets default to 64,128,256,512)",
                    model_context);
  std::uint32_t cmp_prefill = 0;
  std::uint32_t cmp_window = 32;
  cmp->add_option("--prefill", cmp_prefill,
                  "with --model: read each window's first N bytes with the full cache, compress once to the "
                  "budget, score the rest (no proxies); 0 = evict while decoding")
      ->needs("--model");
  cmp->add_option("--window", cmp_window, "with --prefill: attention rows the compression scores from")
      ->needs("--prefill")->capture_default_str();

  // perplexity
  std::string ppl_model;
  std::string ppl_text;
  std::string ppl_policies;
  std::string ppl_budgets;
  std::vector<std::string> ppl_sets;
  std::uint32_t ppl_windows = 0;
  std::string ppl_format = "table";
  auto* ppl = app.add_subcommand(
      "perplexity",
      "Perplexity of a model (.kvm, .gguf or a safetensors folder) over a text with every layer and head "
      "evicting through a policy, "
      "beside the full cache's");
  ppl->add_option("--model", ppl_model, kModelHelp)->required();
  RunFlags ppl_run;
  add_run_flags(ppl, ppl_run);
  ppl->add_option("--text", ppl_text, "the text to score (tokenized by the model's own tokenizer), e.g. model/heldout-sample.txt")->required();
  add_context_option(ppl, model_context);
  ppl->add_option("--policy", ppl_policies,
                  "policy names, comma-separated, or all (all ten; default: the full cache only)");
  ppl->add_option("--budget", ppl_budgets, "budgets, comma-separated (default: each policy's)");
  ppl->add_option("--set", ppl_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  ppl->add_option("--max-windows", ppl_windows, "use only the first N context windows (0 = all)");
  std::uint32_t ppl_prefill = 0;
  std::uint32_t ppl_window = 32;
  ppl->add_option("--prefill", ppl_prefill,
                  "read each window's first N bytes with the full cache, compress once to the budget, score the "
                  "rest; 0 = evict while decoding");
  ppl->add_option("--window", ppl_window, "with --prefill: attention rows the compression scores from")
      ->needs("--prefill")->capture_default_str();
  PagedFlags ppl_paged;
  add_paged_options(ppl, ppl_paged);
  KvFlags ppl_kv;
  add_kv_options(ppl, ppl_kv);
  std::string ppl_memory;
  ppl->add_option("--kv-memory", ppl_memory,
                  "bytes a cache may hold, comma-separated: each --policy runs at every --kv-precision (a list here) "
                  "with the most positions that fit, beside the fp32 full cache: floor((bytes - R x (8d - b)) / b), "
                  "b the bytes a stored position costs, d the head size, R the --kv-residual window's rows kept at "
                  "fp32 (int4: 32); floor(bytes / 8d) when R is longer than that cache can hold, which keeps every "
                  "row at fp32")
      ->excludes("--budget");
  ppl->add_option("--format", ppl_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();

  // stream
  std::string st_model;
  std::string st_text;
  std::string st_policies = "default";
  std::string st_budgets = "256,512";
  std::vector<std::string> st_sets;
  std::string st_positions = "original,cache";
  std::uint32_t st_tokens = 0;
  std::uint32_t st_segment = 0;
  bool st_no_full = false;
  std::uint32_t st_recompute = 0;
  std::uint32_t st_recompute_tokens = 0;
  bool st_sinks = false;
  std::string st_svg;
  bool st_force = false;
  std::string st_format = "table";
  auto* st = app.add_subcommand(
      "stream",
      "A long text read as one sequence, past the model's context, with every cache held at its budget: bits per "
      "byte by segment of the stream, for each policy with keys at their original positions or at their index in "
      "the cache (docs/streaming.md)");
  st->add_option("--model", st_model, kModelHelp)->required();
  RunFlags st_run;
  add_run_flags(st, st_run);
  st->add_option("--text", st_text, "the text to stream, e.g. build/heldout-split.txt (make heldout)")->required();
  add_context_option(st, model_context);
  st->add_option("--policy", st_policies,
                 "NAME or NAME:KEY=VALUE[:KEY=VALUE], comma-separated; default: sliding-window, "
                 "streaming-llm:sinks=1, streaming-llm:sinks=4, h2o, tova, scissorhands, snapkv")
      ->capture_default_str();
  st->add_option("--budget", st_budgets, "positions a cache holds, comma-separated")->capture_default_str();
  st->add_option("--set", st_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  st->add_option("--positions", st_positions,
                 "where kept keys sit in rotary space, comma-separated: original (their tokens' positions) or "
                 "cache (their index among the positions held)")
      ->capture_default_str();
  st->add_option("--tokens", st_tokens, "tokens of the stream, BOS included (0 = the whole text)");
  st->add_option("--segment", st_segment, "tokens a segment of the report (0 = the model's context)");
  st->add_flag("--no-full-cache", st_no_full, "leave out the full cache (which stops at the context)");
  st->add_option("--recompute", st_recompute,
                 "also StreamingLLM's baseline: each token predicted by a cache rebuilt over the N tokens before it "
                 "(N steps a token)");
  st->add_option("--recompute-tokens", st_recompute_tokens, "with --recompute: over the stream's first N tokens")
      ->needs("--recompute");
  st->add_flag("--sinks", st_sinks,
               "print instead the share of attention the first position and the first four draw, by layer, on the "
               "full cache over the first context of the text");
  st->add_option("--svg", st_svg, "also write the chart of bits per byte along the stream to this SVG file");
  st->add_flag("--force", st_force, "with --svg: replace the file if it exists");
  KvFlags st_kv;
  add_kv_options(st, st_kv);
  st->add_option("--format", st_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();

  // serve-bench
  std::string sb_model;
  std::string sb_text;
  std::string sb_sequences = "4";
  std::string sb_policies = "none";
  std::int64_t sb_budget = 128;
  std::string sb_modes = "token";
  std::string sb_sharing = "on";
  bool sb_no_sharing = false;
  std::string sb_chunks = "0";
  std::uint32_t sb_prefix = 512;
  std::uint32_t sb_tokens = 0;
  std::uint32_t sb_prompt = 0;
  std::uint32_t sb_window = 32;
  std::int64_t sb_block_size = 16;
  std::uint64_t sb_pool = 0;
  std::vector<std::string> sb_sets;
  std::string sb_format = "table";
  auto* sb = app.add_subcommand(
      "serve-bench",
      "Sequences decoding together over one block pool (docs/serving.md): peak blocks, blocks saved by prefix "
      "sharing, positions held, evictions and tokens per second, per run");
  sb->add_option("--model", sb_model, kModelHelp)->required();
  RunFlags sb_run;
  add_run_flags(sb, sb_run);
  add_context_option(sb, model_context);
  sb->add_option("--text", sb_text, "the bytes the sequences read, e.g. model/heldout-sample.txt")->required();
  sb->add_option("--sequences", sb_sequences, "sequence counts, comma-separated (one run each)")->capture_default_str();
  sb->add_option("--shared-prefix", sb_prefix, "bytes every sequence starts with (the text's first ones)")
      ->capture_default_str();
  sb->add_option("--tokens", sb_tokens,
                 "tokens each sequence reads, its capacity (0 = the model's context); past the context when every "
                 "run evicts while decoding (the pool then sized for the context)");
  std::string sb_positions = "original";
  sb->add_option("--positions", sb_positions,
                 "where kept keys sit in rotary space: original (their tokens' positions) or cache (their index "
                 "among the positions held)")
      ->capture_default_str();
  sb->add_option("--policy", sb_policies, "policy names, comma-separated, all (all ten), or none (the full cache)")
      ->capture_default_str();
  sb->add_option("--budget", sb_budget, "positions each cache keeps")->capture_default_str();
  sb->add_option("--modes", sb_modes, "token, block or token,block: evict positions or whole blocks")
      ->capture_default_str();
  sb->add_option("--sharing", sb_sharing, "on, off or on,off: prefix sharing of equal full blocks")
      ->capture_default_str();
  sb->add_flag("--no-prefix-sharing", sb_no_sharing, "the same as --sharing off");
  sb->add_option("--chunk", sb_chunks,
                 "0 (evict while decoding) or chunk sizes, comma-separated: read the prompt in chunks, compressing "
                 "after each (a chunk equal to the prompt is one-shot compression)")
      ->capture_default_str();
  sb->add_option("--prompt", sb_prompt, "with --chunk: bytes of each sequence read as the prompt (0 = all)");
  sb->add_option("--window", sb_window, "with --chunk: attention rows each compression scores from")
      ->capture_default_str();
  sb->add_option("--block-size", sb_block_size, "positions per pool block")->capture_default_str();
  sb->add_option("--pool-blocks", sb_pool, "blocks in the pool (0 = every cache of every sequence at capacity)");
  sb->add_option("--set", sb_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  sb->add_option("--format", sb_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();

  // tasks
  std::string task_model;
  std::string task_text;
  std::string task_names_arg = "passkey";
  std::string task_lengths = "1024";
  std::string task_policies = "all";
  std::string task_budgets = "128";
  std::string task_moments = "decode";
  std::vector<std::string> task_sets;
  std::uint32_t task_depths = 5;
  std::uint32_t task_samples = 20;
  std::uint32_t task_seed = 1;
  std::uint32_t task_window = 32;
  std::uint32_t task_chunk = 0;
  std::string task_format = "markdown";
  auto* tasks_cmd = app.add_subcommand(
      "tasks",
      "Retrieval tasks (passkey, multikey, multivalue, vartrack, copy) answered by a model (.kvm, .gguf or a "
      "safetensors folder) with "
      "greedy decoding while its cache is compressed: exact-match accuracy by policy, budget, moment, length "
      "and needle depth");
  tasks_cmd->add_option("--model", task_model, kModelHelp)->required();
  RunFlags tasks_cmd_run;
  add_run_flags(tasks_cmd, tasks_cmd_run);
  add_context_option(tasks_cmd, model_context);
  tasks_cmd->add_option("--text", task_text, "filler text the needles are hidden in, e.g. model/heldout-sample.txt")
      ->required();
  tasks_cmd->add_option("--tasks", task_names_arg, "comma-separated: passkey, multikey, multivalue, vartrack, copy, or all")
      ->capture_default_str();
  tasks_cmd->add_option("--lengths", task_lengths,
                        "sample lengths in positions (bytes for kvevict-tiny, tokens for a model with a tokenizer), "
                        "comma-separated (at most the model's context)")
      ->capture_default_str();
  tasks_cmd->add_option("--policies", task_policies,
                        "comma-separated names, all (all ten, the key-aware three too), or none (the full cache only)")
      ->capture_default_str();
  tasks_cmd->add_option("--budgets", task_budgets, "comma-separated budgets (positions per cache)")->capture_default_str();
  tasks_cmd->add_option("--moments", task_moments,
                        "when the cache is compressed: decode (token by token), prefill (once, before the question), "
                        "prefill-query (once, after it); comma-separated")
      ->capture_default_str();
  tasks_cmd->add_option("--set", task_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  tasks_cmd->add_option("--depths", task_depths, "needle depths per length, spread evenly")
      ->check(CLI::Range(1U, 100U))->capture_default_str();
  tasks_cmd->add_option("--samples", task_samples, "samples per task x length x depth")
      ->check(CLI::Range(1U, 100000U))->capture_default_str();
  tasks_cmd->add_option("--seed", task_seed, "samples are reproducible from this seed")->capture_default_str();
  tasks_cmd->add_option("--window", task_window, "prefill moments: attention rows the compression scores from")
      ->check(CLI::Range(1U, 1U << 20))->capture_default_str();
  tasks_cmd->add_option("--chunk", task_chunk,
                        "prefill moments: read the prompt in chunks of N bytes, compressing after each (0 = once)")
      ->check(CLI::Range(0U, 1U << 20))->capture_default_str();
  KvFlags task_kv;
  add_kv_options(tasks_cmd, task_kv);
  tasks_cmd->add_option("--format", task_format, "markdown, json or csv")
      ->check(CLI::IsMember({"markdown", "json", "csv"}))->capture_default_str();

  // record
  std::string rec_model;
  std::string rec_text;
  std::string rec_out;
  std::uint32_t rec_tokens = 0;
  bool rec_force = false;
  auto* rec = app.add_subcommand(
      "record", "Record a model's full-cache attention over a text as an [layers x heads, N, N] .npy trace "
                "that run, compare and report replay with --trace FILE.npy; with --keys, --values and --queries, "
                "the signals the decoder gives the key-aware policies beside it, which run and compare replay "
                "with the same flags");
  rec->add_option("--model", rec_model, kModelHelp)->required();
  RunFlags rec_run;
  add_run_flags(rec, rec_run);
  add_context_option(rec, model_context);
  rec->add_option("--text", rec_text, "the text, tokenized by the model's own tokenizer; its first N tokens are "
                                       "recorded")->required();
  rec->add_option("--out", rec_out, "the attention .npy file to write, [layers x heads, N, N]")->required();
  rec->add_option("--tokens", rec_tokens, "N: tokens to record, BOS included where the model adds it (default and most: the model's context)");
  RecordFiles rec_files;
  rec->add_option("--keys", rec_files.keys,
                  "also write each cache's keys as stored (after RoPE), [layers x heads, N, headDim] float32, for "
                  "run/compare --keys");
  rec->add_option("--values", rec_files.values, "also write each cache's values, [layers x heads, N, headDim]");
  rec->add_option("--queries", rec_files.queries,
                  "also write each cache's queries before RoPE (its query heads, head-major), "
                  "[layers x heads, N, groups x headDim]");
  rec->add_flag("--force", rec_force, "replace existing files");

  // persistence
  std::string per_trace = "decode-4096";
  std::string per_lags = "1,4,16,64,256";
  std::string per_format = "table";
  auto* per = app.add_subcommand(
      "persistence", "Persistence of importance: of the positions above fair share at step t, the share "
                     "still above it at t + k");
  std::string per_model;
  std::string per_text;
  std::optional<std::uint32_t> per_layer;
  per->add_option("--trace", per_trace, "generated trace id or FILE.npy")->capture_default_str();
  auto* per_model_opt = per->add_option(
      "--model", per_model, "instead of --trace: this model's (.kvm, .gguf, safetensors) full-cache attention over --text");
  per->add_option("--context", model_context, "with --model: positions to run it at")->needs(per_model_opt);
  per->add_option("--text", per_text, "with --model: the text (its first context-length bytes)")->needs(per_model_opt);
  per_model_opt->needs("--text");
  per->add_option("--layer", per_layer, "with --model: only this layer's heads")->needs(per_model_opt);
  per->add_option("--lags", per_lags, "comma-separated lags k")->capture_default_str();
  per->add_option("--format", per_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();

  // sweep
  std::string sw_policy;
  std::string sw_param;
  std::string sw_budgets = "256,512,1024";
  std::vector<std::string> sw_sets;
  std::string sw_trace = "decode-4096";
  std::optional<std::int64_t> sw_steps;
  std::string sw_format = "table";
  bool sw_skip_refused = false;
  auto* sw = app.add_subcommand("sweep", "One policy, one parameter over a list of values, at each budget");
  sw->add_option("--policy", sw_policy, "policy name")->required();
  sw->add_option("--param", sw_param, "KEY=V1,V2,... e.g. recentWindow=16,32,64")->required();
  sw->add_option("--budgets", sw_budgets, "comma-separated budgets")->capture_default_str();
  sw->add_option("--set", sw_sets, "other parameters as KEY=VALUE (repeatable)");
  sw->add_flag("--skip-refused", sw_skip_refused,
               "leave out the value x budget pairs the policy's rules refuse (e.g. a recentWindow not below the "
               "budget), each named on stderr, instead of stopping at the first");
  add_trace_options(sw, sw_trace, sw_steps);
  SignalFiles sw_signals;
  add_signal_options(sw, sw_signals);
  sw->add_option("--format", sw_format, "table, json, csv or markdown")
      ->check(CLI::IsMember({"table", "json", "csv", "markdown"}))->capture_default_str();
  ModelFlags sw_on;
  RunFlags sw_run;
  add_run_flags(sw, sw_run);
  add_model_options(sw, sw_on,
                    "sweep on this model (.kvm, .gguf or a safetensors folder) evicting for real: perplexity rows "
                    "over --text with their paired intervals (budgets default to 64,128,256)",
                    model_context);

  // trace
  std::string tr_trace = "decode-4096";
  std::optional<std::int64_t> tr_steps;
  bool tr_hash = false;
  std::string tr_out;
  bool tr_force = false;
  auto* tr = app.add_subcommand(
      "trace", "Inspect or export a trace. Generated ids: decode-4096, stale-spike-4096, "
               "recalled-fact-4096; or a FILE.npy of recorded attention ([N, N] or [H, N, N])");
  add_trace_options(tr, tr_trace, tr_steps);
  tr->add_flag("--hash", tr_hash, "print the FNV-1a parity hash of the steps as a decimal number (one per head)");
  tr->add_option("--out", tr_out, "write the trace as an [N, N] float32 .npy (row t = step t's weights)");
  tr->add_flag("--force", tr_force, "with --out: replace an existing file");

  // bench
  std::string bench_format = "table";
  std::string bench_budgets = "512,4096";
  std::string bench_policies = "all";
  double bench_seconds = 0.25;
  bool bench_no_compare = false;
  auto* bench = app.add_subcommand(
      "bench", "Time every policy's decode step against a memory-read bandwidth baseline");
  bench->add_option("--format", bench_format, "table, json or markdown")
      ->check(CLI::IsMember({"table", "json", "markdown"}))->capture_default_str();
  bench->add_option("--budgets", bench_budgets, "comma-separated budgets")->capture_default_str();
  bench->add_option("--policies", bench_policies,
                    "comma-separated names (or name:key=value[:key=value] items, each parameter set), or all (all "
                    "ten); the bank benchmark times the banks among them (scissorhands, h2o, tova, sliding-window, "
                    "streaming-llm); with --model, none for the full cache alone")
      ->capture_default_str();
  bench->add_option("--seconds", bench_seconds, "timed seconds per policy and budget")
      ->check(CLI::Range(0.01, 60.0))->capture_default_str();
  bench->add_flag("--no-compare", bench_no_compare, "skip timing the canonical compare");
  std::string bench_simd;
  bench->add_option("--simd", bench_simd,
                    "run the kernels at this SIMD target: baseline, sse4, avx2, avx512 (default: $KVEVICT_SIMD, "
                    "else the best the CPU runs)");
  std::int64_t bench_bank_instances = 16384;
  std::int64_t bench_bank_budget = 1024;
  bench->add_option("--bank-instances", bench_bank_instances, "instances in the bank benchmark (0 skips it)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 20))->capture_default_str();
  bench->add_option("--bank-budget", bench_bank_budget, "budget of each bank instance")
      ->check(CLI::Range(std::int64_t{33}, std::int64_t{1} << 16))->capture_default_str();
  std::string bench_model;
  std::string bench_text = "model/heldout-sample.txt";
  std::uint32_t bench_tokens = 1024;
  int bench_rounds = 5;
  auto* bench_model_opt = bench->add_option(
      "--model", bench_model,
      "instead: decode a text with a model (.kvm, .gguf, safetensors), full cache and each --policies at each "
      "--budgets (default 128), and report tokens per second and where a step's time goes");
  bench->add_option("--context", model_context, "with --model: positions to run it at")->needs(bench_model_opt);
  bench->add_option("--text", bench_text, "with --model: the text to decode")->capture_default_str();
  bench->add_option("--tokens", bench_tokens, "with --model: tokens decoded a pass (at most the text and the context)")
      ->check(CLI::Range(1U, 1U << 20))->capture_default_str();
  bench->add_option("--rounds", bench_rounds, "with --model: passes a run (the median is reported)")
      ->check(CLI::Range(1, 100))->capture_default_str();
  std::uint32_t bench_prompt = 0;
  std::uint32_t bench_chunk = 256;
  std::string bench_threads = "0";
  bool bench_together = false;
  bench->add_option("--prompt", bench_prompt,
                    "with --model: tokens prefilled (in chunks) before the timed decode, and a prefill row timing them")
      ->capture_default_str();
  bench->add_option("--prefill-chunk", bench_chunk, "with --model: tokens a prefill pass takes at once (1 ... 4096)")
      ->check(CLI::Range(1U, 4096U))->capture_default_str();
  bench->add_option("--threads", bench_threads,
                    "with --model: comma-separated thread counts, each timed (0: every core)")
      ->capture_default_str();
  bench->add_flag("--together", bench_together,
                  "with --model: and a row stepping every run together as one batch (one weight read a token)");

  // report
  std::string rep_policies = "all";
  std::string rep_budgets = "256,512,1024";
  std::vector<std::string> rep_sets;
  std::string rep_trace = "decode-4096";
  std::optional<std::int64_t> rep_steps;
  std::optional<std::int64_t> rep_strip_budget;
  std::string rep_out;
  std::string rep_svg;
  bool rep_force = false;
  auto* rep = app.add_subcommand(
      "report", "Write a self-contained HTML report: the metrics, retained mass over the decode, what "
                "each policy holds at each step, and both metrics against the budget");
  rep->add_option("--policies", rep_policies, "comma-separated names, or all (the seven a trace feeds)")
      ->capture_default_str();
  rep->add_option("--budgets", rep_budgets, "comma-separated budgets")->capture_default_str();
  rep->add_option("--set", rep_sets, "POLICY.KEY=VALUE, or KEY=VALUE for every policy that has KEY (repeatable)");
  add_trace_options(rep, rep_trace, rep_steps);
  rep->add_option("--strip-budget", rep_strip_budget,
                  "budget of the strips and the mass-over-time chart, one of --budgets (default: the smallest)");
  rep->add_option("--out", rep_out, "the HTML file to write")->required();
  rep->add_option("--svg", rep_svg, "also write each chart as its own SVG file into this folder");
  rep->add_flag("--force", rep_force, "replace existing files");
  std::string rep_tasks;
  rep->add_option("--tasks", rep_tasks,
                  "also chart retrieval-task results: a file written by kvevict tasks --format json "
                  "(needle heatmaps, accuracy against the budget)");

  // simd
  std::string simd_format = "table";
  auto* simd_cmd = app.add_subcommand(
      "simd", "Show the SIMD targets this build holds, those the CPU runs, and the one in use "
              "(set KVEVICT_SIMD=baseline|sse4|avx2|avx512 to narrow it)");
  simd_cmd->add_option("--format", simd_format, "table or json")
      ->check(CLI::IsMember({"table", "json"}))->capture_default_str();

  // schema
  auto* schema_cmd = app.add_subcommand(
      "schema", "Print the fields of a result row (run, compare and sweep; perplexity and compare --model; --format json) as JSON: "
                "name, type, unit, description, in output order");

  // random-model
  RandomModelSpec rm;
  std::string rm_type = "f32";
  std::string rm_out;
  std::string rm_text = "model/heldout-sample.txt";
  std::string rm_scaling;
  bool rm_tied = false, rm_untied = false, rm_force = false;
  auto* rm_cmd = app.add_subcommand(
      "random-model",
      "Write a tiny random Llama-family model (a GGUF file, or a safetensors folder with config.json and "
      "tokenizer.json) with a byte-level BPE tokenizer learned from a text: every model command runs on it "
      "without a download");
  rm_cmd->add_option("--arch", rm.architecture, "llama, qwen2 or mistral")
      ->check(CLI::IsMember({"llama", "qwen2", "mistral"}))->capture_default_str();
  rm_cmd->add_option("--format", rm.format, "gguf or safetensors")
      ->check(CLI::IsMember({"gguf", "safetensors"}))->capture_default_str();
  rm_cmd->add_option("--type", rm_type,
                     "the matrices' type: f32, f16, bf16, q8_0, q4_0, q5_0, q4_k, q6_k (safetensors: f32, f16, bf16)")
      ->capture_default_str();
  rm_cmd->add_option("--out", rm_out, "the .gguf file, or the folder for safetensors")->required();
  rm_cmd->add_option("--layers", rm.layers, "layers (1 ... 64)")->capture_default_str();
  rm_cmd->add_option("--width", rm.width, "embedding width (a whole number of the type's blocks: 256 for q4_k/q6_k)")
      ->capture_default_str();
  rm_cmd->add_option("--heads", rm.heads, "query heads")->capture_default_str();
  rm_cmd->add_option("--kv-heads", rm.kv_heads, "KV heads (grouped-query attention)")->capture_default_str();
  rm_cmd->add_option("--ff", rm.ff, "feed-forward width")->capture_default_str();
  rm_cmd->add_option("--context", rm.context, "trained context it declares (2 ... 65536)")->capture_default_str();
  rm_cmd->add_option("--rope-theta", rm.rope_base, "rope's base (rope_theta, freq_base)")->capture_default_str();
  rm_cmd->add_option("--seed", rm.seed, "the weights' random seed")->capture_default_str();
  rm_cmd->add_option("--merges", rm.merges, "BPE merges learned for its tokenizer")->capture_default_str();
  rm_cmd->add_option("--vocab", rm.vocab,
                     "tokens in all: 0 for the learned ones; more pads with unused tokens (a real model's embedding "
                     "rows, e.g. 49152 for SmolLM2)")
      ->capture_default_str();
  rm_cmd->add_option("--tokenizer-text", rm_text, "the text the tokenizer's merges are learned from")
      ->capture_default_str();
  rm_cmd->add_flag("--tied", rm_tied, "tie the output to the token embedding (the default for qwen2)");
  rm_cmd->add_flag("--untied", rm_untied, "give it its own output matrix (the default for llama and mistral)")
      ->excludes("--tied");
  rm_cmd->add_option("--rope-scaling", rm_scaling,
                     "llama3: Llama-3's rope scaling (low 1, high 4, original context 64); linear: every angle divided "
                     "by the factor")
      ->check(CLI::IsMember({"llama3", "linear"}));
  rm_cmd->add_option("--rope-factor", rm.rope_factor, "with --rope-scaling: its factor")
      ->needs("--rope-scaling")->capture_default_str();
  rm_cmd->add_flag("--biases", rm.biases,
                   "give llama or mistral every bias llama.cpp reads: q, k, v, output, gate, up and down");
  rm_cmd->add_flag("--force", rm_force, "replace an existing file (or write into a non-empty folder)");

  // convert
  std::string cv_model, cv_out, cv_type = "f32";
  bool cv_force = false;
  auto* cv = app.add_subcommand(
      "convert", "Write kvevict's own model (.kvm) as a GGUF file (architecture kvevict-tiny): at f32 it decodes to "
                 "the bit as the .kvm does");
  cv->add_option("--model", cv_model, "the .kvm model, e.g. model/kvevict-tiny.kvm")->required();
  cv->add_option("--out", cv_out, "the .gguf file to write")->required();
  cv->add_option("--type", cv_type, "the matrices' type: f32, f16, bf16, q8_0, q4_0, q5_0 (the width and FF must be "
                                    "whole blocks: q4_k and q6_k need 256)")
      ->capture_default_str();
  cv->add_flag("--force", cv_force, "replace an existing file");

  // logits
  std::string lg_model, lg_tokens, lg_out, lg_policy;
  std::int64_t lg_budget = 0;
  std::vector<std::string> lg_sets;
  bool lg_force = false;
  auto* lg = app.add_subcommand(
      "logits", "Write a model's logits after each of the given tokens as an [n, vocab] float32 .npy (with the full "
                "cache, or a policy evicting on every cache)");
  lg->add_option("--model", lg_model, kModelHelp)->required();
  RunFlags lg_run;
  add_run_flags(lg, lg_run);
  lg->add_option("--tokens", lg_tokens, "token ids, comma-separated, fed as given (no BOS added)")->required();
  lg->add_option("--out", lg_out, "the .npy file to write")->required();
  lg->add_option("--policy", lg_policy, "a policy on every cache (default: the full cache)");
  lg->add_option("--budget", lg_budget, "with --policy: positions each cache keeps")->needs("--policy");
  lg->add_option("--param", lg_sets, "with --policy: KEY=VALUE (repeatable)")->needs("--policy");
  lg->add_flag("--force", lg_force, "replace an existing file");
  add_context_option(lg, model_context);

  // tokenize
  std::string tk_model, tk_text, tk_string;
  bool tk_no_bos = false, tk_json = false;
  auto* tk = app.add_subcommand("tokenize", "Tokenize a text with a model's own tokenizer and print the token ids");
  tk->add_option("--model", tk_model,
                 "a .gguf (a vocabulary alone will do), a tokenizer.json, a model folder, or a .kvm (bytes)")
      ->required();
  auto* tk_text_opt = tk->add_option("--text", tk_text, "the file to tokenize");
  tk->add_option("--string", tk_string, "or this text")->excludes(tk_text_opt);
  tk->add_flag("--no-bos", tk_no_bos, "leave out the BOS the tokenizer would put first");
  tk->add_flag("--json", tk_json, "print {\"tokenizer\", \"tokens\", \"bytes\"}");

  // inspect
  std::string in_model;
  bool in_json = false;
  auto* in = app.add_subcommand(
      "inspect", "Show the settings kvevict runs a model with (or, with --json, the file's metadata and tensors as "
                 "written)");
  in->add_option("--model", in_model, kModelHelp)->required();
  in->add_flag("--json", in_json, "the file's own metadata and tensor list, as JSON (the weights are not read)");
  add_context_option(in, model_context);

  // vectors
  std::vector<std::string> vec_paths;
  auto* vec = app.add_subcommand("vectors", "Replay test-vector files or folders of *.vectors.json");
  vec->add_option("paths", vec_paths, "files or folders")->required();

  check_values(app);

  // A first word that names no command is refused here, with the nearest
  // one, before the parser reports it as an unexpected argument.
  if (argc > 1 && argv[1][0] != '-') {
    std::vector<std::string> commands;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      commands.push_back(sub->get_name());
    }
    if (std::find(commands.begin(), commands.end(), argv[1]) == commands.end()) {
      const std::string near = nearest_name(argv[1], commands);
      return usage_error(fmt::format("'{}' is not a kvevict command{} (kvevict --help lists them)", argv[1],
                                     near.empty() ? "" : fmt::format(": did you mean '{}'?", near)));
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version end here too, with exit 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    if (const std::optional<std::string> flag = unknown_flag(app, argc, argv)) return usage_error(*flag);
    const std::vector<CLI::App*> chosen = app.get_subcommands();
    return usage_error(fmt::format("{} (kvevict {}--help)", e.what(),
                                   chosen.empty() ? "" : chosen.front()->get_name() + " "));
  }

  try {
    // Every command runs its kernels at the target KVEVICT_SIMD names, if set;
    // a target the CPU lacks is refused here, before any work.
    simd::select_from_environment();
    if (list->parsed()) return cmd_list(list_format);

    if (schema_cmd->parsed()) {
      std::cout << result_schema_json() << '\n';
      return 0;
    }

    if (simd_cmd->parsed()) {
      cli::print_simd(std::cout, simd::compiled_targets(), simd::supported_targets(), simd::active_target(),
                      simd_format);
      return 0;
    }

    if (run_cmd->parsed()) {
      ParamMap params = parse_sets(run_sets);
      std::int64_t budget = find_policy(run_policy).effective(params).front().second;
      for (const auto& [k, v] : params) {
        if (k == "budget") budget = v;
      }
      if (run_budget) budget = *run_budget;
      EvaluateOptions options = options_of(run_trace, run_steps, "run");
      options.paged = paged_of(run_paged);
      options.signals = run_signals;
      const std::vector<RunRow> rows = evaluate({{run_policy, params, budget}}, options);
      if (run_format == "json") {
        std::cout << run_json(rows.front()) << '\n';
      } else if (run_format == "csv") {
        cli::print_rows(std::cout, rows, "csv", false);
      } else {
        cli::print_run_table(std::cout, rows.front());
      }
      return 0;
    }

    if (cmp->parsed() && cmp_on.given()) {
      check_model_source(cmp, cmp_signals);
      CompareRequest request;
      request.policies = model_compare_policies(cmp_policies);
      request.budgets = parse_integer_list(cmp->count("--budgets") > 0 ? cmp_budgets : "64,128,256,512", "--budgets");
      request.overrides = parse_sets(cmp_sets);
      request.skip_refused = cmp_skip_refused;
      print_skipped("compare", request);
      const Progress progress("compare", cmp_run, cmp_on.model);
      const auto model = open_model(cmp_on.model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(cmp_on.text);
      ModelRunOptions options;
      options.max_windows = cmp_on.windows;
      options.paged = paged_of(cmp_paged);
      options.prefill = cmp_prefill;
      options.prefill_window = cmp_window;
      options.kv = kv_of(cmp_on.kv);
      options.progress = progress.fn("window runs (windows x runs)", model->config().context);
      const std::vector<PerplexityRow> rows = compare_model(*model, text, request, options);
      cli::print_perplexity(std::cout, rows, cmp_format);
      if (cmp_format == "table") {
        std::cout << fmt::format(
            "\nranked by perplexity at budget {}; {} predictions over {} of {}. {}\n",
            ranking_budget(request.budgets), rows.front().predictions, cmp_on.text, model->path(),
            cmp_prefill > 0
                ? fmt::format("Each window's first {} bytes read with the full cache, then compressed once to the "
                              "budget from the last {} attention rows; only the bytes after them are scored.",
                              cmp_prefill, cmp_window)
                : fmt::format("Retained mass and recall: the same policy replayed on the model's full-cache "
                              "attention, mean over its {} caches.",
                              model->config().head_count()));
      }
      return 0;
    }

    if (st->parsed()) {
      const Progress progress("stream", st_run, st_model);
      const auto model = open_model(st_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(st_text);
      if (st_sinks) {
        cli::print_sinks(std::cout, sink_shares(*model, text, st_tokens), st_format);
        return 0;
      }
      StreamRequest request;
      const std::vector<std::int64_t> budgets = parse_integer_list(st_budgets, "--budget");
      if (!st_policies.empty() && st_policies != "none") {
        request.specs = stream_specs(st_policies, budgets, parse_sets(st_sets));
      }
      request.positions.clear();
      for (const std::string& p : split_list(st_positions, "--positions")) {
        request.positions.push_back(parse_position_mode(p));
      }
      request.full_cache = !st_no_full;
      request.tokens = st_tokens;
      request.segment = st_segment;
      request.recompute_window = st_recompute;
      request.recompute_tokens = st_recompute_tokens;
      if (st_recompute > 0 && st_recompute_tokens == 0) {
        throw ParameterError("--recompute needs --recompute-tokens N: it costs N x the window steps");
      }
      ModelRunOptions options;
      options.kv = kv_of(st_kv);
      options.progress = progress.fn("runs", st_tokens);
      if (!st_svg.empty()) check_output_file(st_svg, st_force);  // before the work, not after
      const std::vector<StreamRow> rows = stream_perplexity(*model, text, request, options);
      if (std::any_of(rows.begin(), rows.end(), [](const StreamRow& r) { return r.past_trained_context; })) {
        std::fprintf(stderr,
                     "stream: note: runs with original positions went past the %u positions the model was trained "
                     "on, to rotary angles it never saw\n",
                     model->config().trained_context);
      }
      cli::print_stream(std::cout, rows, st_format);
      if (!st_svg.empty()) {
        write_file_atomically(st_svg, cli::stream_chart_svg(rows, model->config().context, st_model), st_force);
      }
      return 0;
    }

    if (ppl->parsed()) {
      const Progress progress("perplexity", ppl_run, ppl_model);
      const auto model = open_model(ppl_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(ppl_text);
      std::vector<RunSpec> specs;
      if (!ppl_policies.empty()) {
        CompareRequest request;
        request.policies = parse_policy_list(ppl_policies);
        request.overrides = parse_sets(ppl_sets);
        request.budgets.clear();
        if (!ppl_budgets.empty()) {
          request.budgets = parse_integer_list(ppl_budgets, "--budget");
        } else {
          for (const std::string& name : request.policies) {
            const ParamMap defaults = find_policy(name).effective({});
            request.budgets.push_back(defaults.front().second);
          }
          std::sort(request.budgets.begin(), request.budgets.end());
          request.budgets.erase(std::unique(request.budgets.begin(), request.budgets.end()), request.budgets.end());
        }
        specs = compare_specs(request);
      } else if (!ppl_budgets.empty() || !ppl_sets.empty() || !ppl_memory.empty()) {
        throw ParameterError("--budget, --set and --kv-memory need --policy (without it only the full cache is scored)");
      }
      ModelRunOptions options;
      options.max_windows = ppl_windows;
      options.paged = paged_of(ppl_paged);
      options.prefill = ppl_prefill;
      options.prefill_window = ppl_window;
      options.progress = progress.fn("window runs (windows x runs)", model->config().context);
      if (!ppl_memory.empty()) {
        MemoryRequest request;
        request.policies = parse_policy_list(ppl_policies);
        request.overrides = parse_sets(ppl_sets);
        for (const std::int64_t m : parse_integer_list(ppl_memory, "--kv-memory")) {
          if (m < 1) throw ParameterError(fmt::format("--kv-memory: {} bytes is not a memory budget", m));
          request.memories.push_back(m);
        }
        request.formats = kv_list_of(ppl_kv);
        cli::print_perplexity(std::cout, perplexity_at_memory(*model, text, request, options), ppl_format);
        return 0;
      }
      options.kv = kv_of(ppl_kv);
      const std::vector<PerplexityRow> rows = perplexity(*model, text, specs, options);
      cli::print_perplexity(std::cout, rows, ppl_format);
      return 0;
    }

    if (sb->parsed()) {
      std::vector<std::uint32_t> sequences;
      for (const std::int64_t n : parse_integer_list(sb_sequences, "--sequences")) {
        if (n < 1 || n > 4096) throw ParameterError(fmt::format("--sequences: {} is not 1 ... 4096", n));
        sequences.push_back(static_cast<std::uint32_t>(n));
      }
      const std::vector<std::string> policies = serve_policy_names(sb_policies);
      std::vector<bool> sharing;
      if (sb_no_sharing) {
        if (sb->count("--sharing") > 0) throw ParameterError("give --sharing or --no-prefix-sharing, not both");
        sharing.push_back(false);
      } else {
        for (const std::string& v : split_list(sb_sharing, "--sharing")) {
          if (v != "on" && v != "off") throw ParameterError(fmt::format("--sharing: '{}' is not on or off", v));
          sharing.push_back(v == "on");
        }
      }
      std::vector<std::uint32_t> chunks;
      for (const std::int64_t c : parse_integer_list(sb_chunks, "--chunk")) {
        if (c < 0 || c > std::int64_t{1} << 20) throw ParameterError(fmt::format("--chunk: {} is not a chunk size", c));
        chunks.push_back(static_cast<std::uint32_t>(c));
      }
      if (sb_block_size < 1 || sb_block_size > std::int64_t{1} << 20) {
        throw ParameterError(fmt::format("--block-size ({}) must be 1 ... 1048576", sb_block_size));
      }
      const Progress progress("serve-bench", sb_run, sb_model);
      const auto model = open_model(sb_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(sb_text);
      ServeBenchRequest request;
      request.runs = serve_runs(sequences, policies, sb_budget, split_list(sb_modes, "--modes"), sharing, chunks);
      request.shared_prefix = sb_prefix;
      request.tokens = sb_tokens;
      request.positions = parse_position_mode(sb_positions);
      request.prompt = sb_prompt;
      request.window = sb_window;
      request.block_size = static_cast<std::uint32_t>(sb_block_size);
      request.pool_blocks = sb_pool;
      request.overrides = parse_sets(sb_sets);
      request.progress = progress.fn("ticks");
      cli::print_serve(std::cout, serve_bench(model, text, request), sb_format);
      return 0;
    }

    if (tasks_cmd->parsed()) {
      const Progress progress("tasks", tasks_cmd_run, task_model);
      const auto model = open_model(task_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(task_text);
      TaskRequest request;
      request.tasks.clear();
      if (task_names_arg == "all") {
        request.tasks = task_names();
      } else {
        for (const std::string& t : split_list(task_names_arg, "--tasks")) request.tasks.push_back(t);
      }
      request.lengths.clear();
      for (const std::int64_t l : parse_integer_list(task_lengths, "--lengths")) {
        if (l < 1 || l > std::int64_t{1} << 20) throw ParameterError(fmt::format("--lengths: {} is not a length", l));
        request.lengths.push_back(static_cast<std::uint32_t>(l));
      }
      if (task_policies == "none") {
        request.budgets.clear();
      } else {
        request.policies = parse_policy_list(task_policies);
        request.budgets = parse_integer_list(task_budgets, "--budgets");
      }
      request.moments.clear();
      for (const std::string& m : split_list(task_moments, "--moments")) request.moments.push_back(parse_moment(m));
      request.overrides = parse_sets(task_sets);
      request.depths = task_depths;
      request.samples = task_samples;
      request.seed = task_seed;
      request.window = task_window;
      request.chunk = task_chunk;
      ModelRunOptions options;
      options.kv = kv_of(task_kv);
      options.progress = progress.fn("answers");
      const std::vector<TaskRow> rows = run_tasks(model, text, request, options);
      if (task_format == "json") {
        std::cout << tasks_json(rows);
      } else if (task_format == "csv") {
        std::cout << tasks_csv(rows);
      } else {
        std::cout << tasks_markdown(rows);
      }
      return 0;
    }

    if (rec->parsed()) {
      const Progress progress("record", rec_run, rec_model);
      const auto model = open_model(rec_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(rec_text);
      rec_files.attention = rec_out;
      rec_files.overwrite = rec_force;
      const std::uint32_t n = record_signals(*model, text, rec_files, rec_tokens);
      const ModelConfig& c = model->config();
      const bool bytes = model->vocabulary().kind() == Vocabulary::Kind::kBytes;
      std::cerr << fmt::format("wrote {}: [{}, {}, {}] float32 ({} layers x {} KV heads, {} {} of {})\n", rec_out,
                               c.head_count(), n, n, c.layers, c.kv_heads, n,
                               bytes ? "bytes" : "tokens (BOS included where the model adds it)", rec_text);
      const std::pair<const std::filesystem::path*, std::uint32_t> more[] = {
          {&rec_files.keys, c.head_dim()}, {&rec_files.values, c.head_dim()}, {&rec_files.queries, c.group() * c.head_dim()}};
      for (const auto& [file, width] : more) {
        if (!file->empty()) {
          std::cerr << fmt::format("wrote {}: [{}, {}, {}] float32\n", file->string(), c.head_count(), n, width);
        }
      }
      return 0;
    }

    if (per->parsed()) {
      std::vector<std::unique_ptr<Trace>> heads;
      std::vector<Trace*> views;
      if (!per_model.empty()) {
        if (per->count("--trace") > 0) throw ParameterError("give --trace or --model, not both");
        const auto model = open_model(per_model, model_context);
        for (auto& h : record_heads(*model, read_model_text(per_text))) heads.push_back(std::move(h));
        if (per_layer) {
          if (*per_layer >= model->config().layers) {
            throw ParameterError(fmt::format("--layer {}: the model has layers 0 ... {}", *per_layer,
                                             model->config().layers - 1));
          }
          for (std::uint32_t hd = 0; hd < model->config().kv_heads; ++hd) {
            views.push_back(heads[*per_layer * model->config().kv_heads + hd].get());
          }
        }
      } else {
        heads = open_trace_heads(per_trace);
      }
      if (views.empty()) {
        for (const auto& h : heads) views.push_back(h.get());
      }
      std::vector<std::uint32_t> lags;
      for (const std::int64_t k : parse_integer_list(per_lags, "--lags")) {
        if (k < 1 || k > std::numeric_limits<std::uint32_t>::max()) {
          throw ParameterError(fmt::format("--lags: {} is not a positive lag", k));
        }
        lags.push_back(static_cast<std::uint32_t>(k));
      }
      cli::print_persistence(std::cout, persistence(views, lags), per_format);
      return 0;
    }

    if (cmp->parsed()) {
      CompareRequest request;
      request.policies = replay_policy_list(cmp_policies, cmp_signals);
      request.budgets = parse_integer_list(cmp_budgets, "--budgets");
      request.overrides = parse_sets(cmp_sets);
      request.skip_refused = cmp_skip_refused;
      print_skipped("compare", request);
      use_threads(cmp_run.threads);
      EvaluateOptions options = options_of(cmp_trace, cmp_steps, "compare");
      options.paged = paged_of(cmp_paged);
      options.signals = cmp_signals;
      const std::vector<RunRow> rows = compare(request, options);
      if (cmp_format == "json") {
        std::cout << rows_json(rows) << '\n';
        return 0;
      }
      cli::print_rows(std::cout, rows, cmp_format, true);
      if (cmp_format == "table") {
        std::cout << fmt::format(
            "\nranked by retained mass at budget {}; {} steps of {}. Both metrics are proxies: "
            "attention kept, not model quality.\n",
            ranking_budget(request.budgets),
            rows.front().totals.steps / static_cast<std::int64_t>(rows.front().heads), rows.front().trace);
      }
      return 0;
    }

    if (sw->parsed()) {
      SweepRequest request;
      request.policy = find_policy(sw_policy).name;
      const std::size_t eq = sw_param.find('=');
      if (eq == std::string::npos || eq == 0) {
        throw ParameterError(fmt::format("--param '{}' is not KEY=V1,V2,...", sw_param));
      }
      request.param = sw_param.substr(0, eq);
      request.values = parse_integer_list(sw_param.substr(eq + 1), request.param);
      request.budgets = parse_integer_list(sw->count("--budgets") > 0 || !sw_on.given() ? sw_budgets : "64,128,256",
                                           "--budgets");
      request.params = parse_sets(sw_sets);
      request.skip_refused = sw_skip_refused;
      std::vector<std::string> skipped;
      const std::vector<RunSpec> specs = sweep_specs(request, &skipped);
      for (const std::string& line : skipped) std::cerr << "sweep: skipped " << line << '\n';
      std::vector<std::string> extra;
      if (request.param != "budget") extra.push_back(request.param);
      if (sw_on.given()) {
        check_model_source(sw, sw_signals);
        const Progress progress("sweep", sw_run, sw_on.model);
        const auto model = open_model(sw_on.model, model_context);
        const std::vector<std::uint8_t> text = read_model_text(sw_on.text);
        ModelRunOptions options;
        options.max_windows = sw_on.windows;
        options.kv = kv_of(sw_on.kv);
        options.progress = progress.fn("window runs (windows x runs)", model->config().context);
        cli::print_perplexity(std::cout, perplexity(*model, text, specs, options), sw_format, extra);
        return 0;
      }
      use_threads(sw_run.threads);
      EvaluateOptions options = options_of(sw_trace, sw_steps, "sweep");
      options.signals = sw_signals;
      const std::vector<RunRow> rows = evaluate(specs, options);
      if (sw_format == "json") {
        std::cout << rows_json(rows) << '\n';
        return 0;
      }
      cli::print_rows(std::cout, rows, sw_format, false, extra);
      return 0;
    }

    if (tr->parsed()) {
      const auto heads = open_trace_heads(tr_trace);
      const std::uint32_t steps = tr_steps ? checked_steps(*heads.front(), *tr_steps) : heads.front()->steps();
      if (!tr_out.empty()) {
        if (heads.size() != 1) throw InputError("--out writes one head; this trace has several");
        write_npy_trace(*heads.front(), steps, tr_out, tr_force);
        std::cerr << fmt::format("wrote {} steps of {} to {}\n", steps, tr_trace, tr_out);
      }
      if (tr_hash) {
        for (const auto& head : heads) std::cout << trace_hash(*head, steps) << '\n';
      } else if (tr_out.empty()) {
        std::cout << fmt::format("trace {}: {} positions, {} decode steps, {} head(s) (use --hash for the parity hash)\n",
                                 tr_trace, heads.front()->length(), heads.front()->steps(), heads.size());
      }
      return 0;
    }

    if (bench->parsed() && bench_model_opt->count() > 0) {
      if (bench->get_option("--bank-instances")->count() > 0 || bench->get_option("--bank-budget")->count() > 0 ||
          bench_no_compare || bench->get_option("--seconds")->count() > 0) {
        throw ParameterError("bench --model times a decoder: --seconds, --no-compare and --bank-* do not apply");
      }
      const auto model = open_model(bench_model, model_context);
      const std::vector<std::uint8_t> text = read_model_text(bench_text);
      DecodeBenchRequest request;
      request.tokens = bench_tokens;
      request.rounds = bench_rounds;
      request.prompt = bench_prompt;
      request.prefill_chunk = bench_chunk;
      request.together = bench_together;
      request.threads.clear();
      for (const std::int64_t t : parse_integer_list(bench_threads, "--threads")) {
        if (t < 0 || t > 1024) throw ParameterError(fmt::format("--threads: {} is not in 0 ... 1024 (0: every core)", t));
        request.threads.push_back(static_cast<int>(t));
      }
      const std::vector<std::int64_t> budgets = bench->get_option("--budgets")->count() > 0
                                                    ? parse_integer_list(bench_budgets, "--budgets")
                                                    : std::vector<std::int64_t>{128};
      // "none": the full cache alone.
      const std::vector<std::string> names = bench->get_option("--policies")->count() == 0
                                                 ? std::vector<std::string>{"h2o", "scissorhands", "snapkv", "sliding-window"}
                                             : bench_policies == "none" ? std::vector<std::string>{}
                                                                        : parse_policy_list(bench_policies);
      for (const std::string& name : names) {
        for (const std::int64_t b : budgets) request.runs.push_back({name, {}, b});
      }
      if (!bench_simd.empty()) simd::select_target(bench_simd);
      request.on_start = [&](std::uint32_t tokens) {
        std::cerr << fmt::format("bench: {} runs x {} thread count(s) x {} rounds (each timed, then profiled{}), "
                                 "{} tokens a pass after a prompt of {}\n",
                                 request.runs.size() + 1, request.threads.size(), bench_rounds,
                                 bench_together ? "; and all together" : "", tokens, bench_prompt);
      };
      cli::print_decode_bench(std::cout, bench_decoder(model, text, request), bench_format);
      return 0;
    }

    if (bench->parsed()) {
      for (const char* flag : {"--text", "--tokens", "--rounds", "--prompt", "--prefill-chunk", "--threads", "--together"}) {
        if (bench->get_option(flag)->count() > 0) {
          throw ParameterError("bench: --text, --tokens, --rounds, --prompt, --prefill-chunk, --threads and --together "
                               "need --model");
        }
      }
      BenchOptions options;
      options.budgets = parse_integer_list(bench_budgets, "--budgets");
      // Items with parameters ("expected-attention:evictEvery=8") go to the
      // library as written; the rest through the registry's list ("all").
      for (const std::string& item : split_list(bench_policies, "--policies")) {
        if (item.find(':') != std::string::npos) {
          options.policies.push_back(item);
        } else {
          for (std::string& name : parse_policy_list(item)) options.policies.push_back(std::move(name));
        }
      }
      options.seconds_per_case = bench_seconds;
      options.include_compare = !bench_no_compare;
      options.bank_instances = bench_bank_instances;
      options.bank_budget = bench_bank_budget;
      options.progress = [](const std::string& what) { std::cerr << "bench: " << what << '\n'; };
      if (!bench_simd.empty()) simd::select_target(bench_simd);
      const BenchReport r = run_bench(options);
      cli::print_bench(std::cout, r, bench_format);
      return 0;
    }

    if (rep->parsed()) {
      ReportRequest request;
      if (rep_policies.find_first_not_of(" ,") == std::string::npos) {
        throw ParameterError("--policies: the policy list is empty (name at least one policy, or all)");
      }
      request.compare.policies = parse_policy_list(rep_policies, kSignalAttention, kTraceSource);
      request.compare.budgets = parse_integer_list(rep_budgets, "--budgets");
      request.compare.overrides = parse_sets(rep_sets);
      request.strip_budget = rep_strip_budget;
      ReportOutput output;
      output.html = rep_out;
      if (!rep_svg.empty()) output.svg_dir = rep_svg;
      output.overwrite = rep_force;
      check_output_file(output.html, output.overwrite);  // before the work, not after
      std::vector<TaskRow> task_rows;
      if (!rep_tasks.empty()) task_rows = read_task_rows_file(rep_tasks);  // before the work too
      ReportData data = build_report(request, options_of(rep_trace, rep_steps, "report"));
      data.tasks = std::move(task_rows);
      data.tasks_source = rep_tasks;
      for (const auto& [file, bytes] : write_report(data, output)) {
        std::cerr << fmt::format("wrote {} ({} bytes)\n", file.string(), bytes);
      }
      return 0;
    }

    if (rm_cmd->parsed()) {
      rm.type = parse_weight_type(rm_type);
      if (rm_tied) rm.tied = true;
      if (rm_untied) rm.tied = false;
      rm.llama3_scaling = rm_scaling == "llama3";
      rm.linear_scaling = rm_scaling == "linear";
      std::error_code ec;
      if (!std::filesystem::is_regular_file(rm_text, ec)) {
        throw InputError(fmt::format("--tokenizer-text {}: not a readable file (the default is relative to the "
                                     "repository root: run from there or give --tokenizer-text FILE)",
                                     rm_text));
      }
      const std::vector<std::uint8_t> text = read_model_text(rm_text);
      rm.tokenizer_text.assign(text.begin(), text.end());
      write_random_model(rm, rm_out, rm_force);
      const auto model = Model::load(rm_out);
      std::cout << "wrote " << rm_out << '\n' << describe_model(*model);
      return 0;
    }

    if (cv->parsed()) {
      const WeightType type = parse_weight_type(cv_type);
      write_gguf_of(*Model::load(cv_model), cv_out, type, cv_force);
      std::cout << "wrote " << cv_out << '\n' << describe_model(*Model::load(cv_out));
      return 0;
    }

    if (lg->parsed()) {
      check_output_file(lg_out, lg_force);  // before the work
      const Progress progress("logits", lg_run, lg_model);
      const auto model = open_model(lg_model, model_context);
      std::vector<Token> tokens;
      for (const std::int64_t t : parse_integer_list(lg_tokens, "--tokens")) {
        if (t < 0 || t >= std::int64_t{model->config().vocab}) {
          throw InputError(fmt::format("--tokens: {} is outside the model's vocabulary of {}", t, model->config().vocab));
        }
        tokens.push_back(static_cast<Token>(t));
      }
      std::optional<RunSpec> spec;
      if (!lg_policy.empty()) {
        ParamMap params = parse_sets(lg_sets);
        std::int64_t budget = lg_budget;
        if (budget == 0) budget = find_policy(lg_policy).effective(params).front().second;
        spec = RunSpec{lg_policy, params, budget};
      }
      const std::vector<float> logits = model_logits(*model, tokens, spec ? &*spec : nullptr);
      const std::uint64_t shape[] = {tokens.size(), model->config().vocab};
      write_npy_floats(shape, logits, lg_out, lg_force);
      std::cerr << fmt::format("wrote {} ([{}, {}] float32)\n", lg_out, tokens.size(), model->config().vocab);
      return 0;
    }

    if (tk->parsed()) {
      if (tk_text.empty() && tk->count("--string") == 0) throw ParameterError("tokenize: give --text FILE or --string TEXT");
      const std::shared_ptr<const Vocabulary> vocab = load_vocabulary(tk_model);
      std::string text = tk_string;
      if (!tk_text.empty()) {
        std::ifstream file(tk_text, std::ios::binary);
        if (!file) throw InputError(fmt::format("{}: cannot be opened (does it exist?)", tk_text));
        text.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
      }
      const std::vector<Token> tokens = vocab->encode(text, !tk_no_bos);
      if (tk_json) {
        const nlohmann::json out = {{"tokenizer", vocab->describe()}, {"tokens", tokens}, {"bytes", text.size()}};
        std::cout << out.dump() << '\n';
      } else {
        std::cout << fmt::format("{}\n", fmt::join(tokens, " "));
      }
      return 0;
    }

    if (in->parsed()) {
      if (in_json) {
        std::cout << inspect_file_json(in_model) << '\n';
      } else {
        std::cout << describe_model(*open_model(in_model, model_context));
      }
      return 0;
    }

    if (vec->parsed()) {
      std::vector<std::filesystem::path> paths(vec_paths.begin(), vec_paths.end());
      const VectorReport report = run_vectors(paths);
      for (const VectorFailure& f : report.failures) std::cout << describe(f) << '\n';
      std::cout << fmt::format("{} passed, {} failed\n", report.passed, report.failed);
      return report.failed == 0 ? 0 : 1;
    }
  } catch (const std::exception& e) {
    std::cerr << "kvevict: error: " << e.what() << '\n';
    return 1;
  }
  return 0;
}
