#include "kvevict/model/decoder/rope.h"

#include <cmath>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/decoder/model.h"

namespace kvevict {

std::string_view position_mode_name(PositionMode mode) noexcept {
  return mode == PositionMode::kCache ? "cache" : "original";
}

PositionMode parse_position_mode(std::string_view text) {
  if (text == "original") return PositionMode::kOriginal;
  if (text == "cache") return PositionMode::kCache;
  throw InputError(fmt::format("positions '{}': expected 'original' (a key at its token's position) or 'cache' "
                               "(at its index among the positions held)",
                               text));
}

Rope::Rope(std::uint32_t head_dim, float base, RopeMode mode, std::span<const float> divisors, std::uint32_t table)
    : head_dim_(head_dim), mode_(mode), table_(table) {
  const std::uint32_t half = head_dim / 2;
  inverse_.resize(half);
  for (std::uint32_t i = 0; i < half; ++i) {
    double inv = std::pow(static_cast<double>(base), -static_cast<double>(i) * 2.0 / static_cast<double>(head_dim));
    if (!divisors.empty()) inv /= static_cast<double>(divisors[i]);
    inverse_[i] = inv;
  }
  cos_.resize(std::size_t{table} * half);
  sin_.resize(std::size_t{table} * half);
  for (std::uint32_t p = 0; p < table; ++p) {
    angles(static_cast<double>(p), cos_.data() + std::size_t{p} * half, sin_.data() + std::size_t{p} * half);
  }
  cos_row_.resize(half);
  sin_row_.resize(half);
}

Rope::Rope(const ModelConfig& config, std::uint32_t table)
    : Rope(config.head_dim(), config.rope_base, config.rope_mode, config.rope_divisors, table) {}

void Rope::angles(double p, float* cos_out, float* sin_out) const noexcept {
  for (std::size_t i = 0; i < inverse_.size(); ++i) {
    const double angle = p * inverse_[i];
    cos_out[i] = static_cast<float>(std::cos(angle));
    sin_out[i] = static_cast<float>(std::sin(angle));
  }
}

void Rope::turn(float* v, const float* c, const float* s, float scale) const noexcept {
  const std::uint32_t half = head_dim_ / 2;
  if (mode_ == RopeMode::kNeox) {
    for (std::uint32_t i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = (a * c[i] - b * s[i]) * scale;
      v[i + half] = (a * s[i] + b * c[i]) * scale;
    }
  } else {
    for (std::uint32_t i = 0; i < half; ++i) {
      const float a = v[2 * i], b = v[2 * i + 1];
      v[2 * i] = (a * c[i] - b * s[i]) * scale;
      v[2 * i + 1] = (a * s[i] + b * c[i]) * scale;
    }
  }
}

void Rope::rotate(float* v, std::uint64_t p, float scale) {
  const std::size_t half = head_dim_ / 2;
  if (p < table_) {
    turn(v, cos_.data() + p * half, sin_.data() + p * half, scale);
    return;
  }
  if (p != row_position_) {  // each head of a step turns to the same position: compute its angles once
    angles(static_cast<double>(p), cos_row_.data(), sin_row_.data());
    row_position_ = p;
  }
  turn(v, cos_row_.data(), sin_row_.data(), scale);
}

void Rope::shift(float* v, std::int64_t delta) const {
  std::vector<float> c(head_dim_ / 2), s(head_dim_ / 2);
  angles(static_cast<double>(delta), c.data(), s.data());
  turn(v, c.data(), s.data(), 1.0F);
}

}  // namespace kvevict
