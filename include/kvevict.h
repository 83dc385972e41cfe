/* kvevict -- the plain C API (C99) of the core library (libkvevict-core:
 * policies, the registry, prefill compression, block eviction and layer
 * budgets), for embedding in inference engines.
 * pkg-config kvevict-core; CMake kvevict::core. (The libraries layered above
 * the core have C APIs of their own, in their own headers.)
 *
 * Opaque handles, status codes, and a thread-local message for the last error:
 * no C++ exception crosses this boundary. Every function returns
 * KVEVICT_OK or an error status; kvevict_last_error() then says what was
 * wrong, in one line, naming the policy, parameter or value.
 *
 * Attention is a pointer and a length: NULL means "absent" (no information,
 * never all zeros); a non-NULL pointer with length 0 is a present, empty
 * vector. Positions are absolute token indices.
 */
#ifndef KVEVICT_H
#define KVEVICT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KVEVICT_VERSION_MAJOR 0
#define KVEVICT_VERSION_MINOR 1
#define KVEVICT_VERSION_PATCH 0

typedef enum kvevict_status {
  KVEVICT_OK = 0,
  KVEVICT_ERROR_PARAMETER = 1, /* a parameter breaks a rule (unknown, out of range) */
  KVEVICT_ERROR_CONTRACT = 2,  /* the caller broke the policy contract; nothing changed */
  KVEVICT_ERROR_INPUT = 3,     /* bad outside input: unknown trace, unreadable file */
  KVEVICT_ERROR_ARGUMENT = 4,  /* a NULL pointer, a destroyed handle, a too-small buffer */
  KVEVICT_ERROR_INTERNAL = 5   /* anything else (out of memory) */
} kvevict_status;

/* The message of the last error on this thread ("" when none). Valid until the
 * next failing call on the same thread. */
const char* kvevict_last_error(void);
/* "0.1.0" */
const char* kvevict_version(void);

/* ---- the registry -------------------------------------------------------- */

typedef struct kvevict_param {
  const char* key; /* interchange name, e.g. "recentWindow" */
  int64_t value;
} kvevict_param;

size_t kvevict_policy_count(void);
/* Name of the index-th registered policy, NULL past the end. */
const char* kvevict_policy_name_at(size_t index);
/* Number of parameters of a policy, and each one's name and default. */
kvevict_status kvevict_policy_param_count(const char* policy, size_t* count);
kvevict_status kvevict_policy_param_at(const char* policy, size_t index, const char** name,
                                       int64_t* default_value);

/* The signals a step can carry (docs/signals.md): bits of a policy's mask. */
#define KVEVICT_SIGNAL_ATTENTION 1u /* the weights over the held positions */
#define KVEVICT_SIGNAL_KEY 2u       /* the admitted token's key as stored (after RoPE), headDim floats */
#define KVEVICT_SIGNAL_VALUE 4u     /* the admitted token's value, headDim floats */
#define KVEVICT_SIGNAL_QUERIES 8u   /* its queries before RoPE, groups x headDim floats, head-major */

/* The signals a registered policy's steps read (KVEVICT_SIGNAL_* bits): what a
 * caller must give kvevict_policy_step. */
kvevict_status kvevict_policy_signals_of(const char* policy, uint32_t* signals);

/* ---- a policy instance ---------------------------------------------------- */

typedef struct kvevict_policy kvevict_policy;

/* Builds a policy by name; omitted parameters take their defaults. */
kvevict_status kvevict_policy_create(const char* name, const kvevict_param* params,
                                     size_t param_count, kvevict_policy** out);
/* Frees the policy. NULL is ignored; a second destroy is refused. */
kvevict_status kvevict_policy_destroy(kvevict_policy* policy);

/* One decode step: weights the new token paid to the held positions, in
 * ascending position order (attn NULL = absent), then admits pos. */
kvevict_status kvevict_policy_on_decode_step(kvevict_policy* policy, int64_t pos,
                                             const float* attn, size_t attn_len);
/* One step's signals, each a pointer and a length, valid for the call only.
 * attention: NULL means absent (no information, never all zeros), as for
 * kvevict_policy_on_decode_step. key, value, queries: NULL (length 0) means
 * not given; a NULL pointer with a non-zero length is KVEVICT_ERROR_ARGUMENT. */
typedef struct kvevict_step_inputs {
  const float* attention;
  size_t attention_len;
  const float* key;
  size_t key_len;
  const float* value;
  size_t value_len;
  const float* queries;
  size_t queries_len;
} kvevict_step_inputs;

/* The signals this policy's steps read (KVEVICT_SIGNAL_* bits). */
kvevict_status kvevict_policy_signals(const kvevict_policy* policy, uint32_t* signals);
/* One decode step with every signal the caller has, then admits pos. For an
 * attention or positional policy exactly kvevict_policy_on_decode_step(pos,
 * attention) (the other signals are not read); a key-aware policy refuses a
 * step that lacks a signal it reads, or gives one of the wrong length, with
 * KVEVICT_ERROR_CONTRACT naming itself and the signal; nothing changes. */
kvevict_status kvevict_policy_step(kvevict_policy* policy, int64_t pos, const kvevict_step_inputs* inputs);
/* Position 0's key, value and queries (its attention is ignored), once and
 * before step 1: no step admits position 0. Policies that read no keys ignore it. */
kvevict_status kvevict_policy_origin(kvevict_policy* policy, const kvevict_step_inputs* inputs);
/* Evicts down to budget (PyramidKV: its own share) and writes the victims in
 * ascending order. `capacity` must be at least kvevict_policy_kept_count():
 * otherwise nothing is evicted and KVEVICT_ERROR_ARGUMENT is returned. */
kvevict_status kvevict_policy_evict(kvevict_policy* policy, int64_t budget, uint32_t* victims,
                                    size_t capacity, size_t* victim_count);
kvevict_status kvevict_policy_kept_count(const kvevict_policy* policy, size_t* count);
kvevict_status kvevict_policy_memory_bytes(const kvevict_policy* policy, size_t* bytes);
/* The policy's registry name; the string lives as long as the library. */
kvevict_status kvevict_policy_name(const kvevict_policy* policy, const char** name);
/* Introspection by its vector name: "votesOf" (1 arg), "scoreOf",
 * "lastAttentionOf", "windowScoreOf", "effectiveBudget" (0 args),
 * "sinkCount". A query the policy lacks is KVEVICT_ERROR_ARGUMENT. */
kvevict_status kvevict_policy_query(const kvevict_policy* policy, const char* query,
                                    const int64_t* args, size_t arg_count, double* result);

/* ---- prefill compression (docs/prefill.md) -------------------------------- */

/* Compresses a prompt of `length` positions once, before decoding: `window`
 * holds the attention rows of its last `rows` positions, row-major (rows x
 * length floats; row i is the query at position length - rows + i over
 * positions 0 ... length-1, 0 after its diagonal). `params` are the policy's
 * parameters without "budget". Writes the kept positions, ascending, to
 * `kept` and their number, min(budget, length), to `kept_count`; a `capacity`
 * below that is KVEVICT_ERROR_ARGUMENT (nothing written). A bad parameter or
 * budget is KVEVICT_ERROR_PARAMETER, a bad window KVEVICT_ERROR_INPUT. */
kvevict_status kvevict_prefill(const char* policy, const kvevict_param* params, size_t param_count,
                               int64_t budget, const float* window, size_t rows, size_t length,
                               uint32_t* kept, size_t capacity, size_t* kept_count);

/* ---- attention from queries and keys (docs/signals.md) ------------------- */

/* An engine with fused attention never writes the softmax weights; these give
 * the attention policies what they read from what it always has. */

/* Rotates x (head_dim floats, head_dim even) to position pos in place: RoPE in
 * the GPT-NeoX layout (dimension i pairs with i + head_dim/2), angle
 * pos * base^(-2i/head_dim) in float64, cos and sin rounded to float32. An odd
 * head_dim is KVEVICT_ERROR_CONTRACT (x unchanged). */
kvevict_status kvevict_rope_neox(float* x, size_t head_dim, int64_t pos, double base);

/* The weights `groups` query heads pay to `n` keys, averaged over the heads,
 * into out[0, n): queries is groups x head_dim floats (head-major, already
 * rotated to their position; each multiplied by `scale` before the dot
 * products, e.g. 1/sqrt(head_dim)), keys n x head_dim (row-major, as the cache
 * stores them). float32 dot products in index order, the row's maximum
 * subtracted, exp, the sum added in order: the decoder's steps, but not its
 * bits -- it sums the dot products in another order, so the weights differ
 * from those it writes by less than 1e-5 (docs/signals.md). scratch needs n
 * floats. For a
 * decode step the keys are the held positions then the new token's own: an
 * attention policy's step reads the first n - 1 weights. */
kvevict_status kvevict_attention_from_keys(const float* queries, size_t groups, const float* keys, size_t n,
                                           size_t head_dim, float scale, float* out, float* scratch);

/* ---- paged caches: block eviction and layer budgets (docs/paged.md) ------ */

/* One policy instance driven in whole blocks, for one (layer, KV head) of a
 * paged cache. block_score: "sum", "mean", "max" or "normsum" (NULL: sum).
 * The policy's budget is block_budget * block_size. */
typedef struct kvevict_block_params {
  int64_t block_size;    /* tokens per block, >= 1 */
  int64_t start_blocks;  /* the first blocks, never evicted */
  int64_t recent_blocks; /* the last full blocks, never evicted (the partial block never is) */
  int64_t block_budget;  /* blocks held after each eviction */
  const char* block_score;
} kvevict_block_params;

typedef struct kvevict_block_evictor kvevict_block_evictor;

kvevict_status kvevict_block_evictor_create(const char* policy, const kvevict_param* params, size_t param_count,
                                            const kvevict_block_params* block, kvevict_block_evictor** out);
kvevict_status kvevict_block_evictor_destroy(kvevict_block_evictor* evictor);
/* As kvevict_policy_on_decode_step (attn NULL: absent). */
kvevict_status kvevict_block_evictor_on_decode_step(kvevict_block_evictor* evictor, int64_t pos, const float* attn,
                                                    size_t attn_len);
/* As kvevict_policy_step and kvevict_policy_origin. */
kvevict_status kvevict_block_evictor_step(kvevict_block_evictor* evictor, int64_t pos,
                                          const kvevict_step_inputs* inputs);
kvevict_status kvevict_block_evictor_origin(kvevict_block_evictor* evictor, const kvevict_step_inputs* inputs);
/* Evicts whole blocks down to block_budget; writes the evicted logical block
 * indices (numbered before the call), ascending, into blocks[0 .. *count).
 * `capacity` must be at least the blocks held (kvevict_block_evictor_counts). */
kvevict_status kvevict_block_evictor_evict(kvevict_block_evictor* evictor, int64_t block_budget, uint32_t* blocks,
                                           size_t capacity, size_t* count);
/* Of the last evict: for each surviving block (numbered after it, the partial
 * one included), the positions removed before it -- how far its keys moved. */
kvevict_status kvevict_block_evictor_removed_before(const kvevict_block_evictor* evictor, uint32_t* out,
                                                    size_t capacity, size_t* count);
/* Of the last evict: the evicted positions, ascending. */
kvevict_status kvevict_block_evictor_evicted_positions(const kvevict_block_evictor* evictor, uint32_t* out,
                                                       size_t capacity, size_t* count);
/* Positions and blocks held (the last block may be partial). */
kvevict_status kvevict_block_evictor_counts(const kvevict_block_evictor* evictor, size_t* positions, size_t* blocks);

/* One budget per layer shared by its KV heads (AdaKV-style): the lowest
 * scores across heads go, each head keeping at least head_floor (-1: a fifth
 * of the fair share, layer_budget / (5 * heads)). */
typedef struct kvevict_layer_budget kvevict_layer_budget;

kvevict_status kvevict_layer_budget_create(const char* policy, const kvevict_param* params, size_t param_count,
                                           int64_t heads, int64_t layer_budget, int64_t head_floor,
                                           kvevict_layer_budget** out);
kvevict_status kvevict_layer_budget_destroy(kvevict_layer_budget* layer);
/* One decode step of one head; step every head once per decode step. */
kvevict_status kvevict_layer_budget_on_decode_step(kvevict_layer_budget* layer, size_t head, int64_t pos,
                                                   const float* attn, size_t attn_len);
/* As kvevict_policy_step and kvevict_policy_origin, for one head. */
kvevict_status kvevict_layer_budget_step(kvevict_layer_budget* layer, size_t head, int64_t pos,
                                         const kvevict_step_inputs* inputs);
kvevict_status kvevict_layer_budget_origin(kvevict_layer_budget* layer, size_t head,
                                           const kvevict_step_inputs* inputs);
/* Evicts so the heads hold at most layer_budget together; *evicted gets how many went. */
kvevict_status kvevict_layer_budget_evict(kvevict_layer_budget* layer, int64_t layer_budget, size_t* evicted);
/* Of the last evict: head's victims, ascending. */
kvevict_status kvevict_layer_budget_victims(const kvevict_layer_budget* layer, size_t head, uint32_t* out,
                                            size_t capacity, size_t* count);
kvevict_status kvevict_layer_budget_kept_count(const kvevict_layer_budget* layer, size_t head, size_t* count);

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_H */
