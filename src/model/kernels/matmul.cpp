// The weight kernels (kvevict/model/kernels/matmul.h): a tile of up to four rows
// times up to four vectors at a time, each weight decoded from its block in
// registers once per tile and multiplied into every vector of the tile.
//
// Why tiles: a decode step (one vector) is bound by reading the weights, and
// four rows give four independent accumulator chains so the multiply-adds
// never wait on each other; a prompt's chunk or a batch of runs (many
// vectors) is bound by arithmetic, and four vectors a decoded weight make
// the decoding a quarter of the work. Every output accumulates its own
// lanes over the columns in order and sums them at the end, so neither the
// tile it fell in nor the thread that ran it changes a bit of it.
//
// The decoded weights are exactly dequantize()'s (weight_types.cpp): the
// same products in the same order (Q4_K's d*sc*q - dmin*m as two roundings,
// Q6_K's (d*sc)*q), so a product with a unit vector reads a weight back to
// the bit -- which the tests check on every target.
//
// Q8_0 goes the integer way instead (matmul.h): decoding a block of int8
// into floats and multiplying it by its scale is most of a float kernel's
// work, so its products are int16 x int16 -> int32 multiply-adds against the
// vectors split into two int16 parts a block (a coarse value and its
// residual, at power-of-two steps, so every scale multiplies exactly), and
// each block's two integer sums are scaled once.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/matmul.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kvevict/model/kernels/matmul.h"

HWY_BEFORE_NAMESPACE();
namespace kvevict::kernels::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes: every block's runs (16 and 32 elements) are then whole
// chunks, on every target.
using DF = hn::CappedTag<float, 16>;
using VF = hn::Vec<DF>;

// A block's float16 scale, converted here rather than by a call: a call in
// the middle of a tile spills every accumulator around it (and costs a
// vzeroupper), which made the quantized kernels three times slower. Every
// half is a float exactly, so this gives half_to_float's bits.
HWY_INLINE float Half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, 2);
  const std::uint32_t sign = std::uint32_t{h & 0x8000U} << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1FU;
  const std::uint32_t mantissa = h & 0x3FFU;
  std::uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000U | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112U) << 23) | (mantissa << 13);
  } else {
    // Zero or subnormal: mantissa x 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24F;
    return sign != 0 ? -magnitude : magnitude;
  }
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Half(p) by the hardware where it converts float16 (F16C, on AVX2 and
// above): one instruction instead of a dozen, in the Q8_0 kernel's
// innermost loop. The same bits (every half is a float exactly).
HWY_INLINE float HalfScale(const std::uint8_t* p) {
#if HWY_TARGET <= HWY_AVX2
  const hn::CappedTag<float, 1> d1;
  const hn::Rebind<hwy::float16_t, decltype(d1)> dh;
  return hn::GetLane(hn::PromoteTo(d1, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p))));
#else
  return Half(p);
#endif
}

// N unsigned bytes from p, as int32 lanes.
HWY_INLINE hn::Vec<hn::RebindToSigned<DF>> Bytes(const std::uint8_t* p) {
  const hn::RebindToSigned<DF> di;
  const hn::Rebind<std::uint8_t, decltype(di)> du8;
  return hn::BitCast(di, hn::PromoteTo(hn::RebindToUnsigned<DF>(), hn::LoadU(du8, p)));
}

// Each codec: a block's elements and bytes, its per-block constants
// (Prepare), and the N weights from element e of the block (Chunk; e a
// multiple of N). Float types are blocks of N elements, with a scalar tail.
struct F32Codec {
  static constexpr bool kFloat = true;
  static constexpr std::size_t kElemBytes = 4;
  struct Block {};
  static Block Prepare(const std::uint8_t*) { return {}; }
  static VF Chunk(const Block&, const std::uint8_t* p, std::size_t e) {
    return hn::LoadU(DF(), reinterpret_cast<const float*>(p) + e);
  }
  static float Scalar(const std::uint8_t* row, std::size_t e) {
    float v;
    std::memcpy(&v, row + 4 * e, 4);
    return v;
  }
};

struct F16Codec {
  static constexpr bool kFloat = true;
  static constexpr std::size_t kElemBytes = 2;
  struct Block {};
  static Block Prepare(const std::uint8_t*) { return {}; }
  static VF Chunk(const Block&, const std::uint8_t* p, std::size_t e) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(DF(), hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p) + e));
  }
  static float Scalar(const std::uint8_t* row, std::size_t e) { return Half(row + 2 * e); }
};

struct BF16Codec {
  static constexpr bool kFloat = true;
  static constexpr std::size_t kElemBytes = 2;
  struct Block {};
  static Block Prepare(const std::uint8_t*) { return {}; }
  static VF Chunk(const Block&, const std::uint8_t* p, std::size_t e) {
    // A bfloat16 is a float32's upper half.
    const hn::RebindToUnsigned<DF> du;
    const hn::Rebind<std::uint16_t, DF> d16;
    const auto wide = hn::PromoteTo(du, hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(p) + e));
    return hn::BitCast(DF(), hn::ShiftLeft<16>(wide));
  }
  static float Scalar(const std::uint8_t* row, std::size_t e) {
    std::uint16_t h;
    std::memcpy(&h, row + 2 * e, 2);
    const std::uint32_t bits = std::uint32_t{h} << 16;
    float v;
    std::memcpy(&v, &bits, 4);
    return v;
  }
};

struct Q8_0Codec {
  static constexpr bool kFloat = false;
  static constexpr std::size_t kElems = 32;
  static constexpr std::size_t kBytes = 34;
  struct Block {
    VF d;
  };
  static Block Prepare(const std::uint8_t* b) { return {hn::Set(DF(), Half(b))}; }
  static VF Chunk(const Block& k, const std::uint8_t* b, std::size_t e) {
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<std::int8_t, decltype(di)> d8;
    const auto q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(b + 2 + e)));
    return hn::Mul(hn::ConvertTo(DF(), q), k.d);
  }
};

struct Q4_0Codec {
  static constexpr bool kFloat = false;
  static constexpr std::size_t kElems = 32;
  static constexpr std::size_t kBytes = 18;
  struct Block {
    VF d;
  };
  static Block Prepare(const std::uint8_t* b) { return {hn::Set(DF(), Half(b))}; }
  static VF Chunk(const Block& k, const std::uint8_t* b, std::size_t e) {
    const hn::RebindToSigned<DF> di;
    // Elements 0..15 are the low nibbles of bytes 0..15, 16..31 their high.
    auto q = Bytes(b + 2 + (e & 15));
    if (e >= 16) q = hn::ShiftRight<4>(q);
    q = hn::Sub(hn::And(q, hn::Set(di, 0x0F)), hn::Set(di, 8));
    return hn::Mul(hn::ConvertTo(DF(), q), k.d);
  }
};

struct Q4_KCodec {
  static constexpr bool kFloat = false;
  static constexpr std::size_t kElems = 256;
  static constexpr std::size_t kBytes = 144;
  struct Block {
    float scale[8];
    float min[8];
  };
  static Block Prepare(const std::uint8_t* b) {
    Block k;
    const float d = Half(b);
    const float dmin = Half(b + 2);
    const std::uint8_t* q = b + 4;
    for (int j = 0; j < 8; ++j) {
      int sc = 0;
      int m = 0;
      if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
      } else {
        sc = (q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
      }
      k.scale[j] = d * static_cast<float>(sc);
      k.min[j] = dmin * static_cast<float>(m);
    }
    return k;
  }
  static VF Chunk(const Block& k, const std::uint8_t* b, std::size_t e) {
    const hn::RebindToSigned<DF> di;
    // 64 elements a group: the low nibbles of its 32 bytes, then the high.
    const std::size_t group = e / 64;
    const std::size_t in = e % 64;
    auto q = Bytes(b + 16 + 32 * group + (in & 31));
    if (in >= 32) q = hn::ShiftRight<4>(q);
    q = hn::And(q, hn::Set(di, 0x0F));
    const std::size_t sub = e / 32;
    return hn::Sub(hn::Mul(hn::Set(DF(), k.scale[sub]), hn::ConvertTo(DF(), q)), hn::Set(DF(), k.min[sub]));
  }
};

struct Q6_KCodec {
  static constexpr bool kFloat = false;
  static constexpr std::size_t kElems = 256;
  static constexpr std::size_t kBytes = 210;
  struct Block {
    float scale[16];
  };
  static Block Prepare(const std::uint8_t* b) {
    Block k;
    const float d = Half(b + 208);
    for (int j = 0; j < 16; ++j) k.scale[j] = d * static_cast<float>(static_cast<std::int8_t>(b[192 + j]));
    return k;
  }
  static VF Chunk(const Block& k, const std::uint8_t* b, std::size_t e) {
    const hn::RebindToSigned<DF> di;
    // Each half of 128: four runs of 32; run r takes the low (r < 2) or
    // high nibbles of ql[32 (r & 1) + l] and bits 2r, 2r+1 of qh[l].
    const std::size_t half = e / 128;
    const std::size_t run = (e % 128) / 32;
    const std::size_t l = e % 32;
    auto lo = Bytes(b + 64 * half + 32 * (run & 1) + l);
    if (run >= 2) lo = hn::ShiftRight<4>(lo);
    lo = hn::And(lo, hn::Set(di, 0x0F));
    auto hi = Bytes(b + 128 + 32 * half + l);
    hi = hn::And(hn::ShiftRightSame(hi, static_cast<int>(2 * run)), hn::Set(di, 3));
    const auto q = hn::Sub(hn::Or(lo, hn::ShiftLeft<4>(hi)), hn::Set(di, 32));
    const float scale = k.scale[8 * half + l / 16 + 2 * run];
    return hn::Mul(hn::Set(DF(), scale), hn::ConvertTo(DF(), q));
  }
};

// How far ahead of a row's read the kernels prefetch: 8 KiB (two to three
// tiles of a 135M model's rows) kept one thread near its reading speed where
// 2 KiB left it at two thirds (AMD EPYC, docs/performance.md).
constexpr std::size_t kPrefetchBytes = 8192;

// Q8_0 against vectors already rounded to integers (QuantizedVectors): rows
// [r0, r0 + R) against vectors [v0, v0 + V).
using DI16 = hn::CappedTag<std::int16_t, 32>;
using DI32 = hn::Repartition<std::int32_t, DI16>;
using DFI = hn::Rebind<float, DI32>;

template <int R, int V>
HWY_INLINE void TileQ8(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::QuantizedVectors& qx,
                       std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const DI16 d16;
  const DI32 d32;
  const DFI df;
  const hn::Rebind<std::int8_t, DI16> d8;
  const std::size_t N = hn::Lanes(d16);
  const std::size_t blocks = w.cols / 32;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  hn::Vec<DFI> acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::uint8_t* b[R];
    float d[R];
    for (int r = 0; r < R; ++r) {
      b[r] = rows[r] + block * 34;
      hwy::Prefetch(b[r] + kPrefetchBytes);
      d[r] = HalfScale(b[r]);
    }
    // Each block's products with the rounded values and, apart, with the
    // rounding's residuals (2^15 times finer).
    hn::Vec<DI32> sum[R][V];
    hn::Vec<DI32> odd[R][V];
    hn::Vec<DI32> fine[R][V];
    hn::Vec<DI32> fine_odd[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) {
        sum[r][v] = hn::Zero(d32);
        odd[r][v] = hn::Zero(d32);
        fine[r][v] = hn::Zero(d32);
        fine_odd[r][v] = hn::Zero(d32);
      }
    }
    for (std::size_t e = 0; e < 32; e += N) {
      hn::Vec<DI16> q[R];
      for (int r = 0; r < R; ++r) {
        q[r] = hn::PromoteTo(d16, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(b[r] + 2 + e)));
      }
      for (int v = 0; v < V; ++v) {
        const std::size_t at = (v0 + v) * qx.stride + block * 32 + e;
        const auto xc = hn::LoadU(d16, qx.values + at);
        const auto xf = hn::LoadU(d16, qx.residuals + at);
        for (int r = 0; r < R; ++r) {
          sum[r][v] = hn::ReorderWidenMulAccumulate(d32, q[r], xc, sum[r][v], odd[r][v]);
          fine[r][v] = hn::ReorderWidenMulAccumulate(d32, q[r], xf, fine[r][v], fine_odd[r][v]);
        }
      }
    }
    for (int v = 0; v < V; ++v) {
      const float sx = qx.scales[(v0 + v) * blocks + block];
      for (int r = 0; r < R; ++r) {
        const float scale = d[r] * sx;  // exact: sx is a power of two
        const auto coarse = hn::RearrangeToOddPlusEven(sum[r][v], odd[r][v]);
        const auto residual = hn::RearrangeToOddPlusEven(fine[r][v], fine_odd[r][v]);
        acc[r][v] = hn::MulAdd(hn::ConvertTo(df, coarse), hn::Set(df, scale), acc[r][v]);
        acc[r][v] = hn::MulAdd(hn::ConvertTo(df, residual), hn::Set(df, scale * 0x1p-15F), acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][v]));
  }
}

template <int R>
HWY_INLINE void RowGroupQ8(const kvevict::WeightMatrix& w, std::size_t r0, const kvevict::QuantizedVectors& qx,
                           float* y, std::size_t ys) {
  // Two vectors a tile: four rows of two vectors' accumulators and integer
  // sums already fill AVX-512's 32 registers.
  std::size_t v = 0;
  for (; v + 2 <= qx.vectors; v += 2) TileQ8<R, 2>(w, r0, qx, v, y, ys);
  if (v < qx.vectors) TileQ8<R, 1>(w, r0, qx, v, y, ys);
}

void MatMulRowsQ8(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end,
                  const kvevict::QuantizedVectors& qx, float* y, std::size_t ys) {
  std::size_t r = begin;
  for (; r + 4 <= end; r += 4) RowGroupQ8<4>(w, r, qx, y, ys);
  for (; r < end; ++r) RowGroupQ8<1>(w, r, qx, y, ys);
}

// Splits each 32-element block of each vector into int16 values at a
// power-of-two step 2^s, s = k - 14 for the block's largest magnitude m in
// [2^(k-1), 2^k) (every |value| / 2^s < 2^14), and the residuals at a step
// 2^15 times finer (each under 2^(s-1), so again under 2^14 steps). Both
// multiplications by powers of two and the residual's subtraction are exact
// in float, so an element is off by at most half the fine step: m * 2^-29.
// A vector is unusable (usable[v] = 0, its parts zeroed: the float kernel
// computes its products) when a block's largest magnitude is not finite, is
// below 2^-60 yet not zero, or is 2^127 or more (its value times the step
// could round up to 2^128, past float's range). Returns the usable vectors.
std::size_t QuantizeVectors(const float* x, std::size_t xs, std::size_t cols, std::size_t vectors,
                            std::int16_t* values, std::int16_t* residuals, float* scales, std::uint8_t* usable) {
  const DFI df;
  const hn::Rebind<std::int16_t, DI32> d16;
  const std::size_t N = hn::Lanes(df);
  const std::size_t blocks = cols / 32;
  std::size_t good = 0;
  for (std::size_t v = 0; v < vectors; ++v) {
    const float* row = x + v * xs;
    bool ok = true;
    for (std::size_t block = 0; block < blocks && ok; ++block) {
      const float* at = row + block * 32;
      auto most = hn::Zero(df);
      bool finite = true;  // NaN compares false
      for (std::size_t e = 0; e < 32; e += N) {
        const auto magnitude = hn::Abs(hn::LoadU(df, at + e));
        finite = finite && hn::AllTrue(df, hn::Lt(magnitude, hn::Set(df, 0x1p127F)));
        most = hn::Max(most, magnitude);
      }
      const float m = hn::GetLane(hn::MaxOfLanes(df, most));
      std::int16_t* out = values + v * cols + block * 32;
      std::int16_t* rest = residuals + v * cols + block * 32;
      float& scale = scales[v * blocks + block];
      if (finite && m == 0.0F) {
        for (std::size_t e = 0; e < 32; ++e) out[e] = rest[e] = 0;
        scale = 0.0F;
        continue;
      }
      if (!finite || m < 0x1p-60F) {
        ok = false;
        break;
      }
      int k = 0;
      (void)std::frexp(m, &k);
      scale = std::ldexp(1.0F, k - 14);
      const auto step = hn::Set(df, scale);
      const auto inverse = hn::Set(df, std::ldexp(1.0F, 14 - k));
      const auto fine_inverse = hn::Set(df, std::ldexp(1.0F, 29 - k));
      for (std::size_t e = 0; e < 32; e += N) {
        const auto value = hn::LoadU(df, at + e);
        const auto rounded = hn::NearestInt(hn::Mul(value, inverse));
        const auto residual = hn::Sub(value, hn::Mul(hn::ConvertTo(df, rounded), step));
        hn::StoreU(hn::DemoteTo(d16, rounded), d16, out + e);
        hn::StoreU(hn::DemoteTo(d16, hn::NearestInt(hn::Mul(residual, fine_inverse))), d16, rest + e);
      }
    }
    if (!ok) {  // zeros: the integer kernel's sums for it are defined (and replaced)
      std::memset(values + v * cols, 0, cols * sizeof(std::int16_t));
      std::memset(residuals + v * cols, 0, cols * sizeof(std::int16_t));
      std::memset(scales + v * blocks, 0, blocks * sizeof(float));
    }
    usable[v] = ok ? 1 : 0;
    good += ok ? 1 : 0;
  }
  return good;
}

// Rows [r0, r0 + R) against vectors [v0, v0 + V).
template <class Codec, int R, int V>
HWY_INLINE void Tile(const kvevict::WeightMatrix& w, std::size_t r0, const float* HWY_RESTRICT x, std::size_t xs,
                     std::size_t v0, float* HWY_RESTRICT y, std::size_t ys) {
  const DF df;
  const std::size_t N = hn::Lanes(df);
  const std::size_t cols = w.cols;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  const float* xv[V];
  for (int v = 0; v < V; ++v) xv[v] = x + (v0 + v) * xs;
  VF acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = hn::Zero(df);
  }
  std::size_t done = 0;
  if constexpr (Codec::kFloat) {
    for (; done + N <= cols; done += N) {
      if (done % (64 / Codec::kElemBytes) == 0) {
        for (int r = 0; r < R; ++r) hwy::Prefetch(rows[r] + done * Codec::kElemBytes + kPrefetchBytes);
      }
      VF wv[R];
      for (int r = 0; r < R; ++r) wv[r] = Codec::Chunk({}, rows[r], done);
      for (int v = 0; v < V; ++v) {
        const VF xc = hn::LoadU(df, xv[v] + done);
        for (int r = 0; r < R; ++r) acc[r][v] = hn::MulAdd(wv[r], xc, acc[r][v]);
      }
    }
  } else {
    for (std::size_t at = 0; at < cols; at += Codec::kElems) {
      const std::size_t block = at / Codec::kElems;
      typename Codec::Block k[R];
      const std::uint8_t* b[R];
      for (int r = 0; r < R; ++r) {
        b[r] = rows[r] + block * Codec::kBytes;
        // A decode step reads each weight once, from memory: ask for it
        // ahead (the rows are short, so the hardware prefetcher never ramps up).
        hwy::Prefetch(b[r] + kPrefetchBytes);
        k[r] = Codec::Prepare(b[r]);
      }
      for (std::size_t e = 0; e < Codec::kElems; e += N) {
        VF wv[R];
        for (int r = 0; r < R; ++r) wv[r] = Codec::Chunk(k[r], b[r], e);
        for (int v = 0; v < V; ++v) {
          const VF xc = hn::LoadU(df, xv[v] + at + e);
          for (int r = 0; r < R; ++r) acc[r][v] = hn::MulAdd(wv[r], xc, acc[r][v]);
        }
      }
    }
    done = cols;
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) {
      float sum = hn::GetLane(hn::SumOfLanes(df, acc[r][v]));
      if constexpr (Codec::kFloat) {
        for (std::size_t e = done; e < cols; ++e) sum += Codec::Scalar(rows[r], e) * xv[v][e];
      }
      y[(v0 + v) * ys + r0 + r] = sum;
    }
  }
}

template <class Codec, int R>
HWY_INLINE void RowGroup(const kvevict::WeightMatrix& w, std::size_t r0, const float* x, std::size_t xs, float* y,
                         std::size_t ys, std::size_t vectors) {
  std::size_t v = 0;
  for (; v + 4 <= vectors; v += 4) Tile<Codec, R, 4>(w, r0, x, xs, v, y, ys);
  switch (vectors - v) {
    case 3: Tile<Codec, R, 3>(w, r0, x, xs, v, y, ys); break;
    case 2: Tile<Codec, R, 2>(w, r0, x, xs, v, y, ys); break;
    case 1: Tile<Codec, R, 1>(w, r0, x, xs, v, y, ys); break;
    default: break;
  }
}

template <class Codec>
void RowsOf(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end, const float* x, std::size_t xs,
            float* y, std::size_t ys, std::size_t vectors) {
  std::size_t r = begin;
  for (; r + 4 <= end; r += 4) RowGroup<Codec, 4>(w, r, x, xs, y, ys, vectors);
  for (; r < end; ++r) RowGroup<Codec, 1>(w, r, x, xs, y, ys, vectors);
}

void MatMulRows(const kvevict::WeightMatrix& w, std::size_t begin, std::size_t end, const float* x, std::size_t xs,
                float* y, std::size_t ys, std::size_t vectors) {
  using kvevict::WeightType;
  switch (w.type) {
    case WeightType::kF32: RowsOf<F32Codec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kF16: RowsOf<F16Codec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kBF16: RowsOf<BF16Codec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kQ8_0: RowsOf<Q8_0Codec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kQ4_0: RowsOf<Q4_0Codec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kQ4_K: RowsOf<Q4_KCodec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kQ6_K: RowsOf<Q6_KCodec>(w, begin, end, x, xs, y, ys, vectors); break;
    case WeightType::kQ5_0: break;  // decoded to F32 at load (has_matmul_kernel)
  }
}

}  // namespace kvevict::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <atomic>
#include <vector>

#include <omp.h>

namespace kvevict {
namespace kernels {
HWY_EXPORT(MatMulRows);
HWY_EXPORT(MatMulRowsQ8);
HWY_EXPORT(QuantizeVectors);
}  // namespace kernels

bool has_matmul_kernel(WeightType type) noexcept { return type != WeightType::kQ5_0; }

int default_threads() noexcept { return std::max(1, omp_get_max_threads()); }

std::size_t quantize_vectors(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                             std::int16_t* values, std::int16_t* residuals, float* scales,
                             std::uint8_t* usable) noexcept {
  return HWY_DYNAMIC_DISPATCH(kernels::QuantizeVectors)(x, x_stride, cols, vectors, values, residuals, scales, usable);
}

void matmul_quantized(const WeightMatrix& w, const QuantizedVectors& x, float* y, std::size_t y_stride,
                      std::size_t begin, std::size_t end) noexcept {
  HWY_DYNAMIC_DISPATCH(kernels::MatMulRowsQ8)(w, begin, end, x, y, y_stride);
}

namespace {

// How a matrix's products take their vectors: as they are (the float
// kernels), split into two int16 parts (exact Q8_0), or rounded to 8 bits
// in llama.cpp's Q8_0 or Q8_K blocks (MatmulMode::kInt8).
enum class Rounding : std::uint8_t { kSplit, kQ8_0, kQ8_K, kCount, kNone = kCount };

Rounding rounding_of(WeightType type, MatmulMode mode) noexcept {
  if (mode == MatmulMode::kInt8 && type == WeightType::kQ8_0) return Rounding::kQ8_0;
  if (mode == MatmulMode::kInt8 && type == WeightType::kQ4_K) return Rounding::kQ8_K;
  if (type == WeightType::kQ8_0) return Rounding::kSplit;
  return Rounding::kNone;
}

// The vectors in one rounding, in the calling thread's room for them: grown
// to the largest product it has made, then reused (no allocation a step once
// a decoder has made one of each).
struct Rounded {
  std::vector<std::int16_t> values;     // kSplit: the coarse part
  std::vector<std::int8_t> bytes;         // kQ8_0 and kQ8_K: the values
  std::vector<std::int16_t> residuals;  // kSplit: the fine part; kQ8_K: the sums by 32
  std::vector<float> scales;
  std::vector<std::uint8_t> usable;  // per vector: 0 takes the float kernel
  // Vectors the integers hold: each vector's products take the integer
  // kernel or, when it cannot hold it, the float kernel -- its own way
  // whatever its neighbours, so a vector's bits never depend on the others.
  std::atomic<std::size_t> held{0};

  void size_for(Rounding kind, std::size_t vectors, std::size_t cols) {
    if (kind == Rounding::kSplit && values.size() < vectors * cols) values.resize(vectors * cols);
    if (kind != Rounding::kSplit && bytes.size() < vectors * cols) bytes.resize(vectors * cols);
    const std::size_t fine = kind == Rounding::kSplit ? vectors * cols : kind == Rounding::kQ8_K ? vectors * cols / 32 : 0;
    if (residuals.size() < fine) residuals.resize(fine);
    const std::size_t block = kind == Rounding::kQ8_K ? 256 : 32;
    if (scales.size() < vectors * cols / block) scales.resize(vectors * cols / block);
    if (usable.size() < vectors) usable.resize(vectors);
    held.store(0, std::memory_order_relaxed);
  }
  // Vectors [first, first + n) of x, rounded.
  void round(Rounding kind, const float* x, std::size_t x_stride, std::size_t cols, std::size_t first, std::size_t n) {
    const float* from = x + first * x_stride;
    std::size_t good = 0;
    switch (kind) {
      case Rounding::kSplit:
        good = quantize_vectors(from, x_stride, cols, n, values.data() + first * cols, residuals.data() + first * cols,
                                scales.data() + first * cols / 32, usable.data() + first);
        break;
      case Rounding::kQ8_0:
        good = round_q8_0(from, x_stride, cols, n, bytes.data() + first * cols, scales.data() + first * cols / 32,
                          usable.data() + first);
        break;
      default:
        good = round_q8_k(from, x_stride, cols, n, bytes.data() + first * cols, scales.data() + first * cols / 256,
                          residuals.data() + first * cols / 32, usable.data() + first);
        break;
    }
    held.fetch_add(good, std::memory_order_relaxed);
  }
};

struct Scratch {
  Rounded by[static_cast<int>(Rounding::kCount)];
};

}  // namespace

void matmul_group(const Product* products, std::size_t count, const float* x, std::size_t x_stride,
                  std::size_t vectors, int threads, MatmulMode mode) noexcept {
  if (count == 0 || vectors == 0) return;
  const std::size_t cols = products[0].w->cols;
  std::size_t bytes = 0;
  std::size_t groups = 0;  // rows in fours, every matrix's
  bool needed[static_cast<int>(Rounding::kCount)] = {};
  for (std::size_t i = 0; i < count; ++i) {
    bytes += products[i].w->bytes();
    groups += (products[i].w->rows + 3) / 4;
    const Rounding kind = rounding_of(products[i].w->type, mode);
    if (kind != Rounding::kNone) needed[static_cast<int>(kind)] = true;
  }
  if (groups == 0) return;
  // A share under ~64 KiB of weights (a quarter of a small matrix) costs
  // more to hand out than to read: those run on this thread.
  const int wanted = threads < 1 ? 1 : threads;
  const int team = static_cast<int>(
      std::min<std::size_t>({static_cast<std::size_t>(wanted), std::max<std::size_t>(1, bytes * vectors / 65536), groups}));
  const bool one = team <= 1;

  thread_local Scratch scratch;
  // The calling thread's, shared with the team by this reference (a
  // thread_local named in the team's code would be each thread's own).
  Scratch& rounded = scratch;
  bool any = false;
  for (int k = 0; k < static_cast<int>(Rounding::kCount); ++k) {
    if (needed[k]) rounded.by[k].size_for(static_cast<Rounding>(k), vectors, cols);
    any = any || needed[k];
  }
  // A few vectors are rounded here before the threads start; a prompt's
  // chunk is rounded by the threads, a share of the vectors each.
  const bool here = !any || one || vectors * cols <= 16384;
  const auto round_share = [&](std::size_t first, std::size_t n) {
    for (int k = 0; k < static_cast<int>(Rounding::kCount); ++k) {
      if (needed[k]) rounded.by[k].round(static_cast<Rounding>(k), x, x_stride, cols, first, n);
    }
  };
  if (here && any) round_share(0, vectors);
  const auto run = HWY_DYNAMIC_DISPATCH(kernels::MatMulRows);
  // One matrix's rows [r0, r1): the integer kernel for every vector its
  // rounding holds, the float kernel for the rest.
  const auto rows = [&](const Product& p, std::size_t r0, std::size_t r1) {
    const Rounding kind = rounding_of(p.w->type, mode);
    const Rounded* r = kind == Rounding::kNone ? nullptr : &rounded.by[static_cast<int>(kind)];
    const std::size_t held = r == nullptr ? 0 : r->held.load(std::memory_order_relaxed);
    if (held == 0) {
      run(*p.w, r0, r1, x, x_stride, p.y, p.y_stride, vectors);
      return;
    }
    if (kind == Rounding::kSplit) {
      matmul_quantized(*p.w, QuantizedVectors{r->values.data(), r->residuals.data(), r->scales.data(), cols, vectors},
                       p.y, p.y_stride, r0, r1);
    } else {
      const std::int16_t* sums = kind == Rounding::kQ8_K ? r->residuals.data() : nullptr;
      matmul_int8(*p.w, Int8Vectors{r->bytes.data(), r->scales.data(), sums, cols, vectors}, p.y, p.y_stride, r0, r1);
    }
    for (std::size_t v = 0; held < vectors && v < vectors; ++v) {
      if (r->usable[v] == 0) run(*p.w, r0, r1, x + v * x_stride, x_stride, p.y + v * p.y_stride, p.y_stride, 1);
    }
  };
  // Groups [from, to) of the matrices one after another: each matrix's rows
  // in its own kernel, so the split changes which thread computes a row,
  // never how.
  const auto rows_of = [&](std::size_t from, std::size_t to) {
    std::size_t first = 0;  // the first group of products[i]
    for (std::size_t i = 0; i < count && first < to; ++i) {
      const Product& p = products[i];
      const std::size_t mine = (p.w->rows + 3) / 4;
      const std::size_t begin = std::max(from, first) - first;
      const std::size_t end = std::min(to, first + mine);
      if (first + begin < end) rows(p, begin * 4, std::min<std::size_t>(p.w->rows, (end - first) * 4));
      first += mine;
    }
  };
  if (one) {
    rows_of(0, groups);
    return;
  }
#pragma omp parallel num_threads(team)
  {
    const auto t = static_cast<std::size_t>(omp_get_thread_num());
    const auto n = static_cast<std::size_t>(omp_get_num_threads());
    if (!here) {
      const std::size_t first = vectors * t / n;
      round_share(first, vectors * (t + 1) / n - first);
      // Every thread sees every share's count and flags past the barrier.
#pragma omp barrier
    }
    rows_of(groups * t / n, groups * (t + 1) / n);
  }
}

void matmul(const WeightMatrix& w, const float* x, std::size_t x_stride, float* y, std::size_t y_stride,
            std::size_t vectors, int threads, MatmulMode mode) noexcept {
  const Product one{&w, y, y_stride};
  matmul_group(&one, w.rows == 0 ? 0 : 1, x, x_stride, vectors, threads, mode);
}

}  // namespace kvevict
#endif  // HWY_ONCE
