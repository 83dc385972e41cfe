/* llama_cpp_bench: llama.cpp's prefill and decode speed on a GGUF file, for
 * scripts/performance.py's "llama.cpp side by side" table, which runs it round
 * by round beside `kvevict bench --model` on the same file, prompt ids and
 * thread count.
 *
 *   llama_cpp_bench MODEL.gguf (--ids FILE | --id-list ID,ID,...)
 *                   [--prompt P] [--tokens T] [--rounds R] [--warmup W]
 *                   [--threads N] [--batch N] [--ubatch N]
 *                   [--cache-type-k TYPE] [--cache-type-v TYPE]
 *                   [--flash-attn auto|on|off] [--cpu-variant NAME]
 *                   [--prompt-logits last|all]
 *
 * The ids are the ones kvevict runs (`kvevict tokenize --model M --text F`
 * prints them: the BOS first when the vocabulary adds one), so no tokenizer
 * difference enters: the first P are the prompt, prefilled from an empty cache
 * (in llama_decode calls of --batch tokens, which llama.cpp splits into
 * --ubatch), and the next T are decoded one llama_decode a token, each fed as
 * given -- kvevict bench's teacher-forced decode, the same work a sampled
 * one does. llama.cpp computes the logits of the last prompt token (what a
 * server asks for; --prompt-logits all: of every prompt token, as kvevict's
 * Decoder::prefill does) and of every decoded one.
 *
 * Each round clears the cache and times both phases (CLOCK_MONOTONIC, to
 * llama_synchronize); --warmup rounds run first, untimed (llama-bench does one:
 * the first pass pays for page faults in the mapped weights and the buffers).
 * The context, the model and the backend stay loaded across rounds.
 *
 * Defaults are llama.cpp's own (llama_context_default_params): F16 K and V
 * caches, flash attention auto, n_batch 2048, n_ubatch 512; the CPU backend is
 * the best of node-llama-cpp's variants for this CPU (libggml-cpu-*.so from
 * KVEVICT_LLAMA_CPP_BINS, picked by ggml_backend_load_all_from_path), or the
 * one --cpu-variant names (haswell: AVX2 without AVX-512).
 *
 * Prints one JSON object on stdout: the settings, what llama.cpp resolved
 * (context size, flash attention, the CPU variant and its features), each
 * round's seconds and tokens/s, and the best round of each phase.
 *
 * Exit status: 0 done; 2 bad arguments; 1 llama.cpp refused the model or the
 * context, or a step failed. Either way the reason is one line on stderr,
 * "llama_cpp_bench: error: ...", with llama.cpp's own first error message
 * when it logged one; its other log lines are hidden unless
 * LLAMA_CPP_BENCH_VERBOSE is set.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef KVEVICT_LLAMA_CPP_BINS
#error "KVEVICT_LLAMA_CPP_BINS (the folder holding libggml-cpu-*.so) must be defined"
#endif

static const char *usage_text =
    "usage: llama_cpp_bench MODEL.gguf (--ids FILE | --id-list ID,ID,...)\n"
    "                       [--prompt P] [--tokens T] [--rounds R] [--warmup W]\n"
    "                       [--threads N] [--batch N] [--ubatch N]\n"
    "                       [--cache-type-k TYPE] [--cache-type-v TYPE]\n"
    "                       [--flash-attn auto|on|off] [--cpu-variant NAME]\n"
    "                       [--prompt-logits last|all]\n"
    "\n"
    "  --ids FILE          token ids, separated by white space or commas (kvevict tokenize's output)\n"
    "  --id-list IDS       or the ids on the command line, comma-separated\n"
    "  --prompt P          ids prefilled before the decode (default 128)\n"
    "  --tokens T          ids decoded after the prompt, one at a time (default 64; 0: none)\n"
    "  --rounds R          timed rounds, each from an empty cache (default 3)\n"
    "  --warmup W          untimed rounds first (default 1, as llama-bench)\n"
    "  --threads N         n_threads and n_threads_batch (default 1)\n"
    "  --batch N           n_batch: the prompt goes to llama_decode N ids a call (default 2048)\n"
    "  --ubatch N          n_ubatch: llama.cpp computes N ids at once (default 512)\n"
    "  --cache-type-k T    K cache type: f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 (default f16)\n"
    "  --cache-type-v T    V cache type, the same (default f16; a quantized one needs flash attention)\n"
    "  --flash-attn M      auto, on or off (default auto)\n"
    "  --cpu-variant NAME  load libggml-cpu-NAME.so alone (e.g. haswell for AVX2) instead of the best\n"
    "  --prompt-logits M   last: the last prompt token's logits only (default); all: every prompt token's\n"
    "\n"
    "Prints one JSON object. Exit status: 0 done; 2 bad arguments; 1 llama.cpp refused\n"
    "the model or the context, or a step failed; the reason is one line on stderr.";

/* llama.cpp's first error since the step began (with its continuation lines):
 * the most specific one ("invalid magic characters", "tensor ... data is not
 * within the file bounds"); the ones after it only say that loading failed. */
static char first_error[1024];
static int in_error; /* 1 while the first error's continuation lines come */
static int verbose;
/* What llama.cpp resolved that its API does not return, read from its log:
 * flash attention's "auto" (llama_context's probe logs "Flash Attention
 * enabled" or "... not supported, set to disabled") and the CPU variant
 * ggml_backend_load_all_from_path picked ("loaded CPU backend from PATH"). */
static int flash_attn_seen = -1; /* -1 not logged, 0 off, 1 on */
static char cpu_backend_path[1024];

static void log_callback(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (verbose) fputs(text, stderr);
  if (strstr(text, "Flash Attention enabled")) flash_attn_seen = 1;
  if (strstr(text, "Flash Attention not supported")) flash_attn_seen = 0;
  const char *loaded = strstr(text, "loaded CPU backend from ");
  if (loaded) {
    snprintf(cpu_backend_path, sizeof cpu_backend_path, "%s", loaded + strlen("loaded CPU backend from "));
    cpu_backend_path[strcspn(cpu_backend_path, "\r\n")] = '\0';
  }
  if (level == GGML_LOG_LEVEL_ERROR && first_error[0] == '\0') {
    in_error = 1;
  } else if (level != GGML_LOG_LEVEL_CONT) {
    in_error = 0;
  }
  if (!in_error) return;
  size_t have = strlen(first_error);
  snprintf(first_error + have, sizeof first_error - have, "%s", text);
}

static void clear_errors(void) {
  first_error[0] = '\0';
  in_error = 0;
}

/* The error text on one line: newlines become "; ", the ends trimmed. */
static const char *reason(void) {
  static char line[sizeof first_error];
  size_t n = 0;
  for (const char *p = first_error; *p && n + 3 < sizeof line; ++p) {
    if (*p == '\n' || *p == '\r') {
      if (n > 0 && p[1] != '\0' && p[1] != '\n' && line[n - 1] != ' ') {
        line[n++] = ';';
        line[n++] = ' ';
      }
    } else {
      line[n++] = *p;
    }
  }
  while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == ';')) --n;
  line[n] = '\0';
  return line;
}

static void die(int code, const char *fmt, ...) {
  va_list ap;
  fputs("llama_cpp_bench: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

/* A failure of llama.cpp's: what we tried, and its own reason when it gave one. */
static void die_llama(const char *what) {
  const char *why = reason();
  if (*why) die(1, "%s: %s", what, why);
  die(1, "%s (llama.cpp gave no reason; LLAMA_CPP_BENCH_VERBOSE=1 shows its log)", what);
}

static int parse_long(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

struct ids {
  llama_token *v;
  size_t n, cap;
};

static void push_id(struct ids *ids, const char *item, const char *where) {
  long v;
  if (!parse_long(item, 0, INT32_MAX, &v))
    die(2, "%s: '%s' is not a token id (non-negative integers, separated by commas or white space)", where, item);
  if (ids->n == ids->cap) {
    ids->cap = ids->cap ? 2 * ids->cap : 1024;
    ids->v = realloc(ids->v, ids->cap * sizeof *ids->v);
    if (!ids->v) die(1, "out of memory");
  }
  ids->v[ids->n++] = (llama_token)v;
}

/* The ids in text: items between commas and white space. An empty item
 * between two commas is refused (it is a typo, not a separator). */
static void parse_ids(char *text, struct ids *ids, const char *where) {
  char *p = text;
  int after_comma = 1; /* the start counts as one: a leading comma is refused */
  for (;;) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') ++p;
    if (*p == '\0') break;
    if (*p == ',') {
      if (after_comma) die(2, "%s: an empty item between commas", where);
      after_comma = 1;
      ++p;
      continue;
    }
    char *start = p;
    while (*p && *p != ',' && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') ++p;
    char keep = *p;
    *p = '\0';
    push_id(ids, start, where);
    *p = keep;
    after_comma = 0;
  }
}

static char *read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) die(1, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) die(1, "out of memory");
  for (;;) {
    if (n + 1 >= cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (!buf) die(1, "out of memory");
    }
    size_t got = fread(buf + n, 1, cap - n - 1, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) die(1, "cannot read %s", path);
  fclose(f);
  if (memchr(buf, '\0', n)) die(1, "%s holds a NUL byte: not a list of token ids", path);
  buf[n] = '\0';
  return buf;
}

struct type_name {
  const char *name;
  enum ggml_type type;
};
/* The cache types llama.cpp's own tools accept (common/arg.cpp's list). */
static const struct type_name cache_types[] = {
    {"f32", GGML_TYPE_F32},   {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16},
    {"q8_0", GGML_TYPE_Q8_0}, {"q4_0", GGML_TYPE_Q4_0}, {"q4_1", GGML_TYPE_Q4_1},
    {"iq4_nl", GGML_TYPE_IQ4_NL}, {"q5_0", GGML_TYPE_Q5_0}, {"q5_1", GGML_TYPE_Q5_1},
};

static enum ggml_type cache_type(const char *flag, const char *v) {
  for (size_t i = 0; i < sizeof cache_types / sizeof cache_types[0]; ++i)
    if (!strcmp(v, cache_types[i].name)) return cache_types[i].type;
  die(2, "%s: '%s' is not one of f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1", flag, v);
  return GGML_TYPE_F16; /* not reached */
}

static const char *cache_type_name(enum ggml_type t) {
  for (size_t i = 0; i < sizeof cache_types / sizeof cache_types[0]; ++i)
    if (cache_types[i].type == t) return cache_types[i].name;
  return "?";
}

static double now_seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* A JSON string: the characters JSON requires escaped, escaped. */
static void print_json_string(const char *s) {
  putchar('"');
  for (const unsigned char *p = (const unsigned char *)s; *p; ++p) {
    if (*p == '"' || *p == '\\') {
      putchar('\\');
      putchar(*p);
    } else if (*p < 0x20) {
      printf("\\u%04x", *p);
    } else {
      putchar(*p);
    }
  }
  putchar('"');
}

static void print_rate(double tokens, double seconds) {
  if (seconds > 0.0) printf("%.6g", tokens / seconds);
  else fputs("null", stdout);
}

struct round_time {
  double prefill, decode;
};

struct settings {
  int prompt, tokens, rounds, warmup, threads, batch, ubatch;
  int all_logits; /* --prompt-logits all */
  enum ggml_type type_k, type_v;
  enum llama_flash_attn_type flash_attn;
};

/* The first logit of the last token decoded: read, as kvevict bench reads
 * each step's, so both engines hand their logits over. */
static float last_logit(struct llama_context *ctx) {
  const float *row = llama_get_logits_ith(ctx, -1);
  if (!row) die_llama("llama_get_logits_ith gave no logits");
  return row[0];
}

/* One round: the cache emptied, the prompt prefilled, the tokens decoded. */
static struct round_time run_round(struct llama_context *ctx, struct llama_batch *batch, const llama_token *ids,
                                   const struct settings *s, float *sink) {
  struct round_time t = {0.0, 0.0};
  llama_memory_clear(llama_get_memory(ctx), 1);
  double start = now_seconds();
  for (int at = 0; at < s->prompt; at += s->batch) {
    int n = s->prompt - at < s->batch ? s->prompt - at : s->batch;
    for (int i = 0; i < n; ++i) {
      batch->token[i] = ids[at + i];
      batch->pos[i] = at + i;
      batch->n_seq_id[i] = 1;
      batch->seq_id[i][0] = 0;
      batch->logits[i] = (int8_t)(s->all_logits || at + i == s->prompt - 1);
    }
    batch->n_tokens = n;
    clear_errors();
    int rc = llama_decode(ctx, *batch);
    if (rc != 0) {
      char what[96];
      snprintf(what, sizeof what, "llama_decode of the prompt (ids %d to %d) returned %d", at, at + n - 1, rc);
      die_llama(what);
    }
  }
  llama_synchronize(ctx);
  if (s->prompt > 0) {
    *sink += last_logit(ctx);
    t.prefill = now_seconds() - start;
  }
  start = now_seconds();
  for (int i = 0; i < s->tokens; ++i) {
    batch->token[0] = ids[s->prompt + i];
    batch->pos[0] = s->prompt + i;
    batch->n_seq_id[0] = 1;
    batch->seq_id[0][0] = 0;
    batch->logits[0] = 1;
    batch->n_tokens = 1;
    clear_errors();
    int rc = llama_decode(ctx, *batch);
    if (rc != 0) {
      char what[96];
      snprintf(what, sizeof what, "llama_decode of decoded token %d returned %d", i, rc);
      die_llama(what);
    }
    llama_synchronize(ctx);
    *sink += last_logit(ctx);
  }
  if (s->tokens > 0) t.decode = now_seconds() - start;
  return t;
}

/* The loaded CPU backend's features with a value other than "0" (its
 * ggml_backend_get_features: "AVX2", "AVX512", "AVX512_VNNI", ...). */
static void print_cpu_features(void) {
  putchar('[');
  int first = 1;
  for (size_t r = 0; r < ggml_backend_reg_count(); ++r) {
    ggml_backend_reg_t reg = ggml_backend_reg_get(r);
    if (strcmp(ggml_backend_reg_name(reg), "CPU") != 0) continue;
    void *address = ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features");
    if (!address) break;
    /* ISO C has no cast from an object pointer to a function pointer (-Wpedantic
     * refuses one); POSIX guarantees they have the same representation (dlsym). */
    ggml_backend_get_features_t get;
    _Static_assert(sizeof get == sizeof address, "function and object pointers differ in size");
    memcpy(&get, &address, sizeof get);
    for (struct ggml_backend_feature *f = get(reg); f && f->name; ++f) {
      if (!strcmp(f->value, "0")) continue;
      if (!first) fputs(", ", stdout);
      first = 0;
      print_json_string(f->name);
    }
    break;
  }
  putchar(']');
}

struct options {
  const char *model, *ids_file, *id_list, *variant;
  struct settings s;
};

/* A number flag's value, in its range. */
static int number_flag(const char *flag, const char *v) {
  long lo = 1, hi = 1 << 20, n;
  if (!strcmp(flag, "--tokens") || !strcmp(flag, "--prompt") || !strcmp(flag, "--warmup")) lo = 0;
  if (!strcmp(flag, "--rounds") || !strcmp(flag, "--warmup")) hi = 1000;
  if (!strcmp(flag, "--threads")) hi = 1024;
  if (!parse_long(v, lo, hi, &n)) die(2, "%s: '%s' is not a whole number from %ld to %ld", flag, v, lo, hi);
  return (int)n;
}

static void parse_args(int argc, char **argv, struct options *o) {
  o->model = argv[1];
  if (o->model[0] == '-') die(2, "the model file comes first (llama_cpp_bench --help shows the usage)");
  o->ids_file = o->id_list = o->variant = NULL;
  /* llama.cpp's defaults, taken from llama.cpp rather than written here */
  struct llama_context_params d = llama_context_default_params();
  struct settings s = {128, 64, 3, 1, 1, (int)d.n_batch, (int)d.n_ubatch, 0, d.type_k, d.type_v, d.flash_attn_type};
  static const char *flags[] = {"--ids", "--id-list", "--prompt", "--tokens", "--rounds", "--warmup",
                                "--threads", "--batch", "--ubatch", "--cache-type-k", "--cache-type-v",
                                "--flash-attn", "--cpu-variant", "--prompt-logits"};
  for (int i = 2; i < argc; ++i) {
    const char *a = argv[i];
    int known = 0;
    for (size_t k = 0; k < sizeof flags / sizeof flags[0]; ++k) known |= !strcmp(a, flags[k]);
    if (!known) die(2, "unknown argument '%s' (llama_cpp_bench --help shows the usage)", a);
    if (i + 1 >= argc) die(2, "%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--ids")) o->ids_file = v;
    else if (!strcmp(a, "--id-list")) o->id_list = v;
    else if (!strcmp(a, "--cache-type-k")) s.type_k = cache_type(a, v);
    else if (!strcmp(a, "--cache-type-v")) s.type_v = cache_type(a, v);
    else if (!strcmp(a, "--cpu-variant")) {
      if (!*v || strchr(v, '/') || strchr(v, '.')) die(2, "--cpu-variant: '%s' is not a variant name (e.g. haswell)", v);
      o->variant = v;
    } else if (!strcmp(a, "--prompt-logits")) {
      if (strcmp(v, "last") && strcmp(v, "all")) die(2, "--prompt-logits: '%s' is not last or all", v);
      s.all_logits = !strcmp(v, "all");
    } else if (!strcmp(a, "--flash-attn")) {
      if (!strcmp(v, "auto")) s.flash_attn = LLAMA_FLASH_ATTN_TYPE_AUTO;
      else if (!strcmp(v, "on")) s.flash_attn = LLAMA_FLASH_ATTN_TYPE_ENABLED;
      else if (!strcmp(v, "off")) s.flash_attn = LLAMA_FLASH_ATTN_TYPE_DISABLED;
      else die(2, "--flash-attn: '%s' is not auto, on or off", v);
    } else {
      int n = number_flag(a, v);
      if (!strcmp(a, "--prompt")) s.prompt = n;
      else if (!strcmp(a, "--tokens")) s.tokens = n;
      else if (!strcmp(a, "--rounds")) s.rounds = n;
      else if (!strcmp(a, "--warmup")) s.warmup = n;
      else if (!strcmp(a, "--threads")) s.threads = n;
      else if (!strcmp(a, "--batch")) s.batch = n;
      else s.ubatch = n;
    }
  }
  if ((o->ids_file != NULL) == (o->id_list != NULL))
    die(2, "give the prompt's token ids with exactly one of --ids FILE and --id-list ID,ID,...");
  if (s.prompt + s.tokens == 0) die(2, "--prompt 0 and --tokens 0: nothing to time");
  o->s = s;
}

/* The ids the options give, at least --prompt + --tokens of them. */
static struct ids load_ids(const struct options *o) {
  struct ids ids = {NULL, 0, 0};
  const char *where = o->ids_file ? o->ids_file : "--id-list";
  char *text;
  if (o->ids_file) {
    text = read_file(o->ids_file);
  } else {
    size_t len = strlen(o->id_list);
    text = malloc(len + 1);
    if (!text) die(1, "out of memory");
    memcpy(text, o->id_list, len + 1);
  }
  parse_ids(text, &ids, where);
  free(text);
  size_t need = (size_t)o->s.prompt + (size_t)o->s.tokens;
  if (ids.n < need)
    die(1, "%s holds %zu ids; --prompt %d and --tokens %d need %zu", where, ids.n, o->s.prompt, o->s.tokens, need);
  return ids;
}

/* The CPU backend: the best variant for this CPU, or the one named. */
static void load_backends(const char *variant) {
  if (variant) {
    char path[2048];
    snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", KVEVICT_LLAMA_CPP_BINS, variant);
    FILE *f = fopen(path, "rb");
    if (!f) die(1, "--cpu-variant %s: there is no %s", variant, path);
    fclose(f);
    clear_errors();
    if (!ggml_backend_load(path)) {
      if (*reason()) die(1, "--cpu-variant %s: %s", variant, reason());
      die(1, "--cpu-variant %s: this CPU cannot run %s", variant, path);
    }
  } else {
    ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  }
  if (ggml_backend_dev_count() == 0)
    die(1, "no ggml backend could be loaded from %s (libggml-cpu-*.so)", KVEVICT_LLAMA_CPP_BINS);
}

static struct llama_model *load_model(const char *path) {
  FILE *probe = fopen(path, "rb");
  if (!probe) die(1, "cannot open %s: %s", path, strerror(errno));
  fclose(probe);
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  clear_errors();
  struct llama_model *model = llama_model_load_from_file(path, mp);
  if (!model) {
    char what[1200];
    snprintf(what, sizeof what, "llama.cpp cannot load %s", path);
    die_llama(what);
  }
  return model;
}

/* A context for prompt + tokens positions, one sequence; s->batch and
 * s->ubatch become what llama.cpp took (it cuts n_batch to the context and
 * n_ubatch to n_batch). */
static struct llama_context *make_context(struct llama_model *model, struct settings *s) {
  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)(s->prompt + s->tokens); /* llama.cpp rounds it up to its padding */
  cp.n_batch = (uint32_t)s->batch;
  cp.n_ubatch = (uint32_t)s->ubatch;
  cp.n_seq_max = 1;
  cp.n_threads = s->threads;
  cp.n_threads_batch = s->threads;
  cp.flash_attn_type = s->flash_attn;
  cp.type_k = s->type_k;
  cp.type_v = s->type_v;
  cp.no_perf = 1;
  clear_errors();
  flash_attn_seen = -1;
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die_llama("llama.cpp cannot make a context for the model");
  s->batch = (int)llama_n_batch(ctx);
  s->ubatch = (int)llama_n_ubatch(ctx);
  return ctx;
}

static const char *flash_attn_name(enum llama_flash_attn_type t) {
  /* the names --flash-attn takes (and llama.cpp's -fa) */
  return t == LLAMA_FLASH_ATTN_TYPE_AUTO ? "auto" : t == LLAMA_FLASH_ATTN_TYPE_ENABLED ? "on" : "off";
}

/* The CPU variant that ran: the one named, or the one the log said was loaded
 * (".../libggml-cpu-zen4.so" -> "zen4"); "" when neither. */
static void cpu_variant_name(const char *variant, char *out, size_t size) {
  out[0] = '\0';
  if (variant) {
    snprintf(out, size, "%s", variant);
    return;
  }
  if (!cpu_backend_path[0]) return;
  const char *slash = strrchr(cpu_backend_path, '/');
  const char *base = slash ? slash + 1 : cpu_backend_path;
  if (!strncmp(base, "libggml-cpu-", 12)) base += 12;
  snprintf(out, size, "%s", base);
  char *dot = strstr(out, ".so");
  if (dot) *dot = '\0';
}

static void print_settings(const struct options *o, struct llama_model *model, struct llama_context *ctx) {
  const struct settings *s = &o->s;
  char desc[256];
  llama_model_desc(model, desc, sizeof desc);
  const char *resolved = s->flash_attn != LLAMA_FLASH_ATTN_TYPE_AUTO ? flash_attn_name(s->flash_attn)
                         : flash_attn_seen == 1                      ? "on"
                         : flash_attn_seen == 0                      ? "off"
                                                                     : NULL;
  char variant[sizeof cpu_backend_path];
  cpu_variant_name(o->variant, variant, sizeof variant);
  printf("{\n  \"engine\": \"llama.cpp\",\n  \"model\": ");
  print_json_string(o->model);
  printf(",\n  \"modelDescription\": ");
  print_json_string(desc);
  printf(",\n  \"modelBytes\": %llu,\n  \"parameters\": %llu,\n", (unsigned long long)llama_model_size(model),
         (unsigned long long)llama_model_n_params(model));
  printf("  \"threads\": %d,\n  \"prompt\": %d,\n  \"tokens\": %d,\n  \"warmup\": %d,\n", s->threads, s->prompt,
         s->tokens, s->warmup);
  printf("  \"promptLogits\": \"%s\",\n", s->all_logits ? "all" : "last");
  printf("  \"context\": %u,\n  \"batch\": %d,\n  \"ubatch\": %d,\n", llama_n_ctx(ctx), s->batch, s->ubatch);
  printf("  \"cacheTypeK\": \"%s\",\n  \"cacheTypeV\": \"%s\",\n", cache_type_name(s->type_k),
         cache_type_name(s->type_v));
  printf("  \"flashAttn\": \"%s\",\n  \"flashAttnResolved\": ", flash_attn_name(s->flash_attn));
  if (resolved) printf("\"%s\"", resolved);
  else fputs("null", stdout);
  printf(",\n  \"cpuVariant\": ");
  if (variant[0]) print_json_string(variant);
  else fputs("null", stdout);
  printf(",\n  \"cpuFeatures\": ");
  print_cpu_features();
}

static void print_seconds(int counted, double seconds) {
  if (counted > 0) printf("%.6g", seconds);
  else fputs("null", stdout);
}

/* Each round, and the best round of each phase (the least disturbed by a
 * neighbour); the object's closing brace. */
static void print_rounds(const struct settings *s, const struct round_time *times) {
  double best_prefill = 0.0, best_decode = 0.0;
  printf(",\n  \"rounds\": [");
  for (int r = 0; r < s->rounds; ++r) {
    const struct round_time *t = &times[r];
    if (t->prefill > 0.0 && (best_prefill == 0.0 || t->prefill < best_prefill)) best_prefill = t->prefill;
    if (t->decode > 0.0 && (best_decode == 0.0 || t->decode < best_decode)) best_decode = t->decode;
    printf("%s\n    {\"prefillSeconds\": ", r ? "," : "");
    print_seconds(s->prompt, t->prefill);
    printf(", \"prefillTokensPerSecond\": ");
    print_rate(s->prompt, t->prefill);
    printf(", \"decodeSeconds\": ");
    print_seconds(s->tokens, t->decode);
    printf(", \"decodeTokensPerSecond\": ");
    print_rate(s->tokens, t->decode);
    putchar('}');
  }
  printf("\n  ],\n  \"best\": {\"prefillTokensPerSecond\": ");
  print_rate(s->prompt, best_prefill);
  printf(", \"decodeTokensPerSecond\": ");
  print_rate(s->tokens, best_decode);
  printf("}\n}\n");
}

int main(int argc, char **argv) {
  verbose = getenv("LLAMA_CPP_BENCH_VERBOSE") != NULL;
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    puts(usage_text);
    return argc < 2 ? 2 : 0;
  }
  struct options o;
  parse_args(argc, argv, &o);
  struct ids ids = load_ids(&o);

  llama_log_set(log_callback, NULL);
  ggml_log_set(log_callback, NULL);
  load_backends(o.variant);
  llama_backend_init();
  struct llama_model *model = load_model(o.model);
  int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
  for (size_t i = 0; i < (size_t)o.s.prompt + (size_t)o.s.tokens; ++i)
    if (ids.v[i] >= n_vocab)
      die(1, "token id %d (id %zu of the list) is outside the model's vocabulary of %d", ids.v[i], i, n_vocab);
  struct llama_context *ctx = make_context(model, &o.s);

  struct llama_batch batch = llama_batch_init(o.s.batch, 0, 1);
  float sink = 0.0f;
  for (int r = 0; r < o.s.warmup; ++r) (void)run_round(ctx, &batch, ids.v, &o.s, &sink);
  struct round_time *times = malloc((size_t)o.s.rounds * sizeof *times);
  if (!times) die(1, "out of memory");
  for (int r = 0; r < o.s.rounds; ++r) times[r] = run_round(ctx, &batch, ids.v, &o.s, &sink);

  print_settings(&o, model, ctx);
  print_rounds(&o.s, times);

  free(times);
  free(ids.v);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  if (fflush(stdout) != 0 || ferror(stdout)) die(1, "cannot write the result: %s", strerror(errno));
  return 0;
}
