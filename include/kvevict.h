/* kvevict -- the plain C API (C99) of the core library (libkvevict-core:
 * policies and the registry), for embedding in inference engines.
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

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_H */
