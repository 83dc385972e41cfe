// How a KV store keeps each position (docs/paged.md, "Fewer bits a
// position"): the precision of its keys and values, and the residual window
// of newest positions kept at full precision. The quantizers here are plain
// scalar code, the one definition the store and its tests share; every
// rounding is stated so that a reference written from this comment alone
// reproduces them to the bit.
//
//   fp32  the float as computed (the default; bit-identical to a store
//         without precisions).
//   fp16  IEEE binary16, rounded to nearest even; magnitudes past the
//         largest finite half (65504) are stored as +-65504, never as
//         infinities (an infinite key would turn attention into NaNs).
//   int8  per token, symmetric: scale = max|x| / 127 (float32), code =
//         nearbyint(x / scale) clamped to [-127, 127], read back as code x
//         scale. A row of zeros has scale 0 and reads back as zeros.
//   int4  KIVI (Liu et al., ICML 2024): keys per channel over a group of
//         `residual` tokens, values per token, both asymmetric: over the
//         numbers x of a channel's group (keys) or of a row (values),
//         lo = min x, scale = (max x - lo) / 15, code = nearbyint((x - lo) /
//         scale) clamped to [0, 15], read back as lo + code x scale (scale 0:
//         code 0, read back as lo). Two codes a byte, the even channel in
//         the low nibble.
//
// The residual window: the newest positions stay at fp32 until `residual`
// of them have arrived; then they are quantized together -- as one key group
// under int4, row by row otherwise -- and never again. Eviction and
// compaction move the stored codes and their scales; what stays is never
// re-quantized.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvevict {

enum class KvPrecision : std::uint8_t { kFp32, kFp16, kInt8, kInt4 };

// "fp32", "fp16", "int8", "int4".
std::string_view precision_name(KvPrecision precision) noexcept;
// The precision named `text`; throws ParameterError "FLAG: 'TEXT' is not a
// KV precision (fp32, fp16, int8 or int4)".
KvPrecision parse_precision(std::string_view text, std::string_view flag = "--kv-precision");

// int4's default residual window (and so key group): 32 tokens, KIVI's group
// size.
inline constexpr std::uint32_t kDefaultInt4Residual = 32;
// The longest residual window a store takes.
inline constexpr std::uint32_t kMaxResidual = 4096;

struct KvFormat {
  KvPrecision precision = KvPrecision::kFp32;
  // Newest positions kept at fp32 until this many have arrived (int4: the
  // key group). -1: the precision's default (int4 32, otherwise 0).
  std::int64_t residual = -1;

  bool quantized() const noexcept { return precision != KvPrecision::kFp32; }
  // The residual window in effect.
  std::uint32_t residual_window() const noexcept;
};

// Throws ParameterError, one rule a message, naming the flags: a residual
// below -1 or above kMaxResidual; a residual with fp32 (nothing to keep at
// full precision); int4 with residual 0 (its keys need a group). `head_dim`
// must be even for int4 (two codes a byte) and at least 1.
void check_format(const KvFormat& format, std::uint32_t head_dim);

// Bytes one stored position costs, keys and values together, once it has
// left the residual window: fp32 8d, fp16 4d, int8 2d + 8 (two scales);
// int4 d codes + 4 (its key group's index) + 8 (its value's lo and scale) +
// 8d / residual (its share of the key group's lo and scale per channel).
// A position in the residual window costs 8d.
double bytes_per_position(const KvFormat& format, std::uint32_t head_dim);

// What a position really costs in a cache that never holds more than
// `most_held` positions at once (a budget B evicts down from B + 1):
// bytes_per_position() once the residual window can fill (R <= most_held),
// 8d when it never can -- every row then stays at fp32.
double held_bytes_per_position(const KvFormat& format, std::uint32_t head_dim, std::uint64_t most_held);

// ---- the quantizers ------------------------------------------------------------

std::uint16_t to_half(float x) noexcept;    // fp16 as above
float from_half(std::uint16_t h) noexcept;  // exact

// int8 of one row: writes codes, returns the scale.
float quantize_int8(std::span<const float> row, std::span<std::int8_t> codes) noexcept;
void dequantize_int8(std::span<const std::int8_t> codes, float scale, std::span<float> out) noexcept;

// int4's range over n numbers at x[0], x[stride], ...
struct Int4Range {
  float lo = 0.0F;
  float scale = 0.0F;
};
Int4Range int4_range(const float* x, std::size_t n, std::size_t stride) noexcept;
std::uint8_t int4_code(float x, Int4Range range) noexcept;
inline float int4_value(std::uint8_t code, Int4Range range) noexcept {
  const float step = static_cast<float>(code) * range.scale;
  return range.lo + step;
}
// The code of channel c in a packed row.
inline std::uint8_t int4_at(const std::uint8_t* packed, std::size_t c) noexcept {
  return static_cast<std::uint8_t>((packed[c / 2] >> (4 * (c % 2))) & 0x0FU);
}
inline void int4_put(std::uint8_t* packed, std::size_t c, std::uint8_t code) noexcept {
  const unsigned shift = 4U * static_cast<unsigned>(c % 2);
  packed[c / 2] = static_cast<std::uint8_t>((packed[c / 2] & ~(0x0FU << shift)) | (unsigned{code} << shift));
}

}  // namespace kvevict
