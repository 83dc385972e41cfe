// The decoder on a paged store (docs/paged.md, "The decoder on a paged
// store"): the same logits as the contiguous store to the bit, blocks taken
// from and given back to one pool, the peak measured against what the budget
// allows, whole-block eviction moving no row, block size 1 equal to the token
// policy, a layer budget through the decoder, and each bad request refused.
//
// Every expectation is derived from the model's configuration (caches =
// layers x KV heads) and the budgets, never from a measured number, so the
// tests hold for another committed model.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "alloc_counter.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/registry.h"
#include "kvevict/eval/paged.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

std::shared_ptr<const Model> committed_model() {
  static const std::shared_ptr<const Model> model = Model::load(testing::model_dir() / "kvevict-tiny.kvm");
  return model;
}

std::vector<std::uint8_t> heldout_prefix(std::size_t bytes) {
  std::vector<std::uint8_t> text = read_text(testing::model_dir() / "heldout-sample.txt");
  text.resize(std::min(bytes, text.size()));
  return text;
}

std::uint64_t ceil_div(std::uint64_t a, std::uint64_t b) { return (a + b - 1) / b; }

// One policy instance per cache: the token policy, or (paged.block_size >= 1)
// a BlockEvictor over it, as the tool builds them.
std::vector<std::unique_ptr<Policy>> attach(Decoder& decoder, const std::string& name, std::int64_t budget,
                                            const PagedOptions& paged = {}) {
  std::vector<std::unique_ptr<Policy>> out;
  for (std::uint32_t h = 0; h < decoder.config().head_count(); ++h) {
    out.push_back(make_run_policy(name, {}, budget, paged));
    decoder.set_policy(h, out.back().get(), budget);
  }
  return out;
}

PagedOptions blocks_of(std::int64_t size, std::int64_t start = 0, std::int64_t recent = 0) {
  PagedOptions p;
  p.block_size = size;
  p.start_blocks = start;
  p.recent_blocks = recent;
  return p;
}

// Bit for bit, not within a tolerance: attention on the paged store reads the
// held rows through the block table into one buffer and runs the contiguous
// store's arithmetic, so nothing but the addresses differs. A tolerance would
// not do: policies break ties and near-ties on these weights, and one
// different decision makes the runs diverge.
TEST(DecoderPaged, LogitsAttentionAndHeldPositionsAreTheContiguousStoresToTheBit) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(220);
  const std::uint32_t caches = model->config().head_count();
  struct Case {
    const char* policy;  // null: the full cache
    std::int64_t budget;
    std::uint32_t store_block;
    PagedOptions evictor;  // block mode when evictor.block_size >= 1
  };
  const std::vector<Case> cases = {
      {nullptr, 0, 1, {}},         {nullptr, 0, 7, {}},          {nullptr, 0, 64, {}},
      {"tova", 40, 1, {}},         {"tova", 40, 3, {}},          {"h2o", 48, 16, {}},
      {"scissorhands", 64, 16, {}}, {"snapkv", 40, 8, {}},       {"sliding-window", 48, 16, blocks_of(16)},
      {"tova", 64, 16, blocks_of(16, 1, 1)}, {"h2o", 96, 32, blocks_of(32)},
  };
  for (const Case& c : cases) {
    const std::string what = fmt::format("{} at {} in blocks of {}{}", c.policy ? c.policy : "full cache", c.budget,
                                         c.store_block, c.evictor.blocks() ? " (block evictor)" : "");
    Decoder flat(model, DecoderOptions{240, 0, 0});
    Decoder paged(model, DecoderOptions{240, c.store_block, 0});
    std::vector<std::unique_ptr<Policy>> a, b;
    if (c.policy != nullptr) {
      a = attach(flat, c.policy, c.budget, c.evictor);
      b = attach(paged, c.policy, c.budget, c.evictor);
    }
    for (std::uint32_t t = 0; t < text.size(); ++t) {
      const std::span<const float> got = paged.step(text[t]);
      const std::vector<float> logits(got.begin(), got.end());
      const std::span<const float> want = flat.step(text[t]);
      ASSERT_EQ(logits, std::vector<float>(want.begin(), want.end())) << what << ", step " << t;
      for (std::uint32_t h = 0; h < caches; ++h) {
        ASSERT_TRUE(std::ranges::equal(paged.held(h), flat.held(h))) << what << ", step " << t << ", cache " << h;
        ASSERT_TRUE(std::ranges::equal(paged.attention(h), flat.attention(h))) << what << ", step " << t;
      }
    }
    EXPECT_EQ(paged.evicted(), flat.evicted()) << what;
    EXPECT_EQ(paged.store().positions_held, flat.store().positions_held) << what;
  }
}

TEST(DecoderPaged, BlocksInUseFollowTheHeldPositionsAndComeBackOnReset) {
  const auto model = committed_model();
  const std::uint32_t caches = model->config().head_count();
  const std::vector<std::uint8_t> text = heldout_prefix(100);
  for (const std::uint32_t bs : {1U, 8U, 16U, 33U}) {
    Decoder decoder(model, DecoderOptions{128, bs, 0});
    EXPECT_EQ(decoder.store().pool_blocks, caches * ceil_div(128, bs));
    EXPECT_EQ(decoder.store().block_size, bs);
    for (std::uint32_t t = 0; t < text.size(); ++t) {
      decoder.step(text[t]);
      // The full cache: every cache holds t + 1 positions in ceil((t + 1) / bs) blocks.
      ASSERT_EQ(decoder.store().blocks_in_use, caches * ceil_div(t + 1, bs)) << "bs " << bs << ", step " << t;
      ASSERT_EQ(decoder.store().peak_blocks, caches * ceil_div(t + 1, bs));
      ASSERT_EQ(decoder.store().positions_held, std::uint64_t{caches} * (t + 1));
    }
    EXPECT_EQ(decoder.store().rows_moved, 0U);
    decoder.reset();
    EXPECT_EQ(decoder.store().blocks_in_use, 0U);
    EXPECT_EQ(decoder.store().peak_blocks, 0U);
    EXPECT_EQ(decoder.store().pool_blocks, caches * ceil_div(128, bs));
  }
}

// A token policy at budget B in blocks of bs: each cache holds at most B
// positions after its eviction, so ceil(B / bs) blocks, and B + 1 (one more
// block when bs divides B) between admitting the token and evicting. The
// caches admit one after another, each evicting before the next admits, so
// at most one cache is over its budget at a time: the pool's peak is exactly
// caches x ceil(B / bs), plus 1 when bs divides B -- within the bound of the
// budget's blocks plus one partial block per cache.
TEST(DecoderPaged, PeakBlocksAreTheBudgetsBlocksPlusOneAndNeverMoreThanOnePartialBlockPerCache) {
  const auto model = committed_model();
  const std::uint32_t caches = model->config().head_count();
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  for (const char* policy : {"sliding-window", "h2o", "tova"}) {
    for (const auto& [budget, bs] : std::vector<std::pair<std::int64_t, std::uint32_t>>{
             {64, 1}, {64, 8}, {64, 16}, {64, 32}, {50, 16}, {100, 7}}) {
      Decoder decoder(model, DecoderOptions{300, bs, 0});
      const auto held = attach(decoder, policy, budget);
      for (const std::uint8_t byte : text) decoder.step(byte);
      const std::uint64_t budget_blocks = ceil_div(budget, bs);
      const std::uint64_t extra = budget % bs == 0 ? 1 : 0;
      const StoreStats s = decoder.store();
      EXPECT_EQ(s.peak_blocks, caches * budget_blocks + extra) << policy << " at " << budget << " in blocks of " << bs;
      EXPECT_LE(s.peak_blocks, caches * (budget_blocks + 1));
      EXPECT_EQ(s.blocks_in_use, caches * budget_blocks);  // each cache holds exactly B now
      EXPECT_EQ(s.peak_positions, std::uint64_t{caches} * budget + 1);
      EXPECT_EQ(s.positions_held, std::uint64_t{caches} * budget);
    }
  }
}

// Whole-block eviction (a BlockEvictor per cache) gives blocks back without
// moving a row; a token policy on the same store closes its gaps by moving
// rows. With a budget of Bb blocks every cache holds Bb blocks after each
// eviction and takes a block past them one cache at a time: peak Bb x caches + 1.
TEST(DecoderPaged, BlockEvictorsFreeWholeBlocksMovingNoRowAndPeakAtTheirBudgetPlusOne) {
  const auto model = committed_model();
  const std::uint32_t caches = model->config().head_count();
  const std::vector<std::uint8_t> text = heldout_prefix(400);
  for (const std::uint32_t bs : {8U, 16U, 32U}) {
    for (const char* policy : {"sliding-window", "tova", "h2o", "snapkv"}) {
      const std::int64_t block_budget = 8;
      Decoder decoder(model, DecoderOptions{400, bs, 0});
      const auto held = attach(decoder, policy, block_budget * bs, blocks_of(bs, 1, 1));
      for (const std::uint8_t byte : text) decoder.step(byte);
      const StoreStats s = decoder.store();
      const std::string what = fmt::format("{} in blocks of {}", policy, bs);
      EXPECT_EQ(s.rows_moved, 0U) << what;
      EXPECT_EQ(s.peak_blocks, caches * static_cast<std::uint64_t>(block_budget) + 1) << what;
      EXPECT_EQ(decoder.evicted() % bs, 0U) << what;  // whole blocks only
      EXPECT_GT(decoder.evicted(), 0U) << what;
      for (std::uint32_t h = 0; h < caches; ++h) {
        EXPECT_LE(decoder.held(h).size(), static_cast<std::size_t>(block_budget * bs)) << what;
      }
    }
    Decoder tokens(model, DecoderOptions{400, bs, 0});
    const auto held = attach(tokens, "h2o", 8 * static_cast<std::int64_t>(bs));
    for (const std::uint8_t byte : text) tokens.step(byte);
    EXPECT_GT(tokens.store().rows_moved, 0U) << "a token policy leaves gaps inside blocks";
  }
}

TEST(DecoderPaged, BlockSizeOneThroughTheDecoderIsTheTokenPolicyRunExactly) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  std::vector<RunSpec> specs;
  for (const PolicyInfo* info : policies()) specs.push_back({info->name, {}, 64});
  ModelRunOptions tokens;
  ModelRunOptions blocks;
  blocks.paged.block_size = 1;
  const std::vector<PerplexityRow> want = perplexity(*model, text, specs, tokens);
  const std::vector<PerplexityRow> got = perplexity(*model, text, specs, blocks);
  ASSERT_EQ(got.size(), want.size());
  const std::uint64_t caches = model->config().head_count();
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].perplexity, want[i].perplexity) << got[i].policy;
    EXPECT_EQ(got[i].evicted, want[i].evicted) << got[i].policy;
    EXPECT_EQ(got[i].block_size, 1U);
    EXPECT_EQ(want[i].block_size, 0U);
    EXPECT_EQ(want[i].peak_blocks, 0U);
    EXPECT_EQ(got[i].peak_blocks, got[i].peak_positions) << "blocks of 1 are positions";
  }
  EXPECT_EQ(got[0].peak_blocks, caches * (text.size() - 1));  // the full cache: every byte but the last fed
  for (std::size_t i = 1; i < got.size(); ++i) {
    // Every cache holds 64 after each eviction and they evict at the same
    // steps: 64 per cache and one cache past it. PyramidKV shares the
    // layers' budgets out unevenly, never more than 64 per cache in all.
    if (got[i].policy == "pyramidkv") {
      EXPECT_LE(got[i].peak_blocks, caches * 64 + 1);
    } else {
      EXPECT_EQ(got[i].peak_blocks, caches * 64 + 1) << got[i].policy;
    }
  }
}

// The proxies replay the same way: blocks of 1 are the token policy's numbers.
TEST(DecoderPaged, CompareModelInBlocksOfOneHasTheTokenPolicysProxies) {
  const auto model = committed_model();
  const std::vector<std::uint8_t> text = heldout_prefix(260);
  CompareRequest request;
  request.policies = {"h2o", "tova", "snapkv"};
  request.budgets = {48, 64};
  ModelRunOptions blocks;
  blocks.paged.block_size = 1;
  const auto want = compare_model(*model, text, request);
  const auto got = compare_model(*model, text, request, blocks);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 1; i < got.size(); ++i) {
    EXPECT_EQ(got[i].perplexity, want[i].perplexity) << got[i].policy;
    EXPECT_EQ(got[i].proxy.retained_attention_mass, want[i].proxy.retained_attention_mass) << got[i].policy;
    EXPECT_EQ(got[i].proxy.heavy_hitter_recall, want[i].proxy.heavy_hitter_recall) << got[i].policy;
    EXPECT_EQ(got[i].rank, want[i].rank);
  }
}

// Sliding window under a layer budget of kv_heads x B: every head holds the
// same positions, each step admits one per head, and the kv_heads lowest
// scores (positions) across the layer are the oldest position of each head
// -- so each head is a window of B, exactly the per-head sliding window at B.
// The layer's KV heads admit before it evicts: peak positions = layers x
// kv_heads x B + kv_heads.
TEST(DecoderPaged, ASlidingWindowLayerBudgetIsThePerHeadWindowAndHoldsTheLayersBudget) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  ModelRunOptions layer;
  layer.paged.layer_budget = true;
  const std::vector<RunSpec> specs = {{"sliding-window", {}, 48}};
  const auto want = perplexity(*model, text, specs);
  const auto got = perplexity(*model, text, specs, layer);
  EXPECT_EQ(got[1].perplexity, want[1].perplexity);
  EXPECT_EQ(got[1].evicted, want[1].evicted);
  EXPECT_EQ(got[1].peak_positions, std::uint64_t{c.layers} * c.kv_heads * 48 + c.kv_heads);
  EXPECT_EQ(want[1].peak_positions, std::uint64_t{c.head_count()} * 48 + 1);
}

// A shared budget holds what fixed budgets hold, layer by layer: PyramidKV's
// per-layer share (and any policy's) is the same total in both modes, so a
// difference between them is the sharing's and not more memory. PyramidKV
// once took its layer share from the largest head budget and held 5.5 % more
// positions in layer mode at budget 64.
TEST(DecoderPaged, SharedAndFixedBudgetsHoldTheSameMeanPositionsPerLayer) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(400);
  for (const std::string policy : {"pyramidkv", "snapkv", "h2o"}) {
    for (const std::int64_t budget : {48, 64}) {
      const RunSpec spec{policy, {}, budget};
      Decoder fixed(model, DecoderOptions{400, 0, 0});
      std::vector<std::unique_ptr<Policy>> heads;
      for (std::uint32_t h = 0; h < c.head_count(); ++h) {
        heads.push_back(find_policy(policy).make(head_params(spec, c, h / c.kv_heads)));
        fixed.set_policy(h, heads.back().get(), budget);
      }
      Decoder shared(model, DecoderOptions{400, 0, 0});
      std::vector<std::unique_ptr<LayerBudget>> layers;
      for (std::uint32_t l = 0; l < c.layers; ++l) {
        ParamMap params = head_params(spec, c, l);
        std::erase_if(params, [](const auto& kv) { return kv.first == "budget"; });
        layers.push_back(std::make_unique<LayerBudget>(policy, params, LayerBudgetParams{c.kv_heads, budget * c.kv_heads, -1}));
        shared.set_layer_budget(l, layers.back().get(), budget * c.kv_heads);
      }
      std::vector<std::uint64_t> held_fixed(c.layers, 0), held_shared(c.layers, 0);
      for (const std::uint8_t b : text) {
        fixed.step(b);
        shared.step(b);
        for (std::uint32_t h = 0; h < c.head_count(); ++h) {
          held_fixed[h / c.kv_heads] += fixed.held(h).size();
          held_shared[h / c.kv_heads] += shared.held(h).size();
        }
      }
      for (std::uint32_t l = 0; l < c.layers; ++l) {
        EXPECT_EQ(held_shared[l], held_fixed[l]) << policy << " at " << budget << ", layer " << l
                                                 << ": mean positions held per step "
                                                 << static_cast<double>(held_shared[l]) / text.size() << " shared, "
                                                 << static_cast<double>(held_fixed[l]) / text.size() << " fixed";
      }
    }
  }
}

// H2O's scores differ by head: the heads' shares move, the layer's total
// never passes its budget, and no head goes under the floor.
TEST(DecoderPaged, ALayerBudgetMovesPositionsBetweenHeadsWithinTheLayersTotal) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(300);
  constexpr std::int64_t kPerHead = 40;
  const std::int64_t total = kPerHead * c.kv_heads;
  for (const std::uint32_t bs : {0U, 8U}) {
    Decoder decoder(model, DecoderOptions{300, bs, 0});
    std::vector<std::unique_ptr<LayerBudget>> layers;
    for (std::uint32_t l = 0; l < c.layers; ++l) {
      ParamMap params;
      set_param(params, "recentWindow", 8);
      layers.push_back(std::make_unique<LayerBudget>("h2o", params, LayerBudgetParams{c.kv_heads, total, 5}));
      decoder.set_layer_budget(l, layers.back().get(), total);
    }
    bool moved = false;
    for (std::uint32_t t = 0; t < text.size(); ++t) {
      decoder.step(text[t]);
      for (std::uint32_t l = 0; l < c.layers; ++l) {
        std::int64_t sum = 0;
        for (std::uint32_t kv = 0; kv < c.kv_heads; ++kv) {
          const std::size_t n = decoder.held(l * c.kv_heads + kv).size();
          ASSERT_EQ(n, layers[l]->kept_count(kv));
          ASSERT_GE(n, std::min<std::size_t>(5, t + 1));
          moved = moved || (t + 1 > static_cast<std::uint32_t>(kPerHead) && n != static_cast<std::size_t>(kPerHead));
          sum += static_cast<std::int64_t>(n);
        }
        ASSERT_EQ(sum, std::min<std::int64_t>(total, std::int64_t{t + 1} * c.kv_heads)) << "layer " << l << " step " << t;
      }
    }
    EXPECT_TRUE(moved || c.kv_heads == 1) << "no head's share ever moved from the fair share";
  }
}

TEST(DecoderPaged, StepsAllocateNothingOnAPagedStore) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::vector<std::uint8_t> text = heldout_prefix(200);
  Decoder tokens(model, DecoderOptions{200, 16, 0});
  const auto a = attach(tokens, "h2o", 64);
  Decoder blocks(model, DecoderOptions{200, 16, 0});
  const auto b = attach(blocks, "tova", 64, blocks_of(16, 1, 1));
  Decoder shared(model, DecoderOptions{200, 8, 0});
  std::vector<std::unique_ptr<LayerBudget>> layers;
  for (std::uint32_t l = 0; l < c.layers; ++l) {
    layers.push_back(std::make_unique<LayerBudget>("tova", ParamMap{}, LayerBudgetParams{c.kv_heads, 32 * c.kv_heads, -1}));
    shared.set_layer_budget(l, layers.back().get(), 32 * c.kv_heads);
  }
  for (Decoder* d : {&tokens, &blocks, &shared}) {
    d->step(text[0]);
    testing::CountAllocations count;
    for (std::size_t t = 1; t < text.size(); ++t) d->step(text[t]);
    EXPECT_EQ(count.count(), 0U);
    EXPECT_GT(d->evicted(), 0U);
  }
}

using testing::expect_error;

TEST(DecoderPaged, BadRequestsAreOneClearError) {
  const auto model = committed_model();
  const ModelConfig& c = model->config();
  const std::uint32_t caches = c.head_count();
  expect_error<ParameterError>([&] { Decoder(model, DecoderOptions{64, 16, caches - 1}); },
                               fmt::format("decoder: a pool of {} blocks cannot give each of the {} caches one",
                                           caches - 1, caches));
  expect_error<ParameterError>([&] { Decoder(model, DecoderOptions{64, 0, 100}); },
                               "decoder: pool_blocks needs a paged store (block_size >= 1)");
  expect_error<InputError>([&] { Decoder(model, DecoderOptions{c.context + 1, 16, 0}); },
                           fmt::format("decoder: capacity {} is over the model's context of {} positions",
                                       c.context + 1, c.context));

  // A pool of one block per cache: blocks of 4 hold 4 positions each; the
  // fifth token finds no free block for the first cache; the decoder then
  // refuses until reset().
  Decoder tight(model, DecoderOptions{64, 4, caches});
  for (int i = 0; i < 4; ++i) tight.step('a');
  expect_error<InputError>([&] { tight.step('a'); },
                           fmt::format("decoder: the block pool is exhausted at position 4 (layer 0, KV head 0): "
                                       "all {} blocks are in use",
                                       caches));
  EXPECT_EQ(tight.position(), 4U);
  EXPECT_THROW(tight.step('a'), ContractError);
  tight.reset();
  EXPECT_EQ(tight.store().blocks_in_use, 0U);
  EXPECT_NO_THROW(tight.step('a'));
  // With a policy at 4 positions the same pool is enough: evictions give back.
  Decoder enough(model, DecoderOptions{64, 4, caches + 1});
  const auto held = attach(enough, "sliding-window", 4, blocks_of(4));
  for (int i = 0; i < 40; ++i) ASSERT_NO_THROW(enough.step('a')) << i;

  // Layer budgets: the heads must match, and a cache has one policy or the other.
  Decoder d(model, 32);
  LayerBudget wrong("tova", {}, LayerBudgetParams{c.kv_heads + 1, 64, 0});
  expect_error<ParameterError>([&] { d.set_layer_budget(0, &wrong, 64); },
                               fmt::format("decoder: the layer budget has {} heads; layer 0 has {} KV heads",
                                           c.kv_heads + 1, c.kv_heads));
  LayerBudget right("tova", {}, LayerBudgetParams{c.kv_heads, 64, 0});
  auto policy = make_policy("tova");
  d.set_policy(0, policy.get(), 64);
  expect_error<ContractError>([&] { d.set_layer_budget(0, &right, 64); },
                              "decoder: cache 0 of layer 0 has a policy of its own");
  d.set_policy(0, nullptr, 0);
  d.set_layer_budget(0, &right, 64);
  expect_error<ContractError>([&] { d.set_policy(0, policy.get(), 64); },
                              "decoder: cache 0 is in layer 0, which has a layer budget");
  expect_error<ContractError>([&] { d.set_layer_budget(c.layers, &right, 64); },
                              fmt::format("decoder: layer {} is out of range (the model has {})", c.layers, c.layers));

  // Through perplexity(): the construction errors, before any work.
  const std::vector<std::uint8_t> text = heldout_prefix(50);
  ModelRunOptions o;
  o.paged.block_size = 16;
  expect_error<ParameterError>([&] { perplexity(*model, text, {{"tova", {}, 100}}, o); },
                               "budget (100) must be a whole number of blocks (--block-size 16)");
  o.paged.block_size = c.context + 1;
  expect_error<ParameterError>([&] { perplexity(*model, text, {}, o); },
                               fmt::format("--block-size ({}) is over the model's context of {} positions",
                                           c.context + 1, c.context));
  o.paged.block_size = 0;
  o.paged.start_blocks = 1;
  EXPECT_THROW(perplexity(*model, text, {}, o), ParameterError);  // check_paged: --start-blocks needs --block-size
  o.paged = {};
  o.paged.block_size = 16;
  o.paged.layer_budget = true;
  EXPECT_THROW(perplexity(*model, text, {}, o), ParameterError);  // one mode or the other
  o.paged = {};
  o.paged.block_size = 16;
  o.paged.recent_blocks = 4;
  EXPECT_THROW(perplexity(*model, text, {{"tova", {}, 64}}, o), ParameterError);  // blockBudget below the areas
  o.paged = {};
  o.paged.layer_budget = true;
  o.paged.head_floor = 100;
  EXPECT_THROW(perplexity(*model, text, {{"tova", {}, 64}}, o), ParameterError);  // floor above the fair share
}

}  // namespace
}  // namespace kvevict
