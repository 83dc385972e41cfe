/* kvevict_eval -- the C API (C99) of the evaluation library (libkvevict-eval):
 * generated traces, the harness and its metrics, the canonical compare and
 * the test vectors. pkg-config kvevict-eval; CMake kvevict::eval. Errors as in
 * <kvevict.h>: a status, and kvevict_last_error() says what was wrong.
 */
#ifndef KVEVICT_EVAL_H
#define KVEVICT_EVAL_H

#include <kvevict.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- traces --------------------------------------------------------------- */

typedef struct kvevict_trace kvevict_trace;

kvevict_status kvevict_trace_open(const char* id, kvevict_trace** out);
kvevict_status kvevict_trace_destroy(kvevict_trace* trace);
/* Positions in the trace; it has length - 1 decode steps. */
kvevict_status kvevict_trace_length(const kvevict_trace* trace, uint32_t* length);
kvevict_status kvevict_trace_rewind(kvevict_trace* trace);
/* The next step's weights (valid until the next call on this trace). */
kvevict_status kvevict_trace_next(kvevict_trace* trace, const float** weights, size_t* count);
/* FNV-1a parity hash of the first `steps` steps (0 = all). */
kvevict_status kvevict_trace_hash(const char* id, uint32_t steps, uint32_t* hash);

/* ---- the harness and metrics ---------------------------------------------- */

typedef struct kvevict_run_result {
  int64_t steps;
  int64_t budget;
  double total_retained_mass;
  int64_t total_heavy_hits;
  int64_t total_heavy_possible;
  int64_t eviction_calls;
  int64_t evicted;
  double retained_attention_mass; /* round6(total_retained_mass / steps) */
  double heavy_hitter_recall;     /* round6(hits / possible) */
} kvevict_run_result;

/* Replays `trace` (from its start) through `policy` at `budget`;
 * max_steps 0 = the whole trace. */
kvevict_status kvevict_run(kvevict_policy* policy, kvevict_trace* trace, int64_t budget,
                           int64_t max_steps, kvevict_run_result* result);

/* Compare (as `kvevict compare --format json`): policies "a,b" or "all" (NULL
 * = all), budgets (NULL/0 = 256, 512, 1024), overrides "policy.key" -> value,
 * trace id (NULL = decode-4096), max_steps 0 = all. Writes the JSON the tool
 * prints, the envelope every command prints: {"command": "compare", "model":
 * null, "rows": [...], "trace"} (`kvevict schema` describes each field); the
 * caller frees it with kvevict_string_free. */
kvevict_status kvevict_compare_json(const char* policies, const int64_t* budgets,
                                    size_t budget_count, const kvevict_param* overrides,
                                    size_t override_count, const char* trace, int64_t max_steps,
                                    char** json);
void kvevict_string_free(char* s);

/* ---- test vectors --------------------------------------------------------- */

/* Replays vector files or folders of *.vectors.json. Counts cases; `report`
 * (optional, free with kvevict_string_free) gets one line per failure. */
kvevict_status kvevict_vectors_run(const char* const* paths, size_t path_count, size_t* passed,
                                   size_t* failed, char** report);

#ifdef __cplusplus
}
#endif

#endif /* KVEVICT_EVAL_H */
