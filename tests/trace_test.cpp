#include <gtest/gtest.h>

#include <bit>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "kvevict/core/errors.h"
#include "kvevict/eval/trace.h"
#include "support.h"

namespace kvevict {
namespace {

double sum_range(std::span<const float> w, std::size_t begin, std::size_t end) {
  double s = 0.0;
  for (std::size_t i = begin; i < end; ++i) s += static_cast<double>(w[i]);
  return s;
}

// Advances a fresh trace to step t and returns a copy of its weights.
std::vector<float> step_weights(std::uint32_t t) {
  DecodeTrace trace;
  std::span<const float> w;
  for (std::uint32_t s = 1; s <= t; ++s) w = trace.next();
  return {w.begin(), w.end()};
}

TEST(Trace, WholeTraceHashIsTheCanonicalOne) {
  DecodeTrace trace;
  EXPECT_EQ(trace.length(), 4096U);
  EXPECT_EQ(trace.steps(), 4095U);
  EXPECT_EQ(trace_hash(trace, 4095), 3136039440U);
}

TEST(Trace, PrefixHashesFindWhereADivergenceStarts) {
  DecodeTrace trace;
  EXPECT_EQ(trace_hash(trace, 10), 515340780U);
  EXPECT_EQ(trace_hash(trace, 200), 2495168784U);
  EXPECT_EQ(trace_hash(trace, 300), 1432877681U);
  // Hashing rewinds: the same prefix again gives the same hash.
  EXPECT_EQ(trace_hash(trace, 10), 515340780U);
}

TEST(Trace, EveryStepHasLengthTSumsToOneAndHasNoZero) {
  DecodeTrace trace;
  for (std::uint32_t t = 1; t <= trace.steps(); ++t) {
    const auto w = trace.next();
    ASSERT_EQ(w.size(), t);
    ASSERT_NEAR(sum_range(w, 0, t), 1.0, 1e-6) << "step " << t;
    for (const float x : w) ASSERT_GT(x, 0.0F) << "step " << t;
  }
  EXPECT_THROW(trace.next(), InputError);
}

TEST(Trace, FirstTwoStepsAreExact) {
  DecodeTrace trace;
  const auto s1 = trace.next();
  ASSERT_EQ(s1.size(), 1U);
  EXPECT_EQ(s1[0], 1.0F);
  const auto s2 = trace.next();
  EXPECT_EQ(std::bit_cast<std::uint32_t>(s2[0]), 1057091522U);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(s2[1]), 1056710779U);
}

TEST(Trace, SinksHoldTheirMassAtStep600) {
  const auto w = step_weights(600);
  EXPECT_NEAR(sum_range(w, 0, 4), 0.15, 0.0005);
}

TEST(Trace, BeforeStep128TheHeavyMassIsInTheRecencyBand) {
  const auto w = step_weights(127);
  EXPECT_GT(sum_range(w, 127 - 64, 127), 0.8);
  EXPECT_LT(sum_range(w, 4, 127 - 64), 0.03);
  const double floor3 = 3 * 0.05 / 127;
  EXPECT_EQ(std::count_if(w.begin() + 4, w.begin() + (127 - 64), [&](float x) { return x > floor3; }), 0);
}

TEST(Trace, AtStep128TheHeavyHittersTakeTheMiddleBand) {
  const auto w = step_weights(128);
  EXPECT_GT(sum_range(w, 4, 128 - 64), 0.25);
  EXPECT_NEAR(sum_range(w, 128 - 64, 128), 0.575, 0.001);
}

TEST(Trace, AtStep600Exactly32MiddlePositionsStandAboveTheNoise) {
  const auto w = step_weights(600);
  const double floor3 = 3 * 0.05 / 600;
  EXPECT_EQ(std::count_if(w.begin() + 4, w.begin() + (600 - 64), [&](float x) { return x > floor3; }), 32);
}

TEST(Trace, HeavySetDrawsMatchTheSpec) {
  DecodeTrace trace;
  for (int t = 1; t < 128; ++t) {
    trace.next();
    ASSERT_TRUE(trace.heavy_set().empty());
  }
  trace.next();
  const std::vector<std::uint32_t> at128{27, 56, 24, 54, 59, 10, 34, 62, 15, 44, 37, 23, 19, 13, 22, 43,
                                         35, 52, 38, 9,  33, 50, 42, 45, 53, 63, 30, 46, 39, 8,  7,  4};
  EXPECT_EQ(std::vector<std::uint32_t>(trace.heavy_set().begin(), trace.heavy_set().end()), at128);
  for (int t = 129; t <= 511; ++t) trace.next();
  EXPECT_EQ(trace.heavy_set()[0], 27U);  // persists between draws
  trace.next();
  const std::vector<std::uint32_t> at512{338, 352, 14, 16, 403, 393, 365, 140};
  EXPECT_EQ(std::vector<std::uint32_t>(trace.heavy_set().begin(), trace.heavy_set().begin() + 8), at512);
}

TEST(Trace, UnknownIdListsTheKnownOnes) {
  try {
    open_trace("decode-9999");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "unknown trace 'decode-9999' (known: decode-4096, stale-spike-4096, recalled-fact-4096)");
  }
}

TEST(Trace, StepsOutsideTheTraceAreRefused) {
  DecodeTrace trace;
  EXPECT_THROW(checked_steps(trace, 0), InputError);
  EXPECT_THROW(checked_steps(trace, 4096), InputError);
  EXPECT_EQ(checked_steps(trace, 4095), 4095U);
}

TEST(Trace, PeerPrefixBitPatternsMatch) {
  const auto dir = testing::conformance_dir();
  if (!dir) GTEST_SKIP() << "../shared/conformance is absent: peer trace prefix not replayed";
  std::ifstream in(*dir / "trace-prefix.json");
  const auto doc = nlohmann::json::parse(in);
  const auto& t = doc.at("traces").at("decode-4096");
  EXPECT_EQ(t.at("hash").get<std::uint32_t>(), 3136039440U);
  DecodeTrace trace;
  const auto& steps = t.at("firstStepBits");
  ASSERT_EQ(steps.size(), 10U);
  for (const auto& expected : steps) {
    const auto w = trace.next();
    ASSERT_EQ(w.size(), expected.size());
    for (std::size_t i = 0; i < w.size(); ++i) {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(w[i]), expected[i].get<std::uint32_t>());
    }
  }
}

}  // namespace
}  // namespace kvevict
