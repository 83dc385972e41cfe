#include "kvevict/core/attention.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

void rope_neox(std::span<float> x, std::int64_t pos, double base) {
  const std::size_t d = x.size();
  if (d % 2 != 0) throw ContractError(fmt::format("rope_neox: head_dim ({}) must be even", d));
  const std::size_t half = d / 2;
  for (std::size_t i = 0; i < half; ++i) {
    const double inv = std::pow(base, -static_cast<double>(i) * 2.0 / static_cast<double>(d));
    const double angle = static_cast<double>(pos) * inv;
    const auto c = static_cast<float>(std::cos(angle));
    const auto s = static_cast<float>(std::sin(angle));
    const float a = x[i];
    const float b = x[i + half];
    x[i] = a * c - b * s;
    x[i + half] = a * s + b * c;
  }
}

void attention_from_keys(std::span<const float> queries, std::size_t groups, std::span<const float> keys,
                         std::size_t n, std::size_t head_dim, float scale, std::span<float> out,
                         std::span<float> scratch) {
  if (groups < 1 || head_dim < 1 || queries.size() != groups * head_dim || keys.size() < n * head_dim ||
      out.size() < n || scratch.size() < n) {
    throw ContractError(fmt::format("attention_from_keys: {} query floats for {} heads of {}, {} key floats for {} "
                                    "keys, room for {} weights and {} scratch",
                                    queries.size(), groups, head_dim, keys.size(), n, out.size(), scratch.size()));
  }
  if (n == 0) return;
  for (std::size_t g = 0; g < groups; ++g) {
    const float* q = queries.data() + g * head_dim;
    float* row = groups == 1 ? out.data() : scratch.data();
    for (std::size_t j = 0; j < n; ++j) {
      const float* k = keys.data() + j * head_dim;
      float dot = 0.0F;
      for (std::size_t i = 0; i < head_dim; ++i) dot += (q[i] * scale) * k[i];
      row[j] = dot;
    }
    const float top = *std::max_element(row, row + n);
    float sum = 0.0F;
    for (std::size_t j = 0; j < n; ++j) {
      row[j] = std::exp(row[j] - top);
      sum += row[j];
    }
    for (std::size_t j = 0; j < n; ++j) row[j] /= sum;
    if (groups == 1) return;
    for (std::size_t j = 0; j < n; ++j) out[j] = g == 0 ? row[j] : out[j] + row[j];
  }
  const auto share = static_cast<float>(groups);
  for (std::size_t j = 0; j < n; ++j) out[j] /= share;
}

}  // namespace kvevict
