/* The llama.cpp adapter's C API (include/kvevict_llama.h), from C: a greedy
 * decode of kvevict-small whose cache an H2O policy keeps at 64 positions,
 * at original and at cache positions, checked step by step against what the
 * budget implies (worked out here, not read back from the adapter alone:
 * min(t + 1, 64) held after token t, one victim a token past the budget,
 * the newest always held, the next position t + 1 or the count held); then
 * each refusal's status and message.
 *   llama_c_api_test MODEL.gguf */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "kvevict_llama.h"
#include "llama.h"

static int failures = 0;
#define EXPECT(cond, ...)                             \
  do {                                                \
    if (!(cond)) {                                    \
      fprintf(stderr, "FAIL line %d: ", __LINE__);    \
      fprintf(stderr, __VA_ARGS__);                   \
      fprintf(stderr, " (%s)\n", kvevict_last_error()); \
      ++failures;                                     \
    }                                                 \
  } while (0)

static void quiet(enum ggml_log_level level, const char* text, void* user) {
  (void)level;
  (void)text;
  (void)user;
}

enum { BUDGET = 64, TOKENS = 200, CELLS = 512 };

static void decode_run(struct llama_model* model, int cache_positions) {
  kvevict_llama_options o;
  kvevict_llama_options_init(&o);
  o.policy = "h2o";
  o.budget = BUDGET;
  o.context = CELLS;
  o.cache_positions = cache_positions;
  kvevict_llama_policy* policy = NULL;
  EXPECT(kvevict_llama_policy_create(model, &o, &policy) == KVEVICT_OK, "create");
  if (policy == NULL) return;
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = CELLS;
  cp.n_batch = 1;
  cp.n_ubatch = 1;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.cb_eval = kvevict_llama_policy_observe;
  cp.cb_eval_user_data = policy;
  struct llama_context* ctx = llama_init_from_model(model, cp);
  EXPECT(ctx != NULL, "context");
  if (ctx == NULL) return;
  const struct llama_vocab* vocab = llama_model_get_vocab(model);
  llama_token token = llama_vocab_bos(vocab);
  struct llama_batch batch = llama_batch_init(1, 0, 1);
  size_t removed = 0;
  uint32_t held[BUDGET + 1];
  for (int t = 0; t < TOKENS; ++t) {
    int32_t pos = -1;
    EXPECT(kvevict_llama_policy_next_position(policy, 0, &pos) == KVEVICT_OK, "next_position");
    const int32_t want_pos = cache_positions && t > BUDGET ? BUDGET : t;
    EXPECT(pos == want_pos, "token %d at position %d, not %d", t, pos, want_pos);
    batch.n_tokens = 1;
    batch.token[0] = token;
    batch.pos[0] = pos;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    if (llama_decode(ctx, batch) != 0) {
      EXPECT(0, "llama_decode refused token %d", t);
      break;
    }
    const int32_t seq = 0;
    EXPECT(kvevict_llama_policy_after_decode(policy, ctx, &seq, &pos, 1) == KVEVICT_OK, "after_decode %d", t);
    size_t victims = 0, count = 0;
    uint32_t victim[4];
    EXPECT(kvevict_llama_policy_victims(policy, 0, victim, 4, &victims) == KVEVICT_OK, "victims");
    EXPECT(victims == (t >= BUDGET ? 1u : 0u), "token %d: %zu victims", t, victims);
    removed += victims;
    EXPECT(kvevict_llama_policy_held(policy, 0, held, BUDGET + 1, &count) == KVEVICT_OK, "held");
    EXPECT(count == (size_t)(t + 1 < BUDGET ? t + 1 : BUDGET), "token %d: %zu held", t, count);
    EXPECT(count > 0 && held[count - 1] == (uint32_t)t, "token %d: the newest is not held", t);
    for (size_t k = 1; k < count; ++k) EXPECT(held[k - 1] < held[k], "held not ascending at %zu", k);
    const float* logits = llama_get_logits_ith(ctx, 0);
    token = 0;
    for (llama_token v = 1; v < llama_vocab_n_tokens(vocab); ++v) token = logits[v] > logits[token] ? v : token;
  }
  EXPECT(removed == TOKENS - BUDGET, "removed %zu", removed);
  /* Too small a buffer: refused, with the count a caller needs. */
  size_t count = 0;
  EXPECT(kvevict_llama_policy_held(policy, 0, held, 3, &count) == KVEVICT_ERROR_ARGUMENT && count == BUDGET,
         "a capacity of 3 for %zu", count);
  /* A sequence the policy does not keep. */
  int32_t pos = 0;
  EXPECT(kvevict_llama_policy_next_position(policy, 5, &pos) == KVEVICT_ERROR_CONTRACT &&
             strstr(kvevict_last_error(), "sequence 5 is not one of the 1") != NULL,
         "sequence 5");
  llama_batch_free(batch);
  llama_free(ctx);
  EXPECT(kvevict_llama_policy_destroy(policy) == KVEVICT_OK, "destroy");
  EXPECT(kvevict_llama_policy_destroy(policy) == KVEVICT_ERROR_ARGUMENT, "a second destroy is refused");
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: llama_c_api_test MODEL.gguf\n");
    return 2;
  }
  llama_log_set(quiet, NULL);
  EXPECT(kvevict_llama_check_release() == KVEVICT_OK, "the installed llama.cpp is the headers' release");
  ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  llama_backend_init();
  struct llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == NULL) {
    fprintf(stderr, "FAIL: llama.cpp cannot load %s\n", argv[1]);
    return 1;
  }
  decode_run(model, 0);
  decode_run(model, 1);

  kvevict_llama_options o;
  kvevict_llama_options_init(&o);
  o.context = CELLS;
  kvevict_llama_policy* p = NULL;
  o.policy = "h3o";
  EXPECT(kvevict_llama_policy_create(model, &o, &p) == KVEVICT_ERROR_PARAMETER &&
             strstr(kvevict_last_error(), "unknown policy 'h3o'") != NULL && p == NULL,
         "an unknown policy");
  o.policy = "h2o";
  o.budget = CELLS;
  EXPECT(kvevict_llama_policy_create(model, &o, &p) == KVEVICT_ERROR_PARAMETER &&
             strstr(kvevict_last_error(), "budget (512) must be 1 ... 511") != NULL,
         "a budget of the context");
  o.budget = 64;
  EXPECT(kvevict_llama_policy_create(NULL, &o, &p) == KVEVICT_ERROR_ARGUMENT &&
             strstr(kvevict_last_error(), "model is NULL") != NULL,
         "no model");
  kvevict_param bad = {"recentWindw", 8};
  o.params = &bad;
  o.param_count = 1;
  EXPECT(kvevict_llama_policy_create(model, &o, &p) == KVEVICT_ERROR_PARAMETER, "an unknown parameter");
  EXPECT(kvevict_llama_policy_destroy(NULL) == KVEVICT_OK, "NULL is ignored");
  llama_model_free(model);
  llama_backend_free();
  printf("llama C API: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
