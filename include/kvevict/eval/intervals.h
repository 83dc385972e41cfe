// 95 % confidence intervals for the evaluation's two kinds of estimate: a
// share of successes (task accuracy: Wilson's score interval) and a
// difference of two per-window means measured on the same windows
// (perplexity: what a policy costs beside the full cache, paired by window).
#pragma once

#include <cstdint>
#include <span>
#include <utility>

namespace kvevict {

// The Wilson score interval (95 %) for `correct` of `n`; {0, 1} for n = 0
// (and for correct > n, which has no interval). It holds its point
// correct / n, and is exactly 0 at the low end for 0 of n and 1 at the high
// end for n of n.
std::pair<double, double> wilson_interval(std::uint64_t correct, std::uint64_t n);

// The two-sided 95 % quantile of Student's t with `dof` degrees of freedom
// (dof >= 1): tabulated to 4 decimals up to 30, a Cornish-Fisher expansion
// about the normal quantile beyond (within 1e-4 there).
double student_t_975(std::uint32_t dof);

struct RatioInterval {
  double mean = 0.0;  // sum(totals) / sum(weights)
  double low = 0.0;   // 95 % interval; equal to mean when there is none
  double high = 0.0;
  bool has_interval = false;  // at least 2 units of positive weight
};

// The mean of a quantity measured over units of different sizes (bits over
// the bytes of each window) as sum(totals) / sum(weights), with the 95 %
// interval of a ratio estimator that treats the units as independent draws:
// residual e_i = totals_i - mean * weights_i, standard error
// sqrt(n / (n - 1) * sum(e_i^2)) / sum(weights), Student's t with n - 1
// degrees of freedom. With equal weights it is the textbook t interval of the
// per-unit means. Fed with a policy's minus the full cache's totals on the
// same windows, the units pair themselves, so what differs from window to
// window in both (the text's difficulty) drops out. Spans of equal length;
// throws std::invalid_argument otherwise.
RatioInterval ratio_interval(std::span<const double> totals, std::span<const double> weights);

}  // namespace kvevict
