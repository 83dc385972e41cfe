#include "common.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "ggml-backend.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict::llama_tool {

namespace {

// llama.cpp's log, kept quiet; its first error line since the call began
// (the most specific: "invalid magic characters", not the "failed to load
// model" that follows it) is passed on when it refuses.
std::string last_error;
void log_quietly(ggml_log_level level, const char* text, void*) {
  if (level == GGML_LOG_LEVEL_ERROR && last_error.empty()) {
    last_error = text;
    while (!last_error.empty() && (last_error.back() == '\n' || last_error.back() == ' ')) last_error.pop_back();
  }
}

ggml_type cache_type(const std::string& kv) {
  if (kv == "fp32") return GGML_TYPE_F32;
  if (kv == "fp16") return GGML_TYPE_F16;
  throw ParameterError(fmt::format("--kv-precision ({}) must be fp32 or fp16: llama.cpp's F32 or F16 cache "
                                   "(kvevict's int8 and int4 stores are not llama.cpp's quantized caches)",
                                   kv));
}

}  // namespace

LlamaModel::LlamaModel(const std::string& path) {
  check_llama_cpp_release();  // before llama.cpp reads any struct of ours
  llama_log_set(&log_quietly, nullptr);
  ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  last_error.clear();
  model_ = llama_model_load_from_file(path.c_str(), mp);
  if (model_ == nullptr) {
    llama_backend_free();
    throw InputError(fmt::format("llama.cpp cannot load {}: {}", path, last_error));
  }
}

LlamaModel::~LlamaModel() {
  llama_model_free(model_);
  llama_backend_free();
}

Context make_context(llama_model* model, std::uint32_t cells, const EngineArgs& a, LlamaPolicySlot* hook) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cells;
  cp.n_batch = 1;
  cp.n_ubatch = 1;
  cp.n_seq_max = 1;
  cp.n_threads = a.threads;
  cp.n_threads_batch = a.threads;
  cp.flash_attn_type = a.flash ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = cache_type(a.kv);
  cp.type_v = cp.type_k;
  cp.no_perf = true;
  if (hook != nullptr) {
    cp.cb_eval = &LlamaPolicySlot::observe;
    cp.cb_eval_user_data = hook;
  }
  last_error.clear();
  Context ctx(llama_init_from_model(model, cp));
  if (!ctx) throw InputError("llama.cpp cannot make a context for the model: " + last_error);
  return ctx;
}

void decode_one(llama_context* ctx, llama_batch& batch, Token token, llama_pos pos) {
  batch.n_tokens = 1;
  batch.token[0] = static_cast<llama_token>(token);
  batch.pos[0] = pos;
  batch.n_seq_id[0] = 1;
  batch.seq_id[0][0] = 0;
  batch.logits[0] = 1;
  last_error.clear();
  if (const int rc = llama_decode(ctx, batch); rc != 0) {
    throw InputError(fmt::format("llama_decode returned {} at position {}: {}", rc, pos, last_error));
  }
}

double next_token_nll(llama_context* ctx, int vocab, Token next) {
  const float* logits = llama_get_logits_ith(ctx, 0);
  double top = -INFINITY;
  for (int v = 0; v < vocab; ++v) top = std::max(top, static_cast<double>(logits[v]));
  double sum = 0.0;
  for (int v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(logits[v]) - top);
  return std::log(sum) + top - static_cast<double>(logits[next]);
}

void check_flash(const std::string& policy, bool flash) {
  const PolicyInfo& info = find_policy(policy);
  if ((info.signals & kSignalAttention) != 0 && flash) {
    throw ParameterError(fmt::format("{} reads the attention weights, which llama.cpp's graph shows only with flash "
                                     "attention off (kq_soft_max): leave out --flash-attn",
                                     info.name));
  }
}

LlamaPolicyOptions policy_options(const RunSpec& spec, std::uint32_t cells, bool cache_positions) {
  return LlamaPolicyOptions{.policy = spec.policy, .params = spec.params, .budget = spec.budget, .context = cells,
                            .cache_positions = cache_positions};
}

}  // namespace kvevict::llama_tool
