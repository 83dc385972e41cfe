#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kvevict/core/errors.h"
#include "kvevict/core/policies/pyramidkv.h"
#include "kvevict/core/policies/snapkv.h"
#include "oracle/oracle.h"
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
  // Per held slot (513): position 4, running sum 8, pooled 8, scratch 1;
  // the screen's bits, 513 / 64 + 2 = 10 words of 8; per ring (513 + 32 =
  // 513/16 waiting as holes): 16 cells of 4, hole name 4; the screen's list,
  // 128 entries of index 4 and score 8.
  EXPECT_EQ(SnapKV().memory_bytes(), (4U + 8U + 8U + 1U) * 513U + 10U * 8U + (4U * 16U + 4U) * 545U + 128U * 12U);
  // Found by fuzzing: a huge window allocated hundreds of megabytes up front.
  try {
    SnapKV p({.budget = 512, .recent_window = 32, .obs_window = 222222, .pool_kernel = 7});
    FAIL();
  } catch (const ParameterError& e) {
    EXPECT_STREQ(e.what(), "SnapKV: obsWindow (222222) must be at most 4096");
  }
  EXPECT_THROW(SnapKV({.budget = 1 << 20, .recent_window = 32, .obs_window = 4096, .pool_kernel = 7}), ParameterError);
}

// The steady state's fast path (snapkv.cpp) chooses its one victim from
// running sums, settling near-ties by exact ring-order sums and ties by
// recomputing everything. Each way must choose the oracle's victim; the
// weights here are built to reach all three: sums that round differently
// in the two orders (1, and 24-bit fractions down to 2^-71), exact ties
// (sixteenths, and zeros), one value for every weight (everything ties), and
// plain random weights; and weights just past exact float64 arithmetic (1,
// and 24-bit fractions at 2^-28: four ones and one of them need 54 bits), where
// a zero bound would be wrong. 2,500 steps cross the resynchronisation at
// 1,024.
enum class NearTieMix { kRounding, kSixteenths, kFlat, kRandom, kBoundary };

float near_tie_weight(NearTieMix mix, std::mt19937& rng, float flat) {
  std::uniform_int_distribution<std::uint32_t> pick(0, 1U << 24);
  switch (mix) {
    case NearTieMix::kRounding:
      switch (pick(rng) % 5) {
        case 0: return 0.0F;
        case 1: return 1.0F;
        case 2: return static_cast<float>(pick(rng) % 17) / 16.0F;
        default: return std::ldexp(static_cast<float>(pick(rng)), -24 - static_cast<int>(pick(rng) % 48));
      }
    case NearTieMix::kSixteenths: return pick(rng) % 3 == 0 ? 0.0F : static_cast<float>(pick(rng) % 5) / 16.0F;
    case NearTieMix::kFlat: return flat;
    case NearTieMix::kRandom: return static_cast<float>(pick(rng)) / static_cast<float>(1U << 24) * 0.01F;
    case NearTieMix::kBoundary:
      switch (pick(rng) % 4) {
        case 0: return 0.0F;
        case 1: return 1.0F;
        default: return std::ldexp(static_cast<float>((1U << 23) + pick(rng) % 4), -28 - 23);
      }
  }
  return 0.0F;
}

template <class P>
detail::SnapKVPathCounts run_against_oracle(P& fast, oracle::Oracle& plain, std::int64_t budget, NearTieMix mix,
                                            std::uint32_t seed, int steps) {
  std::mt19937 rng(seed);
  std::vector<float> w;
  for (int t = 1; t <= steps; ++t) {
    // Mostly full rows; now and then a short one (old cells stay) or none.
    const std::uint32_t shape = rng() % 16;
    const float flat = static_cast<float>(rng() % 4) / 8.0F;
    w.clear();
    std::size_t len = fast.kept_count();
    if (shape == 0) len = rng() % (len + 1);
    for (std::size_t i = 0; i < len; ++i) w.push_back(near_tie_weight(mix, rng, flat));
    const Attention attn = shape == 1 ? Attention(std::nullopt) : Attention(std::span<const float>(w));
    fast.on_decode_step(t, attn);
    plain.on_decode_step(t, attn);
    if (static_cast<std::int64_t>(fast.kept_count()) > budget) {
      const auto a = fast.evict(budget);
      const std::vector<Position> got(a.begin(), a.end());
      const auto b = plain.evict(budget);
      const std::vector<Position> want(b.begin(), b.end());
      if (got != want) {
        ADD_FAILURE() << "step " << t << ": victims differ from the oracle's";
        return fast.path_counts();
      }
    }
  }
  return fast.path_counts();
}

TEST(SnapKVFastPath, EveryWayOfChoosingMatchesTheOracleOnNearTies) {
  detail::SnapKVPathCounts total;
  std::uint32_t seed = 1;
  for (const NearTieMix mix : {NearTieMix::kRounding, NearTieMix::kSixteenths, NearTieMix::kFlat, NearTieMix::kRandom,
                               NearTieMix::kBoundary}) {
    for (const std::int64_t kernel : {1, 3, 7, 15}) {
      for (const auto& [budget, obs] : {std::pair<std::int64_t, std::int64_t>{70, 4}, {300, 16}}) {
        SCOPED_TRACE(::testing::Message() << "mix " << static_cast<int>(mix) << " poolKernel " << kernel
                                          << " budget " << budget << " obsWindow " << obs);
        const SnapKVParams params{.budget = budget, .recent_window = 8, .obs_window = obs, .pool_kernel = kernel};
        SnapKV fast(params);
        oracle::Oracle plain("snapkv", {{"budget", budget}, {"recentWindow", 8}, {"obsWindow", obs},
                                        {"poolKernel", kernel}});
        const auto counts = run_against_oracle(fast, plain, budget, mix, seed++, 2500);
        total.running += counts.running;
        total.candidates += counts.candidates;
        total.exact += counts.exact;
        total.screened += counts.screened;
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
  // Every way ran (the counts are the policy's own record of which did), and
  // the lowest pooled score came from the screen as well as from pooling
  // every position.
  EXPECT_GT(total.running, 0U);
  EXPECT_GT(total.candidates, 0U);
  EXPECT_GT(total.exact, 0U);
  EXPECT_GT(total.screened, 0U);
  EXPECT_LT(total.screened, total.running + total.candidates + total.exact);
}

TEST(SnapKVFastPath, PyramidKVsDeepLayerMatchesTheOracle) {
  // A deep layer's share is below the budget: it holds budget + 1, drops to
  // its share in one batch (the exact path), then evicts one a step.
  const ParamMap params{{"budget", 200}, {"layer", 3}, {"numLayers", 4}, {"recentWindow", 8}};
  PyramidKV fast({.budget = 200, .layer = 3, .num_layers = 4, .recent_window = 8});
  oracle::Oracle plain("pyramidkv", params);
  std::mt19937 rng(7);
  std::vector<float> w;
  for (int t = 1; t <= 1500; ++t) {
    w.clear();
    for (std::size_t i = 0; i < fast.kept_count(); ++i) w.push_back(near_tie_weight(NearTieMix::kRounding, rng, 0.0F));
    fast.on_decode_step(t, std::span<const float>(w));
    plain.on_decode_step(t, std::span<const float>(w));
    const auto a = fast.evict(200);
    const std::vector<Position> got(a.begin(), a.end());
    const auto b = plain.evict(200);
    ASSERT_EQ(got, std::vector<Position>(b.begin(), b.end())) << "step " << t;
  }
  EXPECT_GT(fast.path_counts().running, 1000U);
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
