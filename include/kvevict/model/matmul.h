// Weight-matrix products in the weights' own types (F32, F16, BF16, Q8_0,
// Q4_0, Q4_K, Q6_K): each weight is read once from its blocks and decoded in
// registers, with Google Highway kernels compiled for every SIMD target and
// chosen at run time (kvevict/core/simd.h), the rows split across threads.
//
// One product serves a decode step (one vector), a prompt's chunk (one
// vector a token) and many runs stepped together (one vector a run): every
// output is the same dot product, accumulated lane by lane over the columns
// in order and summed across the lanes at the end, whatever the number of
// vectors, the threads or which thread computed it. So a batched prefill and
// a batch of runs give the logits token-by-token decoding gives, to the bit,
// on one SIMD target (a different target sums in other lanes: last bits).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/model/weight_types.h"

namespace kvevict {

// A row-major [rows, cols] matrix in ggml's block layout: each row is
// cols / block_elements whole blocks (cols a multiple of the block's
// elements; for F32, F16 and BF16 any cols).
struct WeightMatrix {
  WeightType type = WeightType::kF32;
  std::uint32_t rows = 0;
  std::uint32_t cols = 0;
  const std::uint8_t* data = nullptr;

  std::size_t row_bytes() const noexcept { return weight_bytes(type, cols); }
  std::size_t bytes() const noexcept { return row_bytes() * rows; }
  const std::uint8_t* row(std::uint32_t r) const noexcept { return data + row_bytes() * r; }
  bool empty() const noexcept { return data == nullptr; }
};

// True for the types the kernels read (every type but Q5_0, which a model
// decodes to F32 at load).
bool has_matmul_kernel(WeightType type) noexcept;

// y[v * y_stride + r] = dot(row r of w, x + v * x_stride) for v < vectors
// and r < w.rows. x holds vectors x w.cols floats at stride x_stride, y
// vectors x w.rows at y_stride. threads: how many share the rows (1: this
// thread alone; the work is split only when it is large enough to pay for
// it). Allocation-free.
void matmul(const WeightMatrix& w, const float* x, std::size_t x_stride, float* y, std::size_t y_stride,
            std::size_t vectors, int threads) noexcept;

// The threads a product uses when asked for 0: every core this process may
// run on (OpenMP's count).
int default_threads() noexcept;

}  // namespace kvevict
