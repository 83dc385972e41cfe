// Block eviction (BlockEvictor) and shared layer budgets (LayerBudget),
// docs/paged.md: block size 1 and one head decide exactly like the token-level
// policy (differential, every policy, tie-heavy weights at the budgets where
// the fast paths run); larger blocks against a plain reference (repeated strict
// argmin over block scores); hand-worked cases; bad input.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "alloc_counter.h"
#include "generators.h"
#include "kvevict/core/block_evictor.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/registry.h"
#include "kvevict/core/sequence_budget.h"
#include "support.h"

namespace kvevict {
namespace {

// One step's attention over `held` positions, from the weight source: absent
// one step in eight, short or long one in twelve each (as the differential suite).
Attention draw_attention(WeightSource& weights, std::size_t held, std::int64_t t, std::vector<float>& w) {
  w.clear();
  if (weights.pick(8) == 0) return std::nullopt;
  std::size_t len = held;
  const auto shape = weights.pick(12);
  if (shape == 0) len = weights.pick(static_cast<std::uint32_t>(held + 1));
  if (shape == 1) len += 1 + weights.pick(2);
  weights.begin_step(len);
  for (std::size_t i = 0; i < len; ++i) w.push_back(weights.next(t * 7919 + static_cast<std::int64_t>(i)));
  return std::span<const float>(w);
}

const PolicyInfo& any_policy() {
  const auto all = testing::attention_policies();
  std::vector<std::size_t> indices(all.size());
  for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = i;
  return *all[*rc::gen::noShrink(rc::gen::elementOf(indices))];
}

// (And a sequence of one cache decides as the policy too: SequenceBudget.)
RC_GTEST_PROP(BlockEvictor, BlockSizeOneDecidesLikeThePolicy, ()) {
  const PolicyInfo& info = any_policy();
  const std::int64_t budget = random_budget();
  const ParamMap params = random_params(info, budget);
  RC_TAG(info.name, budget >= kLargeBudget ? "large" : "small");
  WeightSource weights = WeightSource::draw(budget >= kLargeBudget);
  const int steps = random_steps(budget, 200);

  auto token = info.make(params);
  BlockEvictor blocks(info.name, params, BlockParams{1, 0, 0, budget, BlockScore::kSum});
  LayerBudget layer(info.name, params, LayerBudgetParams{1, budget, 0});
  SequenceBudget sequence(info.name, params, SequenceBudgetParams{1, budget});
  std::vector<float> w;
  std::vector<Position> want;
  for (int t = 1; t <= steps; ++t) {
    const Attention attn = draw_attention(weights, token->kept_count(), t, w);
    token->on_decode_step(t, attn);
    blocks.on_decode_step(t, attn);
    layer.on_decode_step(0, t, attn);
    sequence.on_decode_step(0, t, attn);
    if (std::ssize(blocks.positions()) > budget || info.name == "pyramidkv") {
      const auto a = token->evict(budget);
      want.assign(a.begin(), a.end());
      const auto chosen = blocks.evict_blocks(budget);
      const auto got = blocks.evicted_positions();
      RC_ASSERT(std::vector<Position>(got.begin(), got.end()) == want);
      RC_ASSERT(chosen.size() == want.size());  // block size 1: a block per position
      layer.evict(budget);
      const auto by_layer = layer.victims(0);
      RC_ASSERT(std::vector<Position>(by_layer.begin(), by_layer.end()) == want);
      RC_ASSERT(blocks.kept_count() == token->kept_count());
      RC_ASSERT(layer.kept_count(0) == token->kept_count());
      const auto by_sequence = sequence.evict(budget);
      RC_ASSERT(std::vector<Position>(by_sequence.begin(), by_sequence.end()) == want);
      RC_ASSERT(sequence.kept_count() == token->kept_count());
      if (std::ssize(blocks.positions()) > budget) break;  // TOVA with nothing observed
    }
  }
}

// The plain reference for larger blocks: a twin policy fed the same steps,
// its scores reduced per full block by plain loops, and `needed` repeated
// strict argmins over the candidate blocks (scanned ascending).
struct Reference {
  std::unique_ptr<Policy> policy;
  BlockParams block;
  std::uint64_t steps = 0;
  std::vector<std::uint64_t> admitted{0};

  std::vector<std::uint32_t> evict(std::int64_t budget, std::vector<Position>& victims,
                                   std::vector<std::uint32_t>& removed_before) {
    const auto bs = static_cast<std::size_t>(block.block_size);
    std::vector<Position> pos(policy->kept_count());
    std::vector<double> score(pos.size());
    policy->scores(pos, score);
    const std::size_t n = pos.size();
    const std::size_t blocks = (n + bs - 1) / bs;
    const std::size_t full = n / bs;
    const ScoreRules rules = policy->score_rules();
    const auto target = static_cast<std::size_t>(std::min<std::int64_t>(budget, rules.budget_cap / block.block_size));
    victims.clear();
    removed_before.assign(blocks, 0);
    if (blocks <= target) return {};
    const std::size_t needed = std::max(blocks - target, (rules.min_victims + bs - 1) / bs);
    std::vector<double> key(full, std::numeric_limits<double>::infinity());
    for (std::size_t j = 0; j < full; ++j) {
      if (j < static_cast<std::size_t>(block.start_blocks) || j + static_cast<std::size_t>(block.recent_blocks) >= full) {
        continue;
      }
      double sum = 0.0;
      double norm = 0.0;
      double most = score[j * bs];
      bool candidate = true;
      for (std::size_t i = j * bs; i < (j + 1) * bs; ++i) {
        if (std::isinf(score[i])) candidate = false;
        sum += score[i];
        most = std::max(most, score[i]);
        norm += score[i] / static_cast<double>(std::max<std::uint64_t>(steps - admitted[i], 1));
      }
      if (!candidate) continue;
      switch (block.score) {
        case BlockScore::kSum: key[j] = sum; break;
        case BlockScore::kMean: key[j] = sum * (1.0 / static_cast<double>(bs)); break;
        case BlockScore::kMax: key[j] = most; break;
        case BlockScore::kNormSum: key[j] = norm; break;
      }
    }
    std::vector<bool> gone(blocks, false);
    for (std::size_t k = 0; k < needed; ++k) {
      std::size_t best = full;
      for (std::size_t j = 0; j < full; ++j) {
        if (gone[j] || std::isinf(key[j])) continue;
        if (best == full || key[j] < key[best]) best = j;
      }
      if (best == full) break;
      gone[best] = true;
    }
    std::vector<std::uint32_t> out;
    std::vector<std::uint64_t> still;
    removed_before.clear();
    std::uint32_t removed = 0;
    for (std::size_t j = 0; j < blocks; ++j) {
      const std::size_t end = std::min((j + 1) * bs, n);
      if (gone[j]) {
        out.push_back(static_cast<std::uint32_t>(j));
        for (std::size_t i = j * bs; i < end; ++i) victims.push_back(pos[i]);
        removed += static_cast<std::uint32_t>(end - j * bs);
      } else {
        removed_before.push_back(removed);
        for (std::size_t i = j * bs; i < end; ++i) still.push_back(admitted[i]);
      }
    }
    admitted = still;
    policy->remove(victims);
    return out;
  }
};

std::size_t evicted_blocks = 0;  // over every case: the property must have evicted

void larger_blocks_case() {
  const PolicyInfo& info = any_policy();
  BlockParams block;
  block.block_size = *rc::gen::inRange<std::int64_t>(1, 9);
  block.start_blocks = *rc::gen::inRange<std::int64_t>(0, 3);
  block.recent_blocks = *rc::gen::inRange<std::int64_t>(0, 3);
  block.block_budget = block.start_blocks + block.recent_blocks + *rc::gen::inRange<std::int64_t>(1, 40);
  block.score = *rc::gen::element(BlockScore::kSum, BlockScore::kMean, BlockScore::kMax, BlockScore::kNormSum);
  const std::int64_t budget = block.block_budget * block.block_size;
  const ParamMap params = random_params(info, budget);
  std::unique_ptr<BlockEvictor> evictor;
  try {
    evictor = std::make_unique<BlockEvictor>(info.name, params, block);
  } catch (const ParameterError& e) {
    // The policy's own protected positions leave no block to evict: refused
    // at construction, as it should be (BlockEvictorErrors tests the message).
    RC_DISCARD(e.what());
  }
  RC_TAG(info.name, block_score_name(block.score));
  ParamMap twin = params;
  set_param(twin, "budget", budget);
  Reference ref{info.make(twin), block};
  WeightSource weights = WeightSource::draw(true);
  std::vector<float> w;
  std::vector<Position> want;
  std::vector<std::uint32_t> want_removed;
  const int steps = static_cast<int>(budget) + uniform(0, 150);
  for (int t = 1; t <= steps; ++t) {
    const Attention attn = draw_attention(weights, evictor->kept_count(), t, w);
    evictor->on_decode_step(t, attn);
    ref.policy->on_decode_step(t, attn);
    ++ref.steps;
    ref.admitted.push_back(ref.steps);
    const std::size_t full_before = evictor->full_blocks();
    const std::vector<Position> held_before(evictor->positions().begin(), evictor->positions().end());
    const auto chosen = evictor->evict_blocks(block.block_budget);
    const std::vector<std::uint32_t> got(chosen.begin(), chosen.end());
    RC_ASSERT(got == ref.evict(block.block_budget, want, want_removed));
    evicted_blocks += got.size();
    const auto victims = evictor->evicted_positions();
    RC_ASSERT(std::vector<Position>(victims.begin(), victims.end()) == want);
    const auto removed = evictor->removed_before();
    RC_ASSERT(std::vector<std::uint32_t>(removed.begin(), removed.end()) == want_removed);
    // Only full blocks outside the start and recent areas go.
    for (const std::uint32_t j : got) {
      RC_ASSERT(j >= block.start_blocks);
      RC_ASSERT(j + block.recent_blocks < full_before);
    }
    // The start area and everything from the recent area on are still held, in place.
    const auto keep_head = static_cast<std::size_t>(block.start_blocks * block.block_size);
    const std::size_t keep_tail = held_before.size() - (full_before - std::min<std::size_t>(full_before, static_cast<std::size_t>(block.recent_blocks))) * static_cast<std::size_t>(block.block_size);
    const auto now = evictor->positions();
    for (std::size_t i = 0; i < std::min(keep_head, held_before.size()); ++i) RC_ASSERT(now[i] == held_before[i]);
    for (std::size_t i = 0; i < keep_tail; ++i) RC_ASSERT(now[now.size() - 1 - i] == held_before[held_before.size() - 1 - i]);
    if (evictor->block_count() > static_cast<std::size_t>(block.block_budget)) break;  // TOVA with nothing observed
  }
}

TEST(BlockEvictor, LargerBlocksMatchThePlainReference) {
  evicted_blocks = 0;
  EXPECT_TRUE(rc::check("larger blocks match the plain reference", larger_blocks_case));
  // The cases did evict blocks, so the comparison compared something.
  EXPECT_GT(evicted_blocks, 1000U);
}

// ---- hand-worked cases ------------------------------------------------------

// H2O (recentWindow 0) in blocks of 2, one start block, one recent block, a
// budget of 4 blocks. Steps 1-7 pay no attention; step 8 pays
// [0, 0, 1/8, 1/8, 3/16, 0, 0, 0] to positions 0-7. Then blocks are
// [0,1] [2,3] [4,5] [6,7] [8]: block 0 is the start area, block 3 the recent
// area, block 4 partial; blocks 1 and 2 are the candidates:
//   block 1: scores 1/8, 1/8 -> sum 1/4,  mean 1/8,  max 1/8,  normsum 1/8/6 + 1/8/5 = 0.0458...
//   block 2: scores 3/16, 0  -> sum 3/16, mean 3/32, max 3/16, normsum 3/16/4 + 0/3 = 0.046875
// (normsum: position p was admitted at step p, so at step 8 it has been held 8 - p steps).
std::unique_ptr<BlockEvictor> stepped_to_eight(BlockScore score) {
  auto e = std::make_unique<BlockEvictor>("h2o", ParamMap{{"recentWindow", 0}}, BlockParams{2, 1, 1, 4, score});
  std::vector<float> zeros;
  for (int t = 1; t <= 7; ++t) {
    zeros.assign(static_cast<std::size_t>(t), 0.0F);
    e->on_decode_step(t, std::span<const float>(zeros));
  }
  const std::vector<float> w{0.0F, 0.0F, 0.125F, 0.125F, 0.1875F, 0.0F, 0.0F, 0.0F};
  e->on_decode_step(8, std::span<const float>(w));
  return e;
}

using Blocks = std::vector<std::uint32_t>;
using Positions = std::vector<Position>;

TEST(BlockEvictor, EachReductionPicksItsBlock) {
  const struct {
    BlockScore score;
    std::uint32_t block;
    Positions victims;
    Blocks removed_before;
  } cases[] = {
      {BlockScore::kSum, 2, {4, 5}, {0, 0, 2, 2}},
      {BlockScore::kMean, 2, {4, 5}, {0, 0, 2, 2}},
      {BlockScore::kMax, 1, {2, 3}, {0, 2, 2, 2}},
      {BlockScore::kNormSum, 1, {2, 3}, {0, 2, 2, 2}},
  };
  for (const auto& c : cases) {
    auto e = stepped_to_eight(c.score);
    EXPECT_EQ(e->block_count(), 5U);
    const auto chosen = e->evict_blocks(4);
    EXPECT_EQ(Blocks(chosen.begin(), chosen.end()), Blocks{c.block}) << block_score_name(c.score);
    EXPECT_EQ(Positions(e->evicted_positions().begin(), e->evicted_positions().end()), c.victims);
    EXPECT_EQ(Blocks(e->removed_before().begin(), e->removed_before().end()), c.removed_before);
    EXPECT_EQ(e->kept_count(), 7U);
    EXPECT_EQ(e->policy().kept_count(), 7U);
  }
}

TEST(BlockEvictor, BlockScoresAsWorkedOut) {
  auto sum = stepped_to_eight(BlockScore::kSum);
  EXPECT_EQ(sum->block_score_of(0), std::numeric_limits<double>::infinity());  // start area
  EXPECT_EQ(sum->block_score_of(1), 0.25);
  EXPECT_EQ(sum->block_score_of(2), 0.1875);
  EXPECT_EQ(sum->block_score_of(3), std::numeric_limits<double>::infinity());  // recent area
  EXPECT_EQ(sum->block_score_of(4), -1.0);  // partial: not a full block
  auto norm = stepped_to_eight(BlockScore::kNormSum);
  EXPECT_DOUBLE_EQ(norm->block_score_of(1), 0.125 / 6 + 0.125 / 5);
  EXPECT_DOUBLE_EQ(norm->block_score_of(2), 0.1875 / 4);
}

TEST(BlockEvictor, SecondEvictionNumbersBlocksAfterTheFirst) {
  // After the sum case evicts [4,5] the blocks are [0,1] [2,3] [6,7] [8]. Step
  // 9 pays nothing to (0,1,2,3,6,7,8); step 10 pays 1/16 to position 6 only:
  // [0,1] [2,3] [6,7] [8,9] [10] -> candidates block 1 (sum 1/4) and block 2
  // (sum 1/16): block 2, i.e. positions 6 and 7, goes.
  auto e = stepped_to_eight(BlockScore::kSum);
  e->evict_blocks(4);
  const std::vector<float> quiet(7, 0.0F);
  e->on_decode_step(9, std::span<const float>(quiet));
  EXPECT_TRUE(e->evict_blocks(4).empty());  // 4 blocks: within the budget
  EXPECT_EQ(Blocks(e->removed_before().begin(), e->removed_before().end()), (Blocks{0, 0, 0, 0}));
  const std::vector<float> w{0, 0, 0, 0, 0.0625F, 0, 0, 0};
  e->on_decode_step(10, std::span<const float>(w));
  const auto chosen = e->evict_blocks(4);
  EXPECT_EQ(Blocks(chosen.begin(), chosen.end()), Blocks{2});
  EXPECT_EQ(Positions(e->evicted_positions().begin(), e->evicted_positions().end()), (Positions{6, 7}));
  EXPECT_EQ(Positions(e->positions().begin(), e->positions().end()), (Positions{0, 1, 2, 3, 8, 9, 10}));
}

TEST(BlockEvictor, SlidingWindowWithAStartBlockKeepsItsSinks) {
  // Recency scores: the oldest candidate block goes; the start block stays.
  BlockEvictor f("sliding-window", {}, BlockParams{2, 1, 0, 2, BlockScore::kSum});
  for (int t = 1; t <= 4; ++t) f.on_decode_step(t, std::nullopt);
  auto chosen = f.evict_blocks(2);
  EXPECT_EQ(Blocks(chosen.begin(), chosen.end()), Blocks{1});  // [2,3]; [4] is partial
  EXPECT_EQ(Blocks(f.removed_before().begin(), f.removed_before().end()), (Blocks{0, 2}));
  f.on_decode_step(5, std::nullopt);
  f.on_decode_step(6, std::nullopt);
  chosen = f.evict_blocks(2);
  EXPECT_EQ(Blocks(chosen.begin(), chosen.end()), Blocks{1});  // [4,5]
  EXPECT_EQ(Positions(f.positions().begin(), f.positions().end()), (Positions{0, 1, 6}));
}

TEST(BlockEvictor, PartialBlockAndPolicyProtectionAreNeverCandidates) {
  // H2O's own recent window (3 positions) covers the partial block [8] and
  // block 3 [6,7]; with no recent area the candidates are blocks 1 and 2
  // (the start block is 0) -- as in the worked case, block 2 goes by sum.
  BlockEvictor e("h2o", {{"recentWindow", 3}}, BlockParams{2, 1, 0, 4, BlockScore::kSum});
  std::vector<float> zeros;
  for (int t = 1; t <= 7; ++t) {
    zeros.assign(static_cast<std::size_t>(t), 0.0F);
    e.on_decode_step(t, std::span<const float>(zeros));
  }
  const std::vector<float> w{0.0F, 0.0F, 0.125F, 0.125F, 0.1875F, 0.0F, 0.0F, 0.0F};
  e.on_decode_step(8, std::span<const float>(w));
  EXPECT_EQ(e.block_score_of(3), std::numeric_limits<double>::infinity());
  const auto chosen = e.evict_blocks(4);
  EXPECT_EQ(Blocks(chosen.begin(), chosen.end()), Blocks{2});
}

TEST(BlockEvictor, NoAllocationAfterConstruction) {
  BlockEvictor e("h2o", {{"recentWindow", 4}}, BlockParams{16, 1, 1, 8, BlockScore::kNormSum});
  std::vector<float> w(200, 0.0625F);
  testing::CountAllocations count;
  for (int t = 1; t <= 150; ++t) {
    e.on_decode_step(t, std::span<const float>(w.data(), e.kept_count()));
    e.evict_blocks(8);
  }
  EXPECT_EQ(count.count(), 0U);
}

void expect_refused(const std::function<void()>& make, const std::string& needle) {
  try {
    make();
    ADD_FAILURE() << "not refused: " << needle;
  } catch (const ParameterError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BlockEvictorErrors, BadConfigurationsAreRefusedAtConstruction) {
  expect_refused([] { BlockEvictor("h2o", {}, BlockParams{0, 0, 0, 4, BlockScore::kSum}); },
                 "BlockEvictor: blockSize (0) must be at least 1");
  expect_refused([] { BlockEvictor("h2o", {{"recentWindow", 0}}, BlockParams{4, 2, 2, 3, BlockScore::kSum}); },
                 "BlockEvictor: blockBudget (3) must be at least startBlocks + recentBlocks (2 + 2)");
  // blocks of 4, 1 start + 1 recent, budget 3: once 4 blocks (13 positions)
  // are held the only full candidate is block 1 -- but H2O's recentWindow 9
  // covers the partial block and 8 positions before it, blocks 1 and 2.
  expect_refused([] { BlockEvictor("h2o", {{"recentWindow", 9}}, BlockParams{4, 1, 1, 3, BlockScore::kSum}); },
                 "BlockEvictor: blockBudget (3) cannot be met");
  // Budget = start + recent with blocks of 2: the full blocks are all protected.
  expect_refused([] { BlockEvictor("h2o", {{"recentWindow", 0}}, BlockParams{2, 1, 1, 2, BlockScore::kSum}); },
                 "cannot be met");
  expect_refused([] { BlockEvictor("h2o", {{"budget", 100}}, BlockParams{16, 0, 0, 8, BlockScore::kSum}); },
                 "BlockEvictor: budget (100) must equal blockBudget x blockSize (8 x 16 = 128)");
  expect_refused([] { parse_block_score("median"); }, "blockScore 'median' is not one of sum, mean, max, normsum");
  expect_refused([] { BlockEvictor("nope", {}, BlockParams{}); }, "nope");
}

TEST(BlockEvictorErrors, OverfillingIsAContractError) {
  BlockEvictor e("sliding-window", {}, BlockParams{2, 0, 0, 1, BlockScore::kSum});
  e.on_decode_step(1, std::nullopt);
  e.on_decode_step(2, std::nullopt);  // 3 positions: the most a budget of 1 block of 2 holds between evictions
  EXPECT_THROW(e.on_decode_step(3, std::nullopt), ContractError);
  EXPECT_EQ(e.kept_count(), 3U);
}

// ---- shared layer budgets ---------------------------------------------------

// H2O, recentWindow 1, two heads sharing 6 positions. Head 0 puts all its
// attention on position 0; head 1 spreads it. After step 3 (scores):
//   head 0: p0 3, p1 0, p2 0, p3 protected
//   head 1: p0 1 + 1/2 + 1/4 = 1.75, p1 1/2 + 1/4 = 0.75, p2 1/2, p3 protected
// The layer holds 8: two go -- head 0's p1 and p2 (score 0, lower positions first).
LayerBudget stepped_layer(std::int64_t layer_budget, std::int64_t floor) {
  LayerBudget layer("h2o", {{"recentWindow", 1}}, LayerBudgetParams{2, layer_budget, floor});
  const std::vector<std::vector<float>> head0{{1}, {1, 0}, {1, 0, 0}};
  const std::vector<std::vector<float>> head1{{1}, {0.5F, 0.5F}, {0.25F, 0.25F, 0.5F}};
  for (int t = 1; t <= 3; ++t) {
    layer.on_decode_step(0, t, std::span<const float>(head0[static_cast<std::size_t>(t - 1)]));
    layer.on_decode_step(1, t, std::span<const float>(head1[static_cast<std::size_t>(t - 1)]));
  }
  return layer;
}

TEST(LayerBudget, AConcentratedHeadGivesRoomToASpreadOne) {
  LayerBudget layer = stepped_layer(6, 1);
  EXPECT_EQ(layer.head_budget(), 5);
  EXPECT_EQ(layer.evict(6), 2U);
  EXPECT_EQ(Positions(layer.victims(0).begin(), layer.victims(0).end()), (Positions{1, 2}));
  EXPECT_TRUE(layer.victims(1).empty());
  EXPECT_EQ(layer.kept_count(0), 2U);
  EXPECT_EQ(layer.kept_count(1), 4U);
  // Step 4: head 0 pays [1, 0] to (0, 3), head 1 a quarter to each of (0,1,2,3):
  //   head 0: p0 4, p3 0, p4 protected;  head 1: p0 2, p1 1, p2 0.75, p3 0.25, p4 protected.
  // 8 held, two go: head 0's p3 (0), then head 1's p3 (0.25).
  const std::vector<float> a{1, 0};
  const std::vector<float> b{0.25F, 0.25F, 0.25F, 0.25F};
  layer.on_decode_step(0, 4, std::span<const float>(a));
  layer.on_decode_step(1, 4, std::span<const float>(b));
  EXPECT_EQ(layer.evict(6), 2U);
  EXPECT_EQ(Positions(layer.victims(0).begin(), layer.victims(0).end()), (Positions{3}));
  EXPECT_EQ(Positions(layer.victims(1).begin(), layer.victims(1).end()), (Positions{3}));
  EXPECT_EQ(layer.total_kept(), 6U);
}

TEST(LayerBudget, TheFloorHoldsEveryHead) {
  // Floor 3: head 0 (4 held) may give up only one, so the second victim is
  // head 1's lowest, p2 (1/2), though head 0's p2 scores 0.
  LayerBudget layer = stepped_layer(6, 3);
  EXPECT_EQ(layer.head_budget(), 3);
  EXPECT_EQ(layer.evict(6), 2U);
  EXPECT_EQ(Positions(layer.victims(0).begin(), layer.victims(0).end()), (Positions{1}));
  EXPECT_EQ(Positions(layer.victims(1).begin(), layer.victims(1).end()), (Positions{2}));
}

TEST(LayerBudget, NormalizedScoresAreWhatTheLayerCompares) {
  // The same steps with normalize=1: head 1's means are p0 1.75/3, p1 0.75/2 =
  // 0.375, p2 0.5/1; head 0's p1 and p2 0. Floor 3: head 0 gives up p1 (0),
  // then head 1 its lowest mean, p1 -- where the sums (above) take its p2.
  LayerBudget layer("h2o", {{"recentWindow", 1}, {"normalize", 1}}, LayerBudgetParams{2, 6, 3});
  const std::vector<std::vector<float>> head0{{1}, {1, 0}, {1, 0, 0}};
  const std::vector<std::vector<float>> head1{{1}, {0.5F, 0.5F}, {0.25F, 0.25F, 0.5F}};
  for (int t = 1; t <= 3; ++t) {
    layer.on_decode_step(0, t, std::span<const float>(head0[static_cast<std::size_t>(t - 1)]));
    layer.on_decode_step(1, t, std::span<const float>(head1[static_cast<std::size_t>(t - 1)]));
  }
  EXPECT_EQ(layer.evict(6), 2U);
  EXPECT_EQ(Positions(layer.victims(0).begin(), layer.victims(0).end()), (Positions{1}));
  EXPECT_EQ(Positions(layer.victims(1).begin(), layer.victims(1).end()), (Positions{1}));
}

TEST(LayerBudget, TiesGoToTheLowerPositionThenTheLowerHead) {
  // Both heads see head 1's weights: identical scores; budget 7 takes one --
  // p2 (1/2) of head 0.
  LayerBudget layer("h2o", {{"recentWindow", 1}}, LayerBudgetParams{2, 7, 1});
  const std::vector<std::vector<float>> w{{1}, {0.5F, 0.5F}, {0.25F, 0.25F, 0.5F}};
  for (int t = 1; t <= 3; ++t) {
    for (std::size_t h = 0; h < 2; ++h) layer.on_decode_step(h, t, std::span<const float>(w[static_cast<std::size_t>(t - 1)]));
  }
  EXPECT_EQ(layer.evict(7), 1U);
  EXPECT_EQ(Positions(layer.victims(0).begin(), layer.victims(0).end()), (Positions{2}));
  EXPECT_TRUE(layer.victims(1).empty());
}

TEST(LayerBudget, DefaultFloorIsAFifthOfTheFairShare) {
  EXPECT_EQ(default_head_floor(4096, 8), 102);  // 4096 / 40
  LayerBudget layer("tova", {}, LayerBudgetParams{8, 4096, -1});
  EXPECT_EQ(layer.head_floor(), 102);
  EXPECT_EQ(layer.head_budget(), 4096 - 7 * 102);
}

TEST(LayerBudgetErrors, BadConfigurationsAreRefusedAtConstruction) {
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{0, 64, -1}); }, "LayerBudget: heads (0) must be at least 1");
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{4, 64, 17}); },
                 "LayerBudget: headFloor (17) times heads (4) must be at most layerBudget (64)");
  // H2O protects 32 newest positions a head: 4 heads need 128 > 100.
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{4, 100, 0}); }, "LayerBudget: layerBudget (100) cannot be met");
  expect_refused([] { LayerBudget("h2o", {{"budget", 5}}, LayerBudgetParams{2, 64, 0}); },
                 "LayerBudget: budget (5) must equal layerBudget - (heads - 1) x headFloor");
  LayerBudget layer("tova", {}, LayerBudgetParams{2, 8, 1});
  EXPECT_THROW(layer.on_decode_step(2, 1, std::nullopt), ContractError);
  // A floor near 2^62 once wrapped floor x heads negative and reached the
  // policy as a negative budget.
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{2, 128, std::int64_t{1} << 62}); },
                 "LayerBudget: headFloor (4611686018427387904) times heads (2) must be at most layerBudget (128)");
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{1025, 4096, -1}); }, "heads (1025) must be at most 1024");
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{2, kMaxLayerBudget + 1, -1}); },
                 "layerBudget (67108865) must be at most 67108864");
}

// Storage is bounded before it is taken: 1,024 heads of 2^18 positions each
// (about 15 MB a head) would be some 15 GB; only the first head is built
// before the refusal. (Once 1,024 x 2^24 asked ~700 GB and met bad_alloc or
// the OOM killer.)
TEST(LayerBudgetErrors, StorageAboveOneGibibyteIsRefusedBeforeItIsTaken) {
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{1024, std::int64_t{1} << 18, 0}); },
                 "LayerBudget: heads (1024) x ");
  expect_refused([] { LayerBudget("h2o", {}, LayerBudgetParams{1024, std::int64_t{1} << 18, 0}); },
                 "bytes one layer may hold: lower heads or layerBudget");
  // A layer of real size is far inside the bound.
  const LayerBudget fine("scissorhands", {}, LayerBudgetParams{32, 32 * 4096, -1});
  EXPECT_LT(fine.memory_bytes(), std::size_t{1} << 30);
}

// PyramidKV in layer mode holds what its fixed budgets hold: layer 3 of 4 at
// an average budget of 64 keeps max(floor(2*64*3/15), 32 + 1) = 33 a head,
// 66 for two heads -- not the 92 that the share of the larger head budget
// (128 - 12 = 116: floor(2*116*3/15) = 46 a head) once allowed.
// The fair share is a budget the caller never wrote: a policy that refuses
// it is named with where the number came from.
TEST(LayerBudgetErrors, AFairShareThePolicyRefusesIsNamedAsSuch) {
  expect_refused([] { LayerBudget("pyramidkv", {}, LayerBudgetParams{2, 64, -1}); },
                 "LayerBudget: layerBudget (64) / heads (2) = 32, the fair share pyramidkv's cap is taken at, is "
                 "refused: PyramidKV: recentWindow (32) must be smaller than budget (32)");
}

TEST(LayerBudget, PyramidKVHoldsItsFixedSharePerLayer) {
  const std::int64_t shares[] = {128, 128, 102, 66};  // 2 x min(64, max(share, 33)) for layers 0 ... 3
  for (std::int64_t l = 0; l < 4; ++l) {
    LayerBudget layer("pyramidkv", {{"layer", l}, {"numLayers", 4}}, LayerBudgetParams{2, 128, -1});
    std::vector<float> w(256, 1.0F / 256);
    std::size_t after = 0;
    for (int t = 1; t <= 200; ++t) {
      for (std::size_t h = 0; h < 2; ++h) {
        layer.on_decode_step(h, t, std::span<const float>(w.data(), layer.kept_count(h)));
      }
      if (layer.total_kept() > 128) {
        layer.evict(128);
        after = layer.total_kept();
        ASSERT_EQ(after, static_cast<std::size_t>(shares[l])) << "layer " << l << " step " << t;
      }
    }
    EXPECT_EQ(after, static_cast<std::size_t>(shares[l])) << "layer " << l << ": no eviction";
  }
}

TEST(LayerBudget, NoAllocationAfterConstruction) {
  LayerBudget layer("snapkv", {{"recentWindow", 4}}, LayerBudgetParams{4, 256, -1});
  std::vector<float> w(512, 0.0625F);
  testing::CountAllocations count;
  for (int t = 1; t <= 200; ++t) {
    for (std::size_t h = 0; h < 4; ++h) {
      layer.on_decode_step(h, t, std::span<const float>(w.data(), layer.kept_count(h)));
    }
    layer.evict(256);
  }
  EXPECT_EQ(count.count(), 0U);
}

TEST(PolicyScores, RemoveRefusesWhatThePolicyWouldNotEvict) {
  auto h2o = make_policy("h2o", {{"budget", 8}, {"recentWindow", 2}});
  for (int t = 1; t <= 4; ++t) h2o->on_decode_step(t, std::nullopt);
  const Positions recent{4};
  EXPECT_THROW(h2o->remove(recent), ContractError);
  const Positions unheld{7};
  EXPECT_THROW(h2o->remove(unheld), ContractError);
  const Positions unordered{2, 1};
  EXPECT_THROW(h2o->remove(unordered), ContractError);
  EXPECT_EQ(h2o->kept_count(), 5U);
  auto streaming = make_policy("streaming-llm", {{"budget", 8}, {"sinks", 2}});
  streaming->on_decode_step(1, std::nullopt);
  const Positions sink{1};
  EXPECT_THROW(streaming->remove(sink), ContractError);
}

}  // namespace
}  // namespace kvevict
