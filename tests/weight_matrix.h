// Weight matrices for the kernel tests: random floats put through the
// reference quantizer of a block format, with what the blocks decode to (what
// a kernel must read), and random vectors to multiply them by.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/kernels/weight_types.h"

namespace kvevict::testing {

struct QuantizedMatrix {
  WeightMatrix w;
  std::vector<std::uint8_t> blocks;
  std::vector<float> values;  // dequantized: what the kernel must read
};

// rows x cols of `source` (row-major) in `type`'s blocks.
inline QuantizedMatrix quantized_matrix(WeightType type, std::uint32_t rows, std::uint32_t cols,
                                        const std::vector<float>& source) {
  QuantizedMatrix m;
  const std::size_t row_bytes = weight_bytes(type, cols);
  m.blocks.resize(row_bytes * rows);
  m.values.resize(std::size_t{rows} * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    quantize(type, source.data() + std::size_t{r} * cols, m.blocks.data() + r * row_bytes, cols);
    dequantize(type, m.blocks.data() + r * row_bytes, m.values.data() + std::size_t{r} * cols, cols);
  }
  m.w = WeightMatrix{type, rows, cols, m.blocks.data()};
  return m;
}

// n floats uniform in [-spread, spread).
inline std::vector<float> uniform_floats(std::size_t n, std::uint32_t seed, float spread = 1.0F) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-spread, spread);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

}  // namespace kvevict::testing
