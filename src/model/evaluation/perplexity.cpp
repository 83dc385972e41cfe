#include "kvevict/model/evaluation/perplexity.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <exception>
#include <fstream>
#include <numbers>
#include <optional>
#include <span>

#include <omp.h>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/sequence_budget.h"
#include "kvevict/core/prefill.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/eviction/compress.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/eval/npy.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/files.h"
#include "kvevict/eval/intervals.h"
#include "kvevict/eval/trace.h"
#include "eval/parallel_jobs.h"
#include "eval/ranking.h"
#include "model/evaluation/scoring.h"

namespace kvevict {

using detail::negative_log_likelihood;
using detail::shared_view;

namespace {

using Window = TextWindow;

// The tokens a run steps through the windows (each window's last position is
// only predicted): what progress counts.
std::uint64_t window_steps(const std::vector<Window>& windows) {
  std::uint64_t steps = 0;
  for (const Window& w : windows) steps += w.length - 1;
  return steps;
}

ParamMap without_budget(ParamMap params) {
  std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
  return params;
}

struct WindowResult {
  double nll = 0.0;
  std::uint64_t evicted = 0;
  StoreStats store;
};

// One window through a decoder whose heads have the given policies (null =
// full cache), on the store `paged` asks for.
WindowResult run_window(const std::shared_ptr<const Model>& model, const TokenizedText& text,
                        const Window& w, const RunSpec* spec, const ModelRunOptions& options, const KvFormat& kv,
                        detail::ProgressCounter& count) {
  const PagedOptions& paged = options.paged;
  const ModelConfig& cfg = model->config();
  DecoderOptions store;
  store.capacity = w.length;
  store.block_size = static_cast<std::uint32_t>(paged.block_size);
  store.kv = kv;
  Decoder decoder(model, store);
  DecoderPolicies policies;
  std::optional<PrefillCompressor> compressor;
  if (spec != nullptr && options.prefill > 0) {
    compressor.emplace(cfg, *spec, options.prefill, options.prefill_window);
  } else if (spec != nullptr) {
    policies = DecoderPolicies(*spec, cfg, paged);
    policies.attach(decoder);
  }
  WindowResult r;
  for (std::uint32_t i = 0; i + 1 < w.length; ++i) {
    const std::span<const float> logits = decoder.step(w.token_at(text, i));
    if (compressor) compressor->after_step(decoder, i);
    // With a prefill, token i + 1 is scored once tokens 0 ... prefill-1 are read.
    if (i + 1 > options.prefill) r.nll += negative_log_likelihood(logits, w.token_at(text, i + 1));
    count.add(1);
  }
  r.evicted = decoder.evicted();
  r.store = decoder.store();
  return r;
}

// The same for several runs over one window, fed together
// (Decoder::prefill_together): one read of each weight for `pass` tokens of
// all of them, the same bits as each run alone. The products run on the
// calling thread (a job that shares the cores with others).
std::vector<WindowResult> run_window_together(const std::shared_ptr<const Model>& model, const TokenizedText& text,
                                              const Window& w, std::span<const RunSpec* const> specs,
                                              std::span<const KvFormat* const> kvs, const ModelRunOptions& options,
                                              std::uint32_t pass, detail::ProgressCounter& count) {
  const PagedOptions& paged = options.paged;
  const ModelConfig& cfg = model->config();
  struct One {
    std::unique_ptr<Decoder> decoder;
    DecoderPolicies policies;
    std::optional<PrefillCompressor> compressor;
  };
  std::vector<One> runs(specs.size());
  std::vector<Decoder*> batch;
  for (std::size_t k = 0; k < specs.size(); ++k) {
    DecoderOptions store;
    store.capacity = w.length;
    store.block_size = static_cast<std::uint32_t>(paged.block_size);
    store.kv = *kvs[k];
    store.threads = 1;
    store.prefill_chunk = k == 0 ? pass : 1;  // the lead's passes; the others never lead one
    One& one = runs[k];
    one.decoder = std::make_unique<Decoder>(model, store);
    if (specs[k] != nullptr && options.prefill > 0) {
      one.compressor.emplace(cfg, *specs[k], options.prefill, options.prefill_window);
    } else if (specs[k] != nullptr) {
      one.policies = DecoderPolicies(*specs[k], cfg, paged);
      one.policies.attach(*one.decoder);
    }
    batch.push_back(one.decoder.get());
  }
  std::vector<WindowResult> r(specs.size());
  std::vector<Token> tokens;
  const std::size_t vocab = cfg.vocab;
  for (std::uint32_t i = 0; i + 1 < w.length;) {
    // Up to `pass` tokens a pass, ending where a compressor reads the
    // decoders (after_step on the tokens before does nothing).
    std::uint32_t end = std::min(w.length - 1, i + pass);
    for (const One& one : runs) {
      const std::uint32_t read = one.compressor ? one.compressor->next_read(i) : PrefillCompressor::kNone;
      if (read != PrefillCompressor::kNone) end = std::min(end, read + 1);
    }
    tokens.clear();
    for (std::uint32_t j = i; j < end; ++j) tokens.push_back(w.token_at(text, j));
    const std::span<const float> logits = Decoder::prefill_together(batch, tokens);
    const std::size_t n = tokens.size();
    for (std::size_t k = 0; k < runs.size(); ++k) {
      if (runs[k].compressor) runs[k].compressor->after_step(*runs[k].decoder, end - 1);
      for (std::uint32_t j = i; j < end; ++j) {
        // With a prefill, token j + 1 is scored once tokens 0 ... prefill-1 are read.
        if (j + 1 <= options.prefill) continue;
        r[k].nll += negative_log_likelihood(logits.subspan((k * n + (j - i)) * vocab, vocab), w.token_at(text, j + 1));
      }
    }
    count.add(runs.size() * n);
    i = end;
  }
  for (std::size_t k = 0; k < runs.size(); ++k) {
    r[k].evicted = runs[k].decoder->evicted();
    r[k].store = runs[k].decoder->store();
  }
  return r;
}

PerplexityRow finish_row(std::string policy, std::int64_t budget, ParamMap params, double nll,
                         std::uint64_t predictions, std::uint64_t bytes, std::uint64_t evicted, double seconds) {
  PerplexityRow row;
  row.policy = std::move(policy);
  row.budget = budget;
  row.params = std::move(params);
  row.perplexity = std::exp(nll / static_cast<double>(predictions));
  // A byte-level model's bytes are its predictions: the same division as ever.
  row.bits_per_byte = nll / static_cast<double>(bytes) / std::numbers::ln2;
  row.predictions = predictions;
  row.predicted_bytes = bytes;
  row.evicted = evicted;
  row.seconds = seconds;
  return row;
}

// Records one window's full-cache attention, one MatrixTrace per head.
std::vector<std::unique_ptr<MatrixTrace>> record_window(const std::shared_ptr<const Model>& model,
                                                        const TokenizedText& text,
                                                        const Window& w,
                                                        const ProgressFn& progress = {},
                                                        std::vector<std::unique_ptr<Policy>>* recorders = nullptr) {
  const ModelConfig& cfg = model->config();
  std::vector<std::unique_ptr<MatrixTrace>> heads;
  for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
    heads.push_back(std::make_unique<MatrixTrace>(
        fmt::format("model:layer{}.head{}", h / cfg.kv_heads, h % cfg.kv_heads), w.length));
  }
  Decoder decoder(model, w.length);
  // Recorders (budget: the whole window, so they never evict) copy what
  // every policy is given; the decoder itself is the full cache's.
  if (recorders != nullptr) {
    for (std::uint32_t h = 0; h < cfg.head_count(); ++h) decoder.set_policy(h, (*recorders)[h].get(), w.length);
  }
  for (std::uint32_t t = 0; t < w.length; ++t) {
    decoder.step(w.token_at(text, t));
    if (t > 0) {
      for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
        const std::span<const float> a = decoder.attention(h);  // t + 1 weights, self last
        const std::span<float> row = heads[h]->row(t);
        std::copy_n(a.begin(), t, row.begin());
      }
    }
    if (progress) progress(t + 1, w.length);
  }
  return heads;
}

}  // namespace

std::vector<float> model_logits(const Model& model, std::span<const Token> tokens, const RunSpec* spec,
                                const ProgressFn& progress) {
  const ModelConfig& cfg = model.config();
  if (tokens.empty()) throw InputError("logits: no tokens given");
  if (tokens.size() > cfg.context) {
    throw InputError(fmt::format("logits: {} tokens are more than the model's context of {} positions", tokens.size(),
                                 cfg.context));
  }
  Decoder decoder(shared_view(model), static_cast<std::uint32_t>(tokens.size()));
  DecoderPolicies policies;
  if (spec != nullptr) {
    policies = DecoderPolicies(*spec, cfg, {});
    policies.attach(decoder);
  }
  std::vector<float> out;
  out.reserve(tokens.size() * cfg.vocab);
  for (const Token t : tokens) {
    const std::span<const float> logits = decoder.step(t);
    out.insert(out.end(), logits.begin(), logits.end());
    if (progress) progress(static_cast<std::uint32_t>(out.size() / cfg.vocab), static_cast<std::uint32_t>(tokens.size()));
  }
  return out;
}

namespace {

// One row's run: a policy (null: the full cache) on a store of one precision;
// `memory` the bytes a cache that chose its budget (0: none).
struct Run {
  const RunSpec* spec = nullptr;
  KvFormat kv{};
  std::int64_t memory = 0;
};

// The options every run shares, checked against the model before any work.
// The positions each window holds: ModelRunOptions::window, or the context.
std::uint32_t window_length(const ModelConfig& cfg, const ModelRunOptions& options) {
  if (options.window > cfg.context) {
    throw ParameterError(fmt::format("a window of {} positions is over the model's context of {}", options.window,
                                     cfg.context));
  }
  if (options.window == 1) throw ParameterError("a window of 1 position predicts nothing: give 2 or more");
  return options.window == 0 ? cfg.context : options.window;
}

void check_run_options(const ModelConfig& cfg, const std::vector<Run>& runs_in, const ModelRunOptions& options) {
  check_paged(options.paged);
  for (const Run& run : runs_in) check_format(run.kv, cfg.head_dim());
  if (options.paged.block_size > std::int64_t{cfg.context}) {
    throw ParameterError(fmt::format("--block-size ({}) is over the model's context of {} positions",
                                     options.paged.block_size, cfg.context));
  }
  if (options.prefill > 0 && options.paged.active()) {
    throw ParameterError("--prefill compresses once after the prefill; it does not combine with the paged options");
  }
  if (options.prefill >= window_length(cfg, options)) {
    throw ParameterError(options.window == 0
                             ? fmt::format("--prefill ({}) must be below the model's context of {} positions",
                                           options.prefill, cfg.context)
                             : fmt::format("--prefill ({}) must be below a window's {} positions", options.prefill,
                                           options.window));
  }
  if (options.prefill > 0 && options.prefill_window < 1) {
    throw ParameterError("--window must be at least 1 (the attention rows the compression scores from)");
  }
}

// What the windows leave to predict after the prefill.
struct Scoring {
  std::uint64_t predictions = 0, predicted_bytes = 0;
  std::vector<double> scored;  // bytes predicted per window (the denominators of bits per byte)
  bool compresses = false;     // some window is long enough to reach the prefill's end
};

Scoring scoring_of(const TokenizedText& text, const std::vector<Window>& windows, const ModelRunOptions& options) {
  Scoring s;
  for (const Window& w : windows) {
    std::uint64_t bytes = 0;
    for (std::uint32_t i = options.prefill + 1; i < w.length; ++i) bytes += w.bytes_at(text, i);
    s.scored.push_back(static_cast<double>(bytes));
    s.predicted_bytes += bytes;
    s.predictions += w.length - 1 > options.prefill ? w.length - 1 - options.prefill : 0;
    s.compresses = s.compresses || w.length > options.prefill;
  }
  if (s.predictions == 0) {
    std::uint32_t longest = 0;
    for (const Window& w : windows) longest = std::max(longest, w.length);
    throw InputError(fmt::format("--prefill ({}) leaves nothing to predict: tokens 0 ... {} of each window are not "
                                 "scored, and the longest window here has {} tokens",
                                 options.prefill, options.prefill, longest));
  }
  return s;
}

// Each head's policy (built once), and a prefill's window against each layer's budget.
void check_run_policies(const ModelConfig& cfg, const std::vector<Run>& runs_in, const ModelRunOptions& options,
                        bool compresses) {
  for (const Run& run : runs_in) {
    if (run.spec == nullptr) continue;
    const RunSpec& spec = *run.spec;
    const PolicyInfo& info = find_policy(spec.policy);
    if (spec.budget < 1) {
      throw ParameterError(fmt::format("{}: budget ({}) must be at least 1", info.name, spec.budget));
    }
    DecoderPolicies(spec, cfg, options.paged);
    // The compression keeps everything when the prefill fits in the budget.
    if (options.prefill > 0 && compresses && spec.budget < std::int64_t{options.prefill}) {
      const std::size_t rows = std::min(options.prefill_window, options.prefill);
      for (std::uint32_t l = 0; l < cfg.layers; ++l) {
        check_prefill(info.name, without_budget(head_params(spec, cfg, l)), spec.budget, rows);
      }
    }
  }
}

// Every run on every window: results[r x windows + w] and the seconds each
// took. Windows run in order, a window's jobs together, so that with a
// deadline (ModelRunOptions) the windows done are the first ones: returns
// how many every run finished. Progress counts tokens stepped: each run
// steps each window's length - 1.
std::size_t run_all_windows(const Model& model, const TokenizedText& text, const std::vector<Window>& windows,
                            const std::vector<Run>& runs_in, const ModelRunOptions& options,
                            std::vector<WindowResult>& results, std::vector<double>& seconds) {
  const std::size_t runs = runs_in.size();
  const std::shared_ptr<const Model> shared = shared_view(model);
  detail::ProgressCounter count(options.progress, runs * window_steps(windows));
  count.start();
  const std::size_t always = std::min<std::size_t>(options.min_windows, windows.size());
  std::size_t per_window = runs;  // jobs a window
  std::size_t started = 0;
  if (options.together && model.uses_kernels() && runs > 1) {
    // Each window's runs in as few groups as keep every core busy, each group
    // stepped together on one core: a weight is read once a token a group,
    // not once a run. (kvevict-tiny's Eigen products take one vector at a
    // time, so a batch would save it nothing: it runs a job a run.)
    const std::size_t cores = static_cast<std::size_t>(std::max(1, omp_get_max_threads()));
    const std::size_t groups = std::clamp<std::size_t>((cores + windows.size() - 1) / windows.size(), 1, runs);
    std::vector<std::pair<std::size_t, std::size_t>> spans;  // [first run, end) of each group
    for (std::size_t g = 0; g < groups; ++g) spans.emplace_back(runs * g / groups, runs * (g + 1) / groups);
    per_window = groups;
    started = detail::paced_jobs(groups * windows.size(), options.deadline, always * groups, [&](std::size_t job) {
      const std::size_t wi = job / groups;
      const std::size_t g = job % groups;
      std::vector<const RunSpec*> specs;
      std::vector<const KvFormat*> kvs;
      for (std::size_t r = spans[g].first; r < spans[g].second; ++r) {
        specs.push_back(runs_in[r].spec);
        kvs.push_back(&runs_in[r].kv);
      }
      const auto began = std::chrono::steady_clock::now();
      std::vector<WindowResult> got = run_window_together(shared, text, windows[wi], specs, kvs, options,
                                                          Decoder::together_pass_tokens(specs.size()), count);
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
      for (std::size_t r = spans[g].first; r < spans[g].second; ++r) {
        results[r * windows.size() + wi] = got[r - spans[g].first];
        seconds[r * windows.size() + wi] = took / static_cast<double>(specs.size());  // the group's time, shared
      }
    });
  } else {
    started = detail::paced_jobs(results.size(), options.deadline, always * runs, [&](std::size_t job) {
      const std::size_t wi = job / runs;
      const std::size_t r = job % runs;
      const auto began = std::chrono::steady_clock::now();
      results[r * windows.size() + wi] = run_window(shared, text, windows[wi], runs_in[r].spec, options, runs_in[r].kv,
                                                    count);
      seconds[r * windows.size() + wi] = std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    });
  }
  const std::size_t done = started / per_window;
  if (done < windows.size()) count.finish();
  return done;
}

// Run r's row from its windows' results (run 0, the full cache at fp32, is
// what every other row's extra bits are measured from).
PerplexityRow run_row(const ModelConfig& cfg, const TokenizedText& text, const std::vector<Run>& runs_in,
                      std::size_t r, const std::vector<WindowResult>& results, const std::vector<double>& seconds,
                      std::size_t windows, std::uint64_t longest_window, const Scoring& scoring,
                      const ModelRunOptions& options) {
  double sum = 0.0, secs = 0.0;  // window order: the same sum on any thread count
  std::uint64_t ev = 0, peak_blocks = 0, peak_positions = 0, peak_cache_bytes = 0;
  for (std::size_t i = 0; i < windows; ++i) {
    const WindowResult& w = results[r * windows + i];
    sum += w.nll;
    ev += w.evicted;
    peak_blocks = std::max(peak_blocks, w.store.peak_blocks);
    peak_positions = std::max(peak_positions, w.store.peak_positions);
    peak_cache_bytes = std::max(peak_cache_bytes, w.store.peak_cache_bytes);
    secs += seconds[r * windows + i];
  }
  PerplexityRow row;
  if (runs_in[r].spec == nullptr) {
    row = finish_row("", 0, {}, sum, scoring.predictions, scoring.predicted_bytes, ev, secs);
  } else {
    const RunSpec& spec = *runs_in[r].spec;
    row = finish_row(spec.policy, spec.budget, find_policy(spec.policy).effective(head_params(spec, cfg, 0)), sum,
                     scoring.predictions, scoring.predicted_bytes, ev, secs);
  }
  if (r > 0) {
    // Each window's extra bits beside the full cache's on the same bytes.
    std::vector<double> extra(windows);
    for (std::size_t i = 0; i < windows; ++i) {
      extra[i] = (results[r * windows + i].nll - results[i].nll) / std::numbers::ln2;
    }
    const RatioInterval cost = ratio_interval(extra, scoring.scored);
    row.extra_bits_per_byte = cost.mean;
    row.extra_low = cost.low;
    row.extra_high = cost.high;
    row.has_extra_interval = cost.has_interval;
  }
  row.block_size = static_cast<std::uint32_t>(options.paged.block_size);
  if (runs_in[r].spec != nullptr && options.paged.granularity() != Granularity::kHead) {
    row.granularity = std::string(granularity_name(options.paged.granularity()));
  }
  row.peak_blocks = peak_blocks;
  row.peak_positions = peak_positions;
  row.store_measured = options.paged.active();
  const KvFormat& kv = runs_in[r].kv;
  row.memory_bytes = runs_in[r].memory;
  row.kv_precision = std::string(precision_name(kv.precision));
  row.kv_residual = kv.residual_window();
  // What a position really costs: a cache that never holds the residual
  // window's R rows keeps them all at fp32.
  const std::uint64_t most_held =
      runs_in[r].spec == nullptr ? longest_window
                                 : std::min<std::uint64_t>(static_cast<std::uint64_t>(runs_in[r].spec->budget) + 1,
                                                           longest_window);
  row.bytes_per_position = held_bytes_per_position(kv, cfg.head_dim(), most_held);
  row.model_bytes_per_position = row.bytes_per_position * cfg.head_count();
  row.tokenizer = text.tokenizer;
  row.peak_cache_bytes = peak_cache_bytes;
  row.prefill = options.prefill;
  return row;
}

std::vector<PerplexityRow> perplexity_runs(const Model& model, const TokenizedText& text,
                                           const std::vector<Run>& runs_in, const ModelRunOptions& options) {
  const ModelConfig& cfg = model.config();
  check_run_options(cfg, runs_in, options);
  std::vector<Window> windows = text_windows(text, window_length(cfg, options), options.max_windows);
  std::uint64_t longest_window = 0;  // the most positions any cache holds
  for (const Window& w : windows) longest_window = std::max<std::uint64_t>(longest_window, w.length);
  // Every request is checked before any work: what is left to predict, each
  // head's policy (built once), and a prefill's window against each layer's
  // budget.
  Scoring scoring = scoring_of(text, windows, options);
  check_run_policies(cfg, runs_in, options, scoring.compresses);
  std::vector<WindowResult> results(runs_in.size() * windows.size());
  std::vector<double> seconds(runs_in.size() * windows.size(), 0.0);
  const std::size_t done = run_all_windows(model, text, windows, runs_in, options, results, seconds);
  if (done < windows.size()) {
    // A deadline ended the runs: the rows are the first `done` windows'.
    for (std::size_t r = 0; r < runs_in.size(); ++r) {
      for (std::size_t wi = 0; wi < done; ++wi) {
        results[r * done + wi] = results[r * windows.size() + wi];
        seconds[r * done + wi] = seconds[r * windows.size() + wi];
      }
    }
    results.resize(runs_in.size() * done);
    seconds.resize(runs_in.size() * done);
    windows.resize(done);
    longest_window = 0;
    for (const Window& w : windows) longest_window = std::max<std::uint64_t>(longest_window, w.length);
    scoring = scoring_of(text, windows, options);
  }
  std::vector<PerplexityRow> rows;
  for (std::size_t r = 0; r < runs_in.size(); ++r) {
    rows.push_back(run_row(cfg, text, runs_in, r, results, seconds, windows.size(), longest_window, scoring, options));
  }
  return rows;
}

}  // namespace

namespace {

std::vector<PerplexityRow> perplexity_tokens(const Model& model, const TokenizedText& text,
                                             const std::vector<RunSpec>& specs, const ModelRunOptions& options) {
  // The full cache first -- at fp32, the reference every row's extra bits
  // are measured from -- then, with a quantized store, the full cache at
  // its precision (what the bits alone cost), then the specs.
  check_format(options.kv, model.config().head_dim());  // a residual with fp32 too, which no run would carry
  std::vector<Run> runs{Run{}};
  if (options.kv.quantized()) runs.push_back({nullptr, options.kv, 0});
  for (const RunSpec& spec : specs) runs.push_back({&spec, options.kv, 0});
  return perplexity_runs(model, text, runs, options);
}

}  // namespace

std::vector<PerplexityRow> perplexity(const Model& model, std::span<const std::uint8_t> text,
                                      const std::vector<RunSpec>& specs, const ModelRunOptions& options) {
  return perplexity_tokens(model, tokenize_text(model, text), specs, options);
}

std::int64_t budget_for_memory(std::int64_t memory, const KvFormat& format, std::uint32_t head_dim) {
  const double stored = bytes_per_position(format, head_dim);
  const double full = 8.0 * head_dim;
  const auto window = static_cast<std::int64_t>(format.residual_window());
  // A budget B holds B + 1 positions before it evicts, so its residual
  // window fills -- and is quantized -- only when R <= B + 1. Then its R rows
  // are reserved at fp32 beside the B stored positions.
  const double reserve = static_cast<double>(window) * (full - stored);
  const auto filled = static_cast<std::int64_t>(std::floor((static_cast<double>(memory) - reserve) / stored));
  if (filled >= window - 1) return filled;
  // A window longer than any cache that fits never fills: every row stays
  // at fp32, and so at most min(B + 1, R) rows are.
  const auto unfilled = static_cast<std::int64_t>(std::floor(static_cast<double>(memory) / full));
  return std::min(unfilled, window - 2);
}

std::vector<PerplexityRow> perplexity_at_memory(const Model& model, std::span<const std::uint8_t> text,
                                                const MemoryRequest& request, const ModelRunOptions& options) {
  const ModelConfig& cfg = model.config();
  if (request.memories.empty()) throw ParameterError("--kv-memory: give at least one memory budget");
  if (request.formats.empty()) throw ParameterError("--kv-precision: give at least one precision");
  if (request.policies.empty()) throw ParameterError("--policy: give at least one policy to fit in the memory");
  if (options.prefill > 0 || options.paged.active()) {
    throw ParameterError("--kv-memory chooses token budgets for eviction while decoding; it does not combine with "
                         "--prefill or the paged options");
  }
  for (const KvFormat& f : request.formats) check_format(f, cfg.head_dim());
  std::vector<RunSpec> specs;
  std::vector<Run> runs{Run{}};
  for (const KvFormat& f : request.formats) {
    if (f.quantized()) runs.push_back({nullptr, f, 0});
  }
  std::vector<std::pair<const KvFormat*, std::int64_t>> of_spec;  // each spec's format and memory
  for (const std::int64_t memory : request.memories) {
    for (const KvFormat& f : request.formats) {
      const std::int64_t budget = budget_for_memory(memory, f, cfg.head_dim());
      if (budget < 1) {
        // What the first position would cost: a budget of 1 holds 2 at most.
        throw ParameterError(fmt::format("--kv-memory ({} bytes) holds no position at {} ({} bytes a position)",
                                         memory, precision_name(f.precision),
                                         held_bytes_per_position(f, cfg.head_dim(), 2)));
      }
      CompareRequest one;
      one.policies = request.policies;
      one.budgets = {budget};
      one.overrides = request.overrides;
      for (RunSpec& spec : compare_specs(one)) {
        specs.push_back(std::move(spec));
        of_spec.emplace_back(&f, memory);
      }
    }
  }
  for (std::size_t i = 0; i < specs.size(); ++i) runs.push_back({&specs[i], *of_spec[i].first, of_spec[i].second});
  return perplexity_runs(model, tokenize_text(model, text), runs, options);
}

namespace {

// Sits on one cache of a full-cache decoder (its budget the whole window, so
// it never evicts) and copies what every policy is given: position 0's key,
// value and queries by on_origin, each later position's by on_step.
class SignalRecorder final : public Policy {
 public:
  SignalRecorder(float* keys, float* values, float* queries, std::size_t dim, std::size_t query_width)
      : keys_(keys), values_(values), queries_(queries), dim_(dim), query_width_(query_width) {}

  std::string_view name() const noexcept override { return "record"; }
  Signals signals() const noexcept override { return kSignalKey | kSignalValue | kSignalQueries; }
  void on_decode_step(std::int64_t /*pos*/, Attention /*attn*/) override {
    throw ContractError("record: the decoder gives every step's key, value and queries (on_step)");
  }
  void on_origin(const StepInputs& in) override { copy(0, in); }
  void on_step(std::int64_t pos, const StepInputs& in) override { copy(static_cast<std::size_t>(pos), in); }
  std::span<const Position> evict(std::int64_t /*budget*/) override { return {}; }
  std::size_t kept_count() const noexcept override { return count_; }
  std::size_t memory_bytes() const noexcept override { return 0; }

 private:
  void copy(std::size_t pos, const StepInputs& in) {
    if (in.key.size() != dim_ || in.value.size() != dim_ || in.queries.size() != query_width_) {
      throw ContractError(fmt::format("record: position {} gives a key of {}, a value of {} and queries of {} floats "
                                      "(want {}, {} and {})",
                                      pos, in.key.size(), in.value.size(), in.queries.size(), dim_, dim_,
                                      query_width_));
    }
    if (keys_ != nullptr) std::copy(in.key.begin(), in.key.end(), keys_ + pos * dim_);
    if (values_ != nullptr) std::copy(in.value.begin(), in.value.end(), values_ + pos * dim_);
    if (queries_ != nullptr) std::copy(in.queries.begin(), in.queries.end(), queries_ + pos * query_width_);
    count_ = pos + 1;
  }

  float* keys_;
  float* values_;
  float* queries_;
  std::size_t dim_;
  std::size_t query_width_;
  std::size_t count_ = 0;
};


// One head's recorded signals, in memory, for run_many: position p's key,
// value and queries are row p of each buffer (an empty buffer: not given).
class RecordedSignals final : public StepSignals {
 public:
  RecordedSignals(const float* keys, const float* values, const float* queries, std::size_t dim,
                  std::size_t query_width)
      : keys_(keys), values_(values), queries_(queries), dim_(dim), query_width_(query_width) {}
  StepInputs at(std::uint32_t pos) override {
    return StepInputs{.attention = std::nullopt,
                      .key = {keys_ + std::size_t{pos} * dim_, dim_},
                      .value = {values_ + std::size_t{pos} * dim_, dim_},
                      .queries = {queries_ + std::size_t{pos} * query_width_, query_width_}};
  }

 private:
  const float* keys_;
  const float* values_;
  const float* queries_;
  std::size_t dim_;
  std::size_t query_width_;
};

// One window's full-cache signals, every cache: what the decoder gave each
// policy at each position ([caches, n, width] each).
struct WindowSignals {
  std::size_t n = 0, dim = 0, query_width = 0;
  std::vector<float> keys, values, queries;
  std::unique_ptr<StepSignals> head(std::size_t h) const {
    return std::make_unique<RecordedSignals>(keys.data() + h * n * dim, values.data() + h * n * dim,
                                             queries.data() + h * n * query_width, dim, query_width);
  }
};

}  // namespace

std::vector<std::string> model_compare_policies(std::string_view text) {
  if (text == "all") return policy_names(kSignalAttention);
  return parse_policy_list(text, kEverySignal);
}

namespace {

// Sequence mode's proxies for one spec: every cache of the window replayed in
// lock step through one SequenceBudget; its one eviction call a step is
// counted once, on cache 0.
std::vector<RunTotals> replay_sequence(const RunSpec& spec, const ModelConfig& cfg, std::span<Trace* const> views,
                                       const WindowSignals& recorded) {
  DecoderPolicies::check_sequence_policy(spec);
  SequenceBudget sb(find_policy(spec.policy).name, head_params(spec, cfg, 0),
                    SequenceBudgetParams{.caches = std::int64_t{cfg.head_count()}, .budget = spec.budget, .keep_newest = true});
  std::vector<std::unique_ptr<StepSignals>> sources;
  std::vector<StepSignals*> per_head;
  if ((find_policy(spec.policy).signals & ~kSignalAttention) != 0) {
    for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
      sources.push_back(recorded.head(h));
      per_head.push_back(sources.back().get());
    }
  }
  std::vector<RunTotals> totals = run_sequence(sb, spec.budget, views, views.front()->steps(), {}, per_head);
  for (std::size_t h = 1; h < totals.size(); ++h) totals[h].eviction_calls = 0;
  return totals;
}

}  // namespace

std::vector<PerplexityRow> compare_model(const Model& model, std::span<const std::uint8_t> text,
                                         const CompareRequest& request,
                                         const ModelRunOptions& options) {
  const ModelConfig& cfg = model.config();
  if (options.deadline) {
    throw ContractError("compare_model replays every window's attention beside its runs: it takes no deadline");
  }
  const std::vector<RunSpec> specs = compare_specs(request);
  const TokenizedText tokens = tokenize_text(model, text);
  const std::vector<Window> windows = text_windows(tokens, window_length(cfg, options), options.max_windows);
  // Progress in tokens: every perplexity run's, then each proxy window's
  // full-cache recording (with a prefill there are no proxies: they replay
  // decode-time eviction).
  const std::size_t lead = options.kv.quantized() ? 2 : 1;  // the full caches before the specs' rows
  const std::uint64_t ppl_tokens = (specs.size() + lead) * window_steps(windows);
  std::uint64_t proxy_tokens = 0;
  for (const Window& w : windows) proxy_tokens += options.prefill == 0 ? w.length : 0;
  detail::ProgressCounter count(options.progress, ppl_tokens + proxy_tokens);
  ModelRunOptions inner = options;
  if (options.progress) {
    // The runs' own count (of ppl_tokens) goes on into this one's.
    inner.progress = [&count, counted = std::uint32_t{0}](std::uint32_t done, std::uint32_t) mutable {
      count.add(done - counted);
      counted = done;
    };
  }
  std::vector<PerplexityRow> rows = perplexity_tokens(model, tokens, specs, inner);
  for (PerplexityRow& row : rows) {
    row.ranked = true;
    row.proxied = options.prefill == 0;
  }
  const auto rank = [&] {
    // Rank by perplexity at the ranking budget (lower is better); the full
    // cache stays first, unranked.
    detail::rank_rows(std::span<PerplexityRow>(rows).subspan(lead), ranking_budget(request.budgets),
                      [](const PerplexityRow& r) { return -r.perplexity; });
  };
  if (options.prefill > 0) {
    rank();
    return rows;
  }

  // The proxies: each window's full-cache attention replayed through every
  // run, head by head (each head its own instances, PyramidKV its own layer).
  std::vector<double> mass(specs.size(), 0.0), recall(specs.size(), 0.0);
  std::vector<std::int64_t> calls(specs.size(), 0);
  const std::shared_ptr<const Model> shared = shared_view(model);
  // Key-aware runs replay each window's full-cache keys, values and queries
  // beside its attention, as the recorded files do (eval/signal_files.h).
  bool keyed = false;
  for (const RunSpec& spec : specs) keyed = keyed || (find_policy(spec.policy).signals & ~kSignalAttention) != 0;
  WindowSignals recorded;
  for (const Window& w : windows) {
    std::vector<std::unique_ptr<Policy>> recorders;
    if (keyed) {
      recorded.n = w.length;
      recorded.dim = cfg.head_dim();
      recorded.query_width = std::size_t{cfg.group()} * recorded.dim;
      recorded.keys.assign(std::size_t{cfg.head_count()} * recorded.n * recorded.dim, 0.0F);
      recorded.values.assign(recorded.keys.size(), 0.0F);
      recorded.queries.assign(std::size_t{cfg.head_count()} * recorded.n * recorded.query_width, 0.0F);
      for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
        recorders.push_back(std::make_unique<SignalRecorder>(
            recorded.keys.data() + h * recorded.n * recorded.dim, recorded.values.data() + h * recorded.n * recorded.dim,
            recorded.queries.data() + h * recorded.n * recorded.query_width, recorded.dim, recorded.query_width));
      }
    }
    const auto heads = record_window(
        shared, tokens, w, [&count](std::uint32_t, std::uint32_t) { count.add(1); }, keyed ? &recorders : nullptr);
    std::vector<std::vector<double>> head_mass(cfg.head_count()), head_recall(cfg.head_count());
    std::vector<std::vector<std::int64_t>> head_calls(cfg.head_count());
    auto add = [&](std::size_t h, const RunTotals& t) {
      head_mass[h].push_back(t.steps == 0 ? 0.0 : t.total_retained_mass / static_cast<double>(t.steps));
      head_recall[h].push_back(t.total_heavy_possible == 0
                                   ? 0.0
                                   : static_cast<double>(t.total_heavy_hits) /
                                         static_cast<double>(t.total_heavy_possible));
      head_calls[h].push_back(t.eviction_calls);
    };
    if (options.paged.sequence_budget) {
      // Sequence mode: every cache replayed in lock step through one
      // SequenceBudget; its one eviction call a step is counted once, on cache 0.
      std::vector<Trace*> views;
      for (const auto& head : heads) views.push_back(head.get());
      for (const RunSpec& spec : specs) {
        const std::vector<RunTotals> totals = replay_sequence(spec, cfg, views, recorded);
        for (std::size_t h = 0; h < totals.size(); ++h) add(h, totals[h]);
      }
    } else if (options.paged.layer_budget) {
      // Layer mode: each layer's KV heads replayed in lock step through one
      // LayerBudget; a layer's one eviction call is counted once, on its first head.
      detail::parallel_jobs(cfg.layers, {}, [&](std::size_t l) {
        std::vector<Trace*> views;
        for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) views.push_back(heads[l * cfg.kv_heads + kv].get());
        for (const RunSpec& spec : specs) {
          const auto lb = make_layer_budget(spec, cfg, static_cast<std::uint32_t>(l), options.paged);
          std::vector<std::unique_ptr<StepSignals>> sources;
          std::vector<StepSignals*> per_head;
          if ((find_policy(spec.policy).signals & ~kSignalAttention) != 0) {
            for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) {
              sources.push_back(recorded.head(l * cfg.kv_heads + kv));
              per_head.push_back(sources.back().get());
            }
          }
          std::vector<RunTotals> totals =
              run_layer(*lb, lb->layer_budget(), views, views.front()->steps(), {}, per_head);
          for (std::uint32_t kv = 1; kv < cfg.kv_heads; ++kv) totals[kv].eviction_calls = 0;
          for (std::uint32_t kv = 0; kv < cfg.kv_heads; ++kv) add(l * cfg.kv_heads + kv, totals[kv]);
        }
      });
    } else {
      detail::parallel_jobs(cfg.head_count(), {}, [&](std::size_t h) {
        const auto layer = static_cast<std::uint32_t>(h / cfg.kv_heads);
        std::vector<std::unique_ptr<Policy>> built;
        std::vector<RunSlot> slots;
        for (const RunSpec& spec : specs) {
          built.push_back(make_run_policy(find_policy(spec.policy).name, head_params(spec, cfg, layer), spec.budget,
                                          options.paged));
          slots.push_back({built.back().get(), spec.budget});
        }
        // One pass over the head's attention for every run; with a key-aware
        // run, every run is given the signals too (an attention policy's
        // on_step reads only the weights).
        const std::unique_ptr<StepSignals> source = keyed ? recorded.head(h) : nullptr;
        for (const RunTotals& t : run_many(slots, *heads[h], std::nullopt, {}, nullptr, {}, source.get())) add(h, t);
      });
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
      double m = 0.0, r = 0.0;
      for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
        m += head_mass[h][i];
        r += head_recall[h][i];
        calls[i] += head_calls[h][i];
      }
      mass[i] += m / cfg.head_count();
      recall[i] += r / cfg.head_count();
    }
  }
  const auto n = static_cast<double>(windows.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    PerplexityRow& row = rows[i + lead];
    row.proxy.retained_attention_mass = round6(mass[i] / n);
    row.proxy.heavy_hitter_recall = round6(recall[i] / n);
    row.proxy.eviction_calls = calls[i];
    row.has_proxy = true;
  }
  rank();
  return rows;
}

namespace {
Window first_window(const Model& model, const TokenizedText& text, std::uint32_t tokens) {
  const std::uint32_t context = model.config().context;
  if (tokens == 0) tokens = context;
  if (tokens < 2 || tokens > context) {
    throw ParameterError(fmt::format("tokens ({}) must be in 2 ... {} (the model's context)", tokens, context));
  }
  const std::size_t lead = text.bos ? 1 : 0;
  return {0, static_cast<std::uint32_t>(std::min<std::size_t>(tokens, lead + text.tokens.size())), lead == 1};
}
}  // namespace

std::vector<std::unique_ptr<MatrixTrace>> record_heads(const Model& model, std::span<const std::uint8_t> text,
                                                       std::uint32_t tokens) {
  const TokenizedText t = tokenize_text(model, text);
  return record_window(shared_view(model), t, first_window(model, t, tokens));
}

std::uint32_t record_attention(const Model& model, std::span<const std::uint8_t> text,
                               const std::filesystem::path& file, bool overwrite,
                               std::uint32_t tokens, const ProgressFn& progress) {
  check_output_file(file, overwrite);  // before the work, not after
  const TokenizedText t = tokenize_text(model, text);
  const Window w = first_window(model, t, tokens);
  const auto heads = record_window(shared_view(model), t, w, progress);
  std::vector<Trace*> views;
  for (const auto& h : heads) views.push_back(h.get());
  write_npy_heads(views, w.length - 1, file, overwrite, true);
  return w.length;
}


std::uint32_t record_signals(const Model& model, std::span<const std::uint8_t> text, const RecordFiles& files,
                             std::uint32_t tokens, const ProgressFn& progress) {
  // Every target before the work, and no two the same file.
  const std::pair<const char*, const std::filesystem::path*> targets[] = {
      {"--out", &files.attention}, {"--keys", &files.keys}, {"--values", &files.values}, {"--queries", &files.queries}};
  std::vector<std::pair<const char*, std::filesystem::path>> seen;
  for (const auto& [flag, path] : targets) {
    if (path->empty()) {
      if (path == &files.attention) throw InputError("no output file given");
      continue;
    }
    check_output_file(*path, files.overwrite);
    std::error_code ec;
    std::filesystem::path canonical = std::filesystem::weakly_canonical(*path, ec);
    if (ec) canonical = std::filesystem::absolute(*path, ec).lexically_normal();
    for (const auto& [other_flag, other] : seen) {
      if (other == canonical) {
        throw ParameterError(fmt::format("{} and {} both name {}: give each its own file", other_flag, flag,
                                         path->string()));
      }
    }
    seen.emplace_back(flag, canonical);
  }

  const TokenizedText t_text = tokenize_text(model, text);
  const Window w = first_window(model, t_text, tokens);
  const ModelConfig& cfg = model.config();
  const std::size_t n = w.length;
  const std::size_t dim = cfg.head_dim();
  const std::size_t query_width = std::size_t{cfg.group()} * dim;
  const std::uint32_t caches = cfg.head_count();
  std::vector<float> keys(files.keys.empty() ? 0 : caches * n * dim);
  std::vector<float> values(files.values.empty() ? 0 : caches * n * dim);
  std::vector<float> queries(files.queries.empty() ? 0 : caches * n * query_width);
  std::vector<std::unique_ptr<SignalRecorder>> recorders;
  std::vector<std::unique_ptr<MatrixTrace>> heads;
  Decoder decoder(shared_view(model), w.length);
  for (std::uint32_t h = 0; h < caches; ++h) {
    heads.push_back(std::make_unique<MatrixTrace>(
        fmt::format("model:layer{}.head{}", h / cfg.kv_heads, h % cfg.kv_heads), w.length));
    recorders.push_back(std::make_unique<SignalRecorder>(
        keys.empty() ? nullptr : keys.data() + h * n * dim, values.empty() ? nullptr : values.data() + h * n * dim,
        queries.empty() ? nullptr : queries.data() + h * n * query_width, dim, query_width));
    decoder.set_policy(h, recorders.back().get(), w.length);
  }
  for (std::uint32_t t = 0; t < w.length; ++t) {
    decoder.step(w.token_at(t_text, t));
    if (t > 0) {
      for (std::uint32_t h = 0; h < caches; ++h) {
        const std::span<const float> a = decoder.attention(h);  // t + 1 weights, self last
        std::copy_n(a.begin(), t, heads[h]->row(t).begin());
      }
    }
    if (progress) progress(t + 1, w.length);
  }
  if (decoder.evicted() != 0) throw ContractError("record: the full-cache decoder evicted");

  std::vector<Trace*> views;
  for (const auto& h : heads) views.push_back(h.get());
  write_npy_heads(views, w.length - 1, files.attention, files.overwrite, true);
  const std::uint64_t row_shape[] = {caches, n, dim};
  const std::uint64_t query_shape[] = {caches, n, query_width};
  if (!files.keys.empty()) write_npy_floats(row_shape, keys, files.keys, files.overwrite);
  if (!files.values.empty()) write_npy_floats(row_shape, values, files.values, files.overwrite);
  if (!files.queries.empty()) write_npy_floats(query_shape, queries, files.queries, files.overwrite);
  return w.length;
}

}  // namespace kvevict
