// A llama.cpp decode loop whose KV cache a kvevict policy keeps at a budget
// (docs/llama-cpp.md): the lines marked "kvevict" are all an engine adds.
// Built and run by the test suite (ctest llama_example) on
// model/kvevict-small.gguf:
//
//   llama_loop MODEL.gguf POLICY BUDGET TOKENS
//
// decodes TOKENS tokens (the model's own greedy continuation of BOS) and
// prints, after the last, how many positions the sequence holds and how many
// the policy removed.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "ggml-backend.h"
#include "kvevict/llama/llama_policy.h"  // kvevict
#include "llama.h"

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: llama_loop MODEL.gguf POLICY BUDGET TOKENS\n");
    return 2;
  }
  const int budget = std::atoi(argv[3]), tokens = std::atoi(argv[4]);
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (model == nullptr) return 1;

  // kvevict: the policy, and the context's eval callback pointing at it.
  // Flash attention off: the policy reads the attention weights.
  kvevict::LlamaPolicy policy(kvevict::llama_shape(model),
                              kvevict::LlamaPolicyOptions{.policy = argv[2], .budget = budget, .context = 512});
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 512;
  cp.n_batch = 1;
  cp.n_ubatch = 1;
  // One token a decode of a small model: one thread (llama.cpp's threads wait
  // for each other at every operation, which costs more than it saves here).
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.cb_eval = &kvevict::LlamaPolicy::observe;  // kvevict
  cp.cb_eval_user_data = &policy;               // kvevict
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr) return 1;

  const llama_vocab* vocab = llama_model_get_vocab(model);
  llama_token token = llama_vocab_bos(vocab);
  llama_batch batch = llama_batch_init(1, 0, 1);
  std::size_t removed = 0;
  for (int pos = 0; pos < tokens; ++pos) {
    batch.n_tokens = 1;
    batch.token[0] = token;
    batch.pos[0] = pos;
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    if (llama_decode(ctx, batch) != 0) return 1;
    const int seq = 0;
    policy.after_decode(ctx, {&seq, 1}, {&pos, 1});  // kvevict: steps the policy, llama_memory_seq_rm's its victims
    removed += policy.victims(0).size();
    const float* logits = llama_get_logits_ith(ctx, 0);
    token = 0;
    for (llama_token v = 1; v < llama_vocab_n_tokens(vocab); ++v) token = logits[v] > logits[token] ? v : token;
  }
  std::printf("held %zu removed %zu\n", policy.held(0).size(), removed);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(model);
  llama_backend_free();
  return 0;
}
