// The 8-bit products (MatmulMode::kInt8, kvevict/model/kernels/matmul.h):
// vectors rounded to 8 bits a value as llama.cpp rounds them, then integer
// multiply-adds against the weights' own integers, each block's sum scaled
// once.
//
// Why: a quantized product in float decodes every weight to a float and
// multiplies it by its scale before the multiply-add, which is most of the
// work (docs/performance.md: Q4_K decoded at a fifth of its reading speed).
// With the vector in integers, a weight is an int16 lane of one
// multiply-add (vpmaddwd: 32 weights an instruction on AVX-512), Q4_K's
// 6-bit sub-block scales multiply the weights' integers before it (15 x 63
// fits int16), and only a block's sum (32 weights for Q8_0, 256 for Q4_K)
// is turned into a float. The rounding is llama.cpp's, so the logits come
// near its own: that is the mode's other purpose.
//
// The values are held in int8 (each in [-127, 127]). Highway (1.0.3, the
// packaged one) has no 8-bit multiply-add: its kernels here widen both sides
// to int16, which keeps every target -- down to the baseline -- on the same
// exact integer sums; on a CPU with AVX-512 VNNI the products run in 8 bits
// (matmul_int8_vnni.cpp), to the same integer sums.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul_int8.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "kvevict/model/kernels/matmul.h"

HWY_BEFORE_NAMESPACE();
namespace kvevict::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DI16 = hn::CappedTag<std::int16_t, 32>;
using DI32 = hn::Repartition<std::int32_t, DI16>;
using DF32 = hn::Rebind<float, DI32>;
using DF = hn::CappedTag<float, 16>;

// As the exact kernels (matmul.cpp): 8 KiB ahead of a row's read.
constexpr std::size_t kPrefetchBytes = 8192;

// A float16 as a float (every half is one exactly); inlined, not a call,
// for the same reason as matmul.cpp's Half: a call spills the tile.
HWY_INLINE float Half(const std::uint8_t* p) {
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
}

// The largest magnitude of n floats (n a multiple of the lanes), and
// whether every one is finite (NaN compares false).
HWY_INLINE float LargestMagnitude(const float* x, std::size_t n, bool& finite) {
  const DF df;
  auto most = hn::Zero(df);
  finite = true;
  for (std::size_t e = 0; e < n; e += hn::Lanes(df)) {
    const auto magnitude = hn::Abs(hn::LoadU(df, x + e));
    finite = finite && hn::AllTrue(df, hn::Lt(magnitude, hn::Set(df, std::numeric_limits<float>::infinity())));
    most = hn::Max(most, magnitude);
  }
  return hn::GetLane(hn::MaxOfLanes(df, most));
}

// n values round(x * inverse), ties to even (the CPU's rounding, as
// llama.cpp's _mm256_round_ps and its nearest_int), at most `top`.
HWY_INLINE void RoundValues(const float* x, std::size_t n, float inverse, std::int32_t top, std::int8_t* out) {
  const DF df;
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::int8_t, decltype(di)> d8;
  for (std::size_t e = 0; e < n; e += hn::Lanes(df)) {
    const auto rounded = hn::Min(hn::NearestInt(hn::Mul(hn::LoadU(df, x + e), hn::Set(df, inverse))), hn::Set(di, top));
    hn::StoreU(hn::DemoteTo(d8, rounded), d8, out + e);
  }
}

std::size_t RoundQ8_0(const float* x, std::size_t xs, std::size_t cols, std::size_t vectors, std::int8_t* values,
                      float* scales, std::uint8_t* usable) {
  const std::size_t blocks = cols / 32;
  std::size_t good = 0;
  for (std::size_t v = 0; v < vectors; ++v) {
    bool ok = true;
    for (std::size_t block = 0; block < blocks && ok; ++block) {
      const float* at = x + v * xs + block * 32;
      const float m = LargestMagnitude(at, 32, ok);
      // A scale past float16's range would make every product infinite:
      // such a vector takes the exact kernel, as a non-finite one does.
      ok = ok && m / 127.0F <= 65504.0F;
      if (!ok) break;
      // llama.cpp's quantize_row_q8_0: the scale stored as float16, the
      // values at 127 / m (not 1 / the stored scale).
      scales[v * blocks + block] = half_to_float(float_to_half(m / 127.0F));
      RoundValues(at, 32, m != 0.0F ? 127.0F / m : 0.0F, 127, values + v * cols + block * 32);
    }
    if (!ok) {
      std::memset(values + v * cols, 0, cols);
      std::memset(scales + v * blocks, 0, blocks * sizeof(float));
    }
    usable[v] = ok ? 1 : 0;
    good += ok ? 1 : 0;
  }
  return good;
}

std::size_t RoundQ8_K(const float* x, std::size_t xs, std::size_t cols, std::size_t vectors, std::int8_t* values,
                      float* scales, std::int16_t* sums, std::uint8_t* usable) {
  const std::size_t blocks = cols / 256;
  std::size_t good = 0;
  for (std::size_t v = 0; v < vectors; ++v) {
    bool ok = true;
    for (std::size_t block = 0; block < blocks && ok; ++block) {
      const float* at = x + v * xs + block * 256;
      std::int8_t* out = values + v * cols + block * 256;
      const float m = LargestMagnitude(at, 256, ok);
      if (!ok) break;
      if (m == 0.0F) {
        std::memset(out, 0, 256);
        scales[v * blocks + block] = 0.0F;
      } else {
        // llama.cpp's quantize_row_q8_K: the first element of the largest
        // magnitude, with its sign, maps to -127.
        std::size_t first = 0;
        while (std::abs(at[first]) != m) ++first;
        const float iscale = -127.0F / at[first];
        RoundValues(at, 256, iscale, 127, out);
        scales[v * blocks + block] = 1.0F / iscale;
      }
      for (std::size_t j = 0; j < 8; ++j) {
        int sum = 0;
        for (std::size_t e = 0; e < 32; ++e) sum += out[32 * j + e];
        sums[v * (cols / 32) + block * 8 + j] = static_cast<std::int16_t>(sum);
      }
    }
    if (!ok) {
      std::memset(values + v * cols, 0, cols);
      std::memset(scales + v * blocks, 0, blocks * sizeof(float));
      std::memset(sums + v * (cols / 32), 0, cols / 32 * sizeof(std::int16_t));
    }
    usable[v] = ok ? 1 : 0;
    good += ok ? 1 : 0;
  }
  return good;
}

// Q8_0 rows [r0, r0 + R) against Q8_0-rounded vectors [v0, v0 + V): per
// block, the 32 products' integer sum, then one float multiply-add by the
// two scales.
template <int R, int V>
HWY_INLINE void TileQ8_0(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx,
                         std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const DI16 d16;
  const DI32 d32;
  const DF32 df;
  const hn::Rebind<std::int8_t, DI16> d8;
  const std::size_t N = hn::Lanes(d16);
  const std::size_t blocks = w.cols / 32;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  hn::Vec<DF32> acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::uint8_t* b[R];
    for (int r = 0; r < R; ++r) {
      b[r] = rows[r] + block * 34;
      hwy::Prefetch(b[r] + kPrefetchBytes);
    }
    hn::Vec<DI32> sum[R][V];
    hn::Vec<DI32> odd[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) sum[r][v] = odd[r][v] = hn::Zero(d32);
    }
    for (std::size_t e = 0; e < 32; e += N) {
      hn::Vec<DI16> q[R];
      for (int r = 0; r < R; ++r) {
        q[r] = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(b[r] + 2 + e)));
      }
      for (int v = 0; v < V; ++v) {
        const auto xv = hn::PromoteTo(d16, hn::LoadU(d8, qx.values + (v0 + v) * qx.stride + block * 32 + e));
        for (int r = 0; r < R; ++r) sum[r][v] = hn::ReorderWidenMulAccumulate(d32, q[r], xv, sum[r][v], odd[r][v]);
      }
    }
    for (int r = 0; r < R; ++r) {
      const float d = Half(b[r]);
      for (int v = 0; v < V; ++v) {
        const float scale = d * qx.scales[(v0 + v) * blocks + block];
        const auto whole = hn::RearrangeToOddPlusEven(sum[r][v], odd[r][v]);
        acc[r][v] = hn::MulAdd(hn::ConvertTo(df, whole), hn::Set(df, scale), acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][v]));
  }
}

// A Q4_K block's 6-bit sub-block scales and mins (as dequantize's: scale
// j < 4 in the low 6 bits of byte j, min j < 4 of byte j + 4; for j >= 4 the
// low 4 bits in byte j + 4's low (scale) or high (min) nibble and the top 2
// in bits 6-7 of byte j - 4 (scale) or j (min)), unpacked four bytes a
// 32-bit word, then widened.
HWY_INLINE void ScalesMins(const std::uint8_t* q, std::int16_t* sc, std::int16_t* m) {
  std::uint32_t word[3];
  std::memcpy(word, q, sizeof word);
  constexpr std::uint32_t kLow6 = 0x3F3F3F3F;
  constexpr std::uint32_t kLow4 = 0x0F0F0F0F;
  constexpr std::uint32_t kTop2 = 0x03030303;
  const std::uint32_t unpacked[4] = {word[0] & kLow6, (word[2] & kLow4) | (((word[0] >> 6) & kTop2) << 4),
                                     word[1] & kLow6, ((word[2] >> 4) & kLow4) | (((word[1] >> 6) & kTop2) << 4)};
  std::uint8_t bytes[16];
  std::memcpy(bytes, unpacked, sizeof bytes);
  const hn::CappedTag<std::int16_t, 8> d16;
  const hn::Rebind<std::uint8_t, decltype(d16)> d8;
  for (std::size_t j = 0; j < 8; j += hn::Lanes(d16)) {
    hn::StoreU(hn::BitCast(d16, hn::PromoteTo(hn::RebindToUnsigned<decltype(d16)>(), hn::LoadU(d8, bytes + j))), d16,
               sc + j);
    hn::StoreU(hn::BitCast(d16, hn::PromoteTo(hn::RebindToUnsigned<decltype(d16)>(), hn::LoadU(d8, bytes + 8 + j))),
               d16, m + j);
  }
}

// sum_j m[j] * s[j] over a block's 8 sub-blocks, as one multiply-add.
HWY_INLINE std::int32_t MinSum(const std::int16_t* m, const std::int16_t* s) {
  const hn::CappedTag<std::int16_t, 8> d16;
  const hn::Repartition<std::int32_t, decltype(d16)> d32;
  auto sum = hn::Zero(d32);
  auto odd = hn::Zero(d32);
  for (std::size_t j = 0; j < 8; j += hn::Lanes(d16)) {
    sum = hn::ReorderWidenMulAccumulate(d32, hn::LoadU(d16, m + j), hn::LoadU(d16, s + j), sum, odd);
  }
  return hn::GetLane(hn::SumOfLanes(d32, hn::RearrangeToOddPlusEven(sum, odd)));
}

// Q4_K rows against Q8_K-rounded vectors. A weight is d * sc_j * q - dmin *
// m_j (q in 0..15, sub-block j of 32), so a block's product is d * dx *
// sum_j sc_j sum_i q_i x_i - dmin * dx * sum_j m_j sum_i x_i: the first sum
// in integers with each q already times its sc_j (at most 945: int16), the
// second from the vector's sums by 32.
template <int R, int V>
HWY_INLINE void TileQ4_K(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx,
                         std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const DI16 d16;
  const DI32 d32;
  const DF32 df;
  const hn::Rebind<std::uint8_t, DI16> d8;
  const hn::Rebind<std::int8_t, DI16> ds8;
  const hn::RebindToUnsigned<DI16> du16;
  const std::size_t N = hn::Lanes(d16);
  const std::size_t blocks = w.cols / 256;
  const std::size_t groups32 = qx.stride / 32;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  hn::Vec<DF32> acc[R][V];
  float mins[R][V] = {};
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::uint8_t* b[R];
    std::int16_t sc[R][8];
    std::int16_t m[R][8];
    for (int r = 0; r < R; ++r) {
      b[r] = rows[r] + block * 144;
      hwy::Prefetch(b[r] + kPrefetchBytes);
      ScalesMins(b[r] + 4, sc[r], m[r]);
    }
    hn::Vec<DI32> sum[R][V];
    hn::Vec<DI32> odd[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) sum[r][v] = odd[r][v] = hn::Zero(d32);
    }
    // 64 elements a group: the low nibbles of its 32 bytes (sub-block 2g),
    // then the high (2g + 1).
    for (std::size_t g = 0; g < 4; ++g) {
      for (std::size_t e = 0; e < 32; e += N) {
        hn::Vec<DI16> lo[R];
        hn::Vec<DI16> hi[R];
        for (int r = 0; r < R; ++r) {
          const auto raw = hn::BitCast(d16, hn::PromoteTo(du16, hn::LoadU(d8, b[r] + 16 + 32 * g + e)));
          lo[r] = hn::Mul(hn::And(raw, hn::Set(d16, 0x0F)), hn::Set(d16, sc[r][2 * g]));
          hi[r] = hn::Mul(hn::ShiftRight<4>(raw), hn::Set(d16, sc[r][2 * g + 1]));
        }
        for (int v = 0; v < V; ++v) {
          const std::int8_t* xv = qx.values + (v0 + v) * qx.stride + block * 256 + 64 * g + e;
          const auto xl = hn::PromoteTo(d16, hn::LoadU(ds8, xv));
          const auto xh = hn::PromoteTo(d16, hn::LoadU(ds8, xv + 32));
          for (int r = 0; r < R; ++r) {
            sum[r][v] = hn::ReorderWidenMulAccumulate(d32, lo[r], xl, sum[r][v], odd[r][v]);
            sum[r][v] = hn::ReorderWidenMulAccumulate(d32, hi[r], xh, sum[r][v], odd[r][v]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float d = Half(b[r]);
      const float dmin = Half(b[r] + 2);
      for (int v = 0; v < V; ++v) {
        const float dx = qx.scales[(v0 + v) * blocks + block];
        const std::int32_t min_sum = MinSum(m[r], qx.sums + (v0 + v) * groups32 + block * 8);
        const auto whole = hn::RearrangeToOddPlusEven(sum[r][v], odd[r][v]);
        acc[r][v] = hn::MulAdd(hn::ConvertTo(df, whole), hn::Set(df, d * dx), acc[r][v]);
        mins[r][v] += dmin * dx * static_cast<float>(min_sum);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][v])) - mins[r][v];
  }
}

// A tile's vectors: four where there are (a prompt's chunk, a batch), each
// row's weights then unpacked once for four vectors; then two, then one.
template <int R, class Tile4, class Tile2, class Tile1>
HWY_INLINE void Vectors(std::size_t vectors, Tile4 tile4, Tile2 tile2, Tile1 tile1) {
  std::size_t v = 0;
  for (; v + 4 <= vectors; v += 4) tile4(v);
  for (; v + 2 <= vectors; v += 2) tile2(v);
  if (v < vectors) tile1(v);
}

// R rows against every vector. With four vectors a tile, two rows keep the
// integer sums and float accumulators (2 x 4 of each) in AVX-512's 32
// registers; a decode step's one vector takes four rows (four independent
// chains over the weights' read).
template <int R>
HWY_INLINE void RowGroup(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx, float* y,
                         std::size_t ys) {
  if (w.type == kvevict::WeightType::kQ4_K) {
    Vectors<R>(
        qx.vectors, [&](std::size_t v) { TileQ4_K<R, 4>(w, r0, qx, v, y, ys); },
        [&](std::size_t v) { TileQ4_K<R, 2>(w, r0, qx, v, y, ys); },
        [&](std::size_t v) { TileQ4_K<R, 1>(w, r0, qx, v, y, ys); });
    return;
  }
  Vectors<R>(
      qx.vectors, [&](std::size_t v) { TileQ8_0<R, 4>(w, r0, qx, v, y, ys); },
      [&](std::size_t v) { TileQ8_0<R, 2>(w, r0, qx, v, y, ys); },
      [&](std::size_t v) { TileQ8_0<R, 1>(w, r0, qx, v, y, ys); });
}

#if HWY_TARGET == HWY_AVX2
// AVX2's own 8-bit products (raw intrinsics; Highway 1.0.3 has no 8-bit
// multiply-add): vpmaddubsw multiplies 32 unsigned bytes by 32 signed ones
// into 16 sums of two, vpmaddwd widens those to 32 bits -- 32 weights two
// instructions, where the kernels above take four (two widenings, two
// multiply-adds) at 16 lanes. The integer sums are the same; as with the
// VNNI kernels (matmul_int8_vnni.cpp), the lanes they sit in before the
// float sum are this target's own. Two rows, two vectors a tile: AVX2's 16
// registers hold their accumulators, weights and vectors.

HWY_INLINE float HalfAvx2(const std::uint8_t* p) {
  std::uint16_t h = 0;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

HWY_INLINE float SumLanesAvx2(__m256 v) {
  const __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// Q8_0: vpmaddubsw wants one side unsigned: each weight's magnitude (128
// for -128, read unsigned) against the vector's value with the weight's
// sign (vpsignb), so no pair passes 2 x 128 x 127 (no saturation).
template <int R, int V>
HWY_INLINE void TileQ8_0Avx2(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx,
                             std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const std::size_t blocks = w.cols / 32;
  const __m256i ones = _mm256_set1_epi16(1);
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    __m256i wq[R];
    __m256i magnitude[R];
    float d[R];
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* b = rows[r] + block * 34;
      hwy::Prefetch(b + kPrefetchBytes);
      wq[r] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2));
      magnitude[r] = _mm256_sign_epi8(wq[r], wq[r]);
      d[r] = HalfAvx2(b);
    }
    for (int v = 0; v < V; ++v) {
      const __m256i xv =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qx.values + (v0 + v) * qx.stride + block * 32));
      const float dx = qx.scales[(v0 + v) * blocks + block];
      for (int r = 0; r < R; ++r) {
        const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(magnitude[r], _mm256_sign_epi8(xv, wq[r])), ones);
        acc[r][v] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(d[r] * dx), acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = SumLanesAvx2(acc[r][v]);
  }
}

// Q4_K: the nibbles (0..15) are the unsigned side, against the vector's
// values; each sub-block's pairs then multiply-add by its 6-bit scale
// (vpmaddwd), so no pair passes 2 x 15 x 127 and no sum 2 x 3810 x 63.
template <int R, int V>
HWY_INLINE void TileQ4_KAvx2(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx,
                             std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const std::size_t blocks = w.cols / 256;
  const std::size_t groups32 = qx.stride / 32;
  const __m256i nibble = _mm256_set1_epi8(0x0F);
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  __m256 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm256_setzero_ps();
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::uint8_t* b[R];
    alignas(16) std::int16_t sc[R][8];
    alignas(16) std::int16_t m[R][8];
    for (int r = 0; r < R; ++r) {
      b[r] = rows[r] + block * 144;
      hwy::Prefetch(b[r] + kPrefetchBytes);
      ScalesMins(b[r] + 4, sc[r], m[r]);
    }
    __m256i sum[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) sum[r][v] = _mm256_setzero_si256();
    }
    for (int g = 0; g < 4; ++g) {
      __m256i lo[R];
      __m256i hi[R];
      for (int r = 0; r < R; ++r) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[r] + 16 + 32 * g));
        lo[r] = _mm256_and_si256(raw, nibble);
        hi[r] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), nibble);
      }
      for (int v = 0; v < V; ++v) {
        const std::int8_t* xv = qx.values + (v0 + v) * qx.stride + block * 256 + 64 * g;
        const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv));
        const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv + 32));
        for (int r = 0; r < R; ++r) {
          const __m256i low = _mm256_madd_epi16(_mm256_maddubs_epi16(lo[r], xl), _mm256_set1_epi16(sc[r][2 * g]));
          const __m256i high =
              _mm256_madd_epi16(_mm256_maddubs_epi16(hi[r], xh), _mm256_set1_epi16(sc[r][2 * g + 1]));
          sum[r][v] = _mm256_add_epi32(sum[r][v], _mm256_add_epi32(low, high));
        }
      }
    }
    // The block: (d * (its integer sum) - dmin * (the mins' sum)) * dx,
    // lane by lane, the mins' four lanes in lanes 0-3.
    __m256 d[R];
    __m256 dmin[R];
    __m128i mins[R];
    for (int r = 0; r < R; ++r) {
      d[r] = _mm256_set1_ps(HalfAvx2(b[r]));
      dmin[r] = _mm256_set1_ps(HalfAvx2(b[r] + 2));
      mins[r] = _mm_load_si128(reinterpret_cast<const __m128i*>(m[r]));
    }
    for (int v = 0; v < V; ++v) {
      const __m256 dx = _mm256_set1_ps(qx.scales[(v0 + v) * blocks + block]);
      const __m128i xs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qx.sums + (v0 + v) * groups32 + block * 8));
      for (int r = 0; r < R; ++r) {
        const __m256 less = _mm256_insertf128_ps(_mm256_setzero_ps(), _mm_cvtepi32_ps(_mm_madd_epi16(mins[r], xs)), 0);
        const __m256 block_sum = _mm256_fnmadd_ps(less, dmin[r], _mm256_mul_ps(_mm256_cvtepi32_ps(sum[r][v]), d[r]));
        acc[r][v] = _mm256_fmadd_ps(block_sum, dx, acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = SumLanesAvx2(acc[r][v]);
  }
}

// Q8_0: four vectors a tile where there are (the weights' magnitudes and
// signs made once for four), then two, then one; Q4_K two at most (its
// integer sums take a register each as well).
template <int R>
HWY_INLINE void RowGroupAvx2(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::Int8Vectors& qx,
                             float* y, std::size_t ys) {
  std::size_t v = 0;
  if (w.type == kvevict::WeightType::kQ4_K) {
    for (; v + 2 <= qx.vectors; v += 2) TileQ4_KAvx2<R, 2>(w, r0, qx, v, y, ys);
    if (v < qx.vectors) TileQ4_KAvx2<R, 1>(w, r0, qx, v, y, ys);
    return;
  }
  if constexpr (R <= 2) {
    for (; v + 4 <= qx.vectors; v += 4) TileQ8_0Avx2<R, 4>(w, r0, qx, v, y, ys);
  }
  for (; v + 2 <= qx.vectors; v += 2) TileQ8_0Avx2<R, 2>(w, r0, qx, v, y, ys);
  if (v < qx.vectors) TileQ8_0Avx2<R, 1>(w, r0, qx, v, y, ys);
}

// A decode step's one vector takes four rows a tile (four independent
// accumulations over the weights' read); more vectors two rows.
HWY_INLINE void RowsAvx2(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end,
                         const kvevict::Int8Vectors& qx, float* y, std::size_t ys) {
  std::size_t r = begin;
  if (qx.vectors == 1) {
    for (; r + 4 <= end; r += 4) RowGroupAvx2<4>(w, r, qx, y, ys);
  }
  for (; r + 2 <= end; r += 2) RowGroupAvx2<2>(w, r, qx, y, ys);
  if (r < end) RowGroupAvx2<1>(w, r, qx, y, ys);
}
#endif  // HWY_TARGET == HWY_AVX2

void RowsOf(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end, const kvevict::Int8Vectors& qx,
            float* y, std::size_t ys) {
  std::size_t r = begin;
#if HWY_TARGET == HWY_AVX2
  RowsAvx2(w, begin, end, qx, y, ys);
  return;
#endif
  if (qx.vectors >= 4) {
    for (; r + 2 <= end; r += 2) RowGroup<2>(w, r, qx, y, ys);
  } else {
    for (; r + 4 <= end; r += 4) RowGroup<4>(w, r, qx, y, ys);
  }
  for (; r < end; ++r) RowGroup<1>(w, r, qx, y, ys);
}

// The vectors 16 at a time, each such share through every row: a prompt's
// 256 rounded vectors of an FF-wide product are 4 MiB, read again for every
// pair of rows, where 16 of them (64 KiB at most) stay in L2 across the
// rows. Which vectors share a tile does not change an output's bits.
void MatMulRowsInt8(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end,
                    const kvevict::Int8Vectors& qx, float* y, std::size_t ys) {
  constexpr std::size_t kShare = 16;
  const std::size_t block = w.type == kvevict::WeightType::kQ4_K ? 256 : 32;
  for (std::size_t v = 0; v < qx.vectors; v += kShare) {
    kvevict::Int8Vectors share = qx;
    share.values = qx.values + v * qx.stride;
    share.scales = qx.scales + v * (qx.stride / block);
    share.sums = qx.sums == nullptr ? nullptr : qx.sums + v * (qx.stride / 32);
    share.vectors = std::min(kShare, qx.vectors - v);
    RowsOf(w, begin, end, share, y + v * ys, ys);
  }
}

}  // namespace kvevict::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <fmt/format.h>

#include "kernels/matmul_int8_vnni.h"
#include "kvevict/core/errors.h"
#include "kvevict/core/simd.h"

namespace kvevict {
namespace kernels {
HWY_EXPORT(RoundQ8_0);
HWY_EXPORT(RoundQ8_K);
HWY_EXPORT(MatMulRowsInt8);
}  // namespace kernels

MatmulMode parse_matmul_mode(std::string_view name) {
  if (name == "exact") return MatmulMode::kExact;
  if (name == "int8") return MatmulMode::kInt8;
  throw ParameterError(fmt::format("matmul mode '{}' is not exact or int8", name));
}

const char* matmul_mode_name(MatmulMode mode) noexcept { return mode == MatmulMode::kInt8 ? "int8" : "exact"; }

bool has_int8_kernel(WeightType type) noexcept { return type == WeightType::kQ8_0 || type == WeightType::kQ4_K; }

std::size_t round_q8_0(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                       std::int8_t* values, float* scales, std::uint8_t* usable) noexcept {
  return HWY_DYNAMIC_DISPATCH(kernels::RoundQ8_0)(x, x_stride, cols, vectors, values, scales, usable);
}

std::size_t round_q8_k(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                       std::int8_t* values, float* scales, std::int16_t* sums, std::uint8_t* usable) noexcept {
  return HWY_DYNAMIC_DISPATCH(kernels::RoundQ8_K)(x, x_stride, cols, vectors, values, scales, sums, usable);
}

void matmul_int8(const WeightMatrix& w, const Int8Vectors& x, float* y, std::size_t y_stride, std::size_t begin,
                 std::size_t end) noexcept {
#if KVEVICT_HAS_VNNI_KERNELS
  if (simd::vnni_active()) {
    kernels::matmul_int8_vnni(w, x, y, y_stride, begin, end);
    return;
  }
#endif
  HWY_DYNAMIC_DISPATCH(kernels::MatMulRowsInt8)(w, begin, end, x, y, y_stride);
}

}  // namespace kvevict
#endif  // HWY_ONCE
