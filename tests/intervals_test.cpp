// The evaluation's confidence intervals (kvevict/eval/intervals.h). Every
// expectation below is worked out by hand in the comment beside it.
#include "kvevict/eval/intervals.h"

#include <cmath>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace kvevict {
namespace {

TEST(StudentT, TheTableAndTheExpansionAgreeWithPublishedQuantiles) {
  EXPECT_DOUBLE_EQ(student_t_975(1), 12.7062);
  EXPECT_DOUBLE_EQ(student_t_975(2), 4.3027);
  EXPECT_DOUBLE_EQ(student_t_975(15), 2.1314);  // 16 windows
  EXPECT_DOUBLE_EQ(student_t_975(30), 2.0423);
  // Beyond the table (published: t(40) = 2.0211, t(60) = 2.0003,
  // t(120) = 1.9799, t(1000) = 1.9623); the normal quantile in the limit.
  EXPECT_NEAR(student_t_975(40), 2.0211, 1e-4);
  EXPECT_NEAR(student_t_975(60), 2.0003, 1e-4);
  EXPECT_NEAR(student_t_975(120), 1.9799, 1e-4);
  EXPECT_NEAR(student_t_975(1000), 1.9623, 1e-4);
  EXPECT_NEAR(student_t_975(1000000), 1.959964, 1e-5);
  // Where the table hands over, the expansion continues it smoothly.
  EXPECT_LT(student_t_975(31), student_t_975(30));
  EXPECT_GT(student_t_975(31), 2.0395 - 1e-4);  // published t(31) = 2.0395
  EXPECT_THROW(student_t_975(0), std::invalid_argument);
}

TEST(RatioInterval, EqualWeightsGiveTheTextbookTInterval) {
  // Totals 2, 4, 6 over 2 each: per-unit means 1, 2, 3, mean 2, sample
  // variance 1, standard error sqrt(1 / 3), t(2) = 4.3027:
  // half-width 4.3027 / sqrt(3) = 2.48417...
  const std::vector<double> totals{2, 4, 6}, weights{2, 2, 2};
  const RatioInterval r = ratio_interval(totals, weights);
  ASSERT_TRUE(r.has_interval);
  EXPECT_DOUBLE_EQ(r.mean, 2.0);
  EXPECT_NEAR(r.low, 2.0 - 4.3027 / std::sqrt(3.0), 1e-12);
  EXPECT_NEAR(r.high, 2.0 + 4.3027 / std::sqrt(3.0), 1e-12);
}

TEST(RatioInterval, UnequalWeightsUseTheRatioEstimator) {
  // Totals 0 and 2 over 1 and 3: mean 2 / 4 = 0.5; residuals 0 - 0.5 = -0.5
  // and 2 - 1.5 = 0.5; se = sqrt(2 / 1 * 0.5) / 4 = 0.25; t(1) = 12.7062.
  const std::vector<double> totals{0, 2}, weights{1, 3};
  const RatioInterval r = ratio_interval(totals, weights);
  ASSERT_TRUE(r.has_interval);
  EXPECT_DOUBLE_EQ(r.mean, 0.5);
  EXPECT_NEAR(r.low, 0.5 - 12.7062 * 0.25, 1e-12);
  EXPECT_NEAR(r.high, 0.5 + 12.7062 * 0.25, 1e-12);
}

TEST(RatioInterval, TotalsProportionalToTheWeightsLeaveNoDoubt) {
  // 3 over 3 and 1 over 1: every unit says exactly 1, so the interval is [1, 1].
  const std::vector<double> totals{3, 1}, weights{3, 1};
  const RatioInterval r = ratio_interval(totals, weights);
  ASSERT_TRUE(r.has_interval);
  EXPECT_DOUBLE_EQ(r.mean, 1.0);
  EXPECT_DOUBLE_EQ(r.low, 1.0);
  EXPECT_DOUBLE_EQ(r.high, 1.0);
}

TEST(RatioInterval, OneUnitOrNoneGivesNoInterval) {
  const std::vector<double> one_total{5}, one_weight{2};
  const RatioInterval one = ratio_interval(one_total, one_weight);
  EXPECT_FALSE(one.has_interval);
  EXPECT_DOUBLE_EQ(one.mean, 2.5);
  EXPECT_DOUBLE_EQ(one.low, 2.5);
  EXPECT_DOUBLE_EQ(one.high, 2.5);
  // A unit with no weight (a window the prefill left nothing to score in) is
  // not a draw: 5 over 2 and 0 over 0 is still one unit.
  const std::vector<double> totals{5, 0}, weights{2, 0};
  EXPECT_FALSE(ratio_interval(totals, weights).has_interval);
  EXPECT_DOUBLE_EQ(ratio_interval(totals, weights).mean, 2.5);
  const RatioInterval none = ratio_interval({}, {});
  EXPECT_FALSE(none.has_interval);
  EXPECT_EQ(none.mean, 0.0);
}

TEST(RatioInterval, SpansOfDifferentLengthsAreRefused) {
  const std::vector<double> totals{1, 2}, weights{1};
  EXPECT_THROW(ratio_interval(totals, weights), std::invalid_argument);
}

TEST(WilsonInterval, HandWorkedCases) {
  // 0 of 48: [0, z^2 / (48 + z^2)] = [0, 3.8415 / 51.8415] = [0, 0.0741].
  const auto [lo0, hi0] = wilson_interval(0, 48);
  EXPECT_NEAR(lo0, 0.0, 1e-12);
  EXPECT_NEAR(hi0, 0.0741, 1e-4);
  // Half of 100: centre 0.5, half-width z * sqrt(0.0025 + z^2 / 40000) / (1 + z^2 / 100) = 0.0962.
  const auto [lo, hi] = wilson_interval(50, 100);
  EXPECT_NEAR(lo, 0.5 - 0.0962, 1e-4);
  EXPECT_NEAR(hi, 0.5 + 0.0962, 1e-4);
  EXPECT_EQ(wilson_interval(0, 0), (std::pair<double, double>{0.0, 1.0}));
}

}  // namespace
}  // namespace kvevict
