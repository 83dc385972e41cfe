// The weight kernels (kvevict/model/kernels/matmul.h) against the block formats'
// dequantizer and a float64 dot product, on whatever SIMD target runs (the
// simd_<target> tests run this suite at each one the CPU has).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kvevict/core/simd.h"
#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/kernels/weight_types.h"
#include "weight_matrix.h"

namespace kvevict {
namespace {

using Matrix = testing::QuantizedMatrix;

// rows x cols random weights (normal, sd 0.5) in `type`'s blocks (the
// reference quantizer's), and what they decode to.
Matrix random_matrix(WeightType type, std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0F, 0.5F);
  std::vector<float> source(std::size_t{rows} * cols);
  for (float& v : source) v = normal(rng);
  return testing::quantized_matrix(type, rows, cols, source);
}

std::vector<float> random_vectors(std::size_t n, std::uint32_t seed) { return testing::uniform_floats(n, seed); }

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

// quantize_vectors keeps its stated bound: every element within 2^-29 of its
// block's largest magnitude m, at a power-of-two scale with m / scale in
// [2^13, 2^14), each part an int16 under 2^14 in magnitude.
TEST(WeightKernels, Q8_0VectorsSplitWithinTheirStatedBound) {
  const std::size_t cols = 32 * 7;
  std::vector<float> x = random_vectors(cols, 21);
  // Blocks of very different sizes, a block of zeros, one of a single value.
  // The last block reaches just under 2^127, the largest the integers hold.
  const float magnitudes[] = {1.0F, 3.0e-12F, 7.5e4F, 0.0F, 1.0F, 2.0e-7F, 1.0e38F};
  for (std::size_t b = 0; b < 7; ++b) {
    for (std::size_t e = 0; e < 32; ++e) x[b * 32 + e] *= magnitudes[b];
  }
  for (std::size_t e = 1; e < 32; ++e) x[4 * 32 + e] = 0.0F;
  x[4 * 32] = -0.3F;
  x[6 * 32 + 3] = std::nextafter(0x1p127F, 0.0F);  // rounds to 2^14 steps of 2^113: 2^127, still finite
  std::vector<std::int16_t> values(cols);
  std::vector<std::int16_t> residuals(cols);
  std::vector<float> scales(7);
  std::vector<std::uint8_t> usable(1);
  ASSERT_EQ(quantize_vectors(x.data(), cols, cols, 1, values.data(), residuals.data(), scales.data(), usable.data()), 1U);
  ASSERT_EQ(usable[0], 1);
  for (std::size_t b = 0; b < 7; ++b) {
    double m = 0.0;
    for (std::size_t e = 0; e < 32; ++e) m = std::max(m, std::fabs(double{x[b * 32 + e]}));
    if (m == 0.0) {
      EXPECT_EQ(scales[b], 0.0F);
    } else {
      int k = 0;
      const double mantissa = std::frexp(double{scales[b]}, &k);
      EXPECT_EQ(mantissa, 0.5) << "block " << b << ": the scale is a power of two";
      EXPECT_GE(m / scales[b], 8192.0) << "block " << b;
      EXPECT_LT(m / scales[b], 16384.0) << "block " << b;
    }
    for (std::size_t e = 0; e < 32; ++e) {
      const std::size_t i = b * 32 + e;
      EXPECT_LE(std::abs(int{values[i]}), 16384);
      EXPECT_LE(std::abs(int{residuals[i]}), 16384);
      const double back = (static_cast<double>(values[i]) + static_cast<double>(residuals[i]) * 0x1p-15) * scales[b];
      EXPECT_LE(std::fabs(back - x[i]), m * 0x1p-29) << "block " << b << " element " << e;
    }
  }
  // -0.3 alone in its block: 0.3 = 0.6 x 2^-1, so its scale is 2^-15.
  EXPECT_EQ(scales[4], 0x1p-15F);
  EXPECT_EQ(values[4 * 32], static_cast<std::int16_t>(std::lrint(-0.3 * 32768.0)));
}

TEST(WeightKernels, Q8_0VectorsTheIntegersCannotHoldAreRefused) {
  const std::size_t cols = 64;
  std::vector<std::int16_t> values(cols);
  std::vector<std::int16_t> residuals(cols);
  std::vector<float> scales(2);
  std::vector<std::uint8_t> usable(1);
  // 2^127 and FLT_MAX: 2^14 steps of 2^114 would be 2^128, past float's range.
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY, 1.0e-20F, 0x1p127F, -3.4028235e38F}) {
    std::vector<float> x = random_vectors(cols, 4);
    for (std::size_t e = 32; e < 64; ++e) x[e] = 0.0F;
    x[40] = bad;
    EXPECT_EQ(quantize_vectors(x.data(), cols, cols, 1, values.data(), residuals.data(), scales.data(), usable.data()), 0U)
        << bad;
    EXPECT_EQ(usable[0], 0) << bad;
  }
}

// Near float's largest values the products take the float kernel: the
// answer is the float64 dot product to float32's rounding (the integer path
// gave 6.1e-5 of the largest element there).
TEST(WeightKernels, Q8_0VectorsNearFloatsLargestAreExactToRounding) {
  const std::uint32_t cols = 64;
  const Matrix m = random_matrix(WeightType::kQ8_0, 8, cols, 5);
  std::vector<float> x(cols, 0.0F);
  x[3] = 3.4e38F;
  x[40] = -1.2e38F;
  std::vector<float> y(m.w.rows);
  matmul(m.w, x.data(), cols, y.data(), m.w.rows, 1, 1);
  for (std::uint32_t r = 0; r < m.w.rows; ++r) {
    const double exact = double{m.values[std::size_t{r} * cols + 3]} * x[3] + double{m.values[std::size_t{r} * cols + 40]} * x[40];
    if (std::fabs(exact) > 3.4028235e38) {
      EXPECT_TRUE(std::isinf(y[r])) << r;
    } else {
      EXPECT_NEAR(y[r], exact, std::fabs(exact) * 1e-6) << r;
    }
  }
}

// A chunk of a prompt on a model's own sizes (576 and 1,536 columns, 40
// vectors: split by the threads themselves), on two threads: each output is
// what the vector alone gives, bit for bit, and the float64 dot product to
// float32's rounding -- also when a vector the integers refuse (a NaN, or a
// block of 1e-20) takes the float kernel beside the others.
TEST(WeightKernels, Q8_0ChunksOfAPromptAreTheVectorsAlone) {
  for (const std::uint32_t cols : {576U, 1536U}) {
    const Matrix m = random_matrix(WeightType::kQ8_0, 96, cols, 17);
    const std::size_t vectors = 40;
    std::vector<float> x = random_vectors(vectors * cols, 8);
    for (std::size_t j = 0; j < cols; ++j) x[3 * cols + j] *= 1.0e4F;  // a vector of another size
    for (const int variant : {0, 1, 2}) {
      if (variant == 1) x[7 * cols + 5] = std::nanf("");
      if (variant == 2) {
        x[7 * cols + 5] = 0.5F;
        for (std::size_t j = 64; j < 96; ++j) x[9 * cols + j] = 1.0e-20F;
      }
      std::vector<float> y(vectors * m.w.rows);
      matmul(m.w, x.data(), cols, y.data(), m.w.rows, vectors, 2);
      std::vector<float> alone(m.w.rows);
      for (std::size_t v = 0; v < vectors; ++v) {
        if (variant == 1 && v == 7) {
          for (std::uint32_t r = 0; r < m.w.rows; ++r) EXPECT_TRUE(std::isnan(y[v * m.w.rows + r])) << r;
          continue;
        }
        matmul(m.w, x.data() + v * cols, cols, alone.data(), m.w.rows, 1, 2);
        for (std::uint32_t r = 0; r < m.w.rows; ++r) {
          ASSERT_EQ(y[v * m.w.rows + r], alone[r])
              << cols << " columns, variant " << variant << ", vector " << v << " row " << r;
          double exact = 0.0;
          double scale = 0.0;
          for (std::uint32_t j = 0; j < cols; ++j) {
            const double p = double{m.values[std::size_t{r} * cols + j]} * x[v * cols + j];
            exact += p;
            scale += std::fabs(p);
          }
          EXPECT_NEAR(y[v * m.w.rows + r], exact, 4e-7 * scale * std::sqrt(static_cast<double>(cols)))
              << cols << " columns, variant " << variant << ", vector " << v << " row " << r;
        }
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
