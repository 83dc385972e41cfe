// The ggml weight types: half/bfloat16 conversions, hand-worked blocks of
// every type (bytes built here, expected floats worked out by hand in the
// comments), the quantizers' round trips, and the type tables.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "kvevict/core/errors.h"
#include "kvevict/model/kernels/weight_types.h"

namespace kvevict {
namespace {

float bits_float(std::uint32_t bits) { return std::bit_cast<float>(bits); }

std::vector<float> dequantized(WeightType type, const std::vector<std::uint8_t>& blocks, std::uint64_t n) {
  std::vector<float> out(n);
  dequantize(type, blocks.data(), out.data(), n);
  return out;
}

TEST(WeightTypesHalf, ToFloatExact) {
  EXPECT_EQ(half_to_float(0x3C00), 1.0f);
  EXPECT_EQ(half_to_float(0xC000), -2.0f);
  EXPECT_EQ(half_to_float(0x7BFF), 65504.0f);
  EXPECT_EQ(half_to_float(0x0400), std::ldexp(1.0f, -14));      // smallest normal
  EXPECT_EQ(half_to_float(0x0001), std::ldexp(1.0f, -24));      // smallest subnormal
  EXPECT_EQ(half_to_float(0x03FF), std::ldexp(1023.0f, -24));   // largest subnormal
  EXPECT_EQ(half_to_float(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(half_to_float(0x3555), 0.25f * (1.0f + 0x155 / 1024.0f));  // exponent 13: 2^-2 * (1 + 0x155/1024)
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(half_to_float(0x8000), 0.0f);
  EXPECT_EQ(half_to_float(0x7C00), std::numeric_limits<float>::infinity());
  EXPECT_EQ(half_to_float(0xFC00), -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(half_to_float(0x7E00)));
  EXPECT_TRUE(std::isnan(half_to_float(0x7C01)));  // signalling NaN stays NaN
  EXPECT_TRUE(std::isnan(half_to_float(0xFFFF)));
}

TEST(WeightTypesHalf, FromFloatRoundsToNearestEven) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(-2.0f), 0xC000);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65519.99f), 0x7BFF);  // below the halfway point 65520
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);   // a tie; even is 2^16, out of range: inf
  EXPECT_EQ(float_to_half(1e6f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e6f), 0xFC00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::infinity()), 0x7C00);
  EXPECT_EQ(float_to_half(-std::numeric_limits<float>::infinity()), 0xFC00);
  const std::uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7C00, 0x7C00);
  EXPECT_NE(nan & 0x03FF, 0);
  EXPECT_NE(float_to_half(bits_float(0x7F800001)) & 0x03FF, 0);  // a NaN whose payload is in the low bits
  // Ties between two normals: 1 + 2^-11 lies halfway between 0x3C00 (even)
  // and 0x3C01; 1 + 3*2^-11 halfway between 0x3C01 and 0x3C02 (even).
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11)), 0x3C00);
  EXPECT_EQ(float_to_half(1.0f + 3.0f * std::ldexp(1.0f, -11)), 0x3C02);
  EXPECT_EQ(float_to_half(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3C01);
  // Subnormals, in units of 2^-24: 0.5 unit (2^-25) is a tie between 0 and
  // 1 -> 0 (even); 1.5 units a tie between 1 and 2 -> 2; 2.5 units -> 2;
  // 0.75 units -> 1.
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -25)), 0x0000);
  EXPECT_EQ(float_to_half(std::ldexp(1.5f, -24)), 0x0002);
  EXPECT_EQ(float_to_half(std::ldexp(2.5f, -24)), 0x0002);
  EXPECT_EQ(float_to_half(std::ldexp(0.75f, -24)), 0x0001);
  EXPECT_EQ(float_to_half(-std::ldexp(3.0f, -24)), 0x8003);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -30)), 0x0000);
  EXPECT_EQ(float_to_half(bits_float(0x00000001)), 0x0000);  // a float subnormal
  // 1023.5 units: a tie between 0x03FF (odd) and 0x0400, the smallest normal.
  EXPECT_EQ(float_to_half(std::ldexp(1023.5f, -24)), 0x0400);
  EXPECT_EQ(float_to_half(std::ldexp(1.0f, -14)), 0x0400);
}

TEST(WeightTypesHalf, EveryHalfRoundTrips) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto bits = static_cast<std::uint16_t>(h);
    const float f = half_to_float(bits);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f)))) << h;
    } else {
      ASSERT_EQ(float_to_half(f), bits) << h;
    }
  }
}

TEST(WeightTypesBf16, Conversions) {
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  EXPECT_EQ(bf16_to_float(0xC040), -3.0f);
  EXPECT_EQ(bf16_to_float(0x0001), bits_float(0x00010000));  // a subnormal
  EXPECT_EQ(bf16_to_float(0x7F80), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(bf16_to_float(0x7FC0)));
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808000)), 0x3F80);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_float(0x3F818000)), 0x3F82);  // tie -> even
  EXPECT_EQ(float_to_bf16(bits_float(0x3F808001)), 0x3F81);  // above the tie
  EXPECT_EQ(float_to_bf16(bits_float(0x3F807FFF)), 0x3F80);  // below it
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds up to inf
  EXPECT_EQ(float_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000)), 0x0002);  // subnormal tie -> even
  const std::uint16_t nan = float_to_bf16(bits_float(0x7F800001));  // payload only in the dropped bits
  EXPECT_TRUE(std::isnan(bf16_to_float(nan)));
}

TEST(WeightTypesBlocks, FloatTypes) {
  // F32: bytes of 1.5f (0x3FC00000) little-endian; F16 0xC400 = -4; BF16 0x4049 = 3.140625.
  EXPECT_EQ(dequantized(WeightType::kF32, {0x00, 0x00, 0xC0, 0x3F}, 1)[0], 1.5f);
  EXPECT_EQ(dequantized(WeightType::kF16, {0x00, 0xC4}, 1)[0], -4.0f);
  EXPECT_EQ(dequantized(WeightType::kBF16, {0x49, 0x40}, 1)[0], 3.140625f);
}

TEST(WeightTypesBlocks, Q8_0ByHand) {
  // d = 0.5 (half 0x3800); qs: 1, -1, 127, -128, zeros, qs[31] = 10.
  std::vector<std::uint8_t> b(34, 0);
  b[0] = 0x00;
  b[1] = 0x38;
  b[2] = 1;
  b[3] = 0xFF;
  b[4] = 127;
  b[5] = 0x80;
  b[33] = 10;
  const auto y = dequantized(WeightType::kQ8_0, b, 32);
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], -0.5f);
  EXPECT_EQ(y[2], 63.5f);
  EXPECT_EQ(y[3], -64.0f);
  for (int j = 4; j < 31; ++j) EXPECT_EQ(y[static_cast<std::size_t>(j)], 0.0f);
  EXPECT_EQ(y[31], 5.0f);
}

TEST(WeightTypesBlocks, Q4_0ByHand) {
  // d = 2 (0x4000); y = (nibble - 8) * 2; low nibbles are elements 0..15,
  // high nibbles 16..31. qs[0] = 0x9F: y0 = (15-8)*2 = 14, y16 = (9-8)*2 = 2.
  // qs[1] = 0x08: y1 = 0, y17 = (0-8)*2 = -16. Others 0x88: 0.
  std::vector<std::uint8_t> b(18, 0x88);
  b[0] = 0x00;
  b[1] = 0x40;
  b[2] = 0x9F;
  b[3] = 0x08;
  const auto y = dequantized(WeightType::kQ4_0, b, 32);
  for (std::size_t j = 0; j < 32; ++j) {
    float want = 0.0f;
    if (j == 0) want = 14.0f;
    if (j == 16) want = 2.0f;
    if (j == 17) want = -16.0f;
    EXPECT_EQ(y[j], want) << j;
  }
}

TEST(WeightTypesBlocks, Q5_0ByHand) {
  // d = 0.25 (0x3400); qh = 0x80020001: bits 0, 17 and 31 set (the 5th bit
  // of elements 0, 17 and 31); y = (q - 16) * 0.25.
  // qs[0] = 0x3A: y0 = (10 | 16) - 16 = 10 -> 2.5; y16 = 3 - 16 = -13 -> -3.25.
  // qs[1] = 0xF0: y1 = 0 - 16 -> -4; y17 = (15 | 16) - 16 = 15 -> 3.75.
  // qs[15] = 0x00: y15 = -4; y31 = (0 | 16) - 16 = 0.
  // Every other qs byte 0: -4.
  std::vector<std::uint8_t> b(22, 0);
  b[0] = 0x00;
  b[1] = 0x34;
  b[2] = 0x01;
  b[3] = 0x00;
  b[4] = 0x02;
  b[5] = 0x80;
  b[6] = 0x3A;
  b[7] = 0xF0;
  const auto y = dequantized(WeightType::kQ5_0, b, 32);
  for (std::size_t j = 0; j < 32; ++j) {
    float want = -4.0f;
    if (j == 0) want = 2.5f;
    if (j == 16) want = -3.25f;
    if (j == 17) want = 3.75f;
    if (j == 31) want = 0.0f;
    EXPECT_EQ(y[j], want) << j;
  }
}

TEST(WeightTypesBlocks, Q4_KByHand) {
  // d = 1 (0x3C00), dmin = 0.5 (0x3800).
  // Sub-block scales sc = [1, 2, 3, 4, 33, 50, 7, 63], mins m = [0, 1, 2, 3, 20, 40, 5, 17].
  // Packed: bytes 0..3 = sc[j] | (sc[j+4] >> 4) << 6:
  //   1 | 2<<6 = 0x81, 2 | 3<<6 = 0xC2, 3 | 0 = 0x03, 4 | 3<<6 = 0xC4
  // bytes 4..7 = m[j] | (m[j+4] >> 4) << 6:
  //   0 | 1<<6 = 0x40, 1 | 2<<6 = 0x81, 2 | 0 = 0x02, 3 | 1<<6 = 0x43
  // bytes 8..11 = (sc[j+4] & 15) | (m[j+4] & 15) << 4:
  //   1 | 4<<4 = 0x41, 2 | 8<<4 = 0x82, 7 | 5<<4 = 0x57, 15 | 1<<4 = 0x1F
  // y = (d*sc) * q - (dmin*m). qs[32g + l] low nibble -> element 64g + l
  // (sub-block 2g), high nibble -> 64g + 32 + l (sub-block 2g + 1).
  //   qs[0] = 0x5A: y0 = 1*10 - 0 = 10;  y32 = 2*5 - 0.5 = 9.5
  //   qs[64] = 0x3F: y128 = 33*15 - 10 = 485;  y160 = 50*3 - 20 = 130
  //   qs[127] = 0xE1: y223 = 7*1 - 2.5 = 4.5;  y255 = 63*14 - 8.5 = 873.5
  // Every other q is 0: y = -dmin*m of its sub-block:
  //   0, -0.5, -1, -1.5, -10, -20, -2.5, -8.5
  std::vector<std::uint8_t> b(144, 0);
  b[0] = 0x00;
  b[1] = 0x3C;
  b[2] = 0x00;
  b[3] = 0x38;
  const std::uint8_t scales[12] = {0x81, 0xC2, 0x03, 0xC4, 0x40, 0x81, 0x02, 0x43, 0x41, 0x82, 0x57, 0x1F};
  for (int i = 0; i < 12; ++i) b[static_cast<std::size_t>(4 + i)] = scales[i];
  b[16 + 0] = 0x5A;
  b[16 + 64] = 0x3F;
  b[16 + 127] = 0xE1;
  const auto y = dequantized(WeightType::kQ4_K, b, 256);
  const float zero_q[8] = {0.0f, -0.5f, -1.0f, -1.5f, -10.0f, -20.0f, -2.5f, -8.5f};
  for (std::size_t e = 0; e < 256; ++e) {
    float want = zero_q[e / 32];
    if (e == 0) want = 10.0f;
    if (e == 32) want = 9.5f;
    if (e == 128) want = 485.0f;
    if (e == 160) want = 130.0f;
    if (e == 223) want = 4.5f;
    if (e == 255) want = 873.5f;
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(WeightTypesBlocks, Q6_KByHand) {
  // Layout: ql[128], qh[64], scales[16] (int8), d (f16, last). d = 0.5.
  // scales[i] = i + 1 for i < 8, -(i - 7) for i >= 8: 1..8, -1..-8.
  // With ql = qh = 0 every q is 0 - 32 = -32: y = 0.5 * s * -32 = -16 s.
  // Half 0: ql[0] = 0x21, qh[0] = 0xE4 (2-bit fields from bit 0: 0, 1, 2, 3):
  //   e0:  (1 | 0<<4) - 32 = -31, s[0] = 1  -> -15.5
  //   e32: (0 | 1<<4) - 32 = -16, s[2] = 3  -> -24
  //   e64: (2 | 2<<4) - 32 = 2,   s[4] = 5  -> 5
  //   e96: (0 | 3<<4) - 32 = 16,  s[6] = 7  -> 56
  // Half 1, l = 31: ql[95] = 0xF7, ql[127] = 0x9C, qh[63] = 0x1B (fields 3, 2, 1, 0):
  //   e159: (7 | 3<<4) - 32 = 23,    s[9] = -2  -> -23
  //   e191: (12 | 2<<4) - 32 = 12,   s[11] = -4 -> -24
  //   e223: (15 | 1<<4) - 32 = -1,   s[13] = -6 -> 3
  //   e255: (9 | 0<<4) - 32 = -23,   s[15] = -8 -> 92
  std::vector<std::uint8_t> b(210, 0);
  b[0] = 0x21;
  b[128 + 0] = 0xE4;
  b[95] = 0xF7;
  b[127] = 0x9C;
  b[128 + 63] = 0x1B;
  for (int i = 0; i < 16; ++i) {
    const int s = i < 8 ? i + 1 : -(i - 7);
    b[static_cast<std::size_t>(192 + i)] = static_cast<std::uint8_t>(static_cast<std::int8_t>(s));
  }
  b[208] = 0x00;
  b[209] = 0x38;
  const auto y = dequantized(WeightType::kQ6_K, b, 256);
  for (std::size_t e = 0; e < 256; ++e) {
    const std::size_t i = e / 16;
    const float s = i < 8 ? static_cast<float>(i + 1) : -static_cast<float>(i - 7);
    float want = -16.0f * s;
    if (e == 0) want = -15.5f;
    if (e == 32) want = -24.0f;
    if (e == 64) want = 5.0f;
    if (e == 96) want = 56.0f;
    if (e == 159) want = -23.0f;
    if (e == 191) want = -24.0f;
    if (e == 223) want = 3.0f;
    if (e == 255) want = 92.0f;
    EXPECT_EQ(y[e], want) << e;
  }
}

TEST(WeightTypesBlocks, SeveralBlocksInARow) {
  // Two Q8_0 blocks: d = 1 and d = 2, qs all 3 -> 3s then 6s.
  std::vector<std::uint8_t> b(68, 3);
  b[0] = 0x00;
  b[1] = 0x3C;
  b[34] = 0x00;
  b[35] = 0x40;
  const auto y = dequantized(WeightType::kQ8_0, b, 64);
  for (std::size_t j = 0; j < 64; ++j) EXPECT_EQ(y[j], j < 32 ? 3.0f : 6.0f);
}

// ---- quantizers --------------------------------------------------------------

std::vector<float> ramp() {  // x_j = j - 16: signed max -16 at j = 0
  std::vector<float> x(32);
  for (std::size_t j = 0; j < 32; ++j) x[j] = static_cast<float>(j) - 16.0f;
  return x;
}

TEST(WeightTypesQuantize, Q4_0AsGgmlReference) {
  // d = -16 / -8 = 2, id = 0.5: q = min(15, (int)(x/2 + 8.5)) = min(15, floor(j/2 + 0.5)).
  const auto x = ramp();
  std::vector<std::uint8_t> b(18);
  quantize(WeightType::kQ4_0, x.data(), b.data(), 32);
  EXPECT_EQ(b[0], 0x00);
  EXPECT_EQ(b[1], 0x40);
  const auto y = dequantized(WeightType::kQ4_0, b, 32);
  for (std::size_t j = 0; j < 32; ++j) {
    const int q = std::min(15, static_cast<int>(std::floor(static_cast<double>(j) / 2 + 0.5)));
    EXPECT_EQ(y[j], static_cast<float>((q - 8) * 2)) << j;
  }
}

TEST(WeightTypesQuantize, Q5_0AsGgmlReference) {
  // d = -16 / -16 = 1: q = (int)(x + 16.5) = j, exact; elements 16..31 have
  // the 5th bit: qh = 0xFFFF0000; qs[j] = j | j << 4.
  const auto x = ramp();
  std::vector<std::uint8_t> b(22);
  quantize(WeightType::kQ5_0, x.data(), b.data(), 32);
  EXPECT_EQ(b[1], 0x3C);
  EXPECT_EQ(b[2], 0x00);
  EXPECT_EQ(b[3], 0x00);
  EXPECT_EQ(b[4], 0xFF);
  EXPECT_EQ(b[5], 0xFF);
  for (std::size_t j = 0; j < 16; ++j) EXPECT_EQ(b[6 + j], static_cast<std::uint8_t>(j | (j << 4)));
  EXPECT_EQ(dequantized(WeightType::kQ5_0, b, 32), x);
}

TEST(WeightTypesQuantize, Q8_0AsGgmlReference) {
  // d = 16/127, q = round(x * 127/16): x = -16 -> -127, x = 1 -> round(7.94) = 8,
  // x = 15 -> round(119.06) = 119.
  const auto x = ramp();
  std::vector<std::uint8_t> b(34);
  quantize(WeightType::kQ8_0, x.data(), b.data(), 32);
  EXPECT_EQ(static_cast<std::int8_t>(b[2]), -127);
  EXPECT_EQ(static_cast<std::int8_t>(b[2 + 17]), 8);
  EXPECT_EQ(static_cast<std::int8_t>(b[2 + 31]), 119);
  EXPECT_EQ(b[2 + 16], 0);
  EXPECT_EQ(b[0] | (b[1] << 8), float_to_half(16.0f / 127.0f));
}

// Round trips of uniform [-1, 1] values (and a block of zeros, and a
// block offset away from zero), each type within its stated bound.
void round_trip(WeightType type, double bound_per_amax, double max_mean_error) {
  const WeightTypeInfo& info = weight_type_info(type);
  const std::size_t n = 2048;
  std::vector<float> x(n);
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  for (float& v : x) v = uniform(rng);
  for (std::size_t i = 256; i < 512; ++i) x[i] = 0.0f;                 // a zero block
  for (std::size_t i = 512; i < 768; ++i) x[i] = 3.0f + 0.5f * x[i];   // all positive, far from 0
  std::vector<std::uint8_t> blocks(weight_bytes(type, n));
  quantize(type, x.data(), blocks.data(), n);
  const auto y = dequantized(type, blocks, n);
  double total = 0.0;
  for (std::size_t b = 0; b < n / info.block_elements; ++b) {
    double amax = 0.0;
    for (std::size_t i = 0; i < info.block_elements; ++i) {
      amax = std::max(amax, std::fabs(static_cast<double>(x[b * info.block_elements + i])));
    }
    for (std::size_t i = 0; i < info.block_elements; ++i) {
      const std::size_t k = b * info.block_elements + i;
      const double err = std::fabs(static_cast<double>(y[k]) - static_cast<double>(x[k]));
      const double bound = info.block_elements == 1 ? bound_per_amax * std::fabs(static_cast<double>(x[k]))
                                                    : bound_per_amax * amax;
      ASSERT_LE(err, bound + 1e-7) << info.name << " element " << k << ": " << x[k] << " -> " << y[k];
      total += err;
    }
  }
  EXPECT_LE(total / static_cast<double>(n), max_mean_error) << info.name;
}

TEST(WeightTypesQuantize, RoundTripsWithinBounds) {
  round_trip(WeightType::kF32, 0.0, 0.0);
  round_trip(WeightType::kF16, 1.0 / 2048, 1e-3);            // half an ulp: 2^-11 relative
  round_trip(WeightType::kBF16, 1.0 / 256, 1e-2);            // 2^-8 relative
  round_trip(WeightType::kQ8_0, 0.5 / 127 * 1.13, 3e-3);     // half a step, plus d's rounding to a half
  round_trip(WeightType::kQ4_0, 1.0 / 8 * 1.01, 0.04);       // a full step at the clamped end (+amax)
  round_trip(WeightType::kQ5_0, 1.0 / 16 * 1.01, 0.02);
  // K-quants: half a step, the step at most (range + min step) / 15 (Q4_K)
  // or amax / 31 (Q6_K) plus one super-block unit. Ranges here reach 2 amax.
  round_trip(WeightType::kQ4_K, 2.1 / 15 / 2 * 1.03, 0.04);
  round_trip(WeightType::kQ6_K, 1.0 / 31 / 2 * 1.03, 0.01);
}

// ---- tables --------------------------------------------------------------------

TEST(WeightTypesTable, SupportedTypes) {
  ASSERT_EQ(weight_types().size(), 8U);
  std::uint32_t last = 0;
  for (const WeightTypeInfo& info : weight_types()) {
    EXPECT_GE(static_cast<std::uint32_t>(info.type), last);
    last = static_cast<std::uint32_t>(info.type);
    EXPECT_EQ(weight_type_info(static_cast<std::uint32_t>(info.type)), &info);
    EXPECT_EQ(parse_weight_type(info.name), info.type);
    std::uint32_t elements = 0;
    std::uint32_t bytes = 0;
    ASSERT_TRUE(ggml_block_size(static_cast<std::uint32_t>(info.type), elements, bytes));
    EXPECT_EQ(elements, info.block_elements);
    EXPECT_EQ(bytes, info.block_bytes);
    EXPECT_EQ(ggml_type_name(static_cast<std::uint32_t>(info.type)), info.name);
  }
  EXPECT_EQ(weight_type_info(3U), nullptr);
  EXPECT_EQ(weight_bytes(WeightType::kQ4_K, 512), 288U);
  EXPECT_EQ(weight_bytes(WeightType::kBF16, 5), 10U);
}

TEST(WeightTypesTable, GgmlBlockSizes) {
  struct Row {
    std::uint32_t id;
    const char* name;
    std::uint32_t elements;
    std::uint32_t bytes;
  };
  const Row rows[] = {{3, "Q4_1", 32, 20},   {7, "Q5_1", 32, 24},      {9, "Q8_1", 32, 36},   {10, "Q2_K", 256, 84},
                      {11, "Q3_K", 256, 110}, {13, "Q5_K", 256, 176},  {15, "Q8_K", 256, 292}, {16, "IQ2_XXS", 256, 66},
                      {20, "IQ4_NL", 32, 18}, {23, "IQ4_XS", 256, 136}, {24, "I8", 1, 1},      {27, "I64", 1, 8},
                      {28, "F64", 1, 8},      {29, "IQ1_M", 256, 56},  {34, "TQ1_0", 256, 54}, {35, "TQ2_0", 256, 66},
                      {39, "MXFP4", 32, 17}};
  for (const Row& r : rows) {
    std::uint32_t elements = 0;
    std::uint32_t bytes = 0;
    ASSERT_TRUE(ggml_block_size(r.id, elements, bytes)) << r.name;
    EXPECT_EQ(elements, r.elements) << r.name;
    EXPECT_EQ(bytes, r.bytes) << r.name;
    EXPECT_EQ(ggml_type_name(r.id), r.name);
  }
  for (const std::uint32_t removed : {4U, 5U, 31U, 32U, 33U, 36U, 37U, 38U, 1000U}) {
    std::uint32_t elements = 0;
    std::uint32_t bytes = 0;
    EXPECT_FALSE(ggml_block_size(removed, elements, bytes)) << removed;
    EXPECT_EQ(ggml_type_name(removed), "type " + std::to_string(removed));
  }
}

TEST(WeightTypesTable, ParseNames) {
  EXPECT_EQ(parse_weight_type("q4_k"), WeightType::kQ4_K);
  EXPECT_EQ(parse_weight_type("Bf16"), WeightType::kBF16);
  EXPECT_EQ(parse_weight_type("f16"), WeightType::kF16);
  try {
    parse_weight_type("q4_1");
    ADD_FAILURE() << "no error";
  } catch (const ParameterError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'q4_1'"), std::string::npos) << what;
    EXPECT_NE(what.find(supported_weight_types()), std::string::npos) << what;
  }
  EXPECT_EQ(supported_weight_types(), "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K");
}

}  // namespace
}  // namespace kvevict
