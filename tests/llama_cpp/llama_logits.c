/* llama_logits: llama.cpp's next-token logits (and token ids) for a GGUF file,
 * for tests/model/llama_cpp_agreement_test.py, which compares them with
 * `kvevict logits` (and `kvevict tokenize`) on the same files.
 *
 *   llama_logits MODEL.gguf --tokens ID,ID,... --out FILE.npy [--threads N]
 *       feeds the ids as given (no BOS added) in one batch at positions 0..n-1
 *       and writes the logits after every one of them as a float32 .npy of
 *       shape [n, vocab]. The context computes as exactly as llama.cpp can:
 *       F32 K and V caches (its default is F16), flash attention off, one
 *       sequence, every position in one ubatch.
 *   llama_logits MODEL.gguf --tokenize TEXT [--no-bos]
 *   llama_logits MODEL.gguf --tokenize-file PATH [--no-bos]
 *       prints llama.cpp's token ids for the text (BOS first when the vocabulary
 *       asks for one, unless --no-bos), comma-separated on one line. Special
 *       tokens' text is not parsed (llama-tokenize's default).
 *   llama_logits MODEL.gguf --dequantize OUT.gguf
 *       writes llama.cpp's own F32 dequantization of every tensor
 *       (llama_model_quantize to ALL_F32), so a quantized file's weights can be
 *       compared apart from llama.cpp's 8-bit rounding of the activations.
 *
 * Exit status: 0 done; 2 bad arguments; 1 llama.cpp refused the model or a
 * step failed. Either way the reason is one line on stderr,
 * "llama_logits: error: ...", with llama.cpp's own last error message when it
 * logged one. llama.cpp's other log lines are hidden unless
 * LLAMA_LOGITS_VERBOSE is set.
 *
 * The CPU backends (libggml-cpu-*.so, one per microarchitecture) are loaded
 * from KVEVICT_LLAMA_CPP_BINS, the folder of node-llama-cpp's prebuilt
 * libraries (cmake/LlamaCpp.cmake defines it), before llama_backend_init().
 */
#define _POSIX_C_SOURCE 200809L /* strdup */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml-backend.h"
#include "llama.h"

#ifndef KVEVICT_LLAMA_CPP_BINS
#error "KVEVICT_LLAMA_CPP_BINS (the folder holding libggml-cpu-*.so) must be defined"
#endif

static const char *usage_text =
    "usage: llama_logits MODEL.gguf --tokens ID,ID,... --out FILE.npy [--threads N]\n"
    "       llama_logits MODEL.gguf --tokenize TEXT [--no-bos]\n"
    "       llama_logits MODEL.gguf --tokenize-file PATH [--no-bos]\n"
    "       llama_logits MODEL.gguf --dequantize OUT.gguf";

/* llama.cpp's first error since the step began (with its continuation lines):
 * the most specific one ("invalid magic characters", "tensor ... data is not
 * within the file bounds"); the ones after it only say that loading failed. */
static char first_error[1024];
static int in_error; /* 1 while the first error's continuation lines come */
static int verbose;

static void log_callback(enum ggml_log_level level, const char *text, void *user) {
  (void)user;
  if (verbose) fputs(text, stderr);
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
  fputs("llama_logits: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  exit(code);
}

/* A failure of llama.cpp's: what we tried, and its own reason when it gave one. */
static void die_llama(const char *what) {
  const char *why = reason();
  if (*why)
    die(1, "%s: %s", what, why);
  die(1, "%s (llama.cpp gave no reason; LLAMA_LOGITS_VERBOSE=1 shows its log)", what);
}

static int parse_int(const char *s, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi) return 0;
  *out = v;
  return 1;
}

/* "1,2,3" -> ids; exits 2 on anything else. */
static llama_token *parse_tokens(const char *list, int *n_out) {
  size_t cap = 1;
  for (const char *p = list; *p; ++p) cap += *p == ',';
  llama_token *ids = malloc(cap * sizeof *ids);
  if (!ids) die(1, "out of memory");
  char *copy = strdup(list);
  if (!copy) die(1, "out of memory");
  int n = 0;
  const char *item = copy;
  /* strtok would skip empty items; walk by hand so "1,,2" is refused */
  for (char *p = copy;; ++p) {
    if (*p == ',' || *p == '\0') {
      int last = *p == '\0';
      *p = '\0';
      long v;
      if (!parse_int(item, 0, INT32_MAX, &v))
        die(2, "--tokens: '%s' is not a token id (non-negative integers, comma-separated)", item);
      ids[n++] = (llama_token)v;
      if (last) break;
      item = p + 1;
    }
  }
  free(copy);
  *n_out = n;
  return ids;
}

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) die(1, "cannot open %s: %s", path, strerror(errno));
  size_t cap = 1 << 16, n = 0;
  char *buf = malloc(cap);
  if (!buf) die(1, "out of memory");
  for (;;) {
    if (n == cap) {
      cap *= 2;
      buf = realloc(buf, cap);
      if (!buf) die(1, "out of memory");
    }
    size_t got = fread(buf + n, 1, cap - n, f);
    n += got;
    if (got == 0) break;
  }
  if (ferror(f)) die(1, "cannot read %s", path);
  fclose(f);
  *len = n;
  return buf;
}

/* A float32 C-order .npy, format 1.0, header padded to 64 bytes. */
static void write_npy(const char *path, const float *data, int rows, int cols) {
  char header[128];
  int len = snprintf(header, sizeof header, "{'descr': '<f4', 'fortran_order': False, 'shape': (%d, %d), }", rows,
                     cols);
  int total = 10 + len + 1;
  int pad = (64 - total % 64) % 64;
  FILE *f = fopen(path, "wb");
  if (!f) die(1, "cannot write %s: %s", path, strerror(errno));
  unsigned short hlen = (unsigned short)(len + pad + 1);
  unsigned char magic[10] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0, (unsigned char)(hlen & 0xff),
                             (unsigned char)(hlen >> 8)};
  int ok = fwrite(magic, 1, 10, f) == 10 && fwrite(header, 1, (size_t)len, f) == (size_t)len;
  for (int i = 0; ok && i < pad; ++i) ok = fputc(' ', f) != EOF;
  ok = ok && fputc('\n', f) != EOF;
  ok = ok && fwrite(data, sizeof(float), (size_t)rows * (size_t)cols, f) == (size_t)rows * (size_t)cols;
  if (fclose(f) != 0) ok = 0;
  if (!ok) die(1, "cannot write %s: %s", path, strerror(errno));
}

static struct llama_model *load(const char *path, int vocab_only) {
  FILE *f = fopen(path, "rb");
  if (!f) die(1, "cannot open %s: %s", path, strerror(errno));
  fclose(f);
  struct llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  mp.vocab_only = vocab_only;
  clear_errors();
  struct llama_model *model = llama_model_load_from_file(path, mp);
  if (!model) {
    char what[4200];
    snprintf(what, sizeof what, "llama.cpp cannot load %s", path);
    die_llama(what);
  }
  return model;
}

static void tokenize(const char *model_path, const char *text, size_t len, int add_bos) {
  if (len > INT32_MAX) die(1, "the text is too long for llama_tokenize (%zu bytes)", len);
  struct llama_model *model = load(model_path, 1);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  int32_t n = llama_tokenize(vocab, text, (int32_t)len, NULL, 0, add_bos, 0);
  if (n == INT32_MIN) die(1, "llama_tokenize: too many tokens");
  if (n < 0) n = -n;
  llama_token *ids = malloc(((size_t)n + 1) * sizeof *ids);
  if (!ids) die(1, "out of memory");
  clear_errors();
  int32_t got = llama_tokenize(vocab, text, (int32_t)len, ids, n + 1, add_bos, 0);
  if (got < 0) die_llama("llama_tokenize failed");
  for (int32_t i = 0; i < got; ++i) printf(i ? ",%d" : "%d", ids[i]);
  putchar('\n');
  free(ids);
  llama_model_free(model);
}

static void logits(const char *model_path, const char *token_list, const char *out, int threads) {
  int n;
  llama_token *ids = parse_tokens(token_list, &n);
  struct llama_model *model = load(model_path, 0);
  const struct llama_vocab *vocab = llama_model_get_vocab(model);
  int n_vocab = llama_vocab_n_tokens(vocab);
  for (int i = 0; i < n; ++i)
    if (ids[i] >= n_vocab) die(2, "--tokens: id %d (token %d) is outside the vocabulary of %d", ids[i], i, n_vocab);

  struct llama_context_params cp = llama_context_default_params();
  cp.n_ctx = (uint32_t)n;  /* llama.cpp rounds it up to its padding */
  cp.n_batch = (uint32_t)n;
  cp.n_ubatch = (uint32_t)n;
  cp.n_seq_max = 1;
  cp.n_threads = threads;
  cp.n_threads_batch = threads;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.no_perf = 1;
  clear_errors();
  struct llama_context *ctx = llama_init_from_model(model, cp);
  if (!ctx) die_llama("llama.cpp cannot make a context for the model");

  struct llama_batch batch = llama_batch_init(n, 0, 1);
  for (int i = 0; i < n; ++i) {
    batch.token[i] = ids[i];
    batch.pos[i] = i;
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = n;
  clear_errors();
  int rc = llama_decode(ctx, batch);
  if (rc != 0) {
    char what[64];
    snprintf(what, sizeof what, "llama_decode returned %d", rc);
    die_llama(what);
  }
  float *all = malloc((size_t)n * (size_t)n_vocab * sizeof *all);
  if (!all) die(1, "out of memory");
  for (int i = 0; i < n; ++i) {
    const float *row = llama_get_logits_ith(ctx, i);
    if (!row) die_llama("llama_get_logits_ith gave no logits");
    memcpy(all + (size_t)i * (size_t)n_vocab, row, (size_t)n_vocab * sizeof *row);
  }
  write_npy(out, all, n, n_vocab);
  free(all);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  free(ids);
}

static void dequantize(const char *in, const char *out) {
  FILE *f = fopen(in, "rb");
  if (!f) die(1, "cannot open %s: %s", in, strerror(errno));
  fclose(f);
  struct llama_model_quantize_params qp = llama_model_quantize_default_params();
  qp.nthread = 1;
  qp.ftype = LLAMA_FTYPE_ALL_F32;
  qp.output_tensor_type = GGML_TYPE_F32;
  qp.token_embedding_type = GGML_TYPE_F32;
  qp.allow_requantize = 1;
  qp.quantize_output_tensor = 1;
  qp.pure = 1;
  clear_errors();
  if (llama_model_quantize(in, out, &qp) != 0) die_llama("llama_model_quantize to F32 failed");
}

int main(int argc, char **argv) {
  verbose = getenv("LLAMA_LOGITS_VERBOSE") != NULL;
  if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
    puts(usage_text);
    return argc < 2 ? 2 : 0;
  }
  const char *model = argv[1];
  const char *tokens = NULL, *out = NULL, *text = NULL, *text_file = NULL, *dequant_out = NULL;
  int add_bos = 1;
  long threads = 1;
  for (int i = 2; i < argc; ++i) {
    const char *a = argv[i];
    int has_value = i + 1 < argc;
    if (strcmp(a, "--no-bos") == 0) {
      add_bos = 0;
      continue;
    }
    if (strcmp(a, "--tokens") && strcmp(a, "--out") && strcmp(a, "--threads") && strcmp(a, "--tokenize") &&
        strcmp(a, "--tokenize-file") && strcmp(a, "--dequantize"))
      die(2, "unknown argument '%s' (llama_logits --help shows the usage)", a);
    if (!has_value) die(2, "%s needs a value", a);
    const char *v = argv[++i];
    if (!strcmp(a, "--tokens")) tokens = v;
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--tokenize")) text = v;
    else if (!strcmp(a, "--tokenize-file")) text_file = v;
    else if (!strcmp(a, "--dequantize")) dequant_out = v;
    else if (!parse_int(v, 1, 256, &threads)) die(2, "--threads: '%s' is not a number from 1 to 256", v);
  }
  int modes = (tokens != NULL) + (text != NULL) + (text_file != NULL) + (dequant_out != NULL);
  if (modes != 1)
    die(2, "give exactly one of --tokens, --tokenize, --tokenize-file, --dequantize (%s)",
        modes ? "more than one given" : "none given");
  if (tokens && !out) die(2, "--tokens needs --out FILE.npy");
  if (!tokens && out) die(2, "--out goes with --tokens");
  if (!text && !text_file && !add_bos) die(2, "--no-bos goes with --tokenize or --tokenize-file");

  llama_log_set(log_callback, NULL);
  ggml_log_set(log_callback, NULL);
  ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  if (ggml_backend_dev_count() == 0)
    die(1, "no ggml backend could be loaded from %s (libggml-cpu-*.so)", KVEVICT_LLAMA_CPP_BINS);
  llama_backend_init();

  if (tokens) {
    logits(model, tokens, out, (int)threads);
  } else if (dequant_out) {
    dequantize(model, dequant_out);
  } else if (text) {
    tokenize(model, text, strlen(text), add_bos);
  } else {
    size_t len;
    char *buf = read_file(text_file, &len);
    tokenize(model, buf, len, add_bos);
    free(buf);
  }
  llama_backend_free();
  return 0;
}
