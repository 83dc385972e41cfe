/* kvevict_model -- the C API (C99) of the real-model library
 * (libkvevict-model): load a .kvm model and measure perplexity with every
 * (layer, head) evicting through a policy. pkg-config kvevict-model; CMake
 * kvevict::model. Errors as in <kvevict.h>.
 */
#ifndef KVEVICT_MODEL_H
#define KVEVICT_MODEL_H

#include <kvevict.h>
#include <kvevict_eval.h> /* kvevict_string_free */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- a real model (model/FORMAT.md, docs/real-model.md) ------------------ */

typedef struct kvevict_model kvevict_model;

/* Reads and checks a .kvm weights file; KVEVICT_ERROR_INPUT names the file and
 * the problem (missing, not a model, truncated, checksum, shapes). Destroy
 * with kvevict_model_destroy (NULL is a no-op). A model may be shared by
 * threads. */
kvevict_status kvevict_model_load(const char* path, kvevict_model** out);
kvevict_status kvevict_model_destroy(kvevict_model* model);

typedef struct kvevict_model_config {
  uint32_t vocab;
  uint32_t layers;
  uint32_t heads; /* query heads per layer */
  uint32_t width;
  uint32_t ff;
  uint32_t context;
  uint32_t kv_heads; /* KV heads per layer: layers * kv_heads caches, so policy instances, per sequence */
} kvevict_model_config;
kvevict_status kvevict_model_get_config(const kvevict_model* model, kvevict_model_config* config);

typedef struct kvevict_perplexity_result {
  double perplexity;    /* exp(mean negative log-likelihood, nats) */
  double bits_per_byte; /* the same mean, in bits */
  uint64_t predictions; /* bytes predicted: length - windows */
  uint64_t evicted;     /* positions removed, all heads and windows together */
} kvevict_perplexity_result;

/* Perplexity of `model` over `text` (bytes) cut into windows of its context,
 * with every (layer, head) evicting through its own instance of `policy` at
 * `budget` (params as in kvevict_policy_create; PyramidKV gets its head's
 * layer unless params name it) -- or with the full cache when `policy` is
 * NULL (budget and params ignored). max_windows 0 = every window. */
kvevict_status kvevict_model_perplexity(const kvevict_model* model, const uint8_t* text, size_t length,
                                        const char* policy, int64_t budget, const kvevict_param* params,
                                        size_t param_count, uint32_t max_windows,
                                        kvevict_perplexity_result* result);

/* kvevict_model_perplexity with every decoder's keys and values stored at
 * `kv_precision` (docs/paged.md, "Fewer bits a position"): "fp32" (or NULL),
 * "fp16", "int8" (per token) or "int4" (KIVI: keys per channel over groups
 * of kv_residual tokens, values per token); kv_residual the newest
 * positions kept at fp32 until that many arrive (-1: 32 for int4, 0
 * otherwise). *result is the policy's (or, with `policy` NULL, the full
 * cache's at that precision); *peak_cache_bytes, when not NULL, receives the
 * most bytes any one cache held at once. KVEVICT_ERROR_PARAMETER for an
 * unknown precision, a residual with fp32 or int4 with residual 0. */
kvevict_status kvevict_model_perplexity_kv(const kvevict_model* model, const uint8_t* text, size_t length,
                                           const char* policy, int64_t budget, const kvevict_param* params,
                                           size_t param_count, uint32_t max_windows, const char* kv_precision,
                                           int64_t kv_residual, kvevict_perplexity_result* result,
                                           uint64_t* peak_cache_bytes);

/* kvevict_model_perplexity at a granularity (docs/paged.md, "Granularity"):
 * which caches share the budget. "head" (or NULL): each (layer, KV head) its
 * own instance, as kvevict_model_perplexity; "layer": a layer's KV heads
 * hold budget x kv_heads positions together; "sequence": every cache of the
 * sequence holds the same `budget` positions, one victim set chosen from all
 * their scores -- the granularity of llama.cpp's cells. *result's `evicted`
 * counts every cache's removals. KVEVICT_ERROR_PARAMETER for another name,
 * or a policy the granularity cannot carry out (PyramidKV, whose budget
 * differs by layer, at "sequence"). */
kvevict_status kvevict_model_perplexity_granular(const kvevict_model* model, const uint8_t* text, size_t length,
                                                 const char* policy, int64_t budget, const kvevict_param* params,
                                                 size_t param_count, uint32_t max_windows, const char* granularity,
                                                 kvevict_perplexity_result* result);

/* ---- streaming past the context (docs/streaming.md) ----------------------- */

/* One long text read as a single sequence by decoders whose caches a policy
 * holds at its budget, as `kvevict stream --format json` (the library's
 * stream_json): writes the envelope the tool prints, {"command": "stream",
 * "model": the model's path as opened, "rows": [...]} -- the full cache first (when
 * full_cache is nonzero; it stops at the context), then each policy x budget
 * at each position mode, then the recomputed window -- each row with its
 * segments. The caller frees *json with kvevict_string_free.
 *
 * policies: "name" or "name:key=value[:key=value...]" items, comma-separated
 *   ("streaming-llm:sinks=4"); NULL or "default" is the set the streaming
 *   page measures; "none" runs no policy.
 * budgets: positions a cache holds (NULL/0: 256, 512), each below the
 *   model's context. overrides: "policy.key" or "key" -> value, under each
 *   item's own parameters (as kvevict_compare_json).
 * positions: "original", "cache" or "original,cache" (NULL: both).
 * tokens: tokens of the stream, BOS included (0: the whole text).
 * segment: tokens a segment of the report (0: the model's context).
 * recompute, recompute_tokens: StreamingLLM's baseline, a cache rebuilt over
 *   the `recompute` tokens before each token, over the stream's first
 *   recompute_tokens tokens (recompute 0: not run).
 * kv_precision, kv_residual: as for kvevict_model_perplexity_kv.
 * KVEVICT_ERROR_PARAMETER for a bad policy, parameter, budget, position mode
 * or precision (before any work); KVEVICT_ERROR_INPUT for more tokens than
 * the text makes. */
kvevict_status kvevict_model_stream(const kvevict_model* model, const uint8_t* text, size_t length,
                                    const char* policies, const int64_t* budgets, size_t budget_count,
                                    const kvevict_param* overrides, size_t override_count, const char* positions,
                                    uint32_t tokens, uint32_t segment, int full_cache, uint32_t recompute,
                                    uint32_t recompute_tokens, const char* kv_precision, int64_t kv_residual,
                                    char** json);

/* The attention sink on the full cache over the first `tokens` tokens (0 or
 * more than the context: the context), as `kvevict stream --sinks --format
 * json` prints it: {"command": "stream", "model": the model's path, "rows":
 * [{"layer", "first", "firstFour", "evenFirst", "evenFirstFour"}]}. Free
 * *json with kvevict_string_free. */
kvevict_status kvevict_model_sink_shares(const kvevict_model* model, const uint8_t* text, size_t length,
                                         uint32_t tokens, char** json);

/* ---- many sequences on one block pool (docs/serving.md) ------------------- */

/* Sequences decoding together over one pool of KV blocks: each joins or
 * leaves between steps, with its own policy per cache; with share_prefix,
 * equal full blocks (same cache, tokens, positions and bytes) are held once
 * and copied before a sequence changes them. Every sequence's logits equal its
 * solo run's to the bit. A batch is used by one thread at a time. */
typedef struct kvevict_batch kvevict_batch;

typedef struct kvevict_batch_options {
  uint32_t capacity;    /* positions per cache of each sequence (0: the model's context) */
  uint32_t block_size;  /* positions per pool block, >= 1 */
  uint64_t pool_blocks; /* blocks in the pool: at least layers x kv_heads */
  int share_prefix;     /* nonzero: prefix sharing on */
} kvevict_batch_options;

typedef struct kvevict_pool_stats {
  uint64_t blocks;      /* in the pool */
  uint64_t free_blocks; /* on the free list now */
  uint64_t in_use;      /* blocks with a reference, now */
  uint64_t peak_in_use; /* the most at once */
  uint64_t references;  /* block references of every cache of every sequence, now */
  uint64_t peak_saved;  /* the most references beyond the blocks in use at once */
  uint64_t shared;      /* times a sequence took a published equal block */
  uint64_t copies;      /* shared blocks copied before a sequence changed them */
} kvevict_pool_stats;

/* KVEVICT_ERROR_PARAMETER for a block size of 0 or a pool too small for one
 * sequence; KVEVICT_ERROR_INPUT for a capacity over the context. The batch
 * keeps the model alive; destroy it with kvevict_batch_destroy. */
kvevict_status kvevict_batch_create(const kvevict_model* model, const kvevict_batch_options* options,
                                    kvevict_batch** out);
/* kvevict_batch_create with every sequence's kept keys placed in rotary space
 * by `positions` (docs/streaming.md): NULL or "original" (their tokens'
 * positions: kvevict_batch_create), or "cache" (their index among the
 * positions held, as StreamingLLM does; with nothing evicted the logits are
 * the same to the bit). Anything else is KVEVICT_ERROR_PARAMETER naming it.
 * Either way a sequence with a policy steps on past the capacity and the
 * model's context, its caches held at the budget. */
kvevict_status kvevict_batch_create_positions(const kvevict_model* model, const kvevict_batch_options* options,
                                              const char* positions, kvevict_batch** out);
kvevict_status kvevict_batch_destroy(kvevict_batch* batch);

/* A new sequence: the full cache when `policy` is NULL (budget and params
 * ignored), else `policy` at `budget` per cache, evicting positions, or whole
 * blocks of the pool's block size when `block_mode` is nonzero. *id receives
 * its id (0, 1, ... never reused). KVEVICT_ERROR_INPUT when fewer blocks are
 * free than the sequence has caches; KVEVICT_ERROR_PARAMETER for a bad
 * policy, budget or parameter. The batch is unchanged on error. */
kvevict_status kvevict_batch_join(kvevict_batch* batch, const char* policy, int64_t budget,
                                  const kvevict_param* params, size_t param_count, int block_mode, uint64_t* id);
kvevict_status kvevict_batch_leave(kvevict_batch* batch, uint64_t id);

/* Feeds sequence `id` its next token; *logits (256 floats, *count = 256) stay
 * valid until that sequence's next step or until it leaves. A failed step
 * (KVEVICT_ERROR_INPUT: the pool exhausted; KVEVICT_ERROR_CONTRACT) removes
 * the sequence from the batch, its blocks back in the pool; the others go
 * on. An id that never joined or has left: KVEVICT_ERROR_INPUT. */
kvevict_status kvevict_batch_step(kvevict_batch* batch, uint64_t id, uint32_t token, const float** logits,
                                  size_t* count);
kvevict_status kvevict_batch_pool_stats(const kvevict_batch* batch, kvevict_pool_stats* stats);

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_MODEL_H */
