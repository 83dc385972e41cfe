// The key-aware policies' hot loops (key_signals_kernels.h), written once
// with Google Highway and compiled for every x86-64 target; the CPU's best
// target runs (include/kvevict/core/simd.h). Every lane is its own chain of
// float64 products and sums in the plain loop's order: the lanes run across
// keys or across independent elements, never across the terms of one sum, and
// the build never fuses a multiply with an add (-ffp-contract=off), so every
// target computes the plain loop's bits.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "policies/key_signals_kernels.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "policies/key_signals_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace kvevict::detail::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 8 float64 lanes, so that two vectors of keys fit a kKeyTile tile.
using DTag = hn::CappedTag<double, 8>;

// Logits of the keys in `t` ([dim][2N] doubles, lanes are keys) into out[0, 2N).
HWY_INLINE void LogitTile(const double* HWY_RESTRICT t, std::size_t dim, const double* HWY_RESTRICT mean,
                          const double* HWY_RESTRICT cov, double* HWY_RESTRICT out) {
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  const std::size_t W = 2 * N;
  auto dot0 = hn::Zero(d);
  auto dot1 = hn::Zero(d);
  for (std::size_t c = 0; c < dim; ++c) {
    const auto m = hn::Set(d, mean[c]);
    dot0 = hn::Add(dot0, hn::Mul(m, hn::LoadU(d, t + c * W)));
    dot1 = hn::Add(dot1, hn::Mul(m, hn::LoadU(d, t + c * W + N)));
  }
  const auto root = hn::Set(d, std::sqrt(static_cast<double>(dim)));
  auto z0 = hn::Div(dot0, root);
  auto z1 = hn::Div(dot1, root);
  if (cov != nullptr) {
    // k' Sigma k, row by row in index order: four rows' sums at once (eight
    // independent chains), each row's sum over b in order, then the rows
    // added into the quadratic form in order.
    auto q0 = hn::Zero(d);
    auto q1 = hn::Zero(d);
    std::size_t a = 0;
    for (; a + 4 <= dim; a += 4) {
      const double* r0 = cov + a * dim;
      const double* r1 = r0 + dim;
      const double* r2 = r1 + dim;
      const double* r3 = r2 + dim;
      auto s00 = hn::Zero(d), s01 = hn::Zero(d), s10 = hn::Zero(d), s11 = hn::Zero(d);
      auto s20 = hn::Zero(d), s21 = hn::Zero(d), s30 = hn::Zero(d), s31 = hn::Zero(d);
      for (std::size_t b = 0; b < dim; ++b) {
        const auto k0 = hn::LoadU(d, t + b * W);
        const auto k1 = hn::LoadU(d, t + b * W + N);
        const auto w0 = hn::Set(d, r0[b]);
        const auto w1 = hn::Set(d, r1[b]);
        const auto w2 = hn::Set(d, r2[b]);
        const auto w3 = hn::Set(d, r3[b]);
        s00 = hn::Add(s00, hn::Mul(w0, k0));
        s01 = hn::Add(s01, hn::Mul(w0, k1));
        s10 = hn::Add(s10, hn::Mul(w1, k0));
        s11 = hn::Add(s11, hn::Mul(w1, k1));
        s20 = hn::Add(s20, hn::Mul(w2, k0));
        s21 = hn::Add(s21, hn::Mul(w2, k1));
        s30 = hn::Add(s30, hn::Mul(w3, k0));
        s31 = hn::Add(s31, hn::Mul(w3, k1));
      }
      q0 = hn::Add(q0, hn::Mul(hn::LoadU(d, t + a * W), s00));
      q1 = hn::Add(q1, hn::Mul(hn::LoadU(d, t + a * W + N), s01));
      q0 = hn::Add(q0, hn::Mul(hn::LoadU(d, t + (a + 1) * W), s10));
      q1 = hn::Add(q1, hn::Mul(hn::LoadU(d, t + (a + 1) * W + N), s11));
      q0 = hn::Add(q0, hn::Mul(hn::LoadU(d, t + (a + 2) * W), s20));
      q1 = hn::Add(q1, hn::Mul(hn::LoadU(d, t + (a + 2) * W + N), s21));
      q0 = hn::Add(q0, hn::Mul(hn::LoadU(d, t + (a + 3) * W), s30));
      q1 = hn::Add(q1, hn::Mul(hn::LoadU(d, t + (a + 3) * W + N), s31));
    }
    for (; a < dim; ++a) {
      const double* r0 = cov + a * dim;
      auto s0 = hn::Zero(d);
      auto s1 = hn::Zero(d);
      for (std::size_t b = 0; b < dim; ++b) {
        const auto w = hn::Set(d, r0[b]);
        s0 = hn::Add(s0, hn::Mul(w, hn::LoadU(d, t + b * W)));
        s1 = hn::Add(s1, hn::Mul(w, hn::LoadU(d, t + b * W + N)));
      }
      q0 = hn::Add(q0, hn::Mul(hn::LoadU(d, t + a * W), s0));
      q1 = hn::Add(q1, hn::Mul(hn::LoadU(d, t + a * W + N), s1));
    }
    const auto dd = hn::Set(d, static_cast<double>(dim));
    const auto two = hn::Set(d, 2.0);
    z0 = hn::Add(z0, hn::Div(hn::Div(q0, dd), two));
    z1 = hn::Add(z1, hn::Div(hn::Div(q1, dd), two));
  }
  hn::Store(z0, d, out);
  hn::Store(z1, d, out + N);
}

void ExpectedLogits(const float* HWY_RESTRICT keys, std::size_t count, std::size_t dim,
                    const double* HWY_RESTRICT mean, const double* HWY_RESTRICT cov, double* HWY_RESTRICT tile,
                    double* HWY_RESTRICT out) {
  const DTag d;
  const std::size_t W = 2 * hn::Lanes(d);
  HWY_ALIGN double z[kKeyTile];
  for (std::size_t i = 0; i < count; i += W) {
    // The tile: the next W keys transposed (lanes are keys), widened to
    // float64; past the last key, zeros (their logits are not kept).
    const std::size_t m = std::min(W, count - i);
    for (std::size_t j = 0; j < m; ++j) {
      const float* k = keys + (i + j) * dim;
      for (std::size_t c = 0; c < dim; ++c) tile[c * W + j] = static_cast<double>(k[c]);
    }
    for (std::size_t j = m; j < W; ++j) {
      for (std::size_t c = 0; c < dim; ++c) tile[c * W + j] = 0.0;
    }
    LogitTile(tile, dim, mean, cov, z);
    std::copy_n(z, m, out + i);
  }
}

void AddWidened(double* HWY_RESTRICT sums, const float* HWY_RESTRICT x, std::size_t n) {
  const DTag d;
  const hn::Rebind<float, DTag> df;
  const std::size_t N = hn::Lanes(d);
  std::size_t c = 0;
  for (; c + N <= n; c += N) {
    hn::StoreU(hn::Add(hn::LoadU(d, sums + c), hn::PromoteTo(d, hn::LoadU(df, x + c))), d, sums + c);
  }
  for (; c < n; ++c) sums[c] += static_cast<double>(x[c]);
}

void AddOuterUpper(double* HWY_RESTRICT cov, const double* HWY_RESTRICT x, std::size_t dim) {
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  for (std::size_t a = 0; a < dim; ++a) {
    const double xa = x[a];
    const auto va = hn::Set(d, xa);
    double* row = cov + a * dim;
    std::size_t b = a;
    for (; b + N <= dim; b += N) {
      hn::StoreU(hn::Add(hn::LoadU(d, row + b), hn::Mul(va, hn::LoadU(d, x + b))), d, row + b);
    }
    for (; b < dim; ++b) row[b] += xa * x[b];
  }
}

void AddOuterUpper4(double* HWY_RESTRICT cov, const double* HWY_RESTRICT x, std::size_t dim) {
  // Four outer products, x[0, dim) first: each element gains its four
  // products in that order, read and written once.
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  const double* x0 = x;
  const double* x1 = x0 + dim;
  const double* x2 = x1 + dim;
  const double* x3 = x2 + dim;
  for (std::size_t a = 0; a < dim; ++a) {
    const auto v0 = hn::Set(d, x0[a]);
    const auto v1 = hn::Set(d, x1[a]);
    const auto v2 = hn::Set(d, x2[a]);
    const auto v3 = hn::Set(d, x3[a]);
    double* row = cov + a * dim;
    std::size_t b = a;
    for (; b + N <= dim; b += N) {
      auto acc = hn::LoadU(d, row + b);
      acc = hn::Add(acc, hn::Mul(v0, hn::LoadU(d, x0 + b)));
      acc = hn::Add(acc, hn::Mul(v1, hn::LoadU(d, x1 + b)));
      acc = hn::Add(acc, hn::Mul(v2, hn::LoadU(d, x2 + b)));
      acc = hn::Add(acc, hn::Mul(v3, hn::LoadU(d, x3 + b)));
      hn::StoreU(acc, d, row + b);
    }
    for (; b < dim; ++b) {
      double acc = row[b];
      acc += x0[a] * x0[b];
      acc += x1[a] * x1[b];
      acc += x2[a] * x2[b];
      acc += x3[a] * x3[b];
      row[b] = acc;
    }
  }
}

void TurnPairs(double* HWY_RESTRICT x, double* HWY_RESTRICT y, const double* HWY_RESTRICT c,
               const double* HWY_RESTRICT s, std::size_t n) {
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vx = hn::LoadU(d, x + i);
    const auto vy = hn::LoadU(d, y + i);
    const auto vc = hn::LoadU(d, c + i);
    const auto vs = hn::LoadU(d, s + i);
    hn::StoreU(hn::Sub(hn::Mul(vc, vx), hn::Mul(vs, vy)), d, x + i);
    hn::StoreU(hn::Add(hn::Mul(vs, vx), hn::Mul(vc, vy)), d, y + i);
  }
  for (; i < n; ++i) {
    const double nx = c[i] * x[i] - s[i] * y[i];
    const double ny = s[i] * x[i] + c[i] * y[i];
    x[i] = nx;
    y[i] = ny;
  }
}

void TurnRows(double* HWY_RESTRICT x, double* HWY_RESTRICT y, double c, double s, std::size_t n) {
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  const auto vc = hn::Set(d, c);
  const auto vs = hn::Set(d, s);
  std::size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto vx = hn::LoadU(d, x + i);
    const auto vy = hn::LoadU(d, y + i);
    hn::StoreU(hn::Sub(hn::Mul(vc, vx), hn::Mul(vs, vy)), d, x + i);
    hn::StoreU(hn::Add(hn::Mul(vs, vx), hn::Mul(vc, vy)), d, y + i);
  }
  for (; i < n; ++i) {
    const double nx = c * x[i] - s * y[i];
    const double ny = s * x[i] + c * y[i];
    x[i] = nx;
    y[i] = ny;
  }
}

void TiledDots(const float* HWY_RESTRICT keys, std::size_t rows, std::size_t dim, const double* HWY_RESTRICT a,
               double* HWY_RESTRICT out) {
  const DTag d;
  const hn::Rebind<float, DTag> df;
  const std::size_t N = hn::Lanes(d);
  for (std::size_t r = 0; r < rows; r += kKeyTile) {
    const float* tile = keys + r * dim;
    for (std::size_t j = 0; j < kKeyTile; j += 2 * N) {
      auto s0 = hn::Zero(d);
      auto s1 = hn::Zero(d);
      for (std::size_t c = 0; c < dim; ++c) {
        const auto ac = hn::Set(d, a[c]);
        const float* at = tile + c * kKeyTile + j;
        s0 = hn::Add(s0, hn::Mul(hn::PromoteTo(d, hn::LoadU(df, at)), ac));
        s1 = hn::Add(s1, hn::Mul(hn::PromoteTo(d, hn::LoadU(df, at + N)), ac));
      }
      hn::StoreU(s0, d, out + r + j);
      hn::StoreU(s1, d, out + r + j + N);
    }
  }
}

void AddRowsIndexed(const double* HWY_RESTRICT values, const std::uint32_t* HWY_RESTRICT row_of, std::size_t count,
                    std::size_t dim, const double* HWY_RESTRICT skip, double* HWY_RESTRICT sums) {
  const DTag d;
  const std::size_t N = hn::Lanes(d);
  std::size_t c = 0;
  for (; c + 4 * N <= dim; c += 4 * N) {
    auto s0 = hn::LoadU(d, sums + c);
    auto s1 = hn::LoadU(d, sums + c + N);
    auto s2 = hn::LoadU(d, sums + c + 2 * N);
    auto s3 = hn::LoadU(d, sums + c + 3 * N);
    for (std::size_t i = 0; i < count; ++i) {
      if (skip[i] == 0.0) continue;
      const double* row = values + std::size_t{row_of[i]} * dim + c;
      s0 = hn::Add(s0, hn::LoadU(d, row));
      s1 = hn::Add(s1, hn::LoadU(d, row + N));
      s2 = hn::Add(s2, hn::LoadU(d, row + 2 * N));
      s3 = hn::Add(s3, hn::LoadU(d, row + 3 * N));
    }
    hn::StoreU(s0, d, sums + c);
    hn::StoreU(s1, d, sums + c + N);
    hn::StoreU(s2, d, sums + c + 2 * N);
    hn::StoreU(s3, d, sums + c + 3 * N);
  }
  for (; c < dim; ++c) {
    double sum = sums[c];
    for (std::size_t i = 0; i < count; ++i) {
      if (skip[i] != 0.0) sum += values[std::size_t{row_of[i]} * dim + c];
    }
    sums[c] = sum;
  }
}

}  // namespace kvevict::detail::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace kvevict::detail {

HWY_EXPORT(ExpectedLogits);
HWY_EXPORT(AddWidened);
HWY_EXPORT(AddOuterUpper);
HWY_EXPORT(AddOuterUpper4);
HWY_EXPORT(TurnPairs);
HWY_EXPORT(TurnRows);
HWY_EXPORT(TiledDots);
HWY_EXPORT(AddRowsIndexed);

void expected_logits(const float* keys, std::size_t count, std::size_t dim, const double* mean, const double* cov,
                     double* tile, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(ExpectedLogits)(keys, count, dim, mean, cov, tile, out);
}

void add_widened(double* sums, const float* x, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(AddWidened)(sums, x, n);
}

void add_outer_upper(double* cov, const double* x, std::size_t dim) noexcept {
  HWY_DYNAMIC_DISPATCH(AddOuterUpper)(cov, x, dim);
}

void add_outer_upper4(double* cov, const double* x, std::size_t dim) noexcept {
  HWY_DYNAMIC_DISPATCH(AddOuterUpper4)(cov, x, dim);
}

void turn_pairs(double* x, double* y, const double* c, const double* s, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(TurnPairs)(x, y, c, s, n);
}

void turn_rows(double* x, double* y, double c, double s, std::size_t n) noexcept {
  HWY_DYNAMIC_DISPATCH(TurnRows)(x, y, c, s, n);
}

void tiled_dots(const float* keys, std::size_t rows, std::size_t dim, const double* a, double* out) noexcept {
  HWY_DYNAMIC_DISPATCH(TiledDots)(keys, rows, dim, a, out);
}

void add_rows_indexed(const double* values, const std::uint32_t* row_of, std::size_t count, std::size_t dim,
                      const double* skip, double* sums) noexcept {
  HWY_DYNAMIC_DISPATCH(AddRowsIndexed)(values, row_of, count, dim, skip, sums);
}

}  // namespace kvevict::detail
#endif  // HWY_ONCE
