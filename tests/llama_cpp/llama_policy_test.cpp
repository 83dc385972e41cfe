// kvevict's policies inside llama.cpp (src/llama/llama_policy.cpp) against
// kvevict's own decoder at sequence granularity (issue 53, item 4): on random
// GGUFs of each architecture (F32 weights; llama.cpp's F32 KV cache, flash
// attention off), every policy at two budgets, both engines read the same
// tokens; at every step they must hold the same positions, and their mean
// negative log-likelihood must agree within 1e-4 bits a token. A step where
// the held positions differ is counted and printed with the two engines'
// scores, so that a near-tie under llama.cpp's arithmetic can be told from a
// mapping error; the test allows none.
//
// The expected values come from the other engine, written separately: the
// decoder never calls llama.cpp, and the adapter sees nothing of the decoder.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <numbers>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ggml-backend.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/paged.h"
#include "kvevict/llama/llama_policy.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/decoder/model_text.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "llama.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

constexpr std::uint32_t kContext = 256;  // a multiple of llama.cpp's cell padding
constexpr std::size_t kTokens = 200;

void init_llama() {
  static const bool once = [] {
    llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    ggml_backend_load_all_from_path(KVEVICT_LLAMA_CPP_BINS);
    llama_backend_init();
    return true;
  }();
  (void)once;
}

fs::path scratch() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / fmt::format("kvevict-llama-policy-{}", ::getpid());
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

fs::path random_gguf(const std::string& arch) {
  RandomModelSpec s;
  s.architecture = arch;
  s.type = WeightType::kF32;
  s.layers = 2;
  s.width = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ff = 128;
  s.context = kContext;
  s.merges = 64;
  const std::vector<std::uint8_t> text = read_text(fs::path(KVEVICT_SOURCE_DIR) / "model" / "heldout-sample.txt");
  s.tokenizer_text.assign(text.begin(), text.begin() + 4000);
  const fs::path file = scratch() / (arch + ".gguf");
  if (!fs::exists(file)) write_random_model(s, file);
  return file;
}

double nll_bits(std::span<const float> logits, Token next) {
  double top = -INFINITY;
  for (const float x : logits) top = std::max(top, static_cast<double>(x));
  double sum = 0.0;
  for (const float x : logits) sum += std::exp(static_cast<double>(x) - top);
  return (std::log(sum) + top - static_cast<double>(logits[next])) / std::numbers::ln2;
}

// A context as exactly as llama.cpp computes (F32 caches, flash attention
// off), `sequences` sequences a token each a decode in one unified cache, its
// eval callback the slot's (the policy is built once llama.cpp says how many
// cells the context has).
llama_context* exact_context(llama_model* lm, LlamaPolicySlot& slot, std::uint32_t sequences) {
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = kContext;
  cp.n_batch = sequences;
  cp.n_ubatch = sequences;
  cp.n_seq_max = sequences;
  cp.kv_unified = true;
  cp.n_threads = 1;
  cp.n_threads_batch = 1;
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  cp.type_k = GGML_TYPE_F32;
  cp.type_v = GGML_TYPE_F32;
  cp.cb_eval = &LlamaPolicySlot::observe;
  cp.cb_eval_user_data = &slot;
  return llama_init_from_model(lm, cp);
}

struct Outcome {
  double bits = 0.0;          // summed over the predictions
  std::size_t differing = 0;  // steps whose held positions differ
  float worst_logit = 0.0F;   // the largest difference of a logit between the engines, any step
  std::uint64_t evicted = 0;  // by kvevict's decoder, every cache
};

Outcome compare_engines(const fs::path& file, const std::string& policy, std::int64_t budget) {
  init_llama();
  // kvevict's decoder, at sequence granularity.
  const std::shared_ptr<const Model> model = Model::load(file, ModelOptions{.context = kContext});
  const std::vector<std::uint8_t> text = read_text(fs::path(KVEVICT_SOURCE_DIR) / "model" / "heldout-sample.txt");
  std::vector<Token> tokens = sequence_tokens(*model, std::span<const std::uint8_t>(text).first(3000));
  tokens.resize(kTokens);
  Decoder decoder(model, DecoderOptions{.capacity = kContext, .threads = 1});
  PagedOptions sequence;
  sequence.set_granularity(Granularity::kSequence);
  DecoderPolicies policies(RunSpec{policy, {}, budget}, model->config(), sequence);
  policies.attach(decoder);

  // llama.cpp, kept by the adapter.
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* lm = llama_model_load_from_file(file.c_str(), mp);
  EXPECT_NE(lm, nullptr);
  LlamaPolicySlot hook;
  llama_context* ctx = exact_context(lm, hook, 1);
  EXPECT_NE(ctx, nullptr);
  LlamaPolicy adapter(llama_shape(lm), LlamaPolicyOptions{.policy = policy, .budget = budget,
                                                          .context = llama_n_ctx(ctx)});
  hook.policy = &adapter;
  llama_batch batch = llama_batch_init(1, 0, 1);

  Outcome out;
  double kvevict_bits = 0.0;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    const std::span<const float> want = decoder.step(tokens[t]);
    batch.n_tokens = 1;
    batch.token[0] = static_cast<llama_token>(tokens[t]);
    batch.pos[0] = static_cast<llama_pos>(t);
    batch.n_seq_id[0] = 1;
    batch.seq_id[0][0] = 0;
    batch.logits[0] = 1;
    EXPECT_EQ(llama_decode(ctx, batch), 0) << "step " << t;
    const std::int32_t seq = 0, pos = static_cast<std::int32_t>(t);
    adapter.after_decode(ctx, std::span<const std::int32_t>(&seq, 1), std::span<const std::int32_t>(&pos, 1));
    const std::span<const float> got(llama_get_logits_ith(ctx, 0), model->config().vocab);
    float worst = 0.0F;
    for (std::size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::abs(want[v] - got[v]));
    out.worst_logit = std::max(out.worst_logit, worst);
    if (t + 1 < tokens.size()) {
      kvevict_bits += nll_bits(want, tokens[t + 1]);
      out.bits += nll_bits(got, tokens[t + 1]);
    }
    if (!std::ranges::equal(decoder.held(0), adapter.held(0))) {
      if (out.differing++ < 3) {
        ADD_FAILURE() << fmt::format("{} at {}: step {}: kvevict holds {} positions, llama.cpp {}", policy, budget, t,
                                     decoder.held(0).size(), adapter.held(0).size());
      }
    }
  }
  out.evicted = decoder.evicted();
  const double predictions = static_cast<double>(tokens.size() - 1);
  EXPECT_NEAR(out.bits / predictions, kvevict_bits / predictions, 1e-4) << policy << " at " << budget;
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(lm);
  return out;
}

TEST(LlamaPolicy, EveryPolicyHoldsWhatKvevictsDecoderHoldsAtSequenceGranularity) {
  for (const std::string arch : {"llama", "qwen2", "mistral"}) {
    const fs::path file = random_gguf(arch);
    for (const PolicyInfo* info : policies()) {
      const std::string name(info->name);
      if (name == "expected-attention" || name == "pyramidkv") continue;  // refused below
      for (const std::int64_t budget : {48, 120}) {
        SCOPED_TRACE(fmt::format("{} {} at {}", arch, name, budget));
        const Outcome o = compare_engines(file, name, budget);
        EXPECT_EQ(o.differing, 0U);
        // The same cache in both: llama.cpp's arithmetic, not its cells, is
        // all that differs (a position llama.cpp still held would move the
        // logits by far more). And eviction happened: 200 tokens past the budget.
        EXPECT_LT(o.worst_logit, 1e-3F);
        EXPECT_EQ(o.evicted % (2 * 2), 0U);
        EXPECT_GE(o.evicted, std::uint64_t{2 * 2} * static_cast<std::uint64_t>(kTokens - budget));
      }
    }
  }
}

// Two sequences in one context (one unified cache, llama.cpp's kv_unified),
// each decode one token of each: every sequence held as its own kvevict
// decoder holds it, its victims removed from its own cells only.
TEST(LlamaPolicy, TwoSequencesInOneContextEachHoldWhatItsDecoderHolds) {
  init_llama();
  const fs::path file = random_gguf("llama");
  const std::shared_ptr<const Model> model = Model::load(file, ModelOptions{.context = kContext});
  const std::vector<std::uint8_t> text = read_text(fs::path(KVEVICT_SOURCE_DIR) / "model" / "heldout-sample.txt");
  const std::vector<Token> all = sequence_tokens(*model, std::span<const std::uint8_t>(text).first(6000));
  ASSERT_GE(all.size(), 2 * kTokens);
  const std::vector<std::vector<Token>> streams{{all.begin(), all.begin() + kTokens},
                                                {all.begin() + kTokens, all.begin() + 2 * kTokens}};
  const std::string name = "h2o";  // the adapter keeps every sequence with one policy
  PagedOptions sequence;
  sequence.set_granularity(Granularity::kSequence);
  std::vector<std::unique_ptr<Decoder>> decoders;
  std::vector<DecoderPolicies> policies;
  policies.reserve(2);
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* lm = llama_model_load_from_file(file.c_str(), mp);
  ASSERT_NE(lm, nullptr);
  for (int s = 0; s < 2; ++s) {
    decoders.push_back(std::make_unique<Decoder>(model, DecoderOptions{.capacity = kContext, .threads = 1}));
    policies.emplace_back(RunSpec{name, {}, 48}, model->config(), sequence);
    policies.back().attach(*decoders.back());
  }
  LlamaPolicySlot hook;
  llama_context* ctx = exact_context(lm, hook, 2);
  ASSERT_NE(ctx, nullptr);
  LlamaPolicy adapter(llama_shape(lm), LlamaPolicyOptions{.policy = name, .budget = 48, .sequences = 2,
                                                          .context = llama_n_ctx(ctx), .batch = 2});
  hook.policy = &adapter;
  llama_batch batch = llama_batch_init(2, 0, 1);
  std::size_t differing = 0;
  for (std::size_t t = 0; t < kTokens; ++t) {
    batch.n_tokens = 2;
    for (int s = 0; s < 2; ++s) {
      decoders[static_cast<std::size_t>(s)]->step(streams[static_cast<std::size_t>(s)][t]);
      batch.token[s] = static_cast<llama_token>(streams[static_cast<std::size_t>(s)][t]);
      batch.pos[s] = static_cast<llama_pos>(t);
      batch.n_seq_id[s] = 1;
      batch.seq_id[s][0] = s;
      batch.logits[s] = 1;
    }
    ASSERT_EQ(llama_decode(ctx, batch), 0) << "step " << t;
    const std::int32_t seqs[2] = {0, 1};
    const std::int32_t pos[2] = {static_cast<std::int32_t>(t), static_cast<std::int32_t>(t)};
    adapter.after_decode(ctx, seqs, pos);
    for (std::uint32_t s = 0; s < 2; ++s) {
      if (!std::ranges::equal(decoders[s]->held(0), adapter.held(s))) ++differing;
      const std::span<const float> want = decoders[s]->last_logits();
      const float* got = llama_get_logits_ith(ctx, static_cast<std::int32_t>(s));
      float worst = 0.0F;
      for (std::size_t v = 0; v < want.size(); ++v) worst = std::max(worst, std::abs(want[v] - got[v]));
      ASSERT_LT(worst, 1e-3F) << "sequence " << s << " step " << t;
    }
  }
  EXPECT_EQ(differing, 0U);
  EXPECT_GT(decoders[0]->evicted(), 0U);
  llama_batch_free(batch);
  llama_free(ctx);
  llama_model_free(lm);
}

TEST(LlamaPolicy, WhatTheGraphCannotGiveIsRefused) {
  const LlamaShape shape{.layers = 2, .heads = 4, .kv_heads = 2, .head_dim = 16};
  try {
    LlamaPolicy p(shape, LlamaPolicyOptions{.policy = "expected-attention", .budget = 32, .context = 256});
    ADD_FAILURE() << "expected-attention was accepted";
  } catch (const ParameterError& e) {
    EXPECT_EQ(std::string(e.what()),
              "llama: expected-attention needs the queries before RoPE, which llama.cpp's graph names alike before "
              "and after (Qcur); use a policy that reads attention or keys");
  }
  EXPECT_THROW(LlamaPolicy(shape, LlamaPolicyOptions{.policy = "pyramidkv", .budget = 32, .context = 256}),
               ParameterError);
  EXPECT_THROW(LlamaPolicy(shape, LlamaPolicyOptions{.policy = "h2o", .budget = 256, .context = 256}),
               ParameterError);
}

// The headers' release against the library's: the libraries installed here
// are the headers' own release (no throw), and any other is refused naming
// both. The versions to refuse are made up from the headers' own, so the
// test holds for whichever release the lock file pins.
TEST(LlamaPolicy, ALibraryOfAnotherReleaseIsRefused) {
  EXPECT_NO_THROW(check_llama_cpp_release());
  const std::string llama = KVEVICT_LLAMA_CPP_HEADERS_LLAMA, ggml = KVEVICT_LLAMA_CPP_HEADERS_GGML;
  EXPECT_NO_THROW(check_llama_cpp_release(llama, ggml));
  EXPECT_NO_THROW(check_llama_cpp_release(llama + "-dev", ggml));
  EXPECT_THROW(check_llama_cpp_release(llama + "1", ggml), InputError);  // 0.4.01 is not 0.4.0
  EXPECT_THROW(check_llama_cpp_release("9." + llama, ggml), InputError);
  EXPECT_THROW(check_llama_cpp_release(llama, ggml + ".1"), InputError);
  try {
    check_llama_cpp_release("0.0.1", ggml);
    ADD_FAILURE() << "another release was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "llama.cpp's library is llama 0.0.1 with ggml " + ggml + ", but this program was built against the "
              "headers of llama " + llama + " with ggml " + ggml + ": they must be one release (reinstall "
              "deps/llama-cpp from its lock file and rebuild)");
  }
}

}  // namespace
}  // namespace kvevict
