#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/h2o.h"
#include "kvevict/core/policies/scissorhands.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(Scissorhands, NobodyVotesAtTheFirstStep) {
  Scissorhands p({.budget = 4, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});  // weight 1, share 1: not strictly above
  EXPECT_EQ(p.votes_of(0), 0);
  EXPECT_EQ(p.votes_of(1), 0);
}

TEST(Scissorhands, AWeightEqualToItsShareEarnsNothing) {
  Scissorhands p({.budget = 4, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  EXPECT_EQ(p.votes_of(0), 0);
  EXPECT_EQ(p.votes_of(1), 0);
  p.on_decode_step(3, V{0.25F, 0.375F, 0.375F});  // share 1/3: 0.375 > 0.333
  EXPECT_EQ(p.votes_of(0), 0);
  EXPECT_EQ(p.votes_of(1), 1);
  EXPECT_EQ(p.votes_of(2), 1);
}

TEST(Scissorhands, ShareUsesTheFullAttentionLength) {
  // Three held, but a vector of four: share 1/4, only the first three read.
  Scissorhands p({.budget = 4, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.3125F, 0.1875F, 0.25F, 0.25F});
  EXPECT_EQ(p.votes_of(0), 1);  // 0.3125 > 0.25
  EXPECT_EQ(p.votes_of(1), 0);
  EXPECT_EQ(p.votes_of(2), 0);  // equal to the share
  EXPECT_EQ(p.kept_count(), 4U);
}

TEST(Scissorhands, TiesEvictTheLowerPosition) {
  Scissorhands p({.budget = 3, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.25F, 0.25F, 0.5F});
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{0}));
}

TEST(Scissorhands, VictimsComeBackAscending) {
  // Votes: 0 -> 2, 1 -> 1, 2 -> 1, 3 -> 0, 4 -> 1; the argmin picks 3 first,
  // then 1 (lowest of the ones tied at 1), and they come back as [1, 3].
  Scissorhands p({.budget = 5, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.75F, 0.25F});
  p.on_decode_step(3, V{0.5F, 0.0625F, 0.4375F});
  p.on_decode_step(4, V{0.125F, 0.375F, 0.25F, 0.25F});
  p.on_decode_step(5, V{0.125F, 0.125F, 0.125F, 0.125F, 0.5F});
  ASSERT_EQ(p.votes_of(0), 2);
  ASSERT_EQ(p.votes_of(1), 1);
  ASSERT_EQ(p.votes_of(2), 1);
  ASSERT_EQ(p.votes_of(3), 0);
  EXPECT_EQ(victims(p.evict(4)), (std::vector<Position>{1, 3}));
  EXPECT_EQ(p.kept_count(), 4U);
  EXPECT_EQ(p.votes_of(1), -1);
  EXPECT_EQ(p.votes_of(2), 1);  // state moved with the survivor
}

TEST(Scissorhands, AbsentAttentionChangesNothing) {
  Scissorhands p({.budget = 3, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.75F, 0.25F});
  p.on_decode_step(3, std::nullopt);
  EXPECT_EQ(p.votes_of(0), 1);
  EXPECT_EQ(p.votes_of(1), 0);
  EXPECT_EQ(p.votes_of(2), 0);
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
}

TEST(ScissorhandsNormalize, RanksByTheVoteRate) {
  // Shares 1, 1/2, 1/3, 1/4. Votes 0: 2 in 4 steps, 1: 2 in 3, 2: 1 in 2,
  // 3: 1 in 1. The count drops 2 (fewest votes, lower than 3); the rate ties
  // 0 and 2 at 0.5 and drops the lower, 0.
  Scissorhands p({.budget = 4, .recent_window = 1, .normalize = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.75F, 0.25F});
  p.on_decode_step(3, V{0.125F, 0.5F, 0.375F});
  p.on_decode_step(4, V{0.3125F, 0.3125F, 0.0625F, 0.3125F});
  EXPECT_EQ(p.votes_of(0), 2);
  EXPECT_EQ(p.rank_of(0), 0.5);
  EXPECT_EQ(p.rank_of(1), 2.0 / 3.0);
  EXPECT_EQ(p.rank_of(2), 0.5);
  EXPECT_EQ(p.rank_of(3), 1.0);
  EXPECT_EQ(p.rank_of(4), 0.0);
  EXPECT_EQ(victims(p.evict(4)), (std::vector<Position>{0}));
  EXPECT_EQ(p.rank_of(0), -1.0);
  // dropAmount 3 takes three at once from the same state: 4 is protected
  // (recentWindow 1); the lowest rates are 0 and 2 (1/2, the lower first), then 1 (2/3).
  Scissorhands q({.budget = 4, .recent_window = 1, .drop_amount = 3, .normalize = 1});
  q.on_decode_step(1, V{1.0F});
  q.on_decode_step(2, V{0.75F, 0.25F});
  q.on_decode_step(3, V{0.125F, 0.5F, 0.375F});
  q.on_decode_step(4, V{0.3125F, 0.3125F, 0.0625F, 0.3125F});
  EXPECT_EQ(victims(q.evict(4)), (std::vector<Position>{0, 1, 2}));
  EXPECT_EQ(q.kept_count(), 2U);
}

TEST(ScissorhandsNormalize, RulesAndMemory) {
  const auto refusal = [](std::int64_t normalize, std::int64_t history) -> std::string {
    try {
      Scissorhands p({.budget = 8, .recent_window = 1, .history_window = history, .normalize = normalize});
    } catch (const ParameterError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(refusal(2, 0), "Scissorhands: normalize (2) must be 0 or 1");
  EXPECT_EQ(refusal(1, 4),
            "Scissorhands: historyWindow (4) must be 0 with normalize=1: a history window already counts every "
            "old position's votes over the same number of steps");
  EXPECT_EQ(refusal(1, 0), "no error");
  EXPECT_EQ(Scissorhands({.budget = 512, .normalize = 1}).memory_bytes(), 21U * 513U);
}

TEST(Scissorhands, RecentWindowAtLeastTheBudgetIsRefused) {
  try {
    Scissorhands p({.budget = 8, .recent_window = 8});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(),
                 "Scissorhands: recentWindow (8) must be smaller than budget (8): there would be "
                 "nothing for the votes to choose between");
  }
  EXPECT_THROW(Scissorhands({.budget = 8, .recent_window = -1}), ParameterError);
  EXPECT_THROW(Scissorhands({.budget = 0, .recent_window = 0}), ParameterError);
  EXPECT_NO_THROW(Scissorhands({.budget = 8, .recent_window = 7}));
}

TEST(Scissorhands, ACapacityOverrunIsRefusedWithStateUnchanged) {
  Scissorhands p({.budget = 2, .recent_window = 0});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.75F, 0.25F});  // three held = budget + 1
  try {
    p.on_decode_step(3, V{0.125F, 0.75F, 0.125F});
    FAIL();
  } catch (const ContractError& e) {
    EXPECT_STREQ(e.what(),
                 "Scissorhands: asked to hold 4 positions with a budget of 2; the caller's budget "
                 "must match the policy's");
  }
  EXPECT_EQ(p.kept_count(), 3U);
  EXPECT_EQ(p.votes_of(0), 1);  // no vote moved
  EXPECT_EQ(p.votes_of(1), 0);
  EXPECT_EQ(p.votes_of(3), -1);
}

TEST(Scissorhands, PositionsMustIncrease) {
  Scissorhands p({.budget = 4, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  EXPECT_THROW(p.on_decode_step(1, V{0.5F, 0.5F}), ContractError);
  EXPECT_THROW(p.on_decode_step(-3, std::nullopt), ContractError);
  EXPECT_EQ(p.kept_count(), 2U);
}

TEST(Scissorhands, NineBytesPerSlot) {
  EXPECT_EQ(Scissorhands({.budget = 512, .recent_window = 32}).memory_bytes(), 9U * 513U);
  EXPECT_EQ(Scissorhands({.budget = 1, .recent_window = 0}).memory_bytes(), 9U * 2U);
}

// budget 2^24 with historyWindow 4096 asked for (2^24 + 1) slots of
// 4096 / 64 = 64 words, 8,589,935,104 bytes, and the tool printed
// std::bad_alloc. The vote bits are capped as SnapKV's rings are, at 256 MiB:
// 8 * ceil(historyWindow / 64) * (budget + 1) <= 2^28.
TEST(Scissorhands, AVoteHistoryOver256MiBIsRefusedAtConstruction) {
  try {
    Scissorhands p({.budget = 1 << 24, .recent_window = 32, .history_window = 4096});
    FAIL();
  } catch (const ParameterError& e) {
    // 2^28 / (8 * (2^24 + 1)) = 1.99...: one word a slot, so at most 64 steps.
    EXPECT_STREQ(e.what(),
                 "Scissorhands: historyWindow (4096) must be at most 64 at budget 16777216 (the vote "
                 "history would need more than 256 MiB)");
  }
  try {
    Scissorhands p({.budget = 1 << 20, .recent_window = 32, .history_window = 1985});
    FAIL();
  } catch (const ParameterError& e) {
    // 2^28 / (8 * (2^20 + 1)) = 31.99...: 31 words (1,984 steps) a slot fit,
    // 260,047,096 bytes; 1,985 steps take 32 words, 268,435,712 > 2^28.
    EXPECT_STREQ(e.what(),
                 "Scissorhands: historyWindow (1985) must be at most 1984 at budget 1048576 (the vote "
                 "history would need more than 256 MiB)");
  }
  // The plain limit still comes first, with its own message.
  try {
    Scissorhands p({.budget = 1 << 24, .recent_window = 32, .history_window = 5000});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "Scissorhands: historyWindow (5000) must be at most 4096");
  }
  // Within the cap: 513 slots of 9 bytes and 64 words.
  EXPECT_EQ(Scissorhands({.budget = 512, .recent_window = 32, .history_window = 4096}).memory_bytes(),
            513U * (9U + 64U * 8U));
}

TEST(Scissorhands, StartsHoldingPositionZero) {
  Scissorhands p;
  EXPECT_EQ(p.kept_count(), 1U);
  EXPECT_EQ(p.votes_of(0), 0);
  EXPECT_TRUE(p.evict(1).empty());
}

// The stale spike (spec/policies.md): position 0 takes nearly all the
// attention on the first two steps and almost nothing after. H2O's sum defends
// it; Scissorhands' count lets it go. Budget 5, recent window 2.
TEST(ScissorhandsVersusH2O, AStaleSpikeSeparatesASumFromACount) {
  const std::vector<V> steps{
      {1.0F},
      {0.9375F, 0.0625F},
      {0.0625F, 0.5F, 0.4375F},
      {0.0625F, 0.3125F, 0.3125F, 0.3125F},
      {0.0F, 0.25F, 0.25F, 0.25F, 0.25F},
  };
  H2O h2o({.budget = 5, .recent_window = 2});
  Scissorhands sh({.budget = 5, .recent_window = 2});
  for (std::size_t i = 0; i < steps.size(); ++i) {
    h2o.on_decode_step(static_cast<std::int64_t>(i + 1), steps[i]);
    sh.on_decode_step(static_cast<std::int64_t>(i + 1), steps[i]);
  }
  EXPECT_EQ(h2o.score_of(0), 2.0625);  // 1 + 0.9375 + 0.0625 + 0.0625 + 0
  EXPECT_EQ(sh.votes_of(0), 1);        // only step 2 beat the share
  const auto h2o_victims = victims(h2o.evict(5));
  const auto sh_victims = victims(sh.evict(5));
  EXPECT_EQ(h2o_victims, (std::vector<Position>{3}));  // score 0.5625, the lowest outside {4, 5}
  EXPECT_EQ(sh_victims, (std::vector<Position>{0}));   // 1 vote, tied with nobody lower
  EXPECT_NE(h2o_victims, sh_victims);
}

TEST(ScissorhandsCanonical, WithinOneHundredthOfH2OOnBothMetrics) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const auto& sh = testing::canonical_row("scissorhands", b).metrics;
    const auto& h2o = testing::canonical_row("h2o", b).metrics;
    EXPECT_LT(std::abs(sh.retained_attention_mass - h2o.retained_attention_mass), 0.01) << b;
    EXPECT_LT(std::abs(sh.heavy_hitter_recall - h2o.heavy_hitter_recall), 0.01) << b;
  }
}

TEST(ScissorhandsCanonical, WideningTheRecentWindowToTheBandPaysOff) {
  const double narrow = testing::run_one("scissorhands", {{"recentWindow", 32}}, 256).metrics.retained_attention_mass;
  const double wide = testing::run_one("scissorhands", {{"recentWindow", 64}}, 256).metrics.retained_attention_mass;
  EXPECT_GT(wide - narrow, 0.1);
}

}  // namespace
}  // namespace kvevict
