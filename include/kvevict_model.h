/* kvevict_model -- the C API (C99) of the real-model library
 * (libkvevict-model): load a .kvm model and measure perplexity with every
 * (layer, head) evicting through a policy. pkg-config kvevict-model; CMake
 * kvevict::model. Errors as in <kvevict.h>.
 */
#ifndef KVEVICT_MODEL_H
#define KVEVICT_MODEL_H

#include <kvevict.h>

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

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_MODEL_H */
