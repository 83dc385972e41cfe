// The decoder at sequence granularity (Decoder::set_sequence_budget;
// DecoderPolicies with PagedOptions::sequence_budget; docs/paged.md,
// "Granularity"): every cache of a sequence holds the same positions, one
// victim set a step, as llama.cpp's cells force.
//
// The expectations come from outside the decoder's own eviction code: a
// replay through the decoder's public API (a decoder without policies, the
// same SequenceBudget stepped by hand from attention(h), victims removed
// with drop()), the decoder's step-by-step run for prefill and
// step_together, SequenceBudget's one-cache rule (it decides as the policy),
// and policies that evict by position alone (the same victims in every
// cache, so every granularity is one run). Counts are derived from the
// model's configuration and the budget, never measured.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "alloc_counter.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/sequence_budget.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/arch/model_writer.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/eviction/decoder_policies.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

namespace fs = std::filesystem;

std::shared_ptr<const Model> tiny() {
  static const std::shared_ptr<const Model> model = testing::committed_model();
  return model;
}

// A random Llama-architecture GGUF (F32 weights): `layers` x `kv_heads` caches.
std::shared_ptr<const Model> random_llama(std::uint32_t layers, std::uint32_t kv_heads, const std::string& name) {
  RandomModelSpec s;
  s.architecture = "llama";
  s.type = WeightType::kF32;
  s.layers = layers;
  s.width = 64;
  s.heads = 4;
  s.kv_heads = kv_heads;
  s.ff = 128;
  s.context = 128;
  s.merges = 64;
  const std::vector<std::uint8_t> text = testing::heldout_prefix(4000);
  s.tokenizer_text.assign(text.begin(), text.end());
  // One folder for the process's models (Model::load maps the file).
  static const testing::ScratchFolder dir("kvevict-sequence-decoder");
  const fs::path file = dir / (name + ".gguf");
  write_random_model(s, file);
  return Model::load(file);
}

std::vector<Token> text_tokens(const Model& model, std::size_t n) {
  const std::vector<std::uint8_t> text = testing::heldout_prefix(4 * n + 64);
  std::vector<Token> t;
  for (std::size_t i = 0; i < n; ++i) t.push_back(static_cast<Token>(text[i] % model.config().vocab));
  return t;
}

PagedOptions sequence_granularity() {
  PagedOptions p;
  p.set_granularity(Granularity::kSequence);
  return p;
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// After every step every cache holds the same positions, at most the budget
// once eviction is due; a policy that evicts one position a step past the
// budget removes exactly (steps past the budget) x caches in all.
TEST(SequenceDecoder, EveryCacheHoldsTheSamePositionsWithinTheBudget) {
  const auto model = tiny();
  const std::uint32_t caches = model->config().head_count();
  const std::vector<Token> tokens = text_tokens(*model, 120);
  constexpr std::int64_t kBudget = 40;
  for (const char* name : {"h2o", "tova", "scissorhands", "snapkv", "knorm", "keydiff", "expected-attention",
                           "sliding-window", "streaming-llm"}) {
    SCOPED_TRACE(name);
    Decoder d(model, 128);
    DecoderPolicies policies(RunSpec{name, {}, kBudget}, model->config(), sequence_granularity());
    policies.attach(d);
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      d.step(tokens[t]);
      const std::span<const Position> first = d.held(0);
      for (std::uint32_t h = 1; h < caches; ++h) {
        ASSERT_TRUE(std::equal(first.begin(), first.end(), d.held(h).begin(), d.held(h).end()))
            << "cache " << h << " at step " << t;
      }
      ASSERT_LE(static_cast<std::int64_t>(first.size()), kBudget) << "step " << t;
    }
    if (std::string(name) != "scissorhands") {  // Scissorhands drops several at once
      EXPECT_EQ(d.evicted(), std::uint64_t{caches} * (tokens.size() - kBudget));
    }
  }
}

// The decoder's own sequence eviction against the same SequenceBudget driven
// through the public API from outside: a decoder with no policy, each cache's
// attention over the positions it held before the token given to the budget,
// its victims dropped from every cache. The logits and held positions must
// match to the bit at every step.
TEST(SequenceDecoder, TheDecoderDecidesAsAReplayThroughThePublicApi) {
  const auto model = random_llama(2, 2, "replay");
  const ModelConfig& c = model->config();
  const std::vector<Token> tokens = text_tokens(*model, 100);
  constexpr std::int64_t kBudget = 48;
  for (const char* name : {"h2o", "tova", "scissorhands"}) {
    SCOPED_TRACE(name);
    Decoder inside(model, 128);
    DecoderPolicies policies(RunSpec{name, {}, kBudget}, c, sequence_granularity());
    policies.attach(inside);
    Decoder outside(model, 128);
    SequenceBudget by_hand(name, ParamMap{}, SequenceBudgetParams{.caches = c.head_count(), .budget = kBudget, .keep_newest = true});
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      const std::span<const float> want = inside.step(tokens[t]);
      outside.step(tokens[t]);
      for (std::uint32_t h = 0; h < c.head_count(); ++h) {
        const std::span<const float> w = outside.attention(h);
        const StepInputs in{.attention = w.first(w.size() - 1)};  // the held positions, not the token itself
        if (t == 0) {
          by_hand.on_origin(h, in);
        } else {
          by_hand.on_step(h, static_cast<std::int64_t>(t), in);
        }
      }
      if (t > 0 && static_cast<std::int64_t>(by_hand.kept_count()) > kBudget) {
        const std::span<const Position> chosen = by_hand.evict(kBudget);
        const std::vector<Position> victims(chosen.begin(), chosen.end());
        for (std::uint32_t h = 0; h < c.head_count(); ++h) outside.drop(h, victims);
      }
      ASSERT_TRUE(same_bits(want, outside.last_logits())) << "step " << t;
      for (std::uint32_t h = 0; h < c.head_count(); ++h) {
        ASSERT_TRUE(std::ranges::equal(inside.held(h), outside.held(h))) << "cache " << h << " step " << t;
      }
    }
  }
}

// A prefill at sequence granularity takes its tokens one at a time (each
// token's eviction before the next token's first layer): the same logits,
// held positions and evictions as step() on each in turn.
TEST(SequenceDecoder, PrefillIsStepByStepToTheBit) {
  for (const auto& model : {tiny(), random_llama(2, 2, "prefill")}) {
    const ModelConfig& c = model->config();
    const std::vector<Token> tokens = text_tokens(*model, 90);
    Decoder chunked(model, DecoderOptions{.capacity = 96, .prefill_chunk = 32});
    Decoder single(model, 96);
    DecoderPolicies a(RunSpec{"tova", {}, 20}, c, sequence_granularity());
    DecoderPolicies b(RunSpec{"tova", {}, 20}, c, sequence_granularity());
    a.attach(chunked);
    b.attach(single);
    std::size_t t = 0;
    while (t < tokens.size()) {
      const std::size_t n = std::min<std::size_t>(32, tokens.size() - t);
      const std::span<const float> rows = chunked.prefill(std::span<const Token>(tokens).subspan(t, n));
      ASSERT_EQ(rows.size(), n * c.vocab);
      for (std::size_t i = 0; i < n; ++i) {
        const std::span<const float> want = single.step(tokens[t + i]);
        ASSERT_TRUE(same_bits(rows.subspan(i * c.vocab, c.vocab), want)) << "token " << t + i;
      }
      ASSERT_TRUE(same_bits(chunked.last_logits(), single.last_logits()));
      t += n;
    }
    for (std::uint32_t h = 0; h < c.head_count(); ++h) EXPECT_TRUE(std::ranges::equal(chunked.held(h), single.held(h)));
    EXPECT_EQ(chunked.evicted(), single.evicted());
    EXPECT_GT(chunked.evicted(), 0U);
  }
}

// Decoders stepped together, each at sequence granularity with its own
// policy, each as it steps alone.
TEST(SequenceDecoder, StepTogetherIsEachAloneToTheBit) {
  const auto model = random_llama(2, 2, "together");
  const ModelConfig& c = model->config();
  const std::vector<Token> tokens = text_tokens(*model, 80);
  const std::vector<std::string> names = {"h2o", "snapkv", "sliding-window"};
  std::vector<std::unique_ptr<Decoder>> together, alone;
  std::vector<DecoderPolicies> policies;
  policies.reserve(2 * names.size());
  for (const std::string& name : names) {
    for (auto* group : {&together, &alone}) {
      group->push_back(std::make_unique<Decoder>(model, 96));
      policies.emplace_back(RunSpec{name, {}, 40}, c, sequence_granularity());
      policies.back().attach(*group->back());
    }
  }
  std::vector<Decoder*> lanes;
  for (auto& d : together) lanes.push_back(d.get());
  for (const Token token : tokens) {
    const std::vector<Token> same(lanes.size(), token);
    Decoder::step_together(lanes, same);
    for (std::size_t i = 0; i < names.size(); ++i) {
      const std::span<const float> want = alone[i]->step(token);
      ASSERT_TRUE(same_bits(together[i]->last_logits(), want)) << names[i];
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    for (std::uint32_t h = 0; h < c.head_count(); ++h) {
      EXPECT_TRUE(std::ranges::equal(together[i]->held(h), alone[i]->held(h))) << names[i];
    }
  }
}

// With one cache (one layer, one KV head) a SequenceBudget compares the raw
// scores and so decides as the policy itself: sequence granularity is head
// granularity to the bit, for the policies that never evict their newest
// position (a recent or observation window protects it; TOVA scores it by
// the attention it draws). The key scorers may evict it per head, which
// sequence granularity forbids (llama.cpp's consecutive positions;
// SequenceBudgetParams::keep_newest): their runs differ, as they must.
TEST(SequenceDecoder, OneCacheIsTheHeadGranularity) {
  const auto model = random_llama(1, 1, "one-cache");
  ASSERT_EQ(model->config().head_count(), 1U);
  const std::vector<std::uint8_t> text = testing::heldout_prefix(1500);
  std::vector<RunSpec> specs;
  for (const char* name : {"h2o", "tova", "scissorhands", "snapkv", "knorm", "keydiff"}) specs.push_back({name, {}, 48});
  constexpr std::size_t kSame = 4;  // the first four (the rows after the full cache's: 1 ... 4)
  ModelRunOptions sequence;
  sequence.paged = sequence_granularity();
  const auto head = perplexity(*model, text, specs);
  const auto seq = perplexity(*model, text, specs, sequence);
  for (std::size_t i = 1; i < head.size(); ++i) {
    SCOPED_TRACE(head[i].policy);
    if (i <= kSame) {
      EXPECT_EQ(seq[i].perplexity, head[i].perplexity);
    } else {
      EXPECT_NE(seq[i].perplexity, head[i].perplexity);
    }
    EXPECT_EQ(seq[i].evicted, head[i].evicted);
    EXPECT_EQ(seq[i].granularity, "sequence");
    EXPECT_EQ(head[i].granularity, "");
  }
}

// A policy that evicts by position alone names the same victims in every
// cache, so every granularity is the same run. An attention policy at
// sequence granularity is a different run (one victim set for all caches):
// the test would not notice a granularity silently ignored without it.
TEST(SequenceDecoder, PositionPoliciesAreTheSameRunAtEveryGranularity) {
  const auto model = tiny();
  const std::vector<std::uint8_t> text = testing::heldout_prefix(2100);
  const std::vector<RunSpec> specs = {{"sliding-window", {}, 48}, {"streaming-llm", {}, 48}, {"h2o", {}, 48}};
  ModelRunOptions sequence;
  sequence.paged = sequence_granularity();
  const auto head = perplexity(*model, text, specs);
  const auto seq = perplexity(*model, text, specs, sequence);
  for (std::size_t i = 1; i <= 2; ++i) {
    EXPECT_EQ(seq[i].perplexity, head[i].perplexity) << head[i].policy;
    EXPECT_EQ(seq[i].evicted, head[i].evicted) << head[i].policy;
  }
  EXPECT_NE(seq[3].perplexity, head[3].perplexity);
  EXPECT_EQ(seq[3].evicted, head[3].evicted);  // one a step in every cache either way
}

TEST(SequenceDecoder, StepsAllocateNothing) {
  const auto model = tiny();
  const std::vector<Token> tokens = text_tokens(*model, 200);
  Decoder d(model, 200);
  DecoderPolicies policies(RunSpec{"tova", {}, 32}, model->config(), sequence_granularity());
  policies.attach(d);
  d.step(tokens[0]);
  testing::CountAllocations count;
  for (std::size_t t = 1; t < tokens.size(); ++t) d.step(tokens[t]);
  EXPECT_EQ(count.count(), 0U);
  EXPECT_GT(d.evicted(), 0U);
}

using testing::expect_error;

TEST(SequenceDecoder, BadRequestsAreOneClearError) {
  const auto model = tiny();
  const ModelConfig& c = model->config();
  const std::uint32_t caches = c.head_count();
  Decoder d(model, 64);
  SequenceBudget wrong("tova", {}, SequenceBudgetParams{.caches = caches + 1, .budget = 16});
  expect_error<ParameterError>([&] { d.set_sequence_budget(&wrong); },
                               fmt::format("decoder: the sequence budget has {} caches; the model has {} ({} layers "
                                           "x {} KV heads)",
                                           caches + 1, caches, c.layers, c.kv_heads));
  SequenceBudget right("tova", {}, SequenceBudgetParams{.caches = caches, .budget = 16});
  auto policy = make_policy("tova");
  d.set_policy(1, policy.get(), 16);
  expect_error<ContractError>([&] { d.set_sequence_budget(&right); },
                              "decoder: cache 1 has a policy or layer budget of its own");
  d.set_policy(1, nullptr, 0);
  d.set_sequence_budget(&right);
  expect_error<ContractError>([&] { d.set_policy(0, policy.get(), 16); },
                              "decoder: cache 0 is under the sequence's budget");
  d.step('a');
  expect_error<ContractError>([&] { d.drop(0, std::vector<Position>{0}); },
                              "decoder: cache 0 is under a layer or sequence budget; drop() is for caches without one");
  expect_error<ContractError>([&] { d.set_sequence_budget(nullptr); },
                              "decoder: a sequence budget is set before the first token");

  // Granularity names and combinations, and what sequence cannot carry out.
  expect_error<ParameterError>([] { (void)parse_granularity("cells"); },
                               "--granularity (cells) must be head, layer or sequence");
  PagedOptions both = sequence_granularity();
  both.layer_budget = true;
  expect_error<ParameterError>([&] { check_paged(both); },
                               "--granularity: a budget is shared by a layer's heads or by the whole sequence, not "
                               "both (--layer-budget is --granularity layer)");
  PagedOptions blocks = sequence_granularity();
  blocks.block_size = 16;
  expect_error<ParameterError>([&] { check_paged(blocks); },
                               "--granularity sequence and --block-size: a sequence's one victim set is per position; "
                               "blocks are evicted per head (give one or the other)");
  expect_error<ParameterError>(
      [&] { DecoderPolicies(RunSpec{"pyramidkv", {}, 32}, c, sequence_granularity()); },
      "pyramidkv: its budget differs by layer, and --granularity sequence holds the same positions in every layer "
      "(use head or layer)");
}

}  // namespace
}  // namespace kvevict
