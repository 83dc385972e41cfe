#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/snapkv.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(SnapKV, AttentionAgesOutOfTheObservationWindow) {
  SnapKV p({.budget = 3, .recent_window = 1, .obs_window = 2, .pool_kernel = 1});
  p.on_decode_step(1, V{1.0F});                // ring cell 0
  p.on_decode_step(2, V{0.125F, 0.875F});      // ring cell 1
  EXPECT_EQ(p.window_score_of(0), 1.125);
  p.on_decode_step(3, V{0.25F, 0.0625F, 0.6875F});  // overwrites cell 0
  EXPECT_EQ(p.window_score_of(0), 0.375);
  EXPECT_EQ(p.window_score_of(1), 0.9375);
  EXPECT_EQ(p.window_score_of(2), 0.6875);
  // H2O would keep 0 (score 1.375); SnapKV forgot its first step.
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{0}));
}

TEST(SnapKV, MaxPoolingProtectsNeighboursOfAStrongPosition) {
  // Sums: 0 -> 0.25, 1 -> 0.0625, 2 -> 0.625, 3 -> 0.0625 (4 protected, new).
  auto feed = [](SnapKV& p) {
    p.on_decode_step(1, V{0.25F});
    p.on_decode_step(2, V{0.0F, 0.0625F});
    p.on_decode_step(3, V{0.0F, 0.0F, 0.625F});
    p.on_decode_step(4, V{0.0F, 0.0F, 0.0F, 0.0625F});
  };
  SnapKV plain({.budget = 4, .recent_window = 1, .obs_window = 8, .pool_kernel = 1});
  feed(plain);
  EXPECT_EQ(victims(plain.evict(4)), (std::vector<Position>{1}));  // tie with 3: lower goes
  SnapKV pooled({.budget = 4, .recent_window = 1, .obs_window = 8, .pool_kernel = 3});
  feed(pooled);
  // Pooled: 0 -> 0.25, 1 -> 0.625, 2 -> 0.625, 3 -> 0.625 (neighbour 2).
  EXPECT_EQ(victims(pooled.evict(4)), (std::vector<Position>{0}));
}

TEST(SnapKV, AbsentStepsDoNotAdvanceTheRingButEmptyOnesDo) {
  SnapKV p({.budget = 4, .recent_window = 1, .obs_window = 2, .pool_kernel = 1});
  p.on_decode_step(1, V{0.5F});      // cell 0
  p.on_decode_step(2, std::nullopt); // nothing
  p.on_decode_step(3, V{});          // cell 1 advanced, nothing written
  EXPECT_EQ(p.window_score_of(0), 0.5);
  p.on_decode_step(4, V{0.25F, 0.125F, 0.0625F, 0.5F});  // cell 0 again
  EXPECT_EQ(p.window_score_of(0), 0.25);
  EXPECT_EQ(p.window_score_of(3), 0.5);
  // Sums 0 -> 0.25, 1 -> 0.125, 2 -> 0.0625, 3 -> 0.5; 4 protected: 2 then 1 go.
  EXPECT_EQ(victims(p.evict(3)), (std::vector<Position>{1, 2}));
}

TEST(SnapKV, Rules) {
  try {
    SnapKV p({.budget = 8, .recent_window = 2, .obs_window = 4, .pool_kernel = 4});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "SnapKV: poolKernel (4) must be odd: the pooling window is centred on each position");
  }
  EXPECT_THROW(SnapKV({.budget = 8, .recent_window = 2, .obs_window = 4, .pool_kernel = 0}), ParameterError);
  EXPECT_THROW(SnapKV({.budget = 8, .recent_window = 2, .obs_window = 0, .pool_kernel = 1}), ParameterError);
  EXPECT_THROW(SnapKV({.budget = 8, .recent_window = 8, .obs_window = 4, .pool_kernel = 1}), ParameterError);
  EXPECT_EQ(SnapKV().memory_bytes(), (4U + 4U * 16U + 17U + 8U) * 513U);  // + ring slot and freed scratch
  // Found by fuzzing: a huge window allocated hundreds of megabytes up front.
  try {
    SnapKV p({.budget = 512, .recent_window = 32, .obs_window = 222222, .pool_kernel = 7});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "SnapKV: obsWindow (222222) must be at most 4096");
  }
  EXPECT_THROW(SnapKV({.budget = 1 << 20, .recent_window = 32, .obs_window = 4096, .pool_kernel = 7}), ParameterError);
}

TEST(SnapKVCanonical, NoPoolingIsExactlyTOVA) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const RunRow snap = testing::run_one("snapkv", {{"poolKernel", 1}}, b);
    const RunRow& tova = testing::canonical_row("tova", b);
    EXPECT_EQ(snap.totals.total_retained_mass, tova.totals.total_retained_mass) << b;
    EXPECT_EQ(snap.totals.total_heavy_hits, tova.totals.total_heavy_hits) << b;
  }
}

TEST(SnapKVCanonical, ObservationWindowOneEqualsSixtyFour) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const RunRow one = testing::run_one("snapkv", {{"obsWindow", 1}}, b);
    const RunRow wide = testing::run_one("snapkv", {{"obsWindow", 64}}, b);
    EXPECT_EQ(one.totals.total_retained_mass, wide.totals.total_retained_mass) << b;
    EXPECT_EQ(one.totals.total_heavy_hits, wide.totals.total_heavy_hits) << b;
  }
}

}  // namespace
}  // namespace kvevict
