// The hot loops of the key-aware policies (KeyDiff, Expected Attention),
// compiled for every SIMD target with Google Highway and dispatched to the
// best one the CPU runs (include/kvevict/core/simd.h). Each computes exactly
// the plain loop it replaces: the lanes run across keys (or across the
// independent elements of a row), never across the terms of one sum, so every
// float64 sum is added in the plain loop's order and every target gives the
// same bits. tests/policies/expected_attention_differential_test.cpp and
// tests/policies/key_scored_test.cpp hold them to plain loops on every target.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvevict::detail {

// Keys a lane tile holds: the most float64 lanes of any target (8) twice.
inline constexpr std::size_t kKeyTile = 16;

// Expected Attention's logit of each of `count` keys (rows of `dim` floats,
// `keys` + i x dim): out[i] = (sum over c of mean[c] x k[c]) / sqrt(dim), plus,
// when `cov` is not null, ((sum over a of k[a] x (sum over b of cov[a x dim +
// b] x k[b])) / dim) / 2 -- every sum in index order, each product and sum
// rounded to float64 as the plain loop rounds it. `tile` is scratch of
// kKeyTile x dim doubles.
void expected_logits(const float* keys, std::size_t count, std::size_t dim, const double* mean, const double* cov,
                     double* tile, double* out) noexcept;

// sums[c] += (double)x[c] for c < n.
void add_widened(double* sums, const float* x, std::size_t n) noexcept;

// The upper triangle of the outer product: cov[a x dim + b] += x[a] x x[b]
// for a <= b < dim (each element its own product and sum).
void add_outer_upper(double* cov, const double* x, std::size_t dim) noexcept;
// add_outer_upper with x = x[0, dim), then x[dim, 2 dim), x[2 dim, 3 dim),
// x[3 dim, 4 dim): the four products added to each element in that order.
void add_outer_upper4(double* cov, const double* x, std::size_t dim) noexcept;

// RoPE's pair turn, element by element: (x, y) <- (c x - s y, s x + c y),
// with c[i], s[i] per element (turn_pairs) or one c, s for all (turn_rows).
void turn_pairs(double* x, double* y, const double* c, const double* s, std::size_t n) noexcept;
void turn_rows(double* x, double* y, double c, double s, std::size_t n) noexcept;

// KeyDiff's keys, stored transposed in tiles of kKeyTile rows: row r's
// channel c is at keys[(r / kKeyTile) x kKeyTile x dim + c x kKeyTile + r %
// kKeyTile]. out[r] = sum over c, in channel order, of (double)key_r[c] x
// a[c], for every row r < rows (rows a multiple of kKeyTile).
void tiled_dots(const float* keys, std::size_t rows, std::size_t dim, const double* a, double* out) noexcept;

// KeyDiff's anchor: for i = 0 ... count - 1 in that order, skipping i when
// skip[i] is 0, sums[c] += values[row_of[i] x dim + c] for every c < dim --
// each channel's sum in that order (the lanes run across channels).
void add_rows_indexed(const double* values, const std::uint32_t* row_of, std::size_t count, std::size_t dim,
                      const double* skip, double* sums) noexcept;

}  // namespace kvevict::detail
