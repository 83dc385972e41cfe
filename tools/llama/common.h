// kvevict-llama's shared pieces: llama.cpp loaded quietly (its first error
// line kept for the refusal), a context for one run, the policies a command
// line names, and a token's negative log-likelihood as kvevict scores it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/llama/llama_policy.h"
#include "kvevict/model/vocab/vocab.h"
#include "llama.h"

namespace kvevict::llama_tool {

// What every subcommand takes about llama.cpp itself.
struct EngineArgs {
  std::string model, kv = "fp32";
  int threads = 1;
  bool flash = false;
};

// llama.cpp's backends and the model, loaded with its log kept quiet; freed
// with the object. Throws InputError with llama.cpp's own first error line
// when it refuses the file.
class LlamaModel {
 public:
  explicit LlamaModel(const std::string& path);
  ~LlamaModel();
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;
  llama_model* get() const noexcept { return model_; }

 private:
  llama_model* model_ = nullptr;
};

// A context of `cells` positions for one run, one token a decode; with
// `hook`, the eval callback goes to the slot (whose policy comes once the
// context says how many cells it has). Throws InputError when llama.cpp
// refuses.
struct ContextDeleter {
  void operator()(llama_context* ctx) const noexcept { llama_free(ctx); }
};
using Context = std::unique_ptr<llama_context, ContextDeleter>;
Context make_context(llama_model* model, std::uint32_t cells, const EngineArgs& a, LlamaPolicySlot* hook);

// One token decoded for sequence 0 at `pos`, its logits kept; throws
// InputError with llama.cpp's reason when it refuses.
void decode_one(llama_context* ctx, llama_batch& batch, Token token, llama_pos pos);

// The negative log-likelihood (nats) of `next` under the last decode's
// logits, computed in double as kvevict's scoring does.
double next_token_nll(llama_context* ctx, int vocab, Token next);

// Refuses a policy that reads the attention weights when flash attention is
// on (llama.cpp's graph then has no kq_soft_max), naming it.
void check_flash(const std::string& policy, bool flash);

// LlamaPolicyOptions for a spec at `cells`.
LlamaPolicyOptions policy_options(const RunSpec& spec, std::uint32_t cells, bool cache_positions = false);

}  // namespace kvevict::llama_tool
