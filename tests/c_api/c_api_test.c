/* The C APIs of every layer (<kvevict.h>, <kvevict_eval.h>, <kvevict_model.h>),
 * from C99, against the installed libraries: every vector file
 * given on the command line replays through it, and each boundary error is a
 * status code with a message -- never a crash. Ends with "N passed, M failed". */
#include <kvevict.h>
#include <kvevict_eval.h>
#include <kvevict_model.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed = 0;
static int failed = 0;

#define CHECK(cond)                                                             \
  do {                                                                          \
    if (cond) {                                                                 \
      ++passed;                                                                 \
    } else {                                                                    \
      ++failed;                                                                 \
      fprintf(stderr, "FAIL %s:%d: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              kvevict_last_error());                                            \
    }                                                                           \
  } while (0)

static int error_contains(const char* text) { return strstr(kvevict_last_error(), text) != NULL; }

static void registry(void) {
  size_t count = 0;
  const char* name = NULL;
  int64_t def = 0;
  CHECK(kvevict_policy_count() == 10); /* the seven attention and positional ones, knorm, keydiff, expected-attention */
  CHECK(strcmp(kvevict_policy_name_at(0), "scissorhands") == 0);
  CHECK(strcmp(kvevict_policy_name_at(8), "keydiff") == 0);
  CHECK(strcmp(kvevict_policy_name_at(9), "expected-attention") == 0);
  CHECK(kvevict_policy_name_at(10) == NULL);
  CHECK(kvevict_policy_param_count("snapkv", &count) == KVEVICT_OK && count == 4);
  CHECK(kvevict_policy_param_at("snapkv", 2, &name, &def) == KVEVICT_OK);
  CHECK(strcmp(name, "obsWindow") == 0 && def == 16);
  CHECK(kvevict_policy_param_count("lru", &count) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("unknown policy 'lru'"));
  CHECK(strcmp(kvevict_version(), "0.1.0") == 0);
}

/* The stale spike of the spec, through C: H2O names 3, Scissorhands names 0. */
static void stale_spike(void) {
  const float s1[] = {1.0f};
  const float s2[] = {0.9375f, 0.0625f};
  const float s3[] = {0.0625f, 0.5f, 0.4375f};
  const float s4[] = {0.0625f, 0.3125f, 0.3125f, 0.3125f};
  const float s5[] = {0.0f, 0.25f, 0.25f, 0.25f, 0.25f};
  const float* steps[] = {s1, s2, s3, s4, s5};
  const char* names[] = {"h2o", "scissorhands"};
  const uint32_t expected[] = {3, 0};
  const kvevict_param params[] = {{"budget", 5}, {"recentWindow", 2}};
  int p;
  for (p = 0; p < 2; ++p) {
    kvevict_policy* policy = NULL;
    uint32_t victims[8];
    size_t n = 99;
    double value = 0;
    int64_t zero = 0;
    size_t kept = 0;
    int t;
    CHECK(kvevict_policy_create(names[p], params, 2, &policy) == KVEVICT_OK);
    for (t = 0; t < 5; ++t) {
      CHECK(kvevict_policy_on_decode_step(policy, t + 1, steps[t], (size_t)t + 1) == KVEVICT_OK);
    }
    CHECK(kvevict_policy_query(policy, p == 0 ? "scoreOf" : "votesOf", &zero, 1, &value) == KVEVICT_OK);
    CHECK(value == (p == 0 ? 2.0625 : 1.0));
    CHECK(kvevict_policy_evict(policy, 5, victims, 2, &n) == KVEVICT_ERROR_ARGUMENT); /* too small */
    CHECK(kvevict_policy_kept_count(policy, &kept) == KVEVICT_OK && kept == 6);       /* nothing went */
    CHECK(kvevict_policy_evict(policy, 5, victims, 8, &n) == KVEVICT_OK);
    CHECK(n == 1 && victims[0] == expected[p]);
    CHECK(kvevict_policy_destroy(policy) == KVEVICT_OK);
  }
}

static void bad_input(void) {
  kvevict_policy* policy = NULL;
  const kvevict_param bad_window[] = {{"budget", 8}, {"recentWindow", 8}};
  const kvevict_param unknown[] = {{"window", 3}};
  const kvevict_param good[] = {{"budget", 4}, {"recentWindow", 1}};
  const float nan_step[] = {NAN};
  const float one[] = {1.0f};
  uint32_t victims[8];
  size_t n = 0;
  double value = 0;
  size_t bytes = 0;

  CHECK(kvevict_policy_create("scissorhands", bad_window, 2, &policy) == KVEVICT_ERROR_PARAMETER);
  CHECK(policy == NULL);
  CHECK(error_contains("Scissorhands: recentWindow (8) must be smaller than budget (8)"));
  CHECK(kvevict_policy_create("h2o", unknown, 1, &policy) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("unknown parameter 'window'"));
  CHECK(kvevict_policy_create(NULL, NULL, 0, &policy) == KVEVICT_ERROR_ARGUMENT);

  CHECK(kvevict_policy_create("scissorhands", good, 2, &policy) == KVEVICT_OK);
  CHECK(kvevict_policy_memory_bytes(policy, &bytes) == KVEVICT_OK && bytes == 9 * 5);
  CHECK(kvevict_policy_on_decode_step(policy, 1, nan_step, 1) == KVEVICT_ERROR_CONTRACT);
  CHECK(error_contains("attention weight 0 is NaN"));
  CHECK(kvevict_policy_on_decode_step(policy, 1, one, 1) == KVEVICT_OK);
  CHECK(kvevict_policy_on_decode_step(policy, 1, NULL, 0) == KVEVICT_ERROR_CONTRACT);
  CHECK(error_contains("must be greater than every position held"));
  CHECK(kvevict_policy_on_decode_step(policy, -5, NULL, 0) == KVEVICT_ERROR_CONTRACT);
  CHECK(kvevict_policy_evict(policy, -1, victims, 8, &n) == KVEVICT_ERROR_CONTRACT);
  CHECK(kvevict_policy_query(policy, "scoreOf", NULL, 0, &value) == KVEVICT_ERROR_ARGUMENT);
  CHECK(error_contains("scissorhands has no query 'scoreOf'"));
  CHECK(kvevict_policy_query(policy, "votesOf", NULL, 0, &value) == KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_policy_destroy(policy) == KVEVICT_OK);
  /* The handle is gone: every use is refused with a message, not a crash. */
  CHECK(kvevict_policy_on_decode_step(policy, 2, NULL, 0) == KVEVICT_ERROR_ARGUMENT);
  CHECK(error_contains("not a live one"));
  CHECK(kvevict_policy_kept_count(policy, &n) == KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_policy_destroy(policy) == KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_policy_destroy(NULL) == KVEVICT_OK);
}

/* Whether `s` begins with `prefix`. */
static int starts_with(const char* s, const char* prefix) { return strncmp(s, prefix, strlen(prefix)) == 0; }

static void trace_and_harness(void) {
  uint32_t hash = 0;
  kvevict_trace* trace = NULL;
  kvevict_policy* policy = NULL;
  kvevict_run_result r;
  const float* w = NULL;
  size_t count = 0;
  uint32_t length = 0;
  const kvevict_param params[] = {{"budget", 512}};
  char* json = NULL;
  const int64_t budgets[] = {256};

  CHECK(kvevict_trace_hash("decode-4096", 0, &hash) == KVEVICT_OK && hash == 3136039440u);
  CHECK(kvevict_trace_hash("decode-4096", 10, &hash) == KVEVICT_OK && hash == 515340780u);
  CHECK(kvevict_trace_hash("decode-9", 0, &hash) == KVEVICT_ERROR_INPUT);
  CHECK(error_contains("unknown trace 'decode-9' (known: decode-4096, stale-spike-4096, recalled-fact-4096)"));
  CHECK(kvevict_trace_open("decode-4096", &trace) == KVEVICT_OK);
  CHECK(kvevict_trace_length(trace, &length) == KVEVICT_OK && length == 4096);
  CHECK(kvevict_trace_next(trace, &w, &count) == KVEVICT_OK && count == 1 && w[0] == 1.0f);
  CHECK(kvevict_policy_create("scissorhands", params, 1, &policy) == KVEVICT_OK);
  CHECK(kvevict_run(policy, trace, 512, 0, &r) == KVEVICT_OK);
  CHECK(r.steps == 4095 && r.eviction_calls == 3584 && r.total_heavy_possible == 130544);
  CHECK(r.retained_attention_mass == 0.711377 && r.heavy_hitter_recall == 0.906047);
  CHECK(kvevict_run(policy, trace, 512, 0, &r) == KVEVICT_ERROR_CONTRACT); /* already holds 512 */
  CHECK(kvevict_policy_destroy(policy) == KVEVICT_OK);
  CHECK(kvevict_trace_destroy(trace) == KVEVICT_OK);

  CHECK(kvevict_compare_json("h2o,tova", budgets, 1, NULL, 0, NULL, 0, &json) == KVEVICT_OK);
  CHECK(json != NULL && strstr(json, "\"retainedAttentionMass\": 0.778128") != NULL);
  /* The envelope the tool prints: command, model (none: a trace), rows, then the trace. */
  CHECK(json != NULL && starts_with(json, "{\n  \"command\": \"compare\",\n  \"model\": null,\n  \"rows\": ["));
  CHECK(json != NULL && strstr(json, "\n  ],\n  \"trace\": \"decode-4096\"\n}") != NULL);
  kvevict_string_free(json);
  CHECK(kvevict_compare_json("h2o,nope", NULL, 0, NULL, 0, NULL, 0, &json) == KVEVICT_ERROR_PARAMETER);
}

/* Two sequences on one pool (docs/serving.md): they read the same 40 bytes,
 * so with blocks of 8 the second holds none of its own -- its 5 full blocks
 * per cache are the first's -- and their logits are equal; each bad request is
 * one status, and the pool is whole once both left. */
static void batch(const kvevict_model* model, uint64_t caches, const uint8_t* text) {
  kvevict_batch* b = NULL;
  kvevict_batch_options small = {64, 8, caches - 1, 1};
  kvevict_batch_options options = {64, 8, 2 * caches * 8, 1};
  kvevict_pool_stats stats;
  const float* la = NULL;
  const float* lb = NULL;
  size_t na = 0, nb = 0;
  uint64_t a = 99, c = 99, w = 99;
  int t, same = 1;
  CHECK(kvevict_batch_create(model, &small, &b) == KVEVICT_ERROR_PARAMETER && b == NULL);
  CHECK(error_contains("cannot hold one sequence"));
  CHECK(kvevict_batch_create(model, &options, &b) == KVEVICT_OK);
  CHECK(kvevict_batch_join(b, NULL, 0, NULL, 0, 0, &a) == KVEVICT_OK && a == 0);
  CHECK(kvevict_batch_join(b, NULL, 0, NULL, 0, 0, &c) == KVEVICT_OK && c == 1);
  for (t = 0; t < 40; ++t) {
    CHECK(kvevict_batch_step(b, a, text[t], &la, &na) == KVEVICT_OK && na == 256);
    CHECK(kvevict_batch_step(b, c, text[t], &lb, &nb) == KVEVICT_OK && nb == 256);
    if (memcmp(la, lb, 256 * sizeof(float)) != 0) same = 0;
  }
  CHECK(same);
  CHECK(kvevict_batch_pool_stats(b, &stats) == KVEVICT_OK);
  CHECK(stats.in_use == 5 * caches && stats.references == 10 * caches && stats.shared == 5 * caches);
  CHECK(stats.copies == 0 && stats.free_blocks == stats.blocks - 5 * caches);
  /* A windowed sequence in block mode: 8 positions, one block per cache at rest. */
  CHECK(kvevict_batch_join(b, "sliding-window", 8, NULL, 0, 1, &w) == KVEVICT_OK && w == 2);
  for (t = 0; t < 30; ++t) CHECK(kvevict_batch_step(b, w, text[t], &la, &na) == KVEVICT_OK);
  CHECK(kvevict_batch_join(b, "lru", 8, NULL, 0, 0, &w) == KVEVICT_ERROR_PARAMETER);
  CHECK(kvevict_batch_step(b, 7, 'a', &la, &na) == KVEVICT_ERROR_INPUT);
  CHECK(error_contains("batch: cannot step sequence 7: no sequence has that id"));
  CHECK(kvevict_batch_leave(b, a) == KVEVICT_OK);
  CHECK(kvevict_batch_leave(b, a) == KVEVICT_ERROR_INPUT && error_contains("it has left"));
  CHECK(kvevict_batch_leave(b, c) == KVEVICT_OK);
  CHECK(kvevict_batch_leave(b, 2) == KVEVICT_OK);
  CHECK(kvevict_batch_pool_stats(b, &stats) == KVEVICT_OK);
  CHECK(stats.free_blocks == stats.blocks && stats.references == 0);
  CHECK(kvevict_batch_step(b, a, 'a', NULL, &na) == KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_batch_destroy(b) == KVEVICT_OK);
  CHECK(kvevict_batch_destroy(b) == KVEVICT_ERROR_ARGUMENT);
}

/* A whole file, malloc'd and NUL-terminated (NULL when it cannot be read). */
static char* read_file(const char* path, size_t* length) {
  FILE* f = fopen(path, "rb");
  char* data = NULL;
  long size;
  if (f == NULL) return NULL;
  if (fseek(f, 0, SEEK_END) == 0 && (size = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
    data = (char*)malloc((size_t)size + 1);
    if (data != NULL && fread(data, 1, (size_t)size, f) != (size_t)size) {
      free(data);
      data = NULL;
    }
    if (data != NULL) {
      data[size] = '\0';
      *length = (size_t)size;
    }
  }
  fclose(f);
  return data;
}

static size_t count_of(const char* text, const char* needle) {
  size_t n = 0;
  const char* at = text;
  while ((at = strstr(at, needle)) != NULL) {
    ++n;
    at += strlen(needle);
  }
  return n;
}

/* The next line of *at (without its newline) into line[size]; 0 at the end.
 * Lines holding "seconds" (run times) are skipped. */
static int next_line(const char** at, char* line, size_t size) {
  for (;;) {
    const char* end;
    size_t n;
    if (**at == '\0') return 0;
    end = strchr(*at, '\n');
    if (end == NULL) end = *at + strlen(*at);
    n = (size_t)(end - *at) < size - 1 ? (size_t)(end - *at) : size - 1;
    memcpy(line, *at, n);
    line[n] = '\0';
    *at = *end == '\n' ? end + 1 : end;
    if (strstr(line, "\"seconds\"") == NULL) return 1;
  }
}

/* `json` and `expected` (the tool's output) line by line, but for the run
 * times; the tool's trailing newline is not a line. */
static int same_but_seconds(const char* json, const char* expected) {
  char a[256], b[256];
  int more_a, more_b;
  for (;;) {
    more_a = next_line(&json, a, sizeof a);
    more_b = next_line(&expected, b, sizeof b);
    if (!more_a || !more_b) return more_a == more_b;
    if (strcmp(a, b) != 0) {
      fprintf(stderr, "stream JSON differs from the tool's: '%s' vs '%s'\n", a, b);
      return 0;
    }
  }
}

/* Streaming past the context (docs/streaming.md) over the first 1200 tokens
 * (bytes: kvevict-tiny has no BOS) of model/heldout-sample.txt, in segments of
 * 500, with two policies at budget 64 at both position modes. Worked by hand:
 * the full cache stops at the context, predicting tokens 1 ... 1023 (segments
 * of 499, 500 and 24); each policy row predicts 1 ... 1199 (499, 500, 200),
 * feeds tokens 0 ... 1198 and, from its 65th, evicts one position a step from
 * each cache: (1199 - 64) x caches, its caches at most 65 positions. Only the
 * original positions go past the 1024 the model was trained on. With
 * KVEVICT_STREAM_JSON naming the tool's `kvevict stream --format json` output
 * for the same arguments, the JSON is the tool's but for the run times. */
static void stream(const kvevict_model* model, uint64_t caches, uint32_t layers, const char* model_path) {
  const int64_t budget64[] = {64};
  const int64_t budget_context[] = {1024};
  const char* expected_path = getenv("KVEVICT_STREAM_JSON");
  const kvevict_param sinks8 = {"streaming-llm.sinks", 8};
  char path[4096];
  char want[64];
  const char* slash = strrchr(model_path, '/');
  size_t dir = slash == NULL ? 0 : (size_t)(slash - model_path) + 1;
  size_t length = 0;
  char* text = NULL;
  char* json = NULL;
  const uint8_t* bytes;
  if (dir + sizeof "heldout-sample.txt" > sizeof path) return;
  memcpy(path, model_path, dir);
  strcpy(path + dir, "heldout-sample.txt");
  text = read_file(path, &length);
  CHECK(text != NULL && length > 1200);
  if (text == NULL) return;
  bytes = (const uint8_t*)text;

  CHECK(kvevict_model_stream(model, bytes, length, "sliding-window,streaming-llm:sinks=4", budget64, 1, NULL, 0,
                             NULL, 1200, 500, 1, 0, 0, NULL, -1, &json) == KVEVICT_OK);
  CHECK(json != NULL);
  if (json != NULL) {
    /* The envelope: the command, the model's path as opened, the rows. */
    snprintf(path, sizeof path, "{\n  \"command\": \"stream\",\n  \"model\": \"%s\",\n  \"rows\": [", model_path);
    CHECK(starts_with(json, path));
    CHECK(count_of(json, "\"label\": ") == 5); /* the full cache, then 2 policies x 2 position modes */
    CHECK(count_of(json, "\"label\": \"full cache\"") == 1 && count_of(json, "\"policy\": null") == 1);
    CHECK(count_of(json, "\"label\": \"streaming-llm sinks=4\"") == 2 && count_of(json, "\"sinks\": 4") == 2);
    CHECK(count_of(json, "\"positions\": \"original\"") == 3 && count_of(json, "\"positions\": \"cache\"") == 2);
    CHECK(count_of(json, "\"tokens\": 1024,") == 1 && count_of(json, "\"predictions\": 1023,") == 1);
    CHECK(count_of(json, "\"tokens\": 1200,") == 4 && count_of(json, "\"predictions\": 1199,") == 4);
    CHECK(count_of(json, "\"bytes\": 1199,") == 4); /* one byte a token */
    snprintf(want, sizeof want, "\"evicted\": %llu,", (unsigned long long)((1199u - 64u) * caches));
    CHECK(count_of(json, want) == 4 && count_of(json, "\"evicted\": 0,") == 1);
    CHECK(count_of(json, "\"peakPositions\": 65,") == 4 && count_of(json, "\"peakPositions\": 1024,") == 1);
    CHECK(count_of(json, "\"pastTrainedContext\": true") == 2 && count_of(json, "\"pastTrainedContext\": false") == 3);
    CHECK(count_of(json, "\"begin\": 1000,") == 5 && count_of(json, "\"end\": 1500,") == 5);
    CHECK(count_of(json, "\"predictions\": 499,") == 5 && count_of(json, "\"predictions\": 500,") == 5);
    CHECK(count_of(json, "\"predictions\": 24,") == 1 && count_of(json, "\"predictions\": 200,") == 4);
    CHECK(count_of(json, "\"kvPrecision\": \"fp32\"") == 5 && count_of(json, "\"sinks\": [") == 0);
    if (expected_path != NULL && expected_path[0] != '\0') {
      size_t n = 0;
      char* expected = read_file(expected_path, &n);
      CHECK(expected != NULL);
      if (expected != NULL) CHECK(same_but_seconds(json, expected));
      free(expected);
    } else {
      printf("(KVEVICT_STREAM_JSON unset: the stream is not compared with the tool's)\n");
    }
  }
  kvevict_string_free(json);
  json = NULL;

  /* One mode, no full cache, an override under the item: one row. */
  CHECK(kvevict_model_stream(model, bytes, length, "streaming-llm", budget64, 1, &sinks8, 1, "cache", 300, 0, 0, 0,
                             0, "fp32", -1, &json) == KVEVICT_OK);
  CHECK(json != NULL && count_of(json, "\"label\": ") == 1 && count_of(json, "\"sinks\": 8") == 1);
  CHECK(json != NULL && count_of(json, "\"positions\": \"cache\"") == 1 && count_of(json, "\"end\": 1024") == 1);
  kvevict_string_free(json);
  json = NULL;
  /* The recomputed window alone: "policy": "recompute" at budget 16. */
  CHECK(kvevict_model_stream(model, bytes, length, "none", NULL, 0, NULL, 0, NULL, 100, 0, 0, 16, 40, NULL, -1,
                             &json) == KVEVICT_OK);
  CHECK(json != NULL && count_of(json, "\"label\": ") == 1 && count_of(json, "\"predictions\": 39,") == 2);
  kvevict_string_free(json);
  json = NULL;

  /* Each bad request: one status and a message, no JSON. */
  CHECK(kvevict_model_stream(model, bytes, length, "sliding-window", budget64, 1, NULL, 0, "original,middle", 200, 0,
                             1, 0, 0, NULL, -1, &json) == KVEVICT_ERROR_PARAMETER && json == NULL);
  CHECK(error_contains("kvevict_model_stream: positions 'middle'"));
  CHECK(kvevict_model_stream(model, bytes, length, "sliding-window", budget_context, 1, NULL, 0, NULL, 200, 0, 1, 0,
                             0, NULL, -1, &json) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("budget (1024) must be 1 ... 1023"));
  CHECK(kvevict_model_stream(model, bytes, length, "lru", budget64, 1, NULL, 0, NULL, 200, 0, 1, 0, 0, NULL, -1,
                             &json) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("unknown policy 'lru'"));
  CHECK(kvevict_model_stream(model, bytes, length, "none", NULL, 0, NULL, 0, NULL, 200, 0, 0, 0, 0, NULL, -1,
                             &json) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("nothing to run"));
  CHECK(kvevict_model_stream(model, bytes, 100, "sliding-window", budget64, 1, NULL, 0, NULL, 1200, 0, 1, 0, 0, NULL,
                             -1, &json) == KVEVICT_ERROR_INPUT);
  CHECK(error_contains("the stream asks for 1200 tokens, but the text makes 100"));
  CHECK(kvevict_model_stream(model, bytes, length, "sliding-window", budget64, 1, NULL, 0, NULL, 200, 0, 1, 0, 0,
                             "int3", -1, &json) == KVEVICT_ERROR_PARAMETER && json == NULL);
  CHECK(kvevict_model_stream(model, bytes, length, NULL, NULL, 0, NULL, 0, NULL, 200, 0, 1, 0, 0, NULL, -1, NULL) ==
        KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_model_stream(model, NULL, 10, NULL, NULL, 0, NULL, 0, NULL, 0, 0, 1, 0, 0, NULL, -1, &json) ==
        KVEVICT_ERROR_ARGUMENT);

  /* The sink: one entry a layer, each share a fraction, the first four drawing at least the first. */
  CHECK(kvevict_model_sink_shares(model, bytes, length, 64, &json) == KVEVICT_OK);
  CHECK(json != NULL && count_of(json, "\"layer\": ") == layers && count_of(json, "\"rows\": [") == 1);
  CHECK(json != NULL && starts_with(json, "{\n  \"command\": \"stream\",\n  \"model\": \""));
  kvevict_string_free(json);
  json = NULL;
  CHECK(kvevict_model_sink_shares(model, bytes, 10, 0, &json) == KVEVICT_ERROR_INPUT && json == NULL);
  CHECK(error_contains("sink shares need more than"));
  free(text);
}

/* Keys at their index in the cache (docs/streaming.md): with nothing evicted
 * the logits are the original positions' to the bit; a sliding window of 16 in
 * a capacity of 17 steps on past the model's context of 1024; a bad mode is
 * one status naming it. */
static void batch_positions(const kvevict_model* model, uint64_t caches) {
  kvevict_batch* original = NULL;
  kvevict_batch* cache = NULL;
  kvevict_batch_options options = {64, 8, caches * 8, 0};
  kvevict_batch_options small = {17, 8, caches * 3, 0};
  const float* la = NULL;
  const float* lb = NULL;
  size_t na = 0, nb = 0;
  uint64_t a = 99, c = 99, w = 99;
  int t, same = 1, ok = 1;
  CHECK(kvevict_batch_create_positions(model, &options, "original", &original) == KVEVICT_OK);
  CHECK(kvevict_batch_create_positions(model, &options, "cache", &cache) == KVEVICT_OK);
  CHECK(kvevict_batch_join(original, NULL, 0, NULL, 0, 0, &a) == KVEVICT_OK);
  CHECK(kvevict_batch_join(cache, NULL, 0, NULL, 0, 0, &c) == KVEVICT_OK);
  for (t = 0; t < 64; ++t) {
    CHECK(kvevict_batch_step(original, a, (uint32_t)"Streams run on past the context. "[t % 33], &la, &na) ==
          KVEVICT_OK);
    CHECK(kvevict_batch_step(cache, c, (uint32_t)"Streams run on past the context. "[t % 33], &lb, &nb) ==
          KVEVICT_OK);
    if (na != 256 || nb != 256 || memcmp(la, lb, 256 * sizeof(float)) != 0) same = 0;
  }
  CHECK(same);
  CHECK(kvevict_batch_destroy(original) == KVEVICT_OK);
  CHECK(kvevict_batch_destroy(cache) == KVEVICT_OK);

  CHECK(kvevict_batch_create_positions(model, &small, "cache", &cache) == KVEVICT_OK);
  CHECK(kvevict_batch_join(cache, "sliding-window", 16, NULL, 0, 0, &w) == KVEVICT_OK);
  for (t = 0; t < 1100; ++t) {
    if (kvevict_batch_step(cache, w, (uint32_t)(32 + t % 90), &la, &na) != KVEVICT_OK) ok = 0;
  }
  CHECK(ok);
  CHECK(kvevict_batch_destroy(cache) == KVEVICT_OK);
  cache = NULL;
  CHECK(kvevict_batch_create_positions(model, &options, "middle", &cache) == KVEVICT_ERROR_PARAMETER && cache == NULL);
  CHECK(error_contains("kvevict_batch_create_positions: positions 'middle'"));
  CHECK(kvevict_batch_create_positions(model, &options, "original,cache", &cache) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("give one mode"));
  CHECK(kvevict_batch_create_positions(model, NULL, "cache", &cache) == KVEVICT_ERROR_ARGUMENT);
}

/* The real model, when KVEVICT_MODEL_FILE names it (the install test does). */
static void real_model(void) {
  const char* path = getenv("KVEVICT_MODEL_FILE");
  kvevict_model* model = NULL;
  kvevict_model_config config;
  kvevict_perplexity_result full, same, window, scissor;
  kvevict_param recent = {"recentWindow", 4};
  uint8_t text[300];
  size_t i;
  uint64_t caches;
  uint64_t peak = 0;
  if (path == NULL || path[0] == '\0') {
    printf("(KVEVICT_MODEL_FILE unset: real-model checks skipped)\n");
    return;
  }
  CHECK(kvevict_model_load("/no/such/model.kvm", &model) == KVEVICT_ERROR_INPUT);
  CHECK(model == NULL && error_contains("/no/such/model.kvm: cannot be opened"));
  CHECK(kvevict_model_load(path, &model) == KVEVICT_OK);
  CHECK(kvevict_model_get_config(model, &config) == KVEVICT_OK);
  CHECK(config.vocab == 256 && config.layers == 4 && config.heads == 4 && config.context == 1024);
  CHECK(config.kv_heads >= 1 && config.heads % config.kv_heads == 0);
  caches = config.layers * config.kv_heads; /* one cache, so one policy, per (layer, KV head) */
  /* 300 bytes of English: one window, 299 predictions. */
  for (i = 0; i < sizeof text; ++i) text[i] = (uint8_t)"The kernel keeps recently used pages in memory. "[i % 48];
  CHECK(kvevict_model_perplexity(model, text, sizeof text, NULL, 0, NULL, 0, 0, &full) == KVEVICT_OK);
  CHECK(full.predictions == 299 && full.evicted == 0 && full.perplexity > 1.0 && full.perplexity < 256.0);
  CHECK(fabs(full.bits_per_byte - log(full.perplexity) / log(2.0)) < 1e-12);
  /* A budget that never binds: exactly the full cache. */
  CHECK(kvevict_model_perplexity(model, text, sizeof text, "h2o", 300, NULL, 0, 0, &same) == KVEVICT_OK);
  CHECK(same.perplexity == full.perplexity && same.evicted == 0);
  /* Budget 8: each cache evicts once a step from step 8 to 298. */
  CHECK(kvevict_model_perplexity(model, text, sizeof text, "sliding-window", 8, NULL, 0, 0, &window) == KVEVICT_OK);
  CHECK(window.evicted == caches * (299u - 8u) && window.perplexity != full.perplexity);
  CHECK(kvevict_model_perplexity(model, text, sizeof text, "scissorhands", 16, &recent, 1, 0, &scissor) == KVEVICT_OK);
  CHECK(scissor.evicted == caches * (299u - 16u));
  CHECK(kvevict_model_perplexity(model, text, sizeof text, "scissorhands", 16, NULL, 0, 0, &scissor) ==
        KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("recentWindow (32) must be smaller than budget (16)"));
  CHECK(kvevict_model_perplexity(model, text, 1, NULL, 0, NULL, 0, 0, &full) == KVEVICT_ERROR_INPUT);
  CHECK(kvevict_model_perplexity(model, text, sizeof text, "lru", 8, NULL, 0, 0, &full) == KVEVICT_ERROR_PARAMETER);
  CHECK(kvevict_model_perplexity(model, NULL, 10, NULL, 0, NULL, 0, 0, &full) == KVEVICT_ERROR_ARGUMENT);
  /* The store's precision: fp32 (NULL) is the plain call's; an int4 window
   * longer than the 299 positions never fills, so every position stays at
   * fp32 and costs 2 x 32 floats; int8 costs 2 x (32 codes + a scale). */
  CHECK(kvevict_model_perplexity_kv(model, text, sizeof text, NULL, 0, NULL, 0, 0, NULL, -1, &same, &peak) ==
        KVEVICT_OK);
  CHECK(same.perplexity == full.perplexity && peak == 299u * 256u);
  CHECK(kvevict_model_perplexity_kv(model, text, sizeof text, NULL, 0, NULL, 0, 0, "int4", 512, &same, &peak) ==
        KVEVICT_OK);
  CHECK(same.perplexity == full.perplexity && peak == 299u * 256u);
  CHECK(kvevict_model_perplexity_kv(model, text, sizeof text, "sliding-window", 8, NULL, 0, 0, "int8", -1, &same,
                                    &peak) == KVEVICT_OK);
  CHECK(same.evicted == window.evicted && peak == 9u * 72u);
  CHECK(kvevict_model_perplexity_kv(model, text, sizeof text, NULL, 0, NULL, 0, 0, "int3", -1, &same, NULL) ==
        KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("kv_precision: 'int3' is not a KV precision (fp32, fp16, int8 or int4)"));
  CHECK(kvevict_model_perplexity_kv(model, text, sizeof text, NULL, 0, NULL, 0, 0, "fp32", 4, &same, NULL) ==
        KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("needs a quantized --kv-precision"));
  /* Granularity: NULL is each cache its own (the plain call); a sliding
   * window evicts by position alone, the same victim in every cache, so at
   * "sequence" it is the same run; TOVA at "sequence" still removes one
   * position from every cache each step from step 16 on. */
  CHECK(kvevict_model_perplexity_granular(model, text, sizeof text, "sliding-window", 8, NULL, 0, 0, NULL, &same) ==
        KVEVICT_OK);
  CHECK(same.perplexity == window.perplexity && same.evicted == window.evicted);
  CHECK(kvevict_model_perplexity_granular(model, text, sizeof text, "sliding-window", 8, NULL, 0, 0, "sequence",
                                          &same) == KVEVICT_OK);
  CHECK(same.perplexity == window.perplexity && same.evicted == window.evicted);
  CHECK(kvevict_model_perplexity_granular(model, text, sizeof text, "tova", 16, NULL, 0, 0, "sequence", &same) ==
        KVEVICT_OK);
  CHECK(same.evicted == caches * (299u - 16u));
  CHECK(kvevict_model_perplexity_granular(model, text, sizeof text, "h2o", 16, NULL, 0, 0, "cells", &same) ==
        KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("--granularity (cells) must be head, layer or sequence"));
  CHECK(kvevict_model_perplexity_granular(model, text, sizeof text, "pyramidkv", 16, NULL, 0, 0, "sequence", &same) ==
        KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("its budget differs by layer"));
  batch(model, caches, text);
  batch_positions(model, caches);
  stream(model, caches, config.layers, path);
  CHECK(kvevict_model_destroy(model) == KVEVICT_OK);
  CHECK(kvevict_model_destroy(model) == KVEVICT_ERROR_ARGUMENT);
  CHECK(kvevict_model_get_config(model, &config) == KVEVICT_ERROR_ARGUMENT);
}

/* Prefill compression through C: the hand-worked H2O case of vectors/prefill.json
 * (a one-off spike at position 0 keeps its large sum), and the boundary errors. */
static void prefill(void) {
  const float window[] = {0.75f, 0.125f, 0.0625f, 0.0625f, 0.0f,   0.0f,   /* query 3 */
                          0.0f,  0.25f,  0.25f,   0.25f,   0.25f,  0.0f,   /* query 4 */
                          0.0f,  0.25f,  0.25f,   0.125f,  0.125f, 0.25f}; /* query 5 */
  const kvevict_param params[] = {{"recentWindow", 1}};
  const kvevict_param with_budget[] = {{"budget", 3}};
  uint32_t kept[8];
  size_t n = 0;
  CHECK(kvevict_prefill("h2o", params, 1, 3, window, 3, 6, kept, 8, &n) == KVEVICT_OK);
  CHECK(n == 3 && kept[0] == 0 && kept[1] == 1 && kept[2] == 5);
  CHECK(kvevict_prefill("scissorhands", params, 1, 3, window, 3, 6, kept, 8, &n) == KVEVICT_OK);
  CHECK(n == 3 && kept[0] == 1 && kept[1] == 2 && kept[2] == 5);
  CHECK(kvevict_prefill("tova", NULL, 0, 6, window, 3, 6, kept, 8, &n) == KVEVICT_OK);
  CHECK(n == 6 && kept[0] == 0 && kept[5] == 5);
  CHECK(kvevict_prefill("h2o", params, 1, 3, window, 3, 6, kept, 2, &n) == KVEVICT_ERROR_ARGUMENT);
  CHECK(error_contains("capacity (2) is smaller than the 3 positions kept"));
  CHECK(kvevict_prefill("h2o", params, 1, 0, window, 3, 6, kept, 8, &n) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("prefill: budget (0) must be at least 1"));
  CHECK(kvevict_prefill("h2o", with_budget, 1, 3, window, 3, 6, kept, 8, &n) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("pass the budget as prefill's own argument"));
  /* The same 18 floats read as 2 rows of 9: row 0 is query 7, and column 8 is not 0. */
  CHECK(kvevict_prefill("h2o", params, 1, 3, window, 2, 9, kept, 8, &n) == KVEVICT_ERROR_INPUT);
  CHECK(error_contains("row 0 column 8 is 0.25, after the diagonal"));
  CHECK(kvevict_prefill("h2o", params, 1, 3, NULL, 3, 6, kept, 8, &n) == KVEVICT_ERROR_ARGUMENT);
  CHECK(error_contains("kvevict_prefill: window is NULL"));
  CHECK(kvevict_prefill("lru", NULL, 0, 3, window, 3, 6, kept, 8, &n) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("unknown policy 'lru'"));
}

/* Steps that carry more than attention (docs/signals.md). */
static void signals(void) {
  const float s1[] = {1.0f};
  const float s2[] = {0.9375f, 0.0625f};
  const float s3[] = {0.0625f, 0.5f, 0.4375f};
  const float* steps[] = {s1, s2, s3};
  const kvevict_param sh_params[] = {{"budget", 3}, {"recentWindow", 1}};
  const kvevict_param kn_params[] = {{"budget", 2}, {"headDim", 2}};
  const float k0[] = {3.0f, 4.0f}, k1[] = {1.0f, 0.0f}, k2[] = {0.0f, 2.0f};
  const float three[] = {1.0f, 0.0f, 0.0f};
  kvevict_policy* plain = NULL;
  kvevict_policy* stepped = NULL;
  kvevict_policy* kn = NULL;
  kvevict_step_inputs in;
  uint32_t mask = 99, va[8], vb[8];
  size_t na = 99, nb = 98, kept = 0;
  double value = 0.0;
  int64_t arg = 0;
  int t;
  CHECK(kvevict_policy_signals_of("h2o", &mask) == KVEVICT_OK && mask == KVEVICT_SIGNAL_ATTENTION);
  CHECK(kvevict_policy_signals_of("sliding-window", &mask) == KVEVICT_OK && mask == 0);
  CHECK(kvevict_policy_signals_of("knorm", &mask) == KVEVICT_OK && mask == KVEVICT_SIGNAL_KEY);
  CHECK(kvevict_policy_signals_of("expected-attention", &mask) == KVEVICT_OK &&
        mask == (KVEVICT_SIGNAL_KEY | KVEVICT_SIGNAL_VALUE | KVEVICT_SIGNAL_QUERIES));
  CHECK(kvevict_policy_signals_of("lru", &mask) == KVEVICT_ERROR_PARAMETER && error_contains("unknown policy 'lru'"));
  CHECK(kvevict_policy_signals_of("h2o", NULL) == KVEVICT_ERROR_ARGUMENT);

  /* Scissorhands: a step given attention plus a key it does not read decides
   * exactly as on_decode_step (budget 3, one recent: position 0 votes at
   * step 2, positions 1 and 2 at step 3, so the one-vote tie sends 0 and 1). */
  CHECK(kvevict_policy_create("scissorhands", sh_params, 2, &plain) == KVEVICT_OK);
  CHECK(kvevict_policy_create("scissorhands", sh_params, 2, &stepped) == KVEVICT_OK);
  CHECK(kvevict_policy_signals(stepped, &mask) == KVEVICT_OK && mask == KVEVICT_SIGNAL_ATTENTION);
  memset(&in, 0, sizeof in);
  in.key = k1;
  in.key_len = 2;
  CHECK(kvevict_policy_origin(stepped, &in) == KVEVICT_OK); /* ignored: it reads no keys */
  for (t = 0; t < 3; ++t) {
    in.attention = steps[t];
    in.attention_len = (size_t)t + 1;
    CHECK(kvevict_policy_on_decode_step(plain, t + 1, steps[t], (size_t)t + 1) == KVEVICT_OK);
    CHECK(kvevict_policy_step(stepped, t + 1, &in) == KVEVICT_OK);
  }
  CHECK(kvevict_policy_query(stepped, "votesOf", &arg, 1, &value) == KVEVICT_OK && value == 1.0);
  CHECK(kvevict_policy_evict(plain, 2, va, 8, &na) == KVEVICT_OK);
  CHECK(kvevict_policy_evict(stepped, 2, vb, 8, &nb) == KVEVICT_OK);
  CHECK(na == 2 && nb == 2 && va[0] == 0 && vb[0] == 0 && va[1] == 1 && vb[1] == 1);
  /* Absent attention through the struct is absent, as a NULL attn is; a
   * refused step is the same refusal. */
  in.attention = NULL;
  in.attention_len = 0;
  CHECK(kvevict_policy_step(stepped, 3, &in) == KVEVICT_ERROR_CONTRACT &&
        error_contains("must be greater than every position held"));
  CHECK(kvevict_policy_step(stepped, 4, NULL) == KVEVICT_ERROR_ARGUMENT &&
        error_contains("kvevict_policy_step: inputs is NULL"));
  in.key = NULL;
  in.key_len = 2;
  CHECK(kvevict_policy_step(stepped, 4, &in) == KVEVICT_ERROR_ARGUMENT &&
        error_contains("inputs->key is NULL but key_len is 2"));
  CHECK(kvevict_policy_kept_count(stepped, &kept) == KVEVICT_OK && kept == 2); /* nothing changed */
  CHECK(kvevict_policy_destroy(plain) == KVEVICT_OK);
  CHECK(kvevict_policy_destroy(stepped) == KVEVICT_OK);
  CHECK(kvevict_policy_step(stepped, 5, &in) == KVEVICT_ERROR_ARGUMENT && error_contains("not a live one"));
  CHECK(kvevict_policy_signals(stepped, &mask) == KVEVICT_ERROR_ARGUMENT);

  /* KNorm on keys alone: norms 5, 1, 2, so position 0 goes. */
  CHECK(kvevict_policy_create("knorm", kn_params, 2, &kn) == KVEVICT_OK);
  CHECK(kvevict_policy_signals(kn, &mask) == KVEVICT_OK && mask == KVEVICT_SIGNAL_KEY);
  memset(&in, 0, sizeof in);
  in.key = k0;
  in.key_len = 2;
  CHECK(kvevict_policy_origin(kn, &in) == KVEVICT_OK);
  in.key = k1;
  CHECK(kvevict_policy_step(kn, 1, &in) == KVEVICT_OK);
  /* Refused before anything changes: no key, a key of 3 floats, weights alone. */
  memset(&in, 0, sizeof in);
  in.attention = three;
  in.attention_len = 2;
  CHECK(kvevict_policy_step(kn, 2, &in) == KVEVICT_ERROR_CONTRACT && error_contains("KNorm") &&
        error_contains("key"));
  in.key = three;
  in.key_len = 3;
  CHECK(kvevict_policy_step(kn, 2, &in) == KVEVICT_ERROR_CONTRACT && error_contains("KNorm"));
  CHECK(kvevict_policy_on_decode_step(kn, 2, three, 2) == KVEVICT_ERROR_CONTRACT && error_contains("KNorm"));
  CHECK(kvevict_policy_kept_count(kn, &kept) == KVEVICT_OK && kept == 2);
  in.attention = NULL;
  in.attention_len = 0;
  in.key = k2;
  in.key_len = 2;
  CHECK(kvevict_policy_step(kn, 2, &in) == KVEVICT_OK);
  arg = 0;
  CHECK(kvevict_policy_query(kn, "keyNormOf", &arg, 1, &value) == KVEVICT_OK && value == 5.0);
  arg = 2;
  CHECK(kvevict_policy_query(kn, "keyNormOf", &arg, 1, &value) == KVEVICT_OK && value == 2.0);
  CHECK(kvevict_policy_evict(kn, 2, va, 8, &na) == KVEVICT_OK && na == 1 && va[0] == 0);
  CHECK(kvevict_policy_destroy(kn) == KVEVICT_OK);

  {
    /* Expected Attention reads key, value and queries. No RoPE, mean query
     * (2, 0): logits k[0] * 2 / sqrt 2, so the key (-1, 0) goes; without the
     * queries the step is refused and nothing changes. */
    const kvevict_param ea_params[] = {{"budget", 2},     {"headDim", 2},    {"sinks", 0},
                                       {"ropeBase", 0},   {"covariance", 0}, {"valueNorm", 0}};
    const float q[] = {2.0f, 0.0f}, v[] = {1.0f, 0.0f};
    const float ka[] = {0.5f, 0.0f}, kb[] = {1.0f, 0.0f}, kc[] = {-1.0f, 0.0f};
    kvevict_policy* ea = NULL;
    CHECK(kvevict_policy_create("expected-attention", ea_params, 6, &ea) == KVEVICT_OK);
    CHECK(kvevict_policy_signals(ea, &mask) == KVEVICT_OK &&
          mask == (KVEVICT_SIGNAL_KEY | KVEVICT_SIGNAL_VALUE | KVEVICT_SIGNAL_QUERIES));
    memset(&in, 0, sizeof in);
    in.key = ka;
    in.key_len = 2;
    in.value = v;
    in.value_len = 2;
    in.queries = q;
    in.queries_len = 2;
    CHECK(kvevict_policy_origin(ea, &in) == KVEVICT_OK);
    in.key = kb;
    CHECK(kvevict_policy_step(ea, 1, &in) == KVEVICT_OK);
    in.key = kc;
    in.queries = NULL;
    in.queries_len = 0;
    CHECK(kvevict_policy_step(ea, 2, &in) == KVEVICT_ERROR_CONTRACT && error_contains("ExpectedAttention") &&
          error_contains("queries"));
    CHECK(kvevict_policy_kept_count(ea, &kept) == KVEVICT_OK && kept == 2);
    in.queries = q;
    in.queries_len = 2;
    CHECK(kvevict_policy_step(ea, 2, &in) == KVEVICT_OK);
    CHECK(kvevict_policy_query(ea, "modelledQueries", NULL, 0, &value) == KVEVICT_OK && value == 3.0);
    CHECK(kvevict_policy_evict(ea, 2, va, 8, &na) == KVEVICT_OK && na == 1 && va[0] == 2);
    CHECK(kvevict_policy_destroy(ea) == KVEVICT_OK);
  }

  {
    /* The same keys through a block evictor (blocks of 1, nothing protected
     * but the partial block -- none with size 1) and a layer budget's head 1. */
    kvevict_block_params bp = {1, 0, 0, 2, "sum"};
    kvevict_block_evictor* ev = NULL;
    kvevict_layer_budget* layer = NULL;
    const kvevict_param kn1[] = {{"headDim", 2}};
    uint32_t blocks[8];
    size_t n = 99, held = 0, evicted = 0;
    memset(&in, 0, sizeof in);
    in.key_len = 2;
    CHECK(kvevict_block_evictor_create("knorm", kn1, 1, &bp, &ev) == KVEVICT_OK);
    in.key = k0;
    CHECK(kvevict_block_evictor_origin(ev, &in) == KVEVICT_OK);
    in.key = k1;
    CHECK(kvevict_block_evictor_step(ev, 1, &in) == KVEVICT_OK);
    in.key = k2;
    CHECK(kvevict_block_evictor_step(ev, 2, &in) == KVEVICT_OK);
    CHECK(kvevict_block_evictor_evict(ev, 2, blocks, 8, &n) == KVEVICT_OK && n == 1 && blocks[0] == 0);
    CHECK(kvevict_block_evictor_step(ev, 3, NULL) == KVEVICT_ERROR_ARGUMENT);
    in.key = NULL;
    in.key_len = 0;
    CHECK(kvevict_block_evictor_step(ev, 3, &in) == KVEVICT_ERROR_CONTRACT && error_contains("KNorm"));
    CHECK(kvevict_block_evictor_counts(ev, &held, NULL) == KVEVICT_OK && held == 2);
    CHECK(kvevict_block_evictor_destroy(ev) == KVEVICT_OK);

    CHECK(kvevict_layer_budget_create("knorm", kn1, 1, 2, 4, 1, &layer) == KVEVICT_OK);
    in.key_len = 2;
    in.key = k1;
    CHECK(kvevict_layer_budget_origin(layer, 0, &in) == KVEVICT_OK);
    CHECK(kvevict_layer_budget_step(layer, 0, 1, &in) == KVEVICT_OK);
    CHECK(kvevict_layer_budget_step(layer, 0, 2, &in) == KVEVICT_OK);
    in.key = k0;
    CHECK(kvevict_layer_budget_origin(layer, 1, &in) == KVEVICT_OK);
    CHECK(kvevict_layer_budget_step(layer, 1, 1, &in) == KVEVICT_OK);
    in.key = k2;
    CHECK(kvevict_layer_budget_step(layer, 1, 2, &in) == KVEVICT_OK);
    CHECK(kvevict_layer_budget_origin(layer, 2, &in) == KVEVICT_ERROR_CONTRACT && error_contains("head 2"));
    CHECK(kvevict_layer_budget_destroy(layer) == KVEVICT_OK);
    (void)evicted;
  }
}

/* Block eviction and a shared layer budget, on the worked cases of
 * docs/paged.md (tests/block_test.cpp works them out). */
static void paged(void) {
  kvevict_block_params bp = {2, 1, 1, 4, "sum"};
  kvevict_param params[] = {{"recentWindow", 0}};
  kvevict_block_evictor* ev = NULL;
  uint32_t blocks[8], shift[8], victims[16];
  size_t n = 0, m = 0, held = 0, nblocks = 0;
  float w[8] = {0};
  int64_t pos;
  CHECK(kvevict_block_evictor_create("h2o", params, 1, &bp, &ev) == KVEVICT_OK);
  for (pos = 1; pos <= 8; ++pos) {
    if (pos == 8) {
      w[2] = 0.125F;
      w[3] = 0.125F;
      w[4] = 0.1875F;
    }
    CHECK(kvevict_block_evictor_on_decode_step(ev, pos, w, (size_t)pos) == KVEVICT_OK);
    CHECK(kvevict_block_evictor_evict(ev, 4, blocks, 8, &n) == KVEVICT_OK);
    if (pos < 8) CHECK(n == 0);
  }
  CHECK(n == 1 && blocks[0] == 2);
  CHECK(kvevict_block_evictor_removed_before(ev, shift, 8, &m) == KVEVICT_OK);
  CHECK(m == 4 && shift[0] == 0 && shift[1] == 0 && shift[2] == 2 && shift[3] == 2);
  CHECK(kvevict_block_evictor_evicted_positions(ev, victims, 16, &m) == KVEVICT_OK);
  CHECK(m == 2 && victims[0] == 4 && victims[1] == 5);
  CHECK(kvevict_block_evictor_counts(ev, &held, &nblocks) == KVEVICT_OK && held == 7 && nblocks == 4);
  CHECK(kvevict_block_evictor_evict(ev, 4, blocks, 1, &n) == KVEVICT_ERROR_ARGUMENT);
  CHECK(error_contains("the block buffer holds 1"));
  CHECK(kvevict_block_evictor_destroy(ev) == KVEVICT_OK);
  CHECK(kvevict_block_evictor_on_decode_step(ev, 9, NULL, 0) == KVEVICT_ERROR_ARGUMENT);

  bp.block_size = 0;
  CHECK(kvevict_block_evictor_create("h2o", params, 1, &bp, &ev) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("blockSize (0) must be at least 1") && ev == NULL);
  bp.block_size = 2;
  bp.block_score = "median";
  CHECK(kvevict_block_evictor_create("h2o", params, 1, &bp, &ev) == KVEVICT_ERROR_PARAMETER);
  CHECK(error_contains("blockScore 'median'"));

  {
    /* Two heads share 6 positions: head 0 looks only at position 0, head 1
     * spreads; head 0's positions 1 and 2 (score 0) go. */
    kvevict_layer_budget* layer = NULL;
    kvevict_param rw[] = {{"recentWindow", 1}};
    const float h0[3][3] = {{1, 0, 0}, {1, 0, 0}, {1, 0, 0}};
    const float h1[3][3] = {{1, 0, 0}, {0.5F, 0.5F, 0}, {0.25F, 0.25F, 0.5F}};
    size_t evicted = 0, kept = 0;
    CHECK(kvevict_layer_budget_create("h2o", rw, 1, 2, 6, 1, &layer) == KVEVICT_OK);
    for (pos = 1; pos <= 3; ++pos) {
      CHECK(kvevict_layer_budget_on_decode_step(layer, 0, pos, h0[pos - 1], (size_t)pos) == KVEVICT_OK);
      CHECK(kvevict_layer_budget_on_decode_step(layer, 1, pos, h1[pos - 1], (size_t)pos) == KVEVICT_OK);
    }
    CHECK(kvevict_layer_budget_evict(layer, 6, &evicted) == KVEVICT_OK && evicted == 2);
    CHECK(kvevict_layer_budget_victims(layer, 0, victims, 16, &m) == KVEVICT_OK);
    CHECK(m == 2 && victims[0] == 1 && victims[1] == 2);
    CHECK(kvevict_layer_budget_victims(layer, 1, victims, 16, &m) == KVEVICT_OK && m == 0);
    CHECK(kvevict_layer_budget_kept_count(layer, 1, &kept) == KVEVICT_OK && kept == 4);
    CHECK(kvevict_layer_budget_kept_count(layer, 2, &kept) == KVEVICT_ERROR_CONTRACT);
    CHECK(error_contains("head 2 is out of range"));
    CHECK(kvevict_layer_budget_destroy(layer) == KVEVICT_OK);
    CHECK(kvevict_layer_budget_create("h2o", NULL, 0, 4, 100, 0, &layer) == KVEVICT_ERROR_PARAMETER);
    CHECK(error_contains("layerBudget (100) cannot be met"));
    /* 1,024 heads of 2^18 positions: refused before the storage is taken. */
    CHECK(kvevict_layer_budget_create("h2o", NULL, 0, 1024, (int64_t)1 << 18, 0, &layer) == KVEVICT_ERROR_PARAMETER);
    CHECK(error_contains("bytes one layer may hold"));
    /* A floor near 2^62: named, not wrapped into a negative budget. */
    CHECK(kvevict_layer_budget_create("h2o", NULL, 0, 2, 128, (int64_t)1 << 62, &layer) == KVEVICT_ERROR_PARAMETER);
    CHECK(error_contains("headFloor (4611686018427387904) times heads (2) must be at most layerBudget (128)"));
  }
}

/* Attention from queries and keys: RoPE by hand at head_dim 2 (theta 1 rad
 * whatever the base), weights of equal and mirrored logits. */
static void attention_from_keys_api(void) {
  float x[2] = {1.0f, 0.0f};
  float odd[3] = {1.0f, 2.0f, 3.0f};
  const float q1[2] = {1.0f, 0.0f};
  const float flat[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const float q2[4] = {1.0f, 0.0f, 0.0f, 1.0f};
  const float mirrored[4] = {2.0f, 0.0f, 0.0f, 2.0f};
  float out[2] = {0.0f, 0.0f};
  float scratch[2] = {0.0f, 0.0f};
  CHECK(kvevict_rope_neox(x, 2, 1, 10000.0) == KVEVICT_OK);
  CHECK(x[0] == (float)cos(1.0) && x[1] == (float)sin(1.0)); /* (1, 0) turned by 1 rad */
  CHECK(kvevict_rope_neox(odd, 3, 1, 10000.0) == KVEVICT_ERROR_CONTRACT && error_contains("must be even"));
  CHECK(odd[0] == 1.0f && odd[2] == 3.0f);
  /* Two equal logits: 1/2 each. */
  CHECK(kvevict_attention_from_keys(q1, 1, flat, 2, 2, 1.0f, out, scratch) == KVEVICT_OK);
  CHECK(out[0] == 0.5f && out[1] == 0.5f);
  /* Two heads whose logits mirror each other (2, 0) and (0, 2): their mean is
   * 1/2 each, up to float rounding. */
  CHECK(kvevict_attention_from_keys(q2, 2, mirrored, 2, 2, 1.0f, out, scratch) == KVEVICT_OK);
  CHECK(fabs(out[0] - 0.5) < 1e-6 && fabs(out[1] - 0.5) < 1e-6 && out[0] + out[1] > 0.999f);
  /* One head of logits (2, 0): 1 / (1 + e^-2) and its complement. */
  CHECK(kvevict_attention_from_keys(q1, 1, mirrored, 2, 2, 1.0f, out, scratch) == KVEVICT_OK);
  CHECK(fabs(out[0] - 1.0 / (1.0 + exp(-2.0))) < 1e-6 && fabs(out[1] - exp(-2.0) / (1.0 + exp(-2.0))) < 1e-6);
  CHECK(kvevict_attention_from_keys(q1, 1, flat, 2, 2, 1.0f, NULL, scratch) == KVEVICT_ERROR_ARGUMENT &&
        error_contains("out"));
  CHECK(kvevict_attention_from_keys(q1, 0, flat, 2, 2, 1.0f, out, scratch) == KVEVICT_ERROR_CONTRACT &&
        error_contains("attention_from_keys"));
}

int main(int argc, char** argv) {
  size_t vpassed = 0;
  size_t vfailed = 0;
  char* report = NULL;
  registry();
  stale_spike();
  bad_input();
  trace_and_harness();
  real_model();
  prefill();
  paged();
  signals();
  attention_from_keys_api();
  if (argc > 1) {
    CHECK(kvevict_vectors_run((const char* const*)(argv + 1), (size_t)(argc - 1), &vpassed, &vfailed,
                              &report) == KVEVICT_OK);
    if (report != NULL && report[0] != '\0') fprintf(stderr, "%s", report);
    kvevict_string_free(report);
    printf("vectors through the C API: %zu cases passed, %zu failed\n", vpassed, vfailed);
    CHECK(vfailed == 0 && vpassed > 0);
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
