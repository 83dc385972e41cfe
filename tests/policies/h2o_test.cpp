#include <gtest/gtest.h>

#include <string>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/h2o.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(H2O, ScoresAccumulateInFloat64) {
  H2O p({.budget = 4, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.625F, 0.375F});
  p.on_decode_step(3, V{0.125F, 0.5F, 0.375F});
  EXPECT_EQ(p.score_of(0), 1.75);
  EXPECT_EQ(p.score_of(1), 0.875);
  EXPECT_EQ(p.score_of(2), 0.375);
  EXPECT_EQ(p.score_of(3), 0.0);
  EXPECT_EQ(p.score_of(4), -1.0);
}

TEST(H2O, LowestScoreOutsideTheRecentWindowGoes) {
  H2O p({.budget = 3, .recent_window = 2});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.75F, 0.25F});
  p.on_decode_step(3, V{0.5F, 0.375F, 0.125F});
  // Scores 0: 2.25, 1: 0.625, 2: 0.125, 3: 0; 2 and 3 are protected.
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
}

TEST(H2O, TiesEvictTheLowerPosition) {
  H2O p({.budget = 3, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.25F, 0.75F, 0.0F});
  // p: 0 -> 1.75, 1 -> 1.25, 2 -> 0, so 2 goes. q ties 1 and 2:
  H2O q({.budget = 3, .recent_window = 1});
  q.on_decode_step(1, V{1.0F});
  q.on_decode_step(2, V{0.75F, 0.25F});
  q.on_decode_step(3, V{0.5F, 0.0F, 0.25F});
  // 0: 2.25, 1: 0.25, 2: 0.25 -> 1 goes (lower of the tie).
  EXPECT_EQ(victims(q.evict(3)), (std::vector<Position>{1}));
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{2}));
}

TEST(H2O, AbsentAttentionAndShortVectors) {
  H2O p({.budget = 3, .recent_window = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, std::nullopt);
  EXPECT_EQ(p.score_of(0), 1.0);
  p.on_decode_step(3, V{0.0625F});  // covers position 0 only
  EXPECT_EQ(p.score_of(0), 1.0625);
  EXPECT_EQ(p.score_of(1), 0.0);
  EXPECT_EQ(p.score_of(2), 0.0);
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
}

TEST(H2O, RulesAndMemory) {
  EXPECT_THROW(H2O({.budget = 4, .recent_window = 4}), ParameterError);
  EXPECT_THROW(H2O({.budget = -1, .recent_window = 0}), ParameterError);
  EXPECT_EQ(H2O({.budget = 512, .recent_window = 32}).memory_bytes(), 13U * 513U);
  H2O p({.budget = 1, .recent_window = 0});
  p.on_decode_step(1, V{1.0F});
  EXPECT_THROW(p.on_decode_step(2, V{0.5F, 0.5F}), ContractError);
  EXPECT_EQ(p.score_of(0), 1.0);  // unchanged by the refused step
}

TEST(H2ONormalize, RanksByTheMeanOverTheStepsThatScoredIt) {
  // Sums 0: 1 + 0.5 + 0.25 = 1.75 over 3 steps, 1: 0.75 over 2, 2: 0.5 over 1,
  // 3: nothing yet. Means 0.583.., 0.375, 0.5, 0; the sum would drop 2.
  H2O p({.budget = 3, .recent_window = 1, .normalize = 1});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.25F, 0.25F, 0.5F});
  EXPECT_EQ(p.score_of(0), 1.75 / 3.0);
  EXPECT_EQ(p.score_of(1), 0.375);
  EXPECT_EQ(p.score_of(2), 0.5);
  EXPECT_EQ(p.score_of(3), 0.0);
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
  // The survivors keep their counts through the compaction: step 4 covers
  // 0, 2, 3 (and admits 4); 2's mean is (0.5 + 0.25) / 2, 3's 0.5 / 1.
  p.on_decode_step(4, V{0.25F, 0.25F, 0.5F});
  EXPECT_EQ(p.score_of(0), 2.0 / 4.0);
  EXPECT_EQ(p.score_of(2), 0.375);
  EXPECT_EQ(p.score_of(3), 0.5);
  // Two victims at once (budget 2 of 4 held, 4 protected): the lowest means, 2 then 0.
  EXPECT_EQ(victims(p.evict(2)), (std::vector<Position>{0, 2}));
  EXPECT_EQ(p.kept_count(), 2U);
}

TEST(H2ONormalize, IsASwitchAndCostsTwelveBytesASlot) {
  EXPECT_EQ(H2O({.budget = 512, .normalize = 1}).memory_bytes(), 25U * 513U);
  const auto refusal = [](std::int64_t normalize) -> std::string {
    try {
      H2O p({.budget = 8, .recent_window = 1, .normalize = normalize});
    } catch (const ParameterError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(refusal(2), "H2O: normalize (2) must be 0 or 1");
  EXPECT_EQ(refusal(-1), "H2O: normalize (-1) must be 0 or 1");
  EXPECT_EQ(refusal(1), "no error");
}

TEST(H2OCanonical, RecentWindowGainStopsOnceItCoversTheBand) {
  // The canonical recency band is 64 wide: 32 -> 64 gains a lot, 64 -> 128 little.
  auto mass = [](std::int64_t rw) {
    return testing::run_one("h2o", {{"recentWindow", rw}}, 256).metrics.retained_attention_mass;
  };
  const double m16 = mass(16), m32 = mass(32), m64 = mass(64), m128 = mass(128);
  EXPECT_GT(m32 - m16, 0.1);
  EXPECT_GT(m64 - m32, 0.1);
  EXPECT_LT(m128 - m64, 0.01);
  EXPECT_GE(m128, m64);
}

}  // namespace
}  // namespace kvevict
