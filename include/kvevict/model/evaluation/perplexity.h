// What a policy costs a real model: perplexity over a text with every
// (layer, head) of the model evicting through its own policy instance, beside
// the full cache's; the attention proxies measured on the same model's real
// attention; and that attention recorded as an .npy trace.
//
// A text is read as the model's tokens (vocab.h: bytes for kvevict-tiny) and
// cut into consecutive windows of the model's context (the last one may be
// shorter); each window starts from an empty cache and predicts its tokens
// 1 ... n-1 from the ones before, so a text of T tokens in W windows makes
// T - W predictions. A model whose vocabulary adds BOS starts every window
// with it (as llama.cpp's perplexity does), so each window holds BOS and
// context - 1 text tokens and predicts every one of them. Perplexity is per
// predicted token; bits per byte divide the same log-likelihood by the bytes
// the predicted tokens stand for, which compares across tokenizers.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kvevict/eval/evaluate.h"
#include "kvevict/eval/harness.h"
#include "kvevict/eval/metrics.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/decoder/model_text.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/core/params.h"
#include "kvevict/eval/trace.h"

namespace kvevict {

// The logits after each of `tokens` is fed ([n, vocab], row-major), with
// the full cache (spec null) or `spec`'s policy on every cache. Throws
// InputError for more tokens than the model's context or a token outside
// its vocabulary.
// `progress`: (tokens stepped, tokens), after each.
std::vector<float> model_logits(const Model& model, std::span<const Token> tokens, const RunSpec* spec = nullptr,
                                const ProgressFn& progress = {});

struct PerplexityRow {
  std::string policy;  // empty for the full cache
  std::int64_t budget = 0;  // 0 for the full cache
  ParamMap params;          // every effective parameter (layer-0 head's for pyramidkv)
  double perplexity = 0.0;  // exp(mean negative log-likelihood per predicted token, nats)
  double bits_per_byte = 0.0;  // the same log-likelihood over the bytes the predicted tokens stand for, in bits
  // What the policy costs beside the full cache on the same windows: its bits
  // per byte minus the full cache's, and the 95 % interval of that
  // difference paired by window (kvevict/eval/intervals.h: ratio_interval of
  // each window's extra bits over its predictions). Unset for the full cache;
  // no interval from a single window.
  double extra_bits_per_byte = 0.0;
  double extra_low = 0.0;
  double extra_high = 0.0;
  bool has_extra_interval = false;
  std::uint64_t predictions = 0;      // tokens predicted (scored)
  std::uint64_t predicted_bytes = 0;  // the bytes they stand for
  std::string tokenizer;              // Vocabulary::describe()
  std::uint64_t evicted = 0;  // positions removed, all heads and windows together
  // compare only: the attention proxies of the same policy and budget replayed
  // on the model's full-cache attention (mean over heads, then windows).
  Metrics proxy;
  bool has_proxy = false;
  double seconds = 0.0;
  int rank = 0;  // compare only: 1 = lowest perplexity at the ranking budget
  // The store, measured (the most of any window): blocks of block_size in
  // use at once over every cache (0 on the contiguous store), and positions.
  std::uint32_t block_size = 0;
  // Which caches shared a budget (paged.h's Granularity): "layer" or
  // "sequence"; empty for each cache its own (head).
  std::string granularity;
  std::uint64_t peak_blocks = 0;
  std::uint64_t peak_positions = 0;
  // The store's precision (kv_precision.h): its name, the residual window in
  // effect, the bytes a stored position costs (bytes_per_position()), and
  // the most bytes any one cache held at once (measured, the most of any
  // window).
  std::string kv_precision = "fp32";
  std::uint32_t kv_residual = 0;
  double bytes_per_position = 0.0;
  // The same for the whole model: every layer's KV heads (layers x kv_heads
  // x bytes_per_position).
  double model_bytes_per_position = 0.0;
  std::uint64_t peak_cache_bytes = 0;
  // perplexity_at_memory: the bytes a cache its budget was chosen for (0: none).
  std::int64_t memory_bytes = 0;
  // How the row was made, which decides the fields it is written with
  // (kvevict/model/evaluation/perplexity_rows.h): ranked by compare_model; with the
  // proxy fields (compare_model without a prefill; null on the full cache);
  // with the store measured (paged options given); the prefill in bytes.
  bool ranked = false;
  bool proxied = false;
  bool store_measured = false;
  std::uint32_t prefill = 0;
};

struct ModelRunOptions {
  // (done, total) tokens stepped by every run together, from any thread, one
  // call at a time: (0, total) once the request is checked, then at most
  // every 0.2 s and at the total.
  ProgressFn progress;
  // Windows of the text to use (0 = all). Lets a long text be sampled.
  std::uint32_t max_windows = 0;
  // Positions a window holds (0: the model's context; at most that). Shorter
  // windows cost less each, with less of the text before each prediction.
  std::uint32_t window = 0;
  // A time to finish by (perplexity; tasks): windows run in order, and one
  // that would not end by then -- as long as the longest one so far took --
  // is not started, once `min_windows` are (tasks: samples, a round over
  // every task x length x depth at a time, once one round is). The rows are
  // those of the windows (samples) every run finished: the rows with
  // max_windows (samples) that many, to the bit.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::uint32_t min_windows = 2;
  // Block mode (docs/paged.md): every decoder on a paged store of
  // paged.block_size, each cache's policy driven by a BlockEvictor (the
  // budget a whole number of blocks); the full cache runs on the same store.
  // Layer mode: each layer's KV heads share budget x kv_heads positions
  // (a LayerBudget per layer). The proxies replay the same way.
  PagedOptions paged;
  // The precision every decoder stores its keys and values at, the full
  // cache's too (kv_precision.h); the proxies replay the model's fp32
  // attention whatever it is.
  KvFormat kv{};
  // The prefill moment (docs/tasks.md): when > 0, each window's first
  // `prefill` bytes are read with the full cache, every policy compresses
  // each cache once to its budget (kvevict::prefill, from the attention rows
  // of the last `prefill_window` of those bytes), and the rest of the window
  // runs without eviction. Only the predictions after the prefill are
  // scored -- the full cache's too, so the rows compare. No proxies (they
  // replay decode-time eviction) and no paged options.
  std::uint32_t prefill = 0;
  std::uint32_t prefill_window = 32;
  // A model on the weight kernels (Model::uses_kernels) steps a window's runs
  // together (Decoder::step_together: each weight read once a token for a
  // group of runs); the rows are the bits of the runs one at a time. false:
  // one run a job, as kvevict-tiny always runs.
  bool together = true;
};

// The full cache first, then one row per spec, in order. Every policy is built
// (and its parameters checked) before any work.
std::vector<PerplexityRow> perplexity(const Model& model, std::span<const std::uint8_t> text,
                                      const std::vector<RunSpec>& specs,
                                      const ModelRunOptions& options = {});

// Equal memory (docs/real-model.md, "Fewer bits or fewer tokens"): the
// positions a cache of `memory` bytes holds between steps at `format`'s
// precision: floor((memory - R x (8 head_dim - b)) / b), b =
// bytes_per_position(format, head_dim), R its residual window (whose rows
// are at fp32), when that budget B can fill the window (R <= B + 1). A
// window longer than that never fills and every row stays at fp32:
// floor(memory / (8 head_dim)), at most R - 2 (so still unfilled). Not in
// it, and measured by the rows' peak_cache_bytes: the newest position before
// eviction, and int4 key groups partly emptied by eviction (each keeps its
// scales while any of its rows is held). Below 1 when nothing fits.
std::int64_t budget_for_memory(std::int64_t memory, const KvFormat& format, std::uint32_t head_dim);

struct MemoryRequest {
  std::vector<std::string> policies;
  ParamMap overrides;                 // "policy.param" or "param", as compare takes them
  std::vector<std::int64_t> memories;  // bytes a cache (keys and values of one layer's KV head)
  std::vector<KvFormat> formats;
};

// Every policy at every memory budget and precision, its budget the
// positions that fit (budget_for_memory). Rows: the fp32 full cache (the
// reference), the full cache at each quantized precision, then memory x
// precision x policy, each with its memory_bytes. Decode-time eviction only:
// ParameterError with a prefill or paged options.
std::vector<PerplexityRow> perplexity_at_memory(const Model& model, std::span<const std::uint8_t> text,
                                                const MemoryRequest& request, const ModelRunOptions& options = {});

// Every policy x budget by perplexity, with the attention proxies measured on
// the model's own full-cache attention. The full cache comes first (rank 0);
// the rest are ranked by perplexity at the ranking budget (lower first, ties
// share a rank), each policy's rows by ascending budget.
std::vector<PerplexityRow> compare_model(const Model& model, std::span<const std::uint8_t> text,
                                         const CompareRequest& request,
                                         const ModelRunOptions& options = {});

// The model's full-cache attention over the first `tokens` bytes of `text`
// (0 = as many as the context holds): [layers x kv_heads, N, N] float32, head
// index = layer * kv_heads + KV head, row t the weights token t gave positions
// 0 ... t-1 (its weight on itself left out, as in every trace). Refuses to
// replace an existing file unless `overwrite`. Returns N.
// The same attention in memory, one trace per head (head index as above).
std::vector<std::unique_ptr<MatrixTrace>> record_heads(const Model& model,
                                                       std::span<const std::uint8_t> text,
                                                       std::uint32_t tokens = 0);

// The policies of a compare over the model: "all" is the seven attention and
// positional policies (the published tables' set); a key-aware policy runs
// when named, its proxies replaying each window's full-cache keys, values
// and queries beside its attention.
std::vector<std::string> model_compare_policies(std::string_view text);

std::uint32_t record_attention(const Model& model, std::span<const std::uint8_t> text,
                               const std::filesystem::path& file, bool overwrite,
                               std::uint32_t tokens = 0, const ProgressFn& progress = {});

// record_attention and, beside it, the signals the decoder gives every
// policy at each position 0 ... N-1 (docs/signals.md), each an
// [layers x kv_heads, N, width] float32 .npy with the attention's head index,
// for `kvevict run/compare --trace ATTENTION --keys ... --values ...
// --queries ...` (eval/signal_files.h):
//   keys     width headDim: each cache's key as stored (after RoPE)
//   values   width headDim
//   queries  width groups x headDim: the queries before RoPE of the cache's
//            query heads, head-major
// An empty path is not written. Every target is checked first (none may
// exist without `overwrite`, no two may be the same file); each file is
// written whole or not at all. Returns N.
struct RecordFiles {
  std::filesystem::path attention;  // required
  std::filesystem::path keys;
  std::filesystem::path values;
  std::filesystem::path queries;
  bool overwrite = false;
};
std::uint32_t record_signals(const Model& model, std::span<const std::uint8_t> text, const RecordFiles& files,
                             std::uint32_t tokens = 0, const ProgressFn& progress = {});

}  // namespace kvevict
