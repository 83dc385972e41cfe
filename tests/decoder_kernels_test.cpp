// The decoder's batched passes: a prefill (a prompt's chunk through each
// layer at once) and step_together (many decoders on one pass) against
// step() one token and one decoder at a time. The weight kernels promise the
// same bits (matmul.h), and so do kvevict-tiny's Eigen products, one vector
// at a time: every logit, every held position, every eviction must agree.
// The suite's name puts it in the simd_<target> runs (each target's kernels).
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/eval/evaluate.h"
#include "kvevict/model/decoder_policies.h"
#include "kvevict/model/model.h"
#include "kvevict/model/model_writer.h"
#include "kvevict/model/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  const fs::path dir = fs::temp_directory_path() /
                       ("kvevict-kernels-test-" + std::to_string(::getpid()) + "-" +
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::shared_ptr<const Model> random_model(const std::string& arch, WeightType type, std::uint32_t width,
                                          const fs::path& dir) {
  RandomModelSpec s;
  s.architecture = arch;
  s.type = type;
  s.layers = 2;
  s.width = width;
  s.heads = 4;
  s.kv_heads = 2;
  s.ff = 2 * width;
  s.context = 96;
  s.merges = 64;
  const std::vector<std::uint8_t> text = testing::heldout_prefix(4000);
  s.tokenizer_text.assign(text.begin(), text.end());
  const fs::path file = dir / (arch + "-" + std::string(weight_type_info(type).name) + ".gguf");
  write_random_model(s, file);
  return Model::load(file);
}

std::shared_ptr<const Model> tiny() {
  return Model::load(fs::path(KVEVICT_SOURCE_DIR) / "model" / "kvevict-tiny.kvm", ModelOptions{.context = 96});
}

std::vector<Token> tokens_for(const Model& model, std::size_t n) {
  std::vector<Token> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<Token>((i * 37 + 11) % model.config().vocab));
  return t;
}

struct PolicySetup {
  const char* label;
  std::optional<RunSpec> spec;  // none: the full cache
  PositionMode positions = PositionMode::kOriginal;
  std::uint32_t block_size = 0;
};

std::vector<PolicySetup> setups() {
  std::vector<PolicySetup> s;
  s.push_back({"full cache", std::nullopt});
  s.push_back({"h2o 12", RunSpec{"h2o", {{"recentWindow", 4}}, 12}});
  s.push_back({"sliding window 10, by index", RunSpec{"sliding-window", {}, 10}, PositionMode::kCache});
  s.push_back({"expected attention 16", RunSpec{"expected-attention", {{"sinks", 2}, {"queryWindow", 8}}, 16}});
  s.push_back({"tova 12, paged", RunSpec{"tova", {}, 12}, PositionMode::kOriginal, 4});
  return s;
}

struct DecodeRun {
  std::unique_ptr<Decoder> decoder;
  DecoderPolicies policies;
};

DecodeRun make_run(const std::shared_ptr<const Model>& model, const PolicySetup& s, std::uint32_t chunk) {
  DecoderOptions o;
  o.positions = s.positions;
  o.block_size = s.block_size;
  o.prefill_chunk = chunk;
  o.threads = 2;
  DecodeRun r;
  r.decoder = std::make_unique<Decoder>(model, o);
  if (s.spec) {
    r.policies = DecoderPolicies(*s.spec, model->config(), PagedOptions{});
    r.policies.attach(*r.decoder);
  }
  return r;
}

void expect_same_caches(const Decoder& a, const Decoder& b, const std::string& where) {
  ASSERT_EQ(a.position(), b.position()) << where;
  ASSERT_EQ(a.evicted(), b.evicted()) << where;
  for (std::uint32_t h = 0; h < a.config().head_count(); ++h) {
    const auto ha = a.held(h);
    const auto hb = b.held(h);
    ASSERT_EQ(std::vector<Position>(ha.begin(), ha.end()), std::vector<Position>(hb.begin(), hb.end()))
        << where << " cache " << h;
  }
}

void check_prefill(const std::shared_ptr<const Model>& model, const std::string& name) {
  const std::vector<Token> tokens = tokens_for(*model, 60);
  for (const PolicySetup& s : setups()) {
    const std::string where = name + ", " + s.label;
    DecodeRun one = make_run(model, s, 1);
    DecodeRun chunked = make_run(model, s, 7);
    std::vector<float> expected;
    for (const Token t : tokens) {
      const auto l = one.decoder->step(t);
      expected.insert(expected.end(), l.begin(), l.end());
    }
    const std::size_t vocab = model->config().vocab;
    for (std::size_t at = 0; at < tokens.size(); at += 7) {
      const std::size_t n = std::min<std::size_t>(7, tokens.size() - at);
      const auto rows = chunked.decoder->prefill(std::span<const Token>(tokens).subspan(at, n));
      ASSERT_EQ(rows.size(), n * vocab) << where;
      for (std::size_t j = 0; j < rows.size(); ++j) {
        ASSERT_EQ(rows[j], expected[at * vocab + j]) << where << ": token " << at + j / vocab << " logit " << j % vocab;
      }
      const auto last = chunked.decoder->last_logits();
      ASSERT_EQ(std::vector<float>(last.begin(), last.end()),
                std::vector<float>(rows.end() - static_cast<std::ptrdiff_t>(vocab), rows.end()))
          << where;
    }
    expect_same_caches(*one.decoder, *chunked.decoder, where);
    // And decoding goes on from there alike.
    const Token next = tokens[3];
    const auto a = one.decoder->step(next);
    const std::vector<float> va(a.begin(), a.end());
    const auto b = chunked.decoder->step(next);
    EXPECT_EQ(va, std::vector<float>(b.begin(), b.end())) << where;
  }
}

TEST(WeightKernelsDecoder, APrefillGivesEachTokensLogitsAsStepsDo) {
  const fs::path dir = scratch();
  check_prefill(random_model("llama", WeightType::kQ8_0, 64, dir), "llama Q8_0");
  check_prefill(random_model("qwen2", WeightType::kF16, 64, dir), "qwen2 F16");
  check_prefill(random_model("mistral", WeightType::kQ4_K, 256, dir), "mistral Q4_K");
  fs::remove_all(dir);
}

TEST(WeightKernelsDecoder, TheTinyModelsPrefillKeepsItsArithmetic) {
  const auto model = tiny();
  EXPECT_FALSE(model->uses_kernels());
  check_prefill(model, "kvevict-tiny");
}

TEST(WeightKernelsDecoder, StepTogetherIsEachDecoderStepAlone) {
  const fs::path dir = scratch();
  for (const auto& model : {random_model("llama", WeightType::kF16, 64, dir), tiny()}) {
    const std::vector<Token> tokens = tokens_for(*model, 50);
    std::vector<DecodeRun> alone;
    std::vector<DecodeRun> together;
    for (const PolicySetup& s : setups()) {
      alone.push_back(make_run(model, s, 1));
      together.push_back(make_run(model, s, 1));
    }
    std::vector<Decoder*> group;
    for (DecodeRun& r : together) group.push_back(r.decoder.get());
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      // Each run its own token, as sequences in a batch; the first half the same token.
      std::vector<Token> step_tokens;
      for (std::size_t i = 0; i < group.size(); ++i) step_tokens.push_back(tokens[(t + (t < 25 ? 0 : i)) % tokens.size()]);
      Decoder::step_together(group, step_tokens);
      for (std::size_t i = 0; i < group.size(); ++i) {
        const auto a = alone[i].decoder->step(step_tokens[i]);
        const std::vector<float> va(a.begin(), a.end());
        const auto b = group[i]->last_logits();
        ASSERT_EQ(va, std::vector<float>(b.begin(), b.end()))
            << model->config().architecture << ", " << setups()[i].label << ", token " << t;
      }
    }
    for (std::size_t i = 0; i < group.size(); ++i) {
      expect_same_caches(*alone[i].decoder, *group[i], setups()[i].label);
    }
  }
  fs::remove_all(dir);
}

TEST(WeightKernelsDecoder, APrefillPastTheChunkOrTheCapacityIsRefusedChangingNothing) {
  const auto model = tiny();
  Decoder decoder(model, DecoderOptions{.capacity = 10, .prefill_chunk = 8});
  const std::vector<Token> tokens = tokens_for(*model, 9);
  testing::expect_error<InputError>([&] { decoder.prefill(tokens); },
                                            "decoder: a prefill of 9 tokens is over the chunk of 8 "
                                            "(DecoderOptions::prefill_chunk)");
  decoder.prefill(std::span<const Token>(tokens).first(6));
  testing::expect_error<InputError>(
      [&] { decoder.prefill(std::span<const Token>(tokens).first(5)); },
      "decoder: position 10 is past the capacity of 10 positions (cache 0 is full: a cache without a policy, or "
      "with a budget of the capacity or more, ends there)");
  EXPECT_EQ(decoder.position(), 6U);
  decoder.prefill(std::span<const Token>(tokens).first(4));  // exactly to the capacity
  EXPECT_EQ(decoder.position(), 10U);
}

TEST(WeightKernelsDecoder, StepTogetherRefusesWhatCannotBeOnePass) {
  const fs::path dir = scratch();
  const auto model = tiny();
  const auto other = random_model("llama", WeightType::kF32, 64, dir);
  Decoder a(model);
  Decoder b(model);
  Decoder c(other);
  const std::vector<Token> two = {1, 2};
  std::vector<Decoder*> same = {&a, &a};
  testing::expect_error<ContractError>([&] { Decoder::step_together(same, two); },
                                               "step_together: decoders 0 and 1 are one");
  std::vector<Decoder*> mixed = {&a, &c};
  testing::expect_error<ContractError>([&] { Decoder::step_together(mixed, two); },
                                               "step_together: decoder 1 runs another model than decoder 0");
  std::vector<Decoder*> pair = {&a, &b};
  const std::vector<Token> bad = {1, 999};
  testing::expect_error<InputError>(
      [&] { Decoder::step_together(pair, bad); },
      "decoder 1: token 999 at position 0 is outside the model's vocabulary of 256");
  EXPECT_EQ(a.position(), 0U);  // checked before anything moved
  fs::remove_all(dir);
}

// Perplexity on a model on the weight kernels steps each window's runs
// together (ModelRunOptions::together): every row must be what the runs give
// one at a time, to the bit -- decode-time eviction, a paged store, and a
// prefill's compression alike.
TEST(WeightKernelsDecoder, PerplexityRowsAreTheRunsOneAtATime) {
  const fs::path dir = scratch();
  const auto model = random_model("llama", WeightType::kQ8_0, 64, dir);
  const std::vector<std::uint8_t> text = testing::heldout_prefix(700);
  const std::vector<RunSpec> specs = {{"h2o", {{"recentWindow", 4}}, 24},
                                      {"tova", {}, 24},
                                      {"sliding-window", {}, 16},
                                      {"expected-attention", {{"sinks", 2}, {"queryWindow", 8}}, 24},
                                      {"snapkv", {{"obsWindow", 4}, {"recentWindow", 4}}, 32}};
  ModelRunOptions decode;
  decode.max_windows = 3;
  ModelRunOptions paged = decode;
  paged.paged.block_size = 8;
  ModelRunOptions prefill = decode;
  prefill.prefill = 40;
  prefill.prefill_window = 8;
  for (const auto& [label, options] : {std::pair<const char*, ModelRunOptions>{"decode", decode},
                                       {"paged", paged},
                                       {"prefill", prefill}}) {
    ModelRunOptions alone = options;
    alone.together = false;
    const std::vector<PerplexityRow> a = perplexity(*model, text, specs, alone);
    const std::vector<PerplexityRow> b = perplexity(*model, text, specs, options);
    ASSERT_EQ(a.size(), specs.size() + 1) << label;
    ASSERT_EQ(b.size(), a.size()) << label;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].bits_per_byte, b[i].bits_per_byte) << label << " row " << i;
      EXPECT_EQ(a[i].perplexity, b[i].perplexity) << label << " row " << i;
      EXPECT_EQ(a[i].extra_bits_per_byte, b[i].extra_bits_per_byte) << label << " row " << i;
      EXPECT_EQ(a[i].evicted, b[i].evicted) << label << " row " << i;
      EXPECT_EQ(a[i].predictions, b[i].predictions) << label << " row " << i;
      EXPECT_EQ(a[i].peak_blocks, b[i].peak_blocks) << label << " row " << i;
      EXPECT_EQ(a[i].peak_positions, b[i].peak_positions) << label << " row " << i;
    }
    EXPECT_GT(a.back().evicted + a[1].evicted, 0U) << label << ": the policies must evict for the test to mean anything";
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvevict
