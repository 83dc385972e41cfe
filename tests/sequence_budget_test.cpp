// One victim set for every cache of a sequence (SequenceBudget): the
// combination worked out by hand, one cache deciding as the policy itself
// (also in block_test.cpp's property, beside the block and layer evictors),
// the refusals, and no allocation after construction.
#include <gtest/gtest.h>

#include <vector>

#include "alloc_counter.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/sequence_budget.h"

namespace kvevict {
namespace {

using Positions = std::vector<Position>;

// H2O, recentWindow 1, two caches; cache 0 puts all its attention on
// position 0, cache 1 spreads it. After step 3 (block_test.cpp's layer case):
//   cache 0: p0 3, p1 0, p2 0, p3 protected    -> scaled by [0, 3]:     1, 0, 0
//   cache 1: p0 1.75, p1 0.75, p2 0.5, p3 prot. -> scaled by [0.5, 1.75]: 1, 0.2, 0
// The sequence's scores are the means: p0 1, p1 0.1, p2 0, p3 protected.
SequenceBudget stepped_sequence() {
  SequenceBudget seq("h2o", {{"recentWindow", 1}}, SequenceBudgetParams{2, 3});
  const std::vector<std::vector<float>> cache0{{1}, {1, 0}, {1, 0, 0}};
  const std::vector<std::vector<float>> cache1{{1}, {0.5F, 0.5F}, {0.25F, 0.25F, 0.5F}};
  for (int t = 1; t <= 3; ++t) {
    seq.on_decode_step(0, t, std::span<const float>(cache0[static_cast<std::size_t>(t - 1)]));
    seq.on_decode_step(1, t, std::span<const float>(cache1[static_cast<std::size_t>(t - 1)]));
  }
  return seq;
}

TEST(SequenceBudget, OneVictimSetFromEveryCachesScaledScores) {
  SequenceBudget seq = stepped_sequence();
  const auto victims = seq.evict(2);
  // p2 (0), then p1 (0.1): the same positions leave both caches. (Cache 1
  // alone would keep p1 over p2 as well; cache 0 alone has them tied.)
  EXPECT_EQ(Positions(victims.begin(), victims.end()), (Positions{1, 2}));
  EXPECT_EQ(seq.cache(0).kept_count(), 2U);
  EXPECT_EQ(seq.cache(1).kept_count(), 2U);
  EXPECT_EQ(seq.kept_count(), 2U);
}

TEST(SequenceBudget, EveryCacheLosesTheSamePositionStepAfterStep) {
  // Budget 3: one goes, p2 (0, below p1's 0.1); every cache loses it.
  SequenceBudget seq = stepped_sequence();
  const auto victims = seq.evict(3);
  EXPECT_EQ(Positions(victims.begin(), victims.end()), (Positions{2}));
  // Step 4: cache 0 pays [1, 0, 0] to (0, 1, 3), cache 1 a third to each.
  //   cache 0: p0 4, p1 0, p3 0, p4 protected -> scaled 1, 0, 0
  //   cache 1: p0 1.75 + 1/3, p1 0.75 + 1/3, p3 1/3, p4 protected -> 1, 0.4, 0
  // Means: p0 1, p1 0.2, p3 0: p3 goes at budget 3.
  const std::vector<float> a{1, 0, 0};
  const std::vector<float> b{1.0F / 3, 1.0F / 3, 1.0F / 3};
  seq.on_decode_step(0, 4, std::span<const float>(a));
  seq.on_decode_step(1, 4, std::span<const float>(b));
  const auto next = seq.evict(3);
  EXPECT_EQ(Positions(next.begin(), next.end()), (Positions{3}));
}

// keep_newest (llama.cpp's constraint: a sequence's next position must
// follow its last stored one). H2O without a recent window, one cache, after
// step 3 of [1], [0.5, 0.5], [0.4, 0.3, 0.3]: p0 1.9, p1 0.8, p2 0.3, and p3,
// the newest, 0 (no attention drawn yet). Without keep_newest p3 goes, as
// H2O's own evict() decides; with it, the next lowest, p2.
TEST(SequenceBudget, KeepNewestNeverEvictsTheLastPosition) {
  for (const bool keep : {false, true}) {
    SequenceBudget seq("h2o", {{"recentWindow", 0}},
                       SequenceBudgetParams{.caches = 1, .budget = 3, .keep_newest = keep});
    const std::vector<std::vector<float>> steps{{1}, {0.5F, 0.5F}, {0.4F, 0.3F, 0.3F}};
    for (int t = 1; t <= 3; ++t) seq.on_decode_step(0, t, std::span<const float>(steps[static_cast<std::size_t>(t - 1)]));
    const auto victims = seq.evict(3);
    EXPECT_EQ(Positions(victims.begin(), victims.end()), keep ? Positions{2} : Positions{3}) << keep;
  }
}

TEST(SequenceBudget, EachCacheOnItsOwnScaleNotTheRawMean) {
  // H2O, recentWindow 1, after 3 steps:
  //   cache 0: p0 1, p1 1.25, p2 0.75 -> scaled by [0.75, 1.25]: 0.5, 1, 0
  //   cache 1: p0 1.75, p1 0.25, p2 1 -> scaled by [0.25, 1.75]: 1, 0, 0.5
  // Means of the scaled: p0 0.75, p1 0.5, p2 0.25 -- p2 goes. The raw means
  // (1.375, 0.75, 0.875) would take p1: cache 1's wider scale would decide.
  SequenceBudget seq("h2o", {{"recentWindow", 1}}, SequenceBudgetParams{2, 3});
  const std::vector<std::vector<float>> cache0{{1}, {0, 1}, {0, 0.25F, 0.75F}};
  const std::vector<std::vector<float>> cache1{{1}, {0.75F, 0.25F}, {0, 0, 1}};
  for (int t = 1; t <= 3; ++t) {
    seq.on_decode_step(0, t, std::span<const float>(cache0[static_cast<std::size_t>(t - 1)]));
    seq.on_decode_step(1, t, std::span<const float>(cache1[static_cast<std::size_t>(t - 1)]));
  }
  const auto victims = seq.evict(3);
  EXPECT_EQ(Positions(victims.begin(), victims.end()), (Positions{2}));
}

TEST(SequenceBudget, NothingIsDueAtOrUnderTheBudget) {
  SequenceBudget seq = stepped_sequence();  // 4 held
  EXPECT_TRUE(seq.evict(4).empty());
  EXPECT_EQ(seq.kept_count(), 4U);
}

TEST(SequenceBudget, CachesThatPartAreAContractError) {
  SequenceBudget seq("h2o", {{"recentWindow", 1}}, SequenceBudgetParams{2, 8});
  const std::vector<float> w{1};
  seq.on_decode_step(0, 1, std::span<const float>(w));  // cache 1 not stepped
  try {
    seq.evict(1);
    FAIL() << "expected a ContractError";
  } catch (const ContractError& e) {
    EXPECT_NE(std::string(e.what()).find("cache 1 holds 1 positions, cache 0 2"), std::string::npos) << e.what();
  }
}

TEST(SequenceBudgetErrors, BadConfigurationsAreRefusedAtConstruction) {
  auto refused = [](const ParamMap& params, SequenceBudgetParams seq, const std::string& words) {
    try {
      SequenceBudget("h2o", params, seq);
      ADD_FAILURE() << "expected a ParameterError naming: " << words;
    } catch (const ParameterError& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  refused({}, {0, 8}, "caches (0) must be at least 1");
  refused({}, {70000, 8}, "caches (70000) must be at most 65536");
  refused({}, {2, 0}, "budget (0) must be at least 1");
  refused({{"budget", 7}}, {2, 8}, "the policy's budget (7) must equal the sequence's (8)");
  refused({{"recentWindow", 16}}, {2, 8}, "");  // H2O's own rule: its window fits in the budget
  refused({}, {65536, 1 << 20}, "bytes one sequence may hold");
}

TEST(SequenceBudget, NoAllocationAfterConstruction) {
  SequenceBudget seq("snapkv", {{"recentWindow", 4}}, SequenceBudgetParams{4, 256});
  std::vector<float> w(512, 0.0625F);
  testing::CountAllocations count;
  for (int t = 1; t <= 300; ++t) {
    for (std::size_t c = 0; c < 4; ++c) seq.on_decode_step(c, t, std::span<const float>(w.data(), seq.kept_count()));
    seq.evict(256);
  }
  EXPECT_EQ(count.count(), 0U);
  EXPECT_EQ(seq.kept_count(), 256U);
}

}  // namespace
}  // namespace kvevict
