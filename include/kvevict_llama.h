/* kvevict-llama -- the plain C API (C99) of the llama.cpp adapter
 * (kvevict/llama/llama_policy.h, docs/llama-cpp.md): a kvevict policy keeping
 * llama.cpp's own KV cache, every sequence of a llama_context held at
 * `budget` positions -- one victim set for every layer and KV head, the
 * granularity of llama.cpp's cells.
 *
 * Built with llama.cpp (the kvevict_llama library, beside npm's prebuilt
 * llama.cpp); include llama.h beside it. Status codes and the thread's last
 * error as in kvevict.h: no C++ exception crosses this boundary.
 *
 *   kvevict_llama_options o;
 *   kvevict_llama_options_init(&o);
 *   o.policy = "h2o"; o.budget = 256; o.context = llama_n_ctx(ctx);
 *   kvevict_llama_policy* p;
 *   kvevict_llama_policy_create(model, &o, &p);
 *   // context params: flash attention off, cb_eval = kvevict_llama_policy_observe, cb_eval_user_data = p
 *   // after each llama_decode of one token of sequence seq at kvevict_llama_policy_next_position(p, seq, &pos):
 *   kvevict_llama_policy_after_decode(p, ctx, &seq, &pos, 1);
 */
#ifndef KVEVICT_LLAMA_H
#define KVEVICT_LLAMA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvevict.h"

#ifdef __cplusplus
extern "C" {
#endif

struct ggml_tensor;
struct llama_context;
struct llama_model;

typedef struct kvevict_llama_options {
  const char* policy;           /* a registered policy name */
  const kvevict_param* params;  /* its parameters (budget is `budget`); may be NULL when param_count is 0 */
  size_t param_count;
  int64_t budget;      /* positions each sequence holds after each step */
  uint32_t sequences;  /* seq ids 0 ... sequences - 1 */
  uint32_t context;    /* the context's llama_n_ctx: cells the cache has */
  uint32_t batch;      /* the most tokens one llama_decode takes */
  int cache_positions; /* nonzero: kept keys at their index in the cache (survivors shifted with
                          llama_memory_seq_add); zero: at their tokens' positions */
} kvevict_llama_options;

/* No policy, budget 256, one sequence, context 0 (must be set), batch 1, original positions. */
void kvevict_llama_options_init(kvevict_llama_options* options);

/* KVEVICT_ERROR_INPUT when llama.cpp's library is not the release of the
 * headers this was built against (llama_version, ggml_version); creating a
 * policy checks it too. */
kvevict_status kvevict_llama_check_release(void);

typedef struct kvevict_llama_policy kvevict_llama_policy;

/* A policy for `model`'s shape. Refused (KVEVICT_ERROR_PARAMETER): an unknown
 * policy or parameter, one that needs what the graph does not show (the
 * queries before RoPE), PyramidKV, a budget of the context or more. */
kvevict_status kvevict_llama_policy_create(const struct llama_model* model, const kvevict_llama_options* options,
                                           kvevict_llama_policy** out);
/* Frees it. NULL is ignored; a second destroy is refused. */
kvevict_status kvevict_llama_policy_destroy(kvevict_llama_policy* policy);

/* The context's eval callback: cb_eval, with cb_eval_user_data = the policy. */
bool kvevict_llama_policy_observe(struct ggml_tensor* tensor, bool ask, void* policy);

/* After llama_decode of one token for each of seqs[0 .. count) (batch order,
 * each at its next position): steps the policies and removes each sequence's
 * victims from llama.cpp's cache. KVEVICT_ERROR_CONTRACT when the graph showed
 * no attention weights (flash attention on, or the callback not installed), a
 * sequence out of order or twice, or a cell the map does not know. */
kvevict_status kvevict_llama_policy_after_decode(kvevict_llama_policy* policy, struct llama_context* ctx,
                                                 const int32_t* seqs, const int32_t* positions, size_t count);

/* Where sequence `seq`'s next token goes: the tokens it has read, or with
 * cache_positions the positions it holds. */
kvevict_status kvevict_llama_policy_next_position(const kvevict_llama_policy* policy, uint32_t seq, int32_t* out);

/* The positions (of the stream) the last after_decode evicted from `seq`, and
 * those it holds now, ascending, into out[0 .. capacity); *count says how many
 * there are (KVEVICT_ERROR_ARGUMENT when more than capacity, *count set). */
kvevict_status kvevict_llama_policy_victims(const kvevict_llama_policy* policy, uint32_t seq, uint32_t* out,
                                            size_t capacity, size_t* count);
kvevict_status kvevict_llama_policy_held(const kvevict_llama_policy* policy, uint32_t seq, uint32_t* out,
                                         size_t capacity, size_t* count);

/* Forgets sequence `seq` (after llama_memory_seq_rm of all of it). */
kvevict_status kvevict_llama_policy_reset(kvevict_llama_policy* policy, uint32_t seq);

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_LLAMA_H */
