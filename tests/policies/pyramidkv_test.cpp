#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/pyramidkv.h"
#include "support.h"

namespace kvevict {
namespace {

using V = std::vector<float>;
std::vector<Position> victims(std::span<const Position> s) { return {s.begin(), s.end()}; }

TEST(PyramidBudget, SpecCheckValues) {
  EXPECT_EQ(pyramid_budget(512, 0, 32, 4), 819);
  EXPECT_EQ(pyramid_budget(512, 31, 32, 4), 204);
  EXPECT_EQ(pyramid_budget(6, 0, 3, 2), 8);
  EXPECT_EQ(pyramid_budget(6, 1, 3, 2), 6);
  EXPECT_EQ(pyramid_budget(6, 2, 3, 2), 4);
  EXPECT_EQ(pyramid_budget(10, 3, 4, 4), 4);
  EXPECT_EQ(pyramid_budget(77, 0, 1, 9), 77);
}

TEST(PyramidBudget, SharesSumToAtMostLTimesBudgetAndFallShortByLessThanL) {
  for (const std::int64_t budget : {1, 7, 64, 100, 512, 4096}) {
    for (const std::int64_t layers : {2, 3, 4, 5, 12, 32, 80}) {
      for (const std::int64_t ratio : {1, 2, 3, 4, 8, 20}) {
        std::int64_t total = 0;
        for (std::int64_t l = 0; l < layers; ++l) total += pyramid_budget(budget, l, layers, ratio);
        EXPECT_LE(total, layers * budget) << budget << " " << layers << " " << ratio;
        EXPECT_LT(layers * budget - total, layers) << budget << " " << layers << " " << ratio;
      }
    }
  }
}

TEST(PyramidBudget, StrictlyDecreasingUniformAtOneAndExactInTheMiddle) {
  for (std::int64_t l = 1; l < 32; ++l) {
    EXPECT_LT(pyramid_budget(512, l, 32, 4), pyramid_budget(512, l - 1, 32, 4));
    EXPECT_EQ(pyramid_budget(512, l, 32, 1), 512);
  }
  for (const std::int64_t layers : {3, 5, 7, 33}) {
    for (const std::int64_t ratio : {2, 4, 7}) {
      EXPECT_EQ(pyramid_budget(300, layers / 2, layers, ratio), 300);
    }
  }
}

TEST(PyramidBudget, RefusesArgumentsOutOfRange) {
  EXPECT_THROW(pyramid_budget(512, 4, 4, 4), ParameterError);
  EXPECT_THROW(pyramid_budget(512, -1, 4, 4), ParameterError);
  EXPECT_THROW(pyramid_budget(512, 0, 0, 4), ParameterError);
  EXPECT_THROW(pyramid_budget(512, 0, 4, 0), ParameterError);
  EXPECT_THROW(pyramid_budget(0, 0, 4, 4), ParameterError);
}

TEST(PyramidKV, ADeepLayerHoldsItsSmallerShareAfterEviction) {
  // budget 6, layer 2 of 3, ratio 2: share 4, effective max(4, 2) = 4.
  PyramidKV p({.budget = 6, .layer = 2, .num_layers = 3, .pyramid_ratio = 2,
               .recent_window = 1, .obs_window = 8, .pool_kernel = 1});
  EXPECT_EQ(p.effective_budget(), 4);
  p.on_decode_step(1, V{1.0F});
  p.on_decode_step(2, V{0.5F, 0.5F});
  p.on_decode_step(3, V{0.25F, 0.25F, 0.5F});
  p.on_decode_step(4, V{0.125F, 0.125F, 0.25F, 0.5F});
  // kept 5 <= budget 6, yet the layer evicts to its share of 4.
  // Sums: 0 -> 1.875, 1 -> 0.875, 2 -> 0.75, 3 -> 0.5; 4 is protected.
  EXPECT_EQ(victims(p.evict(6)), (std::vector<Position>{3}));
  EXPECT_EQ(p.kept_count(), 4U);
  EXPECT_TRUE(p.evict(6).empty());
}

TEST(PyramidKV, EffectiveBudgetKeepsOneChoosablePosition) {
  // Share pyramid_budget(10, 3, 4, 4) = 4 is below recentWindow + 1 = 5.
  PyramidKV p({.budget = 10, .layer = 3, .num_layers = 4, .pyramid_ratio = 4,
               .recent_window = 4, .obs_window = 8, .pool_kernel = 1});
  EXPECT_EQ(p.effective_budget(), 5);
  // Capacity is max(5, 10) + 1 = 11 slots, 11 / 64 + 2 = 2 words of screen
  // bits, 12 rings (one waits as a hole), and a screen list of 11 entries.
  EXPECT_EQ(p.memory_bytes(), (4U + 8U + 8U + 1U) * 11U + 2U * 8U + (4U * 8U + 4U) * 12U + 11U * 12U);
}

TEST(PyramidKV, Rules) {
  try {
    PyramidKV p({.budget = 8, .layer = 4, .num_layers = 4});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "PyramidKV: layer (4) must be in [0, numLayers) = [0, 4)");
  }
  EXPECT_THROW(PyramidKV({.budget = 8, .pyramid_ratio = 0}), ParameterError);
  EXPECT_THROW(PyramidKV({.budget = 8, .num_layers = 0}), ParameterError);
  EXPECT_THROW(PyramidKV({.budget = 8, .recent_window = 2, .pool_kernel = 2}), ParameterError);
}

TEST(PyramidKVCanonical, OneLayerIsExactlySnapKV) {
  for (const std::int64_t b : {256, 512, 1024}) {
    const RunRow one = testing::run_one("pyramidkv", {{"numLayers", 1}}, b);
    const RunRow& snap = testing::canonical_row("snapkv", b);
    EXPECT_EQ(one.totals.total_retained_mass, snap.totals.total_retained_mass) << b;
    EXPECT_EQ(one.totals.total_heavy_hits, snap.totals.total_heavy_hits) << b;
    EXPECT_EQ(one.totals.eviction_calls, snap.totals.eviction_calls) << b;
  }
}

}  // namespace
}  // namespace kvevict
