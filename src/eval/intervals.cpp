#include "kvevict/eval/intervals.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>

namespace kvevict {

std::pair<double, double> wilson_interval(std::uint64_t correct, std::uint64_t n) {
  if (n == 0 || correct > n) return {0.0, 1.0};
  constexpr double z = 1.959963984540054;
  const auto nn = static_cast<double>(n);
  const double p = static_cast<double>(correct) / nn;
  const double denom = 1.0 + z * z / nn;
  const double centre = (p + z * z / (2.0 * nn)) / denom;
  const double half = z * std::sqrt(p * (1.0 - p) / nn + z * z / (4.0 * nn * nn)) / denom;
  // At 0 (or n) of n the bound is 0 (or 1) exactly; the formula's rounding
  // left 2.8e-17 for 0 of 12, an interval that missed its own point.
  const double low = correct == 0 ? 0.0 : std::clamp(centre - half, 0.0, p);
  const double high = correct == n ? 1.0 : std::clamp(centre + half, p, 1.0);
  return {low, high};
}

double student_t_975(std::uint32_t dof) {
  // t(0.975, dof) for dof = 1 ... 30, the standard table.
  static constexpr std::array<double, 30> kTable{
      12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
      2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
      2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
  if (dof == 0) throw std::invalid_argument("student_t_975: dof must be at least 1");
  if (dof <= kTable.size()) return kTable[dof - 1];
  // Cornish-Fisher: the normal quantile corrected in powers of 1/dof.
  constexpr double z = 1.959963984540054;
  const double v = dof;
  const double z3 = z * z * z, z5 = z3 * z * z, z7 = z5 * z * z;
  return z + (z3 + z) / (4.0 * v) + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * v * v) +
         (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * v * v * v);
}

RatioInterval ratio_interval(std::span<const double> totals, std::span<const double> weights) {
  if (totals.size() != weights.size()) {
    throw std::invalid_argument("ratio_interval: totals and weights differ in length");
  }
  double sum_total = 0.0, sum_weight = 0.0;
  std::size_t units = 0;
  for (std::size_t i = 0; i < totals.size(); ++i) {
    sum_total += totals[i];
    sum_weight += weights[i];
    if (weights[i] > 0.0) ++units;
  }
  RatioInterval out;
  if (sum_weight <= 0.0) return out;
  out.mean = out.low = out.high = sum_total / sum_weight;
  if (units < 2) return out;
  double squares = 0.0;
  for (std::size_t i = 0; i < totals.size(); ++i) {
    if (weights[i] <= 0.0) continue;  // a unit with nothing measured is not a draw
    const double e = totals[i] - out.mean * weights[i];
    squares += e * e;
  }
  const double n = static_cast<double>(units);
  const double se = std::sqrt(n / (n - 1.0) * squares) / sum_weight;
  const double half = student_t_975(static_cast<std::uint32_t>(units - 1)) * se;
  out.low = out.mean - half;
  out.high = out.mean + half;
  out.has_interval = true;
  return out;
}

}  // namespace kvevict
