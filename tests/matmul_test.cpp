// The weight kernels (kvevict/model/matmul.h) against the block formats'
// dequantizer and a float64 dot product, on whatever SIMD target runs (the
// simd_<target> tests run this suite at each one the CPU has).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvevict/core/simd.h"
#include "kvevict/model/matmul.h"
#include "kvevict/model/weight_types.h"

namespace kvevict {
namespace {

struct Matrix {
  WeightMatrix w;
  std::vector<std::uint8_t> blocks;
  std::vector<float> values;  // dequantized: what the kernel must read
};

// rows x cols random weights in `type`'s blocks (the reference quantizer's),
// and what they decode to.
Matrix random_matrix(WeightType type, std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 0.5F);
  std::vector<float> source(std::size_t{rows} * cols);
  for (float& v : source) v = normal(rng);
  Matrix m;
  const std::size_t row_bytes = weight_bytes(type, cols);
  m.blocks.resize(row_bytes * rows);
  m.values.resize(source.size());
  for (std::uint32_t r = 0; r < rows; ++r) {
    quantize(type, source.data() + std::size_t{r} * cols, m.blocks.data() + r * row_bytes, cols);
    dequantize(type, m.blocks.data() + r * row_bytes, m.values.data() + std::size_t{r} * cols, cols);
  }
  m.w = WeightMatrix{type, rows, cols, m.blocks.data()};
  return m;
}

std::vector<float> random_vectors(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> x(n);
  for (float& v : x) v = u(rng);
  return x;
}

struct Case {
  WeightType type;
  std::uint32_t cols;  // a whole number of blocks; float types with a tail past the lanes
};

const Case kCases[] = {
    {WeightType::kF32, 37},  {WeightType::kF16, 45},   {WeightType::kBF16, 67},  {WeightType::kQ8_0, 96},
    {WeightType::kQ4_0, 96}, {WeightType::kQ4_K, 512}, {WeightType::kQ6_K, 512},
};

std::string label(const Case& c) {
  return std::string(weight_type_info(c.type).name) + " on " + simd::active_target();
}

// Block scales of every kind a float16 holds -- normal, subnormal, the
// largest, zero, negative -- decode as the dequantizer's (the kernels convert
// them themselves, not through half_to_float). Q8_0 and Q4_0 blocks carry
// the scale in their first two bytes.
TEST(WeightKernels, EveryKindOfHalfScaleDecodesAsTheDequantizer) {
  const std::uint16_t scales[] = {0x3C00, 0x0001, 0x03FF, 0x0400, 0x7BFF, 0x0000, 0x8000, 0xBC00, 0x8001, 0x1234};
  for (const WeightType type : {WeightType::kQ8_0, WeightType::kQ4_0}) {
    const std::uint32_t blocks = sizeof(scales) / sizeof(scales[0]);
    const std::uint32_t cols = 32 * blocks;
    Matrix m = random_matrix(type, 4, cols, 11);
    const std::size_t block_bytes = weight_type_info(type).block_bytes;
    for (std::uint32_t r = 0; r < 4; ++r) {
      for (std::uint32_t b = 0; b < blocks; ++b) {
        std::uint8_t* at = m.blocks.data() + r * m.w.row_bytes() + b * block_bytes;
        at[0] = static_cast<std::uint8_t>(scales[b] & 0xFF);
        at[1] = static_cast<std::uint8_t>(scales[b] >> 8);
      }
      dequantize(type, m.blocks.data() + r * m.w.row_bytes(), m.values.data() + std::size_t{r} * cols, cols);
    }
    std::vector<float> x(cols, 0.0F);
    std::vector<float> y(4);
    for (std::uint32_t j = 0; j < cols; ++j) {
      x[j] = 1.0F;
      matmul(m.w, x.data(), cols, y.data(), 4, 1, 1);
      x[j] = 0.0F;
      for (std::uint32_t r = 0; r < 4; ++r) {
        ASSERT_EQ(y[r], m.values[std::size_t{r} * cols + j])
            << weight_type_info(type).name << " scale " << std::hex << scales[j / 32] << " row " << r;
      }
    }
  }
}

TEST(WeightKernels, AUnitVectorReadsEachWeightBackExactly) {
  for (const Case& c : kCases) {
    const Matrix m = random_matrix(c.type, 13, c.cols, 7);
    std::vector<float> x(c.cols, 0.0F);
    std::vector<float> y(m.w.rows);
    for (std::uint32_t j = 0; j < c.cols; ++j) {
      x[j] = 1.0F;
      matmul(m.w, x.data(), c.cols, y.data(), m.w.rows, 1, 1);
      x[j] = 0.0F;
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        ASSERT_EQ(y[r], m.values[std::size_t{r} * c.cols + j]) << label(c) << " row " << r << " column " << j;
      }
    }
  }
}

TEST(WeightKernels, ProductsMatchAFloat64DotProductOfTheDecodedWeights) {
  for (const Case& c : kCases) {
    const Matrix m = random_matrix(c.type, 21, c.cols, 11);
    const std::size_t vectors = 6;
    const std::vector<float> x = random_vectors(vectors * c.cols, 3);
    std::vector<float> y(vectors * m.w.rows);
    matmul(m.w, x.data(), c.cols, y.data(), m.w.rows, vectors, 1);
    for (std::size_t v = 0; v < vectors; ++v) {
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        double exact = 0.0;
        double scale = 0.0;
        for (std::uint32_t j = 0; j < c.cols; ++j) {
          const double p = double{m.values[std::size_t{r} * c.cols + j]} * x[v * c.cols + j];
          exact += p;
          scale += std::fabs(p);
        }
        // float32 accumulation: a few ulps of the terms' magnitude.
        EXPECT_NEAR(y[v * m.w.rows + r], exact, 4e-7 * scale * std::sqrt(static_cast<double>(c.cols)) + 1e-30)
            << label(c) << " row " << r << " vector " << v;
      }
    }
  }
}

TEST(WeightKernels, EachOutputIsTheSameWhateverTheVectorsAndThreads) {
  for (const Case& c : kCases) {
    const Matrix m = random_matrix(c.type, 301, c.cols, 5);  // enough work for two threads
    const std::size_t vectors = 11;  // tiles of 4, 4 and 3
    const std::vector<float> x = random_vectors(vectors * c.cols, 9);
    std::vector<float> together(vectors * m.w.rows);
    matmul(m.w, x.data(), c.cols, together.data(), m.w.rows, vectors, 1);
    std::vector<float> threaded(vectors * m.w.rows);
    matmul(m.w, x.data(), c.cols, threaded.data(), m.w.rows, vectors, 2);
    EXPECT_EQ(together, threaded) << label(c);
    std::vector<float> alone(m.w.rows);
    for (std::size_t v = 0; v < vectors; ++v) {
      matmul(m.w, x.data() + v * c.cols, c.cols, alone.data(), m.w.rows, 1, 2);
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        ASSERT_EQ(alone[r], together[v * m.w.rows + r]) << label(c) << " row " << r << " vector " << v;
      }
    }
  }
}

TEST(WeightKernels, StridesLeaveTheGapsAlone) {
  const Matrix m = random_matrix(WeightType::kQ8_0, 9, 64, 2);
  const std::size_t xs = 70;
  const std::size_t ys = 12;
  const std::vector<float> x = random_vectors(3 * xs, 4);
  std::vector<float> y(3 * ys, -7.0F);
  matmul(m.w, x.data(), xs, y.data(), ys, 3, 1);
  std::vector<float> one(9);
  for (std::size_t v = 0; v < 3; ++v) {
    matmul(m.w, x.data() + v * xs, 64, one.data(), 9, 1, 1);
    for (std::size_t r = 0; r < ys; ++r) {
      if (r < 9) {
        EXPECT_EQ(y[v * ys + r], one[r]);
      } else {
        EXPECT_EQ(y[v * ys + r], -7.0F) << "vector " << v << " gap " << r;
      }
    }
  }
}

TEST(WeightKernels, Q5_0HasNoKernelAndIsDecodedAtLoad) {
  EXPECT_FALSE(has_matmul_kernel(WeightType::kQ5_0));
  for (const Case& c : kCases) EXPECT_TRUE(has_matmul_kernel(c.type)) << label(c);
}

}  // namespace
}  // namespace kvevict
