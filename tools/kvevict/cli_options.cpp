// The flags and helpers several kvevict commands share (cli_options.h).
#include "cli_options.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "kvevict/core/block_evictor.h"
#include "kvevict/core/errors.h"
#include "kvevict/eval/threads.h"
#include "kvevict/model/decoder/model_text.h"

namespace kvevict::cli {

namespace {

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

std::string clock_of(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 3600 ? fmt::format("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60) : fmt::format("{}:{:02}", s / 60, s % 60);
}

}  // namespace

void add_run_flags(CLI::App* cmd, RunFlags& f) {
  cmd->add_option("--threads", f.threads,
                  "threads for the runs and the weight products (0: every core; more than the cores is capped, "
                  "with a note)")
      ->capture_default_str();
  cmd->add_option("--progress", f.progress,
                  "progress on stderr: auto (one line redrawn on a terminal, plain lines otherwise), lines, off")
      ->check(CLI::IsMember({"auto", "lines", "off"}))->capture_default_str();
}

Progress::Progress(std::string what, const RunFlags& flags, const std::string& model)
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

ProgressFn Progress::fn(const std::string& unit, double tokens_per_unit) const {
  if (mode_ == "off") return {};
  struct State {
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point last_line{};
    std::uint32_t last_tenth = 0;
    std::uint32_t total = 0;
    std::uint32_t done = 0;
  };
  auto state = std::make_shared<State>();
  const bool in_tokens = unit == "tokens";
  return [what = what_, tty = mode_ == "tty", unit, tokens_per_unit, in_tokens, state, end = end_](
             std::uint32_t done, std::uint32_t total) {
    const auto now = std::chrono::steady_clock::now();
    // A new stage of the work (choose: its probes, then the runs) counts
    // from 0 again: its rate and time left from its own start. (A total that
    // shrinks to what was done is a stage a deadline ended: the same stage.)
    if (done < state->done) {
      state->start = now;
      state->last_tenth = 0;
      state->last_line = {};
      state->total = total;
    }
    state->done = done;
    const double elapsed = std::chrono::duration<double>(now - state->start).count();
    std::string line = fmt::format("{}: {}/{} {} ({:.0f}%)", what, done, total, unit,
                                   100.0 * done / std::max<std::uint32_t>(total, 1));
    if (in_tokens) {
      if (done > 0 && elapsed > 0.0) line += fmt::format(" at {:.0f} tokens/s", done / elapsed);
    } else if (tokens_per_unit > 0.0) {
      line += fmt::format(", ~{:.0f} tokens", done * tokens_per_unit);
      if (elapsed > 0.0) line += fmt::format(" at {:.0f} tokens/s", done * tokens_per_unit / elapsed);
    }
    if (done > 0 && done < total) {
      double left = elapsed * (total - done) / done;
      if (end) left = std::min(left, std::max(0.0, std::chrono::duration<double>(*end - now).count()));
      line += fmt::format(", {} left", clock_of(left));
    }
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

ParamMap parse_sets(const std::vector<std::string>& sets) { return parse_assignments(sets); }

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

void add_paged_options(CLI::App* cmd, PagedFlags& f, bool model) {
  cmd->add_option("--block-size", f.block_size,
                  std::string("evict whole blocks of N positions (paged KV cache") +
                      (model ? "; with a model the decoder runs on a paged store of N-position blocks" : "") +
                      "); the budget must be a whole number of blocks");
  cmd->add_option("--start-blocks", f.start_blocks, "with --block-size: the first N blocks are never evicted");
  cmd->add_option("--recent-blocks", f.recent_blocks,
                  "with --block-size: the last N full blocks are never evicted (the partial block never is)");
  cmd->add_option("--block-score", f.block_score, "with --block-size: a block's score from its positions' "
                                                  "scores: sum, mean, max or normsum (each over its steps held)");
  add_granularity_option(cmd, f.granularity, model);
  cmd->add_flag("--layer-budget", f.layer_budget, "the same as --granularity layer");
  cmd->add_option("--head-floor", f.head_floor,
                  "with --granularity layer: the fewest positions a head keeps (default: a fifth of the fair share)");
}

void add_granularity_option(CLI::App* cmd, std::string& granularity, bool model) {
  cmd->add_option("--granularity", granularity,
                  std::string("which caches share the budget: head (each its own, the default), layer (a layer's ") +
                      (model ? "KV heads" : "heads: all of a trace's") +
                      " share budget x heads positions, the lowest-scoring across them go) or sequence (every " +
                      (model ? "cache of the sequence, all layers and KV heads," : "head of the trace") +
                      " holds the same budget positions, one victim set from all their scores: llama.cpp's cells; "
                      "docs/paged.md)");
}

PagedOptions granularity_of(const std::string& granularity) {
  PagedOptions p;
  if (!granularity.empty()) p.set_granularity(parse_granularity(granularity));
  return p;
}

CLI::Option* add_kv_options(CLI::App* cmd, KvFlags& f, const std::string& needs) {
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

void add_model_options(CLI::App* cmd, ModelFlags& f, const std::string& model_help, ModelLoad& load) {
  auto* model = cmd->add_option("--model", f.model, model_help);
  add_context_option(cmd, load, model);
  cmd->add_option("--text", f.text, "with --model: the text to score (tokenized by the model's own tokenizer)")
      ->needs(model);
  model->needs("--text");
  cmd->add_option("--max-windows", f.windows, "with --model: use only the first N context windows (0 = all)")
      ->needs(model);
  add_kv_options(cmd, f.kv, "--model");
}

void check_model_source(const CLI::App* cmd, const SignalFiles& signals) {
  if (cmd->count("--trace") + cmd->count("--steps") > 0) {
    throw ParameterError("--trace and --steps replay a trace; --model runs the model over --text (give one or the other)");
  }
  if (!signals.empty()) {
    throw ParameterError("--keys, --values and --queries replay a recorded trace; --model runs the model, whose "
                         "decoder gives the policies their keys itself (give one or the other)");
  }
}

void add_context_option(CLI::App* cmd, ModelLoad& load, CLI::Option* needs) {
  const std::string with = needs != nullptr ? "with " + needs->get_name() + ": " : "";
  auto* context = cmd->add_option("--context", load.context,
                                  with + "positions to run the model at: its windows' length and its caches' capacity "
                                         "(default: the model's trained context, at most 4096)");
  auto* matmul =
      cmd->add_option("--matmul", load.matmul,
                      with + "how quantized matrices multiply: exact (the default, every published table) or int8 "
                             "(Q8_0 and Q4_K against the vectors rounded to 8 bits as llama.cpp rounds them: "
                             "faster, and logits nearer llama.cpp's; docs/performance.md)")
          ->check(CLI::IsMember({"exact", "int8"}))
          ->capture_default_str();
  if (needs != nullptr) {
    context->needs(needs);
    matmul->needs(needs);
  }
}

std::shared_ptr<const Model> open_model(const std::string& path, const ModelLoad& load) {
  ModelOptions options;
  options.context = load.context;
  options.matmul = parse_matmul_mode(load.matmul);
  const std::uint32_t context = load.context;
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
  if (!f.granularity.empty()) {
    const Granularity g = parse_granularity(f.granularity);
    if (f.layer_budget && g != Granularity::kLayer) {
      throw ParameterError(fmt::format("--layer-budget is --granularity layer; it cannot be given with --granularity {}",
                                       f.granularity));
    }
    p.set_granularity(g);
  }
  p.head_floor = f.head_floor;
  check_paged(p);
  return p;
}

int usage_error(std::string message) {
  std::replace(message.begin(), message.end(), '\n', ' ');
  while (!message.empty() && message.back() == ' ') message.pop_back();
  std::cerr << "kvevict: error: " << message << '\n';
  return kUsageExit;
}

void print_skipped(const std::string& command, const CompareRequest& request) {
  if (!request.skip_refused) return;
  std::vector<std::string> skipped;
  (void)compare_specs(request, &skipped);
  for (const std::string& line : skipped) std::cerr << command << ": skipped " << line << '\n';
}

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

}  // namespace kvevict::cli
