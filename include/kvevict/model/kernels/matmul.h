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
//
// Q8_0 is the exception to "decoded in registers": its products are integer
// multiply-adds against the vectors split into two int16 parts a 32-element
// block (quantize_vectors), each block's sums scaled once, because turning
// int8 into floats was most of the work and left a decode step far from
// reading speed. The split costs each element at most 2^-29 of its block's
// largest magnitude -- below float32's own rounding of the products' sum --
// and a vector of one non-zero (a unit vector) is exact; a vector with a
// block that is not finite, non-zero below 2^-60, or at 2^127 or more takes
// the float kernel, alone: each vector's products are the same bits whatever
// the other vectors of the product (a chunk's tokens, a batch's runs).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kvevict/model/kernels/weight_types.h"

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

// How the products of a quantized matrix are computed.
//  - kExact: against the vectors as they are (the default; every published
//    table): the float kernels, or Q8_0's split integers (within 2^-29 of a
//    block's largest magnitude).
//  - kInt8: against the vectors rounded to 8 bits as llama.cpp rounds them
//    (its "vec_dot_type"), so the logits come close to llama.cpp's own and a
//    product is about one integer multiply-add per weight: Q8_0 against
//    vectors in llama.cpp's Q8_0 blocks (32 values of [-127, 127] and
//    a float16 scale, largest magnitude / 127), Q4_K against its Q8_K blocks
//    (256 values, a float scale of largest / -127, the values' sums by 32).
//    The other types (F32, F16, BF16, Q4_0, Q6_K) are computed as kExact. A
//    vector holding a NaN or an infinity is not rounded: its products are
//    kExact's (NaN or infinite as those are), alone; nor is one with a block
//    whose Q8_0 scale would pass float16's largest (65504): the float kernel
//    multiplies it as it is.
enum class MatmulMode : std::uint8_t { kExact, kInt8 };

// "exact" or "int8"; throws ParameterError naming the value otherwise.
MatmulMode parse_matmul_mode(std::string_view name);
const char* matmul_mode_name(MatmulMode mode) noexcept;
// The types kInt8 rounds the vectors for (Q8_0, Q4_K).
bool has_int8_kernel(WeightType type) noexcept;

// True for the types the kernels read (every type but Q5_0, which a model
// decodes to F32 at load).
bool has_matmul_kernel(WeightType type) noexcept;

// y[v * y_stride + r] = dot(row r of w, x + v * x_stride) for v < vectors
// and r < w.rows. x holds vectors x w.cols floats at stride x_stride, y
// vectors x w.rows at y_stride. threads: how many share the rows (1: this
// thread alone; the work is split only when it is large enough to pay for
// it). Allocation-free, except that Q8_0 keeps the calling thread's rounded
// vectors in a buffer that grows to the largest product it has made.
void matmul(const WeightMatrix& w, const float* x, std::size_t x_stride, float* y, std::size_t y_stride,
            std::size_t vectors, int threads, MatmulMode mode = MatmulMode::kExact) noexcept;

// Vectors split for the Q8_0 kernel: (values[i] + residuals[i] * 2^-15) *
// scales[v * (stride / 32) + j / 32], i = v * stride + j, is element j of
// vector v to within 2^-29 of its block's largest magnitude; every scale a
// power of two (or zero for a block of zeros).
struct QuantizedVectors {
  const std::int16_t* values = nullptr;
  const std::int16_t* residuals = nullptr;
  const float* scales = nullptr;
  std::size_t stride = 0;  // the columns, a multiple of 32
  std::size_t vectors = 0;
};

// Splits `vectors` vectors of `cols` floats (cols a multiple of 32, at
// x_stride) into values and residuals[vectors * cols] and scales[vectors *
// cols / 32]: each block's scale is 2^(k - 14) for its largest magnitude in
// [2^(k-1), 2^k), each value the element over it rounded to nearest (ties
// to even), each residual what is left over the scale times 2^-15, rounded
// the same way. usable[v] is 0 (and the vector's parts zeros) when one of
// its blocks holds a NaN or infinity, or its largest magnitude is non-zero
// but below 2^-60, or 2^127 or more; 1 otherwise. Returns the usable vectors.
std::size_t quantize_vectors(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                             std::int16_t* values, std::int16_t* residuals, float* scales,
                             std::uint8_t* usable) noexcept;

// Rows [begin, end) of a Q8_0 matrix against rounded vectors:
// y[v * y_stride + r] for v < x.vectors. The kernel matmul uses for Q8_0.
void matmul_quantized(const WeightMatrix& w, const QuantizedVectors& x, float* y, std::size_t y_stride,
                      std::size_t begin, std::size_t end) noexcept;

// Vectors rounded to 8 bits a value (kInt8): `values` (vectors x stride,
// each in [-127, 127]),
// `scales` (one a block: 32 values for Q8_0 blocks, 256 for Q8_K) and, for
// Q8_K, `sums` (each 32 values' sum, vectors x stride / 32). Element j of
// vector v is about values[v * stride + j] * scales[(v * stride + j) / block].
struct Int8Vectors {
  const std::int8_t* values = nullptr;
  const float* scales = nullptr;
  const std::int16_t* sums = nullptr;  // Q8_K only
  std::size_t stride = 0;              // the columns, a multiple of the block
  std::size_t vectors = 0;
};

// llama.cpp's rounding of `vectors` vectors of `cols` floats (at x_stride)
// into Q8_0 blocks (cols a multiple of 32): each block's largest magnitude
// m, its scale float16(m / 127), each value round(x * (127 / m)) with ties to
// even (0 for a block of zeros). usable[v] is 0 (its parts zeros) for a
// vector holding a NaN or an infinity, or a block with m / 127 past 65504
// (float16's largest). Returns the usable vectors.
std::size_t round_q8_0(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                       std::int8_t* values, float* scales, std::uint8_t* usable) noexcept;
// The same into Q8_K blocks (cols a multiple of 256): each block's element
// of largest magnitude M (the first such), iscale = -127 / M, each value
// min(127, round(iscale * x)) with ties to even, the scale 1 / iscale, and
// the sums of each 32 values.
std::size_t round_q8_k(const float* x, std::size_t x_stride, std::size_t cols, std::size_t vectors,
                       std::int8_t* values, float* scales, std::int16_t* sums, std::uint8_t* usable) noexcept;

// Rows [begin, end) of a Q8_0 matrix against Q8_0-rounded vectors,
// or of a Q4_K matrix against Q8_K-rounded ones: y[v * y_stride + r] for v <
// x.vectors. The kernels kInt8 uses. Each block's integer dot product is
// exact; it is scaled by the weights' and the vector's scales and summed in
// float32 in the blocks' order (Q4_K: its mins' term apart, then added).
void matmul_int8(const WeightMatrix& w, const Int8Vectors& x, float* y, std::size_t y_stride, std::size_t begin,
                 std::size_t end) noexcept;

// One of several products with the same vectors: y[v * y_stride + r] =
// dot(row r of *w, vector v).
struct Product {
  const WeightMatrix* w = nullptr;
  float* y = nullptr;
  std::size_t y_stride = 0;
};

// matmul for `count` matrices of the same columns against the same vectors
// (a layer's q, k and v; its gate and up), their rows shared out over the
// threads together: one fork and join instead of one a matrix, the vectors
// rounded once for every Q8_0 matrix, and each output the bits matmul gives
// it alone.
void matmul_group(const Product* products, std::size_t count, const float* x, std::size_t x_stride,
                  std::size_t vectors, int threads, MatmulMode mode = MatmulMode::kExact) noexcept;

// The threads a product uses when asked for 0: every core this process may
// run on (OpenMP's count).
int default_threads() noexcept;

}  // namespace kvevict
