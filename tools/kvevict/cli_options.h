// The flags and helpers several kvevict commands share: --threads and
// --progress, the trace, signal, paged-cache, KV-precision and model flags,
// opening a model and its text, and the one-line usage error. Parsing only:
// what the flags mean is checked by the library.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "kvevict/core/params.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/paged.h"
#include "kvevict/eval/signal_files.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/kv/kv_precision.h"

namespace kvevict::cli {

// What a trace replay can feed: attention rows, no keys.
inline constexpr std::string_view kTraceSource = "a trace (attention weights only)";

// The model files every model command takes.
inline constexpr const char* kModelHelp =
    "the model: kvevict's .kvm (e.g. model/kvevict-tiny.kvm), a GGUF file, or a safetensors folder (config.json, "
    "model.safetensors, tokenizer.json) of a llama, qwen2 or mistral model (docs/models.md)";

// Exit status of a usage error: the command line does not parse (the
// README's "The tool" and --help's footer say so). What the library refuses
// after that exits 1.
inline constexpr int kUsageExit = 2;

// --threads and --progress, on every command that runs a model.
struct RunFlags {
  int threads = 0;
  std::string progress = "auto";
};

void add_run_flags(CLI::App* cmd, RunFlags& f);

// Progress of a model's work (minutes, not seconds), on stderr: what is
// done, its rate and the time left -- one line redrawn on a terminal (shown
// at once, while the model loads), a plain line every tenth of the way or
// 10 s otherwise (logs, CI). Also sets --threads.
class Progress {
 public:
  Progress(std::string what, const RunFlags& flags, const std::string& model);

  // The library's (done, total) in `unit`s: "tokens" (each run's tokens
  // stepped; perplexity, compare, sweep, stream, tasks, choose) with tokens/s;
  // another unit with `tokens_per_unit`, the tokens one stands for. A
  // (done, total) that starts over (less done than before) is a new stage
  // of the work, with its own rate and time left.
  ProgressFn fn(const std::string& unit, double tokens_per_unit = 0.0) const;

  // Work that ends by `end` whatever is left of it (choose's time budget):
  // the time left shown is at most the time until then.
  void ends_by(std::chrono::steady_clock::time_point end) { end_ = end; }

  int threads() const noexcept { return threads_; }

 private:
  std::string what_;
  std::string mode_;
  int threads_ = 1;
  std::optional<std::chrono::steady_clock::time_point> end_;
};

// --set KEY=VALUE items as a parameter map.
ParamMap parse_sets(const std::vector<std::string>& sets);

// A trace replay's options: the trace, its first `steps` steps, and progress
// on stderr (on a terminal) named `what`.
EvaluateOptions options_of(const std::string& trace, std::optional<std::int64_t> steps, const std::string& what);

// --trace and --steps.
void add_trace_options(CLI::App* cmd, std::string& trace, std::optional<std::int64_t>& steps);

// --keys, --values, --queries: the signals recorded beside an .npy trace
// (kvevict record), for the key-aware policies; checked by the library.
void add_signal_options(CLI::App* cmd, SignalFiles& f);

// --block-size, --start-blocks, --recent-blocks, --block-score, --granularity,
// --layer-budget, --head-floor (docs/paged.md); parsed here, checked by the library.
struct PagedFlags {
  std::optional<std::int64_t> block_size;  // left out: token-level eviction; given: at least 1
  std::int64_t start_blocks = 0;
  std::int64_t recent_blocks = 0;
  std::string block_score = "sum";
  bool layer_budget = false;
  std::int64_t head_floor = -1;
  std::string granularity;  // head, layer or sequence; empty: head, or layer with --layer-budget
};

// `model`: the command runs a model (with --model, or always), so the help
// says what the flags do to its decoder; run replays traces only.
void add_paged_options(CLI::App* cmd, PagedFlags& f, bool model = true);
PagedOptions paged_of(const PagedFlags& f);
// --granularity alone, for the commands without the block flags (stream,
// tasks, serve-bench); granularity_of: its PagedOptions (head when empty).
void add_granularity_option(CLI::App* cmd, std::string& granularity, bool model = true);
PagedOptions granularity_of(const std::string& granularity);

// --kv-precision and --kv-residual (docs/paged.md "Fewer bits a position");
// checked by the library against the model.
struct KvFlags {
  std::string precision = "fp32";
  std::optional<std::int64_t> residual;
};

// `needs`: the flag both need ("--model"), named in --kv-precision's help.
CLI::Option* add_kv_options(CLI::App* cmd, KvFlags& f, const std::string& needs = "");
KvFormat kv_of(const KvFlags& f);
// --kv-memory's precisions: a comma-separated list, --kv-residual applied to
// each quantized one.
std::vector<KvFormat> kv_list_of(const KvFlags& f);

// compare's and sweep's --model, --text, --max-windows and the precision
// flags: the run over the real model instead of a trace.
// How every model command opens its model: --context and --matmul (one
// value of each for all commands: main.cpp makes it, the commands bind to
// it).
struct ModelLoad {
  std::uint32_t context = 0;  // 0: the model's trained context, at most 4096
  std::string matmul = "exact";
};

struct ModelFlags {
  std::string model;
  std::string text;
  std::uint32_t windows = 0;
  KvFlags kv;
  bool given() const noexcept { return !model.empty(); }
};

void add_model_options(CLI::App* cmd, ModelFlags& f, const std::string& model_help, ModelLoad& load);

// --model runs the model; a trace and recorded signals replay one: refuse both at once.
void check_model_source(const CLI::App* cmd, const SignalFiles& signals);

// Every model command's --context: the positions to run a model at (its
// trained context, or the first 4096 of a longer one, when not given); and
// --matmul exact|int8 (matmul.h). `needs`: an option both require, or null.
void add_context_option(CLI::App* cmd, ModelLoad& load, CLI::Option* needs = nullptr);

// The model at `path`, run at load.context positions (0: its trained
// context, at most 4096, with a note on stderr when that is fewer), its
// products as load.matmul says.
std::shared_ptr<const Model> open_model(const std::string& path, const ModelLoad& load);

// A model command's text, read by the library: a missing held-out split
// says how to make it; a text that is not UTF-8 is scored as the bytes it is,
// with a warning (the model was trained on text).
std::vector<std::uint8_t> read_model_text(const std::string& path);

// A usage error is one line on stderr, as every other refusal is, though the
// argument parser's own messages may span lines. Returns kUsageExit.
int usage_error(std::string message);

// compare --skip-refused: each pair left out, on stderr, before the work.
void print_skipped(const std::string& command, const CompareRequest& request);

}  // namespace kvevict::cli
