// The quantized KV store (kv_precision.h, docs/paged.md "Fewer bits a
// position"): each quantizer against hand-worked numbers and against a plain
// reference written here from the header's words alone; the store's rows read
// back as that reference says, through the residual window, key groups,
// eviction that never re-quantizes, paged and contiguous alike; the bytes it
// holds counted by hand; the decoder at fp32 unchanged; bad formats refused
// with one line each.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "kvevict/model/kv/kv_precision.h"
#include "kvevict/model/kv/kv_store.h"
#include "kvevict/model/decoder/decoder.h"
#include "kvevict/model/decoder/model.h"
#include "kvevict/model/evaluation/perplexity.h"
#include "support.h"

namespace kvevict {
namespace {

using testing::expect_error;

// ---- references, from the header's words --------------------------------------

// The nearest finite half to x by search over every half (from_half is exact,
// and increasing over 0x0000 ... 0x7BFF), ties to the even code, saturating.
std::uint16_t reference_half(float x) {
  const bool negative = std::signbit(x);
  const double a = std::fabs(static_cast<double>(x));
  std::uint16_t lo = 0, hi = 0x7BFF;
  if (a >= 65504.0) return static_cast<std::uint16_t>((negative ? 0x8000 : 0) | 0x7BFF);
  while (hi - lo > 1) {  // the last code at or below a, and the next
    const auto mid = static_cast<std::uint16_t>((lo + hi) / 2);
    if (static_cast<double>(from_half(mid)) <= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  if (static_cast<double>(from_half(hi)) <= a) lo = hi;
  std::uint16_t best = lo;
  if (lo < 0x7BFF) {
    const auto up = static_cast<std::uint16_t>(lo + 1);
    const double below = a - static_cast<double>(from_half(lo));
    const double above = static_cast<double>(from_half(up)) - a;
    if (above < below || (above == below && (up % 2) == 0)) best = up;
  }
  return static_cast<std::uint16_t>((negative ? 0x8000 : 0) | best);
}

std::vector<float> reference_int8(const std::vector<float>& row) {
  float top = 0.0F;
  for (const float x : row) top = std::max(top, std::fabs(x));
  const float scale = top / 127.0F;
  std::vector<float> out;
  for (const float x : row) {
    if (scale == 0.0F) {
      out.push_back(0.0F);
      continue;
    }
    const float code = std::clamp(std::nearbyint(x / scale), -127.0F, 127.0F);
    out.push_back(code * scale);
  }
  return out;
}

// int4 of the numbers xs (one range over them all), read back.
std::vector<float> reference_int4(const std::vector<float>& xs) {
  const float lo = *std::min_element(xs.begin(), xs.end());
  const float hi = *std::max_element(xs.begin(), xs.end());
  const float scale = (hi - lo) / 15.0F;
  std::vector<float> out;
  for (const float x : xs) {
    const float code = scale == 0.0F ? 0.0F : std::clamp(std::nearbyint((x - lo) / scale), 0.0F, 15.0F);
    const float step = code * scale;
    out.push_back(lo + step);
  }
  return out;
}

void expect_bits(const float* got, const std::vector<float>& want, const std::string& what) {
  for (std::size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << what << " [" << i << "]: " << got[i] << " against " << want[i];
  }
}

// ---- the quantizers --------------------------------------------------------------

TEST(KvPrecision, HalvesWorkedByHand) {
  EXPECT_EQ(to_half(1.0F), 0x3C00);
  EXPECT_EQ(to_half(-2.0F), 0xC000);
  EXPECT_EQ(to_half(0.1F), 0x2E66);     // 0.0999755859375
  EXPECT_EQ(to_half(65504.0F), 0x7BFF);
  EXPECT_EQ(to_half(70000.0F), 0x7BFF);  // saturates, never infinite
  EXPECT_EQ(to_half(-std::numeric_limits<float>::infinity()), 0xFBFF);
  EXPECT_EQ(to_half(std::ldexp(1.0F, -14)), 0x0400);      // the smallest normal
  EXPECT_EQ(to_half(std::ldexp(1.0F, -24)), 0x0001);      // the smallest subnormal
  EXPECT_EQ(to_half(std::ldexp(1.0F, -25)), 0x0000);      // half-way to 0: even
  EXPECT_EQ(to_half(std::ldexp(3.0F, -25)), 0x0002);      // 1.5 units: even
  EXPECT_EQ(to_half(1.0F + std::ldexp(1.0F, -11)), 0x3C00);      // half-way: even
  EXPECT_EQ(to_half(1.0F + std::ldexp(3.0F, -11)), 0x3C02);      // half-way: even, upward
  EXPECT_EQ(to_half(2047.0F / 1024.0F * 1024.0F), 0x67FF);       // 2047, exact
  EXPECT_EQ(to_half(std::ldexp(2047.0F, -11) + std::ldexp(1.0F, -12)), 0x3C00);  // carries into the exponent
  EXPECT_TRUE(std::isnan(from_half(to_half(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_EQ(from_half(0x3C00), 1.0F);
  EXPECT_EQ(from_half(0x0001), std::ldexp(1.0F, -24));
  EXPECT_EQ(from_half(0x7BFF), 65504.0F);
  EXPECT_EQ(from_half(0xC000), -2.0F);
  EXPECT_TRUE(std::isinf(from_half(0x7C00)));
}

TEST(KvPrecision, EveryFiniteHalfRoundTripsAndRandomFloatsMatchTheNearestHalf) {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    if ((h & 0x7C00U) == 0x7C00U) continue;  // infinities and NaNs
    ASSERT_EQ(to_half(from_half(static_cast<std::uint16_t>(h))), h) << std::hex << h;
  }
  std::mt19937 gen(7);
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::uniform_real_distribution<float> mantissa(-2.0F, 2.0F);
  for (int i = 0; i < 100000; ++i) {
    const float x = std::ldexp(mantissa(gen), exponent(gen));
    ASSERT_EQ(to_half(x), reference_half(x)) << x;
  }
}

TEST(KvPrecision, Int8WorkedByHand) {
  const std::vector<float> row{1.0F, -2.54F, 0.5F, 0.0F};
  std::vector<std::int8_t> codes(4);
  const float scale = quantize_int8(row, codes);
  EXPECT_EQ(scale, 2.54F / 127.0F);
  EXPECT_EQ(codes, (std::vector<std::int8_t>{50, -127, 25, 0}));
  std::vector<float> back(4);
  dequantize_int8(codes, scale, back);
  EXPECT_EQ(back[1], -127.0F * scale);
  const std::vector<float> zeros(4, 0.0F);
  EXPECT_EQ(quantize_int8(zeros, codes), 0.0F);
  EXPECT_EQ(codes, (std::vector<std::int8_t>{0, 0, 0, 0}));
}

TEST(KvPrecision, Int4WorkedByHandAndPacked) {
  const float xs[] = {0.0F, 1.5F, 3.0F, 7.5F, 2.5F, 3.5F};
  const Int4Range r = int4_range(xs, 4, 1);
  EXPECT_EQ(r.lo, 0.0F);
  EXPECT_EQ(r.scale, 0.5F);
  EXPECT_EQ(int4_code(1.5F, r), 3);
  EXPECT_EQ(int4_code(7.5F, r), 15);
  EXPECT_EQ(int4_code(9.0F, r), 15);   // clamped
  EXPECT_EQ(int4_code(-1.0F, r), 0);
  const Int4Range unit{0.0F, 1.0F};
  EXPECT_EQ(int4_code(2.5F, unit), 2);  // ties to even
  EXPECT_EQ(int4_code(3.5F, unit), 4);
  EXPECT_EQ(int4_value(15, r), 7.5F);
  const Int4Range strided = int4_range(xs + 1, 3, 2);  // 1.5, 7.5, 3.5
  EXPECT_EQ(strided.lo, 1.5F);
  EXPECT_EQ(strided.scale, 6.0F / 15.0F);
  EXPECT_EQ(int4_code(0.0F, Int4Range{5.0F, 0.0F}), 0);  // a flat range: code 0, read back as lo
  EXPECT_EQ(int4_value(0, Int4Range{5.0F, 0.0F}), 5.0F);
  std::uint8_t packed[2] = {0xFF, 0xFF};
  int4_put(packed, 0, 0x3);
  int4_put(packed, 1, 0xA);
  int4_put(packed, 2, 0x0);
  EXPECT_EQ(packed[0], 0xA3);  // the even channel in the low nibble
  EXPECT_EQ(packed[1], 0xF0);
  EXPECT_EQ(int4_at(packed, 1), 0xA);
  EXPECT_EQ(int4_at(packed, 3), 0xF);
}

TEST(KvPrecision, BytesPerPositionByHand) {
  EXPECT_EQ(bytes_per_position({}, 32), 256.0);
  EXPECT_EQ(bytes_per_position({KvPrecision::kFp16}, 32), 128.0);
  EXPECT_EQ(bytes_per_position({KvPrecision::kInt8}, 32), 2.0 * (32 + 4));
  // int4, residual 32: 16 + 4 key bytes, 16 + 8 value bytes, 256 / 32 for the group.
  EXPECT_EQ(bytes_per_position({KvPrecision::kInt4}, 32), 44.0 + 8.0);
  EXPECT_EQ(bytes_per_position({KvPrecision::kInt4, 8}, 32), 44.0 + 32.0);
}

TEST(KvPrecision, BadFormatsAreRefusedOneRuleAtATime) {
  expect_error<ParameterError>([] { parse_precision("int3"); },
                               "--kv-precision: 'int3' is not a KV precision (fp32, fp16, int8 or int4)");
  expect_error<ParameterError>([] { check_format({KvPrecision::kFp32, 4}, 32); },
                               "--kv-residual (4) needs a quantized --kv-precision (fp16, int8 or int4): an fp32 "
                               "store holds every position at full precision");
  expect_error<ParameterError>([] { check_format({KvPrecision::kInt4, 0}, 32); },
                               "--kv-residual 0 with --kv-precision int4: int4 keys are quantized per channel over a "
                               "group of the residual window's tokens, so the window must be at least 1");
  expect_error<ParameterError>([] { check_format({KvPrecision::kInt8, 4097}, 32); },
                               "--kv-residual (4097) must be 0 ... 4096");
  expect_error<ParameterError>([] { check_format({KvPrecision::kInt4}, 5); },
                               "--kv-precision int4 packs two codes a byte and needs an even head size (this model's "
                               "is 5)");
  EXPECT_NO_THROW(check_format({KvPrecision::kFp32, 0}, 32));
  EXPECT_NO_THROW(check_format({KvPrecision::kInt8, 16}, 32));
}

// ---- the store -------------------------------------------------------------------

constexpr std::uint32_t kDim = 4;

// Row p of a made-up stream: distinct, signed, with ranges that move.
std::vector<float> row_of(std::uint32_t p, float salt) {
  std::vector<float> r(kDim);
  for (std::uint32_t c = 0; c < kDim; ++c) {
    r[c] = std::sin(static_cast<float>(p * 7 + c * 3) + salt) * static_cast<float>(1 + (p + c) % 5);
  }
  return r;
}

void append_row(SequenceStore& s, std::uint32_t p) {
  const auto [k, v] = s.append(0, static_cast<Position>(p));
  const std::vector<float> key = row_of(p, 0.0F), value = row_of(p, 1.0F);
  std::copy(key.begin(), key.end(), k);
  std::copy(value.begin(), value.end(), v);
  s.seal(0, p);
}

std::vector<float> held(SequenceStore& s, bool keys) {
  const auto [k, v] = s.rows(0);
  const float* from = keys ? k : v;
  return {from, from + std::size_t{s.count(0)} * kDim};
}

std::shared_ptr<BlockPool> pool_for(std::uint32_t block_size, KvFormat format) {
  return block_size == 0 ? nullptr : std::make_shared<BlockPool>(kDim, block_size, 16, format);
}

class KvStoreQuantized : public ::testing::TestWithParam<std::uint32_t> {};  // block size, 0: contiguous

TEST_P(KvStoreQuantized, Int8RowsReadBackAsTheReferenceAndBytesAreCountedByHand) {
  const KvFormat format{KvPrecision::kInt8, 0};
  SequenceStore s({1, 1, kDim, 8}, pool_for(GetParam(), format), false, format);
  for (std::uint32_t p = 0; p < 5; ++p) append_row(s, p);
  const std::vector<float> keys = held(s, true), values = held(s, false);
  for (std::uint32_t p = 0; p < 5; ++p) {
    expect_bits(keys.data() + p * kDim, reference_int8(row_of(p, 0.0F)), "key " + std::to_string(p));
    expect_bits(values.data() + p * kDim, reference_int8(row_of(p, 1.0F)), "value " + std::to_string(p));
  }
  // A row: its scale and 4 codes = 2 floats, key and value: 16 bytes.
  const std::uint64_t rows = GetParam() == 0 ? 5 : (5 + GetParam() - 1) / GetParam() * GetParam();
  EXPECT_EQ(s.stats().bytes_held, rows * 16);
  EXPECT_EQ(s.stats().peak_cache_bytes, rows * 16);
}

TEST_P(KvStoreQuantized, Int4KeepsTheResidualWindowExactThenQuantizesItAsOneKeyGroup) {
  const KvFormat format{KvPrecision::kInt4, 4};
  SequenceStore s({1, 1, kDim, 12}, pool_for(GetParam(), format), false, format);
  for (std::uint32_t p = 0; p < 3; ++p) append_row(s, p);
  EXPECT_EQ(s.pending(0), 3U);
  std::vector<float> keys = held(s, true);
  for (std::uint32_t p = 0; p < 3; ++p) expect_bits(keys.data() + p * kDim, row_of(p, 0.0F), "fp32 key");
  append_row(s, 3);  // the window fills: the four become one group
  EXPECT_EQ(s.pending(0), 0U);
  keys = held(s, true);
  const std::vector<float> values = held(s, false);
  for (std::uint32_t c = 0; c < kDim; ++c) {  // keys: per channel over the group's four tokens
    std::vector<float> channel;
    for (std::uint32_t p = 0; p < 4; ++p) channel.push_back(row_of(p, 0.0F)[c]);
    const std::vector<float> want = reference_int4(channel);
    for (std::uint32_t p = 0; p < 4; ++p) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(keys[p * kDim + c]), std::bit_cast<std::uint32_t>(want[p]))
          << "key " << p << " channel " << c;
    }
  }
  for (std::uint32_t p = 0; p < 4; ++p) {  // values: per token
    expect_bits(values.data() + p * kDim, reference_int4(row_of(p, 1.0F)), "value " + std::to_string(p));
  }
  // int4 at head size 4: key 1 + 1 floats, value 2 + 1: 20 bytes a row; one
  // group of 4 channels x (lo, scale): 32 bytes.
  const std::uint64_t stored = GetParam() == 0 ? 4 : (4 + GetParam() - 1) / GetParam() * GetParam();
  EXPECT_EQ(s.stats().bytes_held, stored * 20 + 32);
}

TEST_P(KvStoreQuantized, EvictionMovesCodesAndNeverRequantizesWhatStays) {
  const KvFormat format{KvPrecision::kInt4, 4};
  SequenceStore s({1, 1, kDim, 12}, pool_for(GetParam(), format), false, format);
  for (std::uint32_t p = 0; p < 7; ++p) append_row(s, p);  // one group (0-3), 4-6 in the window
  const std::vector<float> keys = held(s, true), values = held(s, false);
  // Evict two of the group's positions (0 and 2: the range of what they leave
  // differs, checked below, so a re-quantization would change the rest) and
  // one position of the window.
  bool range_moves = false;  // the test can only fail a re-quantization that would change something
  for (std::uint32_t c = 0; c < kDim; ++c) {
    std::vector<float> all, kept;
    for (std::uint32_t p = 0; p < 4; ++p) all.push_back(row_of(p, 0.0F)[c]);
    kept = {all[1], all[3]};
    range_moves = range_moves || reference_int4(kept)[0] != keys[1 * kDim + c];
  }
  ASSERT_TRUE(range_moves);
  const Position victims[] = {0, 2, 5};
  s.mark(0, victims, "test", 7);
  EXPECT_EQ(s.remove_marked(0), 3U);
  EXPECT_EQ(s.pending(0), 2U);
  const std::vector<Position> want_positions{1, 3, 4, 6};
  EXPECT_EQ(std::vector<Position>(s.positions(0).begin(), s.positions(0).end()), want_positions);
  const std::vector<float> after_keys = held(s, true), after_values = held(s, false);
  const std::uint32_t old_slot[] = {1, 3, 4, 6};
  for (std::uint32_t i = 0; i < 4; ++i) {
    for (std::uint32_t c = 0; c < kDim; ++c) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(after_keys[i * kDim + c]),
                std::bit_cast<std::uint32_t>(keys[old_slot[i] * kDim + c]));
      ASSERT_EQ(std::bit_cast<std::uint32_t>(after_values[i * kDim + c]),
                std::bit_cast<std::uint32_t>(values[old_slot[i] * kDim + c]));
    }
  }
  // The window fills again from 4, 6, 7, 8: a group of those four.
  append_row(s, 7);
  append_row(s, 8);
  EXPECT_EQ(s.pending(0), 0U);
  const std::vector<float> regrouped = held(s, true);
  const std::uint32_t members[] = {4, 6, 7, 8};
  for (std::uint32_t c = 0; c < kDim; ++c) {
    std::vector<float> channel;
    for (const std::uint32_t p : members) channel.push_back(row_of(p, 0.0F)[c]);
    const std::vector<float> want = reference_int4(channel);
    for (std::uint32_t i = 0; i < 4; ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(regrouped[(2 + i) * kDim + c]), std::bit_cast<std::uint32_t>(want[i]));
    }
  }
  // Evicting the first group's last members frees it: one group's 32 bytes go.
  const std::uint64_t before = s.stats().bytes_held;
  const Position first_group[] = {1, 3};
  s.mark(0, first_group, "test", 9);
  s.remove_marked(0);
  if (GetParam() == 0) {
    EXPECT_EQ(s.stats().bytes_held, before - 2 * 20 - 32);
  } else {
    EXPECT_LT(s.stats().bytes_held, before - 32 + 1);
  }
}

TEST_P(KvStoreQuantized, PagedAndContiguousReadBackTheSameBits) {
  for (const KvFormat format : {KvFormat{KvPrecision::kFp16, 0}, KvFormat{KvPrecision::kInt8, 3},
                                KvFormat{KvPrecision::kInt4, 3}}) {
    SequenceStore a({1, 1, kDim, 24}, nullptr, false, format);
    SequenceStore b({1, 1, kDim, 24}, pool_for(GetParam() == 0 ? 2 : GetParam(), format), false, format);
    std::uint32_t p = 0;
    for (int round = 0; round < 4; ++round) {
      for (int i = 0; i < 5; ++i, ++p) {
        append_row(a, p);
        append_row(b, p);
      }
      const Position victims[] = {a.positions(0)[1], a.positions(0)[a.count(0) - 2]};
      a.mark(0, victims, "test", p);
      b.mark(0, victims, "test", p);
      a.remove_marked(0);
      b.remove_marked(0);
      ASSERT_EQ(held(a, true), held(b, true)) << precision_name(format.precision) << " round " << round;
      ASSERT_EQ(held(a, false), held(b, false));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Stores, KvStoreQuantized, ::testing::Values(0U, 2U, 3U));

TEST(KvStoreQuantized, KeyGroupsRunOutOnlyPastTheCapacityBetweenClears) {
  const KvFormat format{KvPrecision::kInt4, 2};
  SequenceStore s({1, 1, kDim, 4}, nullptr, false, format);
  for (std::uint32_t p = 0; p < 4; ++p) append_row(s, p);  // groups {0,1} and {2,3}: the 4 / 2 there are
  const Position victims[] = {0, 2};
  s.mark(0, victims, "test", 4);
  s.remove_marked(0);  // both groups still alive
  append_row(s, 4);
  expect_error<ContractError>([&] { append_row(s, 5); },
                              "store: cache 0 has no free int4 key group (2 are alive): more than its capacity of 4 "
                              "positions appended since it was cleared");
  s.clear();
  for (std::uint32_t p = 0; p < 4; ++p) append_row(s, p);
  EXPECT_EQ(s.pending(0), 0U);
}

TEST(KvStoreQuantized, MismatchesAreRefused) {
  const KvFormat int8{KvPrecision::kInt8, 0};
  expect_error<ParameterError>(
      [&] { SequenceStore({1, 1, kDim, 8}, std::make_shared<BlockPool>(kDim, 2, 8), false, int8); },
      "store: the pool holds fp32 rows; this sequence's are int8");
  expect_error<ParameterError>(
      [&] { SequenceStore({1, 1, kDim, 8}, std::make_shared<BlockPool>(kDim, 2, 8, int8), true, int8); },
      "store: prefix sharing compares blocks bit for bit and needs fp32 rows, not int8");
}

// ---- the decoder -------------------------------------------------------------------

TEST(DecoderKv, Fp32IsTheStoreAsItWasAndAResidualLongerThanTheTextIsToo) {
  const auto model = testing::committed_model();
  Decoder plain(model, 96);
  Decoder fp32(model, DecoderOptions{.capacity = 96, .kv = KvFormat{KvPrecision::kFp32, 0}});
  // int4 whose window never fills: every position stays at fp32.
  Decoder unfilled(model, DecoderOptions{.capacity = 96, .kv = KvFormat{KvPrecision::kInt4, 128}});
  Decoder filled(model, DecoderOptions{.capacity = 96, .kv = KvFormat{KvPrecision::kInt4, 8}});
  float largest = 0.0F;
  bool differs = false;
  for (std::uint32_t t = 0; t < 96; ++t) {
    const auto token = static_cast<std::uint8_t>("the quick brown fox jumps over the lazy dog. "[t % 45]);
    const std::span<const float> a = plain.step(token);
    const std::span<const float> b = fp32.step(token);
    const std::span<const float> c = unfilled.step(token);
    const std::span<const float> d = filled.step(token);
    ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size_bytes())) << "step " << t;
    ASSERT_EQ(0, std::memcmp(a.data(), c.data(), a.size_bytes())) << "step " << t;
    for (std::size_t i = 0; i < a.size(); ++i) {
      largest = std::max(largest, std::fabs(a[i] - d[i]));
      differs = differs || a[i] != d[i];
    }
  }
  EXPECT_TRUE(differs) << "int4 with its window filled must read back quantized keys";
  EXPECT_LT(largest, 2.0F) << "int4 logits stray further than quantization explains";
  // Bytes, by hand: fp32 a cache of 96 positions x 2 x 32 floats; int4 with
  // residual 8: 12 full groups, 96 rows of 44 bytes and 12 x 256 bytes of scales.
  const ModelConfig& cfg = model->config();
  EXPECT_EQ(plain.store().bytes_held, std::uint64_t{cfg.head_count()} * 96 * 256);
  EXPECT_EQ(filled.store().bytes_held, std::uint64_t{cfg.head_count()} * (96 * 44 + 12 * 256));
  // The peak: the last window full at fp32 just before it is quantized --
  // 88 rows in 11 groups, 8 rows of 256 bytes.
  EXPECT_EQ(filled.store().peak_cache_bytes, 88U * 44 + 11 * 256 + 8 * 256);
}

TEST(DecoderKv, QuantizedPagedAndContiguousGiveTheSameLogitsUnderEviction) {
  const auto model = testing::committed_model();
  const ModelConfig& cfg = model->config();
  for (const KvFormat format : {KvFormat{KvPrecision::kInt8, 0}, KvFormat{KvPrecision::kInt4, 16}}) {
    Decoder contiguous(model, DecoderOptions{.capacity = 160, .kv = format});
    Decoder paged(model, DecoderOptions{.capacity = 160, .block_size = 16, .kv = format});
    std::vector<std::unique_ptr<Policy>> policies;
    for (std::uint32_t h = 0; h < cfg.head_count(); ++h) {
      for (Decoder* d : {&contiguous, &paged}) {
        policies.push_back(find_policy("h2o").make({{"budget", 48}}));
        d->set_policy(h, policies.back().get(), 48);
      }
    }
    for (std::uint32_t t = 0; t < 160; ++t) {
      const auto token = static_cast<std::uint8_t>("Attention is all you need, and a little memory. "[t % 48]);
      const std::span<const float> a = contiguous.step(token);
      const std::span<const float> b = paged.step(token);
      ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size_bytes()))
          << precision_name(format.precision) << " step " << t;
    }
    EXPECT_GT(contiguous.evicted(), 0U);
  }
}

// Every registered policy (an eleventh too) in token, block and layer mode
// and after a prefill, on int8 and int4 stores: it runs, evicts, holds fewer
// bytes than fp32 would, and blocks of 1 are the token policy to the bit.
TEST(DecoderKv, EveryPolicyAndModeRunsOnAQuantizedStore) {
  const auto model = testing::committed_model();
  const std::vector<std::uint8_t> all = read_text(testing::model_dir() / "heldout-sample.txt");
  const std::vector<std::uint8_t> text(all.begin(), all.begin() + 160);
  for (const KvFormat format : {KvFormat{KvPrecision::kInt8, 0}, KvFormat{KvPrecision::kInt4, 16}}) {
    for (const std::string& name : policy_names()) {
      const std::string what = name + " at " + std::string(precision_name(format.precision));
      RunSpec spec{name, {}, 96};
      if (find_policy(name).has_param("recentWindow")) spec.params = {{"recentWindow", 8}};
      ModelRunOptions token;
      token.kv = format;
      const std::vector<PerplexityRow> rows = perplexity(*model, text, {spec}, token);
      ASSERT_EQ(rows.size(), 3U) << what;
      EXPECT_GT(rows[2].evicted, 0U) << what;
      EXPECT_EQ(rows[2].kv_precision, precision_name(format.precision)) << what;
      EXPECT_LT(rows[2].peak_cache_bytes, 97U * 256) << what;  // 97 fp32 positions: the budget and the newest
      ModelRunOptions one = token;
      one.paged.block_size = 1;
      const std::vector<PerplexityRow> blocks = perplexity(*model, text, {spec}, one);
      EXPECT_EQ(blocks[2].bits_per_byte, rows[2].bits_per_byte) << what << ": blocks of 1";
      ModelRunOptions sixteen = token;
      sixteen.paged.block_size = 16;
      EXPECT_GT(perplexity(*model, text, {spec}, sixteen)[2].evicted, 0U) << what << ": blocks of 16";
      ModelRunOptions layer = token;
      layer.paged.layer_budget = true;
      EXPECT_GT(perplexity(*model, text, {spec}, layer)[2].evicted, 0U) << what << ": layer budget";
      ModelRunOptions prefill = token;
      prefill.prefill = 120;
      EXPECT_GT(perplexity(*model, text, {spec}, prefill)[2].evicted, 0U) << what << ": prefill";
    }
  }
}

TEST(DecoderKv, ASharedPoolMustHoldTheDecodersPrecision) {
  const auto model = testing::committed_model();
  auto pool = std::make_shared<BlockPool>(model->config().head_dim(), 16, 64);
  expect_error<ParameterError>(
      [&] { Decoder(model, DecoderOptions{.capacity = 64, .pool = pool, .kv = KvFormat{KvPrecision::kFp16}}); },
      "store: the pool holds fp32 rows; this sequence's are fp16");
}

// What a position really costs: a cache that never holds its residual
// window's R rows keeps every row at fp32 (the window is quantized when its
// R-th row arrives).
TEST(KvPrecision, HeldBytesPerPositionIsFp32WhenTheWindowNeverFills) {
  const KvFormat long_window{KvPrecision::kInt4, 1000};
  EXPECT_EQ(held_bytes_per_position(long_window, 32, 400), 8.0 * 32);
  EXPECT_EQ(held_bytes_per_position(long_window, 32, 999), 8.0 * 32);
  EXPECT_EQ(held_bytes_per_position(long_window, 32, 1000), bytes_per_position(long_window, 32));
  EXPECT_EQ(held_bytes_per_position({KvPrecision::kInt4}, 32, 33), bytes_per_position({KvPrecision::kInt4}, 32));
  // No window (fp16, int8 at residual 0; fp32): every row is stored as it comes.
  EXPECT_EQ(held_bytes_per_position({KvPrecision::kInt8, 0}, 32, 1), bytes_per_position({KvPrecision::kInt8}, 32));
  EXPECT_EQ(held_bytes_per_position({}, 32, 1), 8.0 * 32);
}

// The audit's case: an int4 window of 1000 reserved 1000 fp32 rows, so a
// memory that holds 390 fp32 positions held "no position". A budget B holds
// B + 1 positions at most, so at most min(B + 1, R) rows are at fp32.
TEST(KvPrecision, MemoryBudgetReservesOnlyTheRowsACacheCanHold) {
  const std::uint32_t d = 32;
  const double full = 8.0 * d;
  EXPECT_EQ(budget_for_memory(static_cast<std::int64_t>(390 * full), {KvPrecision::kInt4, 1000}, d), 390);
  EXPECT_EQ(budget_for_memory(static_cast<std::int64_t>(390 * full) - 1, {KvPrecision::kInt4, 1000}, d), 389);
  // A window that fills: its R rows reserved at fp32 beside B stored ones, as before.
  for (const KvFormat f : {KvFormat{KvPrecision::kInt4}, KvFormat{KvPrecision::kInt4, 8}, KvFormat{KvPrecision::kInt8, 0},
                           KvFormat{KvPrecision::kFp16, 4}, KvFormat{}}) {
    const double b = bytes_per_position(f, d);
    const double reserve = f.residual_window() * (full - b);
    EXPECT_EQ(budget_for_memory(16384, f, d), static_cast<std::int64_t>(std::floor((16384 - reserve) / b)))
        << precision_name(f.precision);
  }
  // Just short of filling a window of 100: B + 1 stays below R, every row fp32.
  const KvFormat hundred{KvPrecision::kInt4, 100};
  EXPECT_EQ(budget_for_memory(static_cast<std::int64_t>(99 * full), hundred, d), 98);
  // More memory never means fewer positions, and under the accounting above
  // each budget fits: stored rows and R fp32 ones once the window fills, all
  // fp32 before.
  std::int64_t last = budget_for_memory(0, hundred, d);
  for (std::int64_t memory = 0; memory <= 40000; memory += 7) {
    const std::int64_t budget = budget_for_memory(memory, hundred, d);
    EXPECT_GE(budget, last) << memory;
    last = budget;
    if (budget < 1) continue;
    const double b = bytes_per_position(hundred, d);
    const double cost = budget + 1 >= 100 ? budget * b + 100 * (full - b) : budget * full;
    EXPECT_LE(cost, static_cast<double>(memory)) << memory;
  }
  EXPECT_LT(budget_for_memory(255, {KvPrecision::kInt4, 1000}, d), 1);  // not one fp32 position
}

// Through the decoder: the budget the memory allows runs, its rows stay at
// fp32 (the window never fills), and the bytes measured are those.
TEST(DecoderKv, MemoryWithALongWindowHoldsItsFp32Positions) {
  const auto model = testing::committed_model();
  const std::uint32_t d = model->config().head_dim();
  const std::vector<std::uint8_t> all = read_text(testing::model_dir() / "heldout-sample.txt");
  const std::vector<std::uint8_t> text(all.begin(), all.begin() + 200);
  MemoryRequest request;
  request.policies = {"sliding-window"};
  request.memories = {std::int64_t{150} * 8 * d};
  request.formats = {KvFormat{KvPrecision::kInt4, 1000}};
  const std::vector<PerplexityRow> rows = perplexity_at_memory(*model, text, request);
  ASSERT_EQ(rows.size(), 3U);  // fp32 full cache, int4 full cache, the policy
  EXPECT_EQ(rows[1].bytes_per_position, 8.0 * d);  // 200 positions never fill a window of 1000
  EXPECT_EQ(rows[2].budget, 150);
  EXPECT_GT(rows[2].evicted, 0U);
  EXPECT_EQ(rows[2].bytes_per_position, 8.0 * d);
  EXPECT_EQ(rows[2].bits_per_byte, perplexity(*model, text, {RunSpec{"sliding-window", {}, 150}})[1].bits_per_byte);
  // The budget's positions and the newest before eviction, at fp32.
  EXPECT_EQ(rows[2].peak_cache_bytes, 151U * 8 * d);
}

}  // namespace
}  // namespace kvevict
