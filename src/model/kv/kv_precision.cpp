#include "kvevict/model/kv/kv_precision.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

std::string_view precision_name(KvPrecision precision) noexcept {
  switch (precision) {
    case KvPrecision::kFp16:
      return "fp16";
    case KvPrecision::kInt8:
      return "int8";
    case KvPrecision::kInt4:
      return "int4";
    case KvPrecision::kFp32:
      break;
  }
  return "fp32";
}

KvPrecision parse_precision(std::string_view text, std::string_view flag) {
  for (const KvPrecision p : {KvPrecision::kFp32, KvPrecision::kFp16, KvPrecision::kInt8, KvPrecision::kInt4}) {
    if (text == precision_name(p)) return p;
  }
  throw ParameterError(fmt::format("{}: '{}' is not a KV precision (fp32, fp16, int8 or int4)", flag, text));
}

std::uint32_t KvFormat::residual_window() const noexcept {
  if (residual >= 0) return static_cast<std::uint32_t>(residual);
  return precision == KvPrecision::kInt4 ? kDefaultInt4Residual : 0;
}

void check_format(const KvFormat& format, std::uint32_t head_dim) {
  if (format.residual < -1 || format.residual > std::int64_t{kMaxResidual}) {
    throw ParameterError(fmt::format("--kv-residual ({}) must be 0 ... {}", format.residual, kMaxResidual));
  }
  if (format.precision == KvPrecision::kFp32 && format.residual > 0) {
    throw ParameterError(fmt::format("--kv-residual ({}) needs a quantized --kv-precision (fp16, int8 or int4): "
                                     "an fp32 store holds every position at full precision",
                                     format.residual));
  }
  if (format.precision == KvPrecision::kInt4 && format.residual == 0) {
    throw ParameterError("--kv-residual 0 with --kv-precision int4: int4 keys are quantized per channel over a "
                         "group of the residual window's tokens, so the window must be at least 1");
  }
  if (head_dim == 0) throw ParameterError("KV store: head_dim must be at least 1");
  if (format.precision == KvPrecision::kInt4 && head_dim % 2 != 0) {
    throw ParameterError(fmt::format("--kv-precision int4 packs two codes a byte and needs an even head size (this "
                                     "model's is {})",
                                     head_dim));
  }
}

namespace {
std::size_t floats_for(std::size_t bytes) { return (bytes + sizeof(float) - 1) / sizeof(float); }
}  // namespace

double bytes_per_position(const KvFormat& format, std::uint32_t head_dim) {
  const std::size_t d = head_dim;
  // The stored rows' sizes, padded to whole floats as the store keeps them.
  switch (format.precision) {
    case KvPrecision::kFp16:
      return static_cast<double>(2 * floats_for(2 * d) * sizeof(float));
    case KvPrecision::kInt8:
      return static_cast<double>(2 * (1 + floats_for(d)) * sizeof(float));
    case KvPrecision::kInt4: {
      const std::size_t rows = (1 + floats_for(d / 2)) + (2 + floats_for(d / 2));
      const double group = 2.0 * static_cast<double>(d * sizeof(float)) /
                           static_cast<double>(std::max<std::uint32_t>(1, format.residual_window()));
      return static_cast<double>(rows * sizeof(float)) + group;
    }
    case KvPrecision::kFp32:
      break;
  }
  return static_cast<double>(2 * d * sizeof(float));
}

double held_bytes_per_position(const KvFormat& format, std::uint32_t head_dim, std::uint64_t most_held) {
  // The window is quantized when its R-th row arrives; a cache that never
  // holds R positions keeps every row as it came, at fp32.
  if (format.residual_window() > most_held) return 8.0 * head_dim;
  return bytes_per_position(format, head_dim);
}

// ---- fp16 --------------------------------------------------------------------------

std::uint16_t to_half(float x) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(x);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000U);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) return static_cast<std::uint16_t>(sign | 0x7E00U);  // NaN stays NaN
  if (magnitude >= 0x477FE000U) return static_cast<std::uint16_t>(sign | 0x7BFFU);  // >= 65504: saturate
  if (magnitude < 0x38800000U) {
    // Below the smallest normal half (2^-14): a multiple of 2^-24. Scaling
    // by 2^24 is exact, and nearbyint rounds to nearest even; 1024 is the
    // smallest normal's encoding, so a carry lands right.
    const float units = std::bit_cast<float>(magnitude) * 16777216.0F;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint16_t>(std::nearbyint(units)));
  }
  const std::uint32_t exponent = (magnitude >> 23) - 127 + 15;
  const std::uint32_t mantissa = magnitude & 0x7FFFFFU;
  std::uint32_t h = (exponent << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;  // a carry moves into the exponent: still right
  return static_cast<std::uint16_t>(sign | h);
}

float from_half(std::uint16_t h) noexcept {
  const std::uint32_t sign = std::uint32_t{h & 0x8000U} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1FU;
  const std::uint32_t mantissa = h & 0x3FFU;
  if (exponent == 0) {
    const float v = static_cast<float>(mantissa) * 5.9604644775390625e-8F;  // x 2^-24, exact
    return sign != 0 ? -v : v;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

// ---- int8 --------------------------------------------------------------------------

float quantize_int8(std::span<const float> row, std::span<std::int8_t> codes) noexcept {
  float top = 0.0F;
  for (const float x : row) top = std::max(top, std::fabs(x));
  const float scale = top / 127.0F;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (scale == 0.0F) {
      codes[i] = 0;
      continue;
    }
    float v = std::nearbyint(row[i] / scale);
    if (!(v > -127.0F)) v = -127.0F;  // NaN too: a code must come out
    if (v > 127.0F) v = 127.0F;
    codes[i] = static_cast<std::int8_t>(v);
  }
  return scale;
}

void dequantize_int8(std::span<const std::int8_t> codes, float scale, std::span<float> out) noexcept {
  for (std::size_t i = 0; i < codes.size(); ++i) out[i] = static_cast<float>(codes[i]) * scale;
}

// ---- int4 --------------------------------------------------------------------------

Int4Range int4_range(const float* x, std::size_t n, std::size_t stride) noexcept {
  float lo = x[0], hi = x[0];
  for (std::size_t i = 1; i < n; ++i) {
    lo = std::min(lo, x[i * stride]);
    hi = std::max(hi, x[i * stride]);
  }
  return {lo, (hi - lo) / 15.0F};
}

std::uint8_t int4_code(float x, Int4Range range) noexcept {
  if (range.scale == 0.0F) return 0;
  float v = std::nearbyint((x - range.lo) / range.scale);
  if (!(v > 0.0F)) v = 0.0F;
  if (v > 15.0F) v = 15.0F;
  return static_cast<std::uint8_t>(v);
}

}  // namespace kvevict
