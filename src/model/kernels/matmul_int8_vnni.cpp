// The 8-bit products (MatmulMode::kInt8) on AVX-512 VNNI: 64 weights a
// multiply-add instruction (vpdpbusd: unsigned 8 x signed 8 bits, four
// products summed into each 32-bit lane), where the Highway kernels of
// matmul_int8.cpp widen both sides to 16 bits (32 an instruction).
//
// Why a file of its own, with intrinsics: Highway 1.0.3 (the packaged one)
// has no 8-bit multiply-add, and its AVX3_DL target, which would hold one,
// asks the compiler for AVX-VNNI rather than AVX-512 VNNI. These functions
// carry their own target attribute and run only where the CPU reports
// avx512vnni and the SIMD selection allows it (kvevict::simd, "avx512-vnni").
//
// Each block's integer sum is exact, as in the Highway kernels; what differs
// is how a block's partial sums sit in lanes before they are scaled and
// summed in float32 -- so the bits are this target's own, and the same for
// an output whatever the tile, the vectors beside it and the threads.
#include "kernels/matmul_int8_vnni.h"

#if KVEVICT_HAS_VNNI_KERNELS
// GCC 12's AVX-512 intrinsics start some results from _mm512_undefined_*(),
// which -Wmaybe-uninitialized reports inside target-attributed functions
// (GCC bug 105593, fixed in GCC 13): a false report, silenced for this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace kvevict::kernels {
namespace {

#define KVEVICT_VNNI \
  __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512vnni"), always_inline)) inline
#define KVEVICT_VNNI_ENTRY __attribute__((target("avx2,fma,f16c,avx512f,avx512vl,avx512dq,avx512bw,avx512vnni")))

// As the Highway kernels: 8 KiB ahead of a row's read.
constexpr std::size_t kPrefetchBytes = 8192;

KVEVICT_VNNI float half_at(const std::uint8_t* p) {
  std::uint16_t h = 0;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// Two float values as a 16-lane vector: a in lanes 0-7, b in 8-15 (the two
// blocks a 64-byte step of Q8_0 covers).
KVEVICT_VNNI __m512 pair_ps(float a, float b) {
  return _mm512_insertf32x8(_mm512_set1_ps(a), _mm256_set1_ps(b), 1);
}

KVEVICT_VNNI float sum_lanes(__m512 v) {
  const __m256 half = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 quarter = _mm_add_ps(_mm256_castps256_ps128(half), _mm256_extractf128_ps(half, 1));
  const __m128 two = _mm_add_ps(quarter, _mm_movehl_ps(quarter, quarter));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

// Q8_0 rows [r0, r0 + R) against vectors [v0, v0 + V), two blocks (64
// values) a step. vpdpbusd wants one side unsigned: the vector's values go
// in offset by 128 (x ^ 0x80 = x + 128 in [1, 255]) and each lane starts
// from -128 times the sum of its four weights, so it ends at sum w * x
// exactly (no saturation: vpdpbusd sums into 32 bits).
template <int R, int V>
KVEVICT_VNNI void tile_q8_0(const WeightMatrix& w, std::size_t r0, const Int8Vectors& qx, std::size_t v0, float* y,
                            std::size_t ys) {
  const std::size_t blocks = w.cols / 32;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  const __m512i offset = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  std::size_t block = 0;
  for (; block + 2 <= blocks; block += 2) {
    __m512i wq[R];
    __m512i start[R];
    __m512 d[R];
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* b = rows[r] + block * 34;
      _mm_prefetch(reinterpret_cast<const char*>(b + kPrefetchBytes), _MM_HINT_T0);
      wq[r] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2))),
                                 _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 36)), 1);
      start[r] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, wq[r]));
      d[r] = pair_ps(half_at(b), half_at(b + 34));
    }
    for (int v = 0; v < V; ++v) {
      const std::int8_t* xv = qx.values + (v0 + v) * qx.stride + block * 32;
      const __m512i xu = _mm512_xor_si512(_mm512_loadu_si512(xv), offset);
      const float* s = qx.scales + (v0 + v) * blocks + block;
      const __m512 dx = pair_ps(s[0], s[1]);
      for (int r = 0; r < R; ++r) {
        const __m512i sum = _mm512_dpbusd_epi32(start[r], xu, wq[r]);
        acc[r][v] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d[r], dx), acc[r][v]);
      }
    }
  }
  // An odd block count's last block, in the low half of the lanes.
  if (block < blocks) {
    const __mmask16 low = 0x00FF;
    for (int r = 0; r < R; ++r) {
      const std::uint8_t* b = rows[r] + block * 34;
      const __m512i wq = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 2)));
      const __m512i start =
          _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), offset, wq));
      const __m512 d = _mm512_set1_ps(half_at(b));
      for (int v = 0; v < V; ++v) {
        const std::int8_t* xv = qx.values + (v0 + v) * qx.stride + block * 32;
        const __m512i xu = _mm512_xor_si512(
            _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xv))), offset);
        const __m512 dx = _mm512_set1_ps(qx.scales[(v0 + v) * blocks + block]);
        const __m512i sum = _mm512_dpbusd_epi32(start, xu, wq);
        // Lanes 8-15 (the upper half, zeros) keep the accumulator.
        acc[r][v] = _mm512_mask3_fmadd_ps(_mm512_cvtepi32_ps(sum), _mm512_mul_ps(d, dx), acc[r][v], low);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = sum_lanes(acc[r][v]);
  }
}

// A Q4_K block's 12 bytes of 6-bit sub-block scales and mins as 16 bytes:
// the eight scales, then the eight mins (dequantize's layout: scale j < 4
// in the low 6 bits of byte j, min j < 4 of byte j + 4; for j >= 4 the low
// 4 bits in byte j + 4's low (scale) or high (min) nibble and the top 2 in
// bits 6-7 of byte j - 4 (scale) or j (min)), four bytes a 32-bit word.
KVEVICT_VNNI __m128i scales_mins(const std::uint8_t* q) {
  std::uint32_t word[3];
  std::memcpy(word, q, sizeof word);
  constexpr std::uint32_t kLow6 = 0x3F3F3F3F;
  constexpr std::uint32_t kLow4 = 0x0F0F0F0F;
  constexpr std::uint32_t kTop2 = 0x03030303;
  const std::uint32_t scales_low = word[0] & kLow6;
  const std::uint32_t scales_high = (word[2] & kLow4) | (((word[0] >> 6) & kTop2) << 4);
  const std::uint32_t mins_low = word[1] & kLow6;
  const std::uint32_t mins_high = ((word[2] >> 4) & kLow4) | (((word[1] >> 6) & kTop2) << 4);
  return _mm_set_epi32(static_cast<int>(mins_high), static_cast<int>(mins_low), static_cast<int>(scales_high),
                       static_cast<int>(scales_low));
}

// Q4_K rows against Q8_K-rounded vectors, 64 values a step: the low
// nibbles of a group's 32 bytes (sub-block 2g) and the high (2g + 1) side
// by side, against the vector's 64 values of those two sub-blocks. The
// weights (0..15) are the unsigned side of vpdpbusd; each lane's sum of
// four products (|s| <= 4 * 15 * 127, which fits 16 bits) is then scaled by
// its sub-block's 6-bit scale with vpdpwssd (the lane's low 16 bits times the
// scale, its high 16 bits times 0) into the block's integer sum. The mins'
// term, dmin * sum_j m_j * (sum of sub-block j's values), from the vector's
// sums by 32 in one 8-lane multiply-add.
template <int R, int V>
KVEVICT_VNNI void tile_q4_k(const WeightMatrix& w, std::size_t r0, const Int8Vectors& qx, std::size_t v0, float* y,
                            std::size_t ys) {
  const std::size_t blocks = w.cols / 256;
  const std::size_t groups32 = qx.stride / 32;
  const std::uint8_t* rows[R];
  for (int r = 0; r < R; ++r) rows[r] = w.row(static_cast<std::uint32_t>(r0 + r));
  const __m512i nibble = _mm512_set1_epi8(0x0F);
  // Group g's scales: sub-block 2g's in lanes 0-7, 2g + 1's in 8-15.
  __m512i pick[4];
  for (int g = 0; g < 4; ++g) {
    pick[g] = _mm512_inserti64x4(_mm512_set1_epi32(2 * g), _mm256_set1_epi32(2 * g + 1), 1);
  }
  __m512 acc[R][V];
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (std::size_t block = 0; block < blocks; ++block) {
    const std::uint8_t* b[R];
    __m512i wide[R];  // the eight scales then the eight mins, a 32-bit lane each
    __m128i mins[R];
    for (int r = 0; r < R; ++r) {
      b[r] = rows[r] + block * 144;
      _mm_prefetch(reinterpret_cast<const char*>(b[r] + kPrefetchBytes), _MM_HINT_T0);
      const __m128i packed = scales_mins(b[r] + 4);
      wide[r] = _mm512_cvtepu8_epi32(packed);
      mins[r] = _mm_cvtepu8_epi16(_mm_srli_si128(packed, 8));
    }
    __m512i sum[R][V];
    for (int r = 0; r < R; ++r) {
      for (int v = 0; v < V; ++v) sum[r][v] = _mm512_setzero_si512();
    }
    for (int g = 0; g < 4; ++g) {
      __m512i q[R];
      __m512i scale[R];  // sub-block 2g's scale in lanes 0-7, 2g + 1's in 8-15
      for (int r = 0; r < R; ++r) {
        scale[r] = _mm512_permutexvar_epi32(pick[g], wide[r]);
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[r] + 16 + 32 * g));
        q[r] = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_zextsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), nibble);
      }
      for (int v = 0; v < V; ++v) {
        const __m512i xv = _mm512_loadu_si512(qx.values + (v0 + v) * qx.stride + block * 256 + 64 * g);
        for (int r = 0; r < R; ++r) {
          const __m512i four = _mm512_dpbusd_epi32(_mm512_setzero_si512(), q[r], xv);
          sum[r][v] = _mm512_dpwssd_epi32(sum[r][v], four, scale[r]);
        }
      }
    }
    // The block: (d * (its integer sum) - dmin * (the mins' sum)) * dx,
    // lane by lane, the mins' four lanes in lanes 0-3 -- each factor a
    // broadcast made once a row or once a vector, none a product of two.
    __m512 d[R];
    __m512 dmin[R];
    for (int r = 0; r < R; ++r) {
      d[r] = _mm512_set1_ps(half_at(b[r]));
      dmin[r] = _mm512_set1_ps(half_at(b[r] + 2));
    }
    for (int v = 0; v < V; ++v) {
      const __m512 dx = _mm512_set1_ps(qx.scales[(v0 + v) * blocks + block]);
      const __m128i xs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qx.sums + (v0 + v) * groups32 + block * 8));
      for (int r = 0; r < R; ++r) {
        const __m512 less = _mm512_zextps128_ps512(_mm_cvtepi32_ps(_mm_madd_epi16(mins[r], xs)));
        const __m512 block_sum = _mm512_fnmadd_ps(less, dmin[r], _mm512_mul_ps(_mm512_cvtepi32_ps(sum[r][v]), d[r]));
        acc[r][v] = _mm512_fmadd_ps(block_sum, dx, acc[r][v]);
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int v = 0; v < V; ++v) y[(v0 + v) * ys + r0 + r] = sum_lanes(acc[r][v]);
  }
}

template <int R, int V>
KVEVICT_VNNI void tile(const WeightMatrix& w, std::size_t r0, const Int8Vectors& qx, std::size_t v0, float* y,
                       std::size_t ys) {
  if (w.type == WeightType::kQ4_K) {
    tile_q4_k<R, V>(w, r0, qx, v0, y, ys);
  } else {
    tile_q8_0<R, V>(w, r0, qx, v0, y, ys);
  }
}

// R rows against every vector: four vectors a tile where there are, then
// two, then one (as the Highway kernels).
template <int R>
KVEVICT_VNNI void row_group(const WeightMatrix& w, std::size_t r0, const Int8Vectors& qx, float* y, std::size_t ys) {
  std::size_t v = 0;
  for (; v + 4 <= qx.vectors; v += 4) tile<R, 4>(w, r0, qx, v, y, ys);
  for (; v + 2 <= qx.vectors; v += 2) tile<R, 2>(w, r0, qx, v, y, ys);
  if (v < qx.vectors) tile<R, 1>(w, r0, qx, v, y, ys);
}

}  // namespace

// The vectors 16 at a time through every row (as matmul_int8.cpp: a share
// stays in L2 across the rows). Q8_0 tiles four rows by four vectors (its
// row overheads -- the weights' loads, scales and start lanes -- then serve
// four vectors, its vectors' four rows: 5 % more prefill tokens/s than two
// rows on the SmolLM2-135M-shaped file, three alternating pairs); Q4_K's
// integer sums by vector and row fill the registers at two rows by four.
KVEVICT_VNNI_ENTRY void matmul_int8_vnni(const WeightMatrix& w, const Int8Vectors& qx, float* y, std::size_t ys,
                                         std::size_t begin, std::size_t end) noexcept {
  constexpr std::size_t kShare = 16;
  const std::size_t block = w.type == WeightType::kQ4_K ? 256 : 32;
  for (std::size_t v = 0; v < qx.vectors; v += kShare) {
    Int8Vectors share = qx;
    share.values = qx.values + v * qx.stride;
    share.scales = qx.scales + v * (qx.stride / block);
    share.sums = qx.sums == nullptr ? nullptr : qx.sums + v * (qx.stride / 32);
    share.vectors = qx.vectors - v < kShare ? qx.vectors - v : kShare;
    float* out = y + v * ys;
    std::size_t r = begin;
    if (share.vectors >= 4 && w.type == WeightType::kQ8_0) {
      for (; r + 4 <= end; r += 4) row_group<4>(w, r, share, out, ys);
    } else if (share.vectors >= 4) {
      for (; r + 2 <= end; r += 2) row_group<2>(w, r, share, out, ys);
    } else {
      for (; r + 4 <= end; r += 4) row_group<4>(w, r, share, out, ys);
    }
    for (; r < end; ++r) row_group<1>(w, r, share, out, ys);
  }
}

}  // namespace kvevict::kernels
#endif  // KVEVICT_HAS_VNNI_KERNELS
