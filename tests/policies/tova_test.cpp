#include <gtest/gtest.h>

#include <algorithm>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/tova.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(TOVA, TheLatestWeightReplacesTheRecord) {
  TOVA p({.budget = 3});
  EXPECT_EQ(p.last_attention_of(0), -1.0);  // never observed
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.25F, 0.75F});
  p.on_decode_step(3, V{0.5F, 0.125F, 0.375F});
  EXPECT_EQ(p.last_attention_of(0), 0.5);
  EXPECT_EQ(p.last_attention_of(1), 0.125);  // 0.75 before: replaced, not summed
  EXPECT_EQ(p.last_attention_of(3), -1.0);
  // H2O would drop 2 (score 0.375 < 0.875); TOVA drops 1.
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1}));
}

TEST(TOVA, TheNewestUnobservedTokenIsImmune) {
  TOVA p({.budget = 1});
  p.on_decode_step(1, V{1.0F});
  EXPECT_EQ(victims(p.evict(1)), (std::vector<Position>{0}));
  // After an absent step nothing is observed: nothing can go.
  p.on_decode_step(2, std::nullopt);
  EXPECT_EQ(victims(p.evict(1)), (std::vector<Position>{}));
  EXPECT_EQ(p.kept_count(), 2U);
}

TEST(TOVA, TiesAndAscendingVictims) {
  TOVA p({.budget = 4});
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.25F, 0.5F, 0.25F});
  p.on_decode_step(4, V{0.3125F, 0.0625F, 0.5F, 0.125F});
  // last: 0 -> 0.3125, 1 -> 0.0625, 2 -> 0.5, 3 -> 0.125, 4 unobserved.
  EXPECT_EQ(victims(p.evict(2)), (std::vector<Position>{0, 1, 3}));
  EXPECT_EQ(p.kept_count(), 2U);
  TOVA q({.budget = 2});
  q.on_decode_step(1, V{1.0F});
  q.on_decode_step(2, V{0.5F, 0.5F});
  EXPECT_EQ(victims(q.evict(2)), (std::vector<Position>{0}));  // tie: lower goes
}

TEST(TOVA, MemoryAndRules) {
  EXPECT_EQ(TOVA({.budget = 512}).memory_bytes(), 13U * 513U);
  EXPECT_THROW(TOVA({.budget = 0}), ParameterError);
}

TEST(TOVACanonical, KeepsTheRecencyBandAndTheSinksWithNoRuleForEither) {
  TOVA p({.budget = 256});
  DecodeTrace trace;
  const auto held = testing::held_after_run(p, trace, 256, trace.steps());
  ASSERT_EQ(held.size(), 256U);
  for (Position s = 0; s < 4; ++s) EXPECT_TRUE(std::binary_search(held.begin(), held.end(), s)) << s;
  // The band: the 64 positions before the newest (4095), and the newest itself.
  for (Position q = 4095 - 64; q <= 4095; ++q) {
    EXPECT_TRUE(std::binary_search(held.begin(), held.end(), q)) << q;
  }
}

}  // namespace
}  // namespace kvevict
