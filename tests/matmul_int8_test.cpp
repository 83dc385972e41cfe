// The 8-bit products (MatmulMode::kInt8, kvevict/model/kernels/matmul.h):
// the rounding against llama.cpp's rules written out here a second time, in
// plain scalar code; the products against a float64 dot product of the
// decoded weights and the rounded vectors; exact sums where every step is
// exact; and the same bits whatever the vectors, tiles and threads. On
// whatever SIMD target runs (the simd_<target> tests rerun the suite).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kvevict/core/errors.h"
#include "kvevict/core/simd.h"
#include "kvevict/model/kernels/matmul.h"
#include "kvevict/model/kernels/weight_types.h"
#include "weight_matrix.h"

namespace kvevict {
namespace {

std::vector<float> random_vectors(std::size_t n, std::uint32_t seed, float spread = 1.0F) {
  return testing::uniform_floats(n, seed, spread);
}

using Matrix = testing::QuantizedMatrix;

Matrix random_matrix(WeightType type, std::uint32_t rows, std::uint32_t cols, std::uint32_t seed) {
  return testing::quantized_matrix(type, rows, cols, random_vectors(std::size_t{rows} * cols, seed, 0.8F));
}

// llama.cpp's rounding, written out from its rules (ggml's
// quantize_row_q8_0 and quantize_row_q8_K): each vector's blocks as the
// floats they stand for, values * scale.
struct Reference {
  std::vector<int> values;
  std::vector<float> scales;
  std::vector<int> sums;  // Q8_K: by 32
};

Reference reference_q8_0(const std::vector<float>& x) {
  Reference ref;
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float m = 0.0F;
    for (std::size_t e = 0; e < 32; ++e) m = std::max(m, std::fabs(x[32 * b + e]));
    ref.scales.push_back(half_to_float(float_to_half(m / 127.0F)));
    const float inverse = m != 0.0F ? 127.0F / m : 0.0F;
    for (std::size_t e = 0; e < 32; ++e) ref.values.push_back(static_cast<int>(std::nearbyint(x[32 * b + e] * inverse)));
  }
  return ref;
}

Reference reference_q8_k(const std::vector<float>& x) {
  Reference ref;
  for (std::size_t b = 0; b < x.size() / 256; ++b) {
    float amax = 0.0F;
    float max = 0.0F;
    for (std::size_t e = 0; e < 256; ++e) {
      if (std::fabs(x[256 * b + e]) > amax) {
        amax = std::fabs(x[256 * b + e]);
        max = x[256 * b + e];
      }
    }
    if (amax == 0.0F) {
      ref.scales.push_back(0.0F);
      ref.values.insert(ref.values.end(), 256, 0);
    } else {
      const float iscale = -127.0F / max;
      for (std::size_t e = 0; e < 256; ++e) {
        ref.values.push_back(std::min(127, static_cast<int>(std::nearbyint(iscale * x[256 * b + e]))));
      }
      ref.scales.push_back(1.0F / iscale);
    }
    for (std::size_t j = 0; j < 8; ++j) {
      int sum = 0;
      for (std::size_t e = 0; e < 32; ++e) sum += ref.values[256 * b + 32 * j + e];
      ref.sums.push_back(sum);
    }
  }
  return ref;
}

std::string on_target() { return std::string(" on ") + simd::active_target(); }

// Vectors with blocks of every kind: random, all zeros, one non-zero, ties
// (x * 127 / m exactly at .5), the largest element negative and repeated.
std::vector<float> awkward_vector(std::size_t cols, std::uint32_t seed) {
  std::vector<float> x = random_vectors(cols, seed);
  std::fill(x.begin() + 32, x.begin() + 64, 0.0F);           // a zero block (and part of a Q8_K block)
  x[70] = -3.0F;                                              // a negative largest in its block
  x[71] = 3.0F;                                               // the same magnitude after it
  x[100] = 127.0F;                                            // m = 127: x * 127 / m = x
  x[101] = 2.5F;                                              // a tie: to even (2)
  x[102] = -3.5F;                                             // a tie: to even (-4)
  if (cols >= 512) std::fill(x.begin() + 256, x.begin() + 512, 0.0F);  // a whole zero Q8_K block
  return x;
}

TEST(WeightKernelsInt8, Q8_0RoundingIsLlamaCppsRule) {
  const std::size_t cols = 32 * 24;
  const std::vector<float> x = awkward_vector(cols, 3);
  std::vector<std::int8_t> values(cols);
  std::vector<float> scales(cols / 32);
  std::uint8_t usable = 9;
  EXPECT_EQ(round_q8_0(x.data(), cols, cols, 1, values.data(), scales.data(), &usable), 1U);
  EXPECT_EQ(usable, 1);
  const Reference ref = reference_q8_0(x);
  for (std::size_t j = 0; j < cols; ++j) ASSERT_EQ(values[j], ref.values[j]) << "element " << j << on_target();
  for (std::size_t b = 0; b < cols / 32; ++b) ASSERT_EQ(scales[b], ref.scales[b]) << "block " << b << on_target();
  // Worked by hand: block 3 holds 127 as its largest, so its scale is 1 and
  // its values the elements rounded, ties to even.
  EXPECT_EQ(scales[3], 1.0F);
  EXPECT_EQ(values[100], 127);
  EXPECT_EQ(values[101], 2);
  EXPECT_EQ(values[102], -4);
  EXPECT_EQ(scales[1], 0.0F);  // the zero block
}

TEST(WeightKernelsInt8, Q8_KRoundingIsLlamaCppsRule) {
  const std::size_t cols = 256 * 3;
  const std::vector<float> x = awkward_vector(cols, 5);
  std::vector<std::int8_t> values(cols);
  std::vector<float> scales(cols / 256);
  std::vector<std::int16_t> sums(cols / 32);
  std::uint8_t usable = 9;
  EXPECT_EQ(round_q8_k(x.data(), cols, cols, 1, values.data(), scales.data(), sums.data(), &usable), 1U);
  EXPECT_EQ(usable, 1);
  const Reference ref = reference_q8_k(x);
  for (std::size_t j = 0; j < cols; ++j) ASSERT_EQ(values[j], ref.values[j]) << "element " << j << on_target();
  for (std::size_t b = 0; b < cols / 256; ++b) ASSERT_EQ(scales[b], ref.scales[b]) << "block " << b << on_target();
  for (std::size_t j = 0; j < cols / 32; ++j) ASSERT_EQ(sums[j], ref.sums[j]) << "sum " << j << on_target();
  // Block 0's largest is 127 (positive): it maps to -127, the scale -1.
  EXPECT_EQ(values[100], -127);
  EXPECT_EQ(scales[0], -1.0F);
  EXPECT_EQ(scales[1], 0.0F);  // the zero block
}

// A vector with a NaN or an infinity anywhere is not rounded (usable 0): its
// products are the exact mode's, alone; nor is one with a Q8_0 block whose
// scale would pass float16's largest (every product infinite): the float
// kernel multiplies it as it is.
TEST(WeightKernelsInt8, VectorsTheRoundingCannotHoldAreRefused) {
  const std::size_t cols = 512;
  std::vector<float> x = random_vectors(4 * cols, 8);
  x[cols + 300] = std::numeric_limits<float>::quiet_NaN();
  x[2 * cols + 7] = -std::numeric_limits<float>::infinity();
  x[3 * cols + 40] = 65504.0F * 128.0F;  // Q8_0 scale past float16; Q8_K's float scale holds it
  std::vector<std::int8_t> values(4 * cols);
  std::vector<float> scales(4 * cols / 32);
  std::vector<std::int16_t> sums(4 * cols / 32);
  std::uint8_t usable[4];
  EXPECT_EQ(round_q8_0(x.data(), cols, cols, 4, values.data(), scales.data(), usable), 1U);
  EXPECT_EQ(std::vector<int>(usable, usable + 4), (std::vector<int>{1, 0, 0, 0}));
  EXPECT_EQ(round_q8_k(x.data(), cols, cols, 4, values.data(), scales.data(), sums.data(), usable), 2U);
  EXPECT_EQ(std::vector<int>(usable, usable + 4), (std::vector<int>{1, 0, 0, 1}));

  // Through matmul: the refused vectors' products are the exact mode's.
  for (const WeightType type : {WeightType::kQ8_0, WeightType::kQ4_K}) {
    const Matrix m = random_matrix(type, 9, cols, 2);
    std::vector<float> int8(4 * m.w.rows);
    std::vector<float> exact(4 * m.w.rows);
    matmul(m.w, x.data(), cols, int8.data(), m.w.rows, 4, 1, MatmulMode::kInt8);
    matmul(m.w, x.data(), cols, exact.data(), m.w.rows, 4, 1, MatmulMode::kExact);
    for (std::size_t v = 1; v < 3; ++v) {
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        const float a = int8[v * m.w.rows + r];
        const float b = exact[v * m.w.rows + r];
        EXPECT_TRUE(std::memcmp(&a, &b, sizeof a) == 0) << weight_type_info(type).name << " vector " << v << " row " << r;
      }
    }
    // Q8_0's vector 3 (a block past float16) is multiplied as it is, by the
    // float kernel: the float64 product of the decoded weights, to float32's
    // accumulation -- not its rounding to 8 bits, which would be far off.
    if (type != WeightType::kQ8_0) continue;
    for (std::uint32_t r = 0; r < m.w.rows; ++r) {
      double dot = 0.0;
      double scale = 0.0;
      for (std::size_t j = 0; j < cols; ++j) {
        const double p = double{m.values[r * cols + j]} * x[3 * cols + j];
        dot += p;
        scale += std::fabs(p);
      }
      EXPECT_NEAR(int8[3 * m.w.rows + r], dot, 4e-7 * scale * std::sqrt(static_cast<double>(cols))) << "row " << r;
    }
  }
}

// The products against float64 sums of the decoded weights times the
// rounded vectors (the values times their scales): only float32's
// accumulation differs.
TEST(WeightKernelsInt8, ProductsMatchAFloat64DotProductOfTheRoundedVectors) {
  for (const WeightType type : {WeightType::kQ8_0, WeightType::kQ4_K}) {
    // Q8_0: an odd number of blocks (the VNNI kernel takes two a step).
    const std::uint32_t cols = type == WeightType::kQ8_0 ? 32 * 33 : 1024;
    const Matrix m = random_matrix(type, 23, cols, 13);
    const std::size_t vectors = 7;  // tiles of 4, 2 and 1
    std::vector<float> x = random_vectors(vectors * cols, 17);
    std::vector<float> y(vectors * m.w.rows);
    matmul(m.w, x.data(), cols, y.data(), m.w.rows, vectors, 1, MatmulMode::kInt8);
    for (std::size_t v = 0; v < vectors; ++v) {
      const std::vector<float> one(x.begin() + static_cast<std::ptrdiff_t>(v * cols),
                                   x.begin() + static_cast<std::ptrdiff_t>((v + 1) * cols));
      const Reference ref = type == WeightType::kQ8_0 ? reference_q8_0(one) : reference_q8_k(one);
      const std::size_t block = type == WeightType::kQ8_0 ? 32 : 256;
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        double exact = 0.0;
        double scale = 0.0;
        for (std::uint32_t j = 0; j < cols; ++j) {
          const double p = double{m.values[std::size_t{r} * cols + j]} * ref.values[j] * ref.scales[j / block];
          exact += p;
          scale += std::fabs(p);
        }
        EXPECT_NEAR(y[v * m.w.rows + r], exact, 2e-6 * scale + 1e-30)
            << weight_type_info(type).name << " row " << r << " vector " << v << on_target();
      }
    }
  }
}

// Where every step is exact -- integer weights at scale 1, a vector whose
// blocks each hold 127 (scale 1, the values the elements) -- the product is
// the integer dot product, to the bit.
TEST(WeightKernelsInt8, Q8_0IntegerCaseIsExact) {
  const std::uint32_t rows = 6;
  const std::uint32_t cols = 32 * 5;
  std::mt19937 rng(4);
  std::uniform_int_distribution<int> weight(-128, 127);  // -128: a file may hold it
  std::uniform_int_distribution<int> element(-126, 126);
  std::vector<std::uint8_t> blocks(weight_bytes(WeightType::kQ8_0, cols) * rows);
  std::vector<int> w(std::size_t{rows} * cols);
  for (std::uint32_t r = 0; r < rows; ++r) {
    for (std::uint32_t b = 0; b < cols / 32; ++b) {
      std::uint8_t* at = blocks.data() + (std::size_t{r} * cols / 32 + b) * 34;
      const std::uint16_t one = 0x3C00;  // 1.0 in float16
      std::memcpy(at, &one, 2);
      for (int e = 0; e < 32; ++e) {
        const int q = weight(rng);
        w[std::size_t{r} * cols + b * 32 + static_cast<std::uint32_t>(e)] = q;
        at[2 + e] = static_cast<std::uint8_t>(static_cast<std::int8_t>(q));
      }
    }
  }
  const std::size_t vectors = 5;
  std::vector<float> x(vectors * cols);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 32 == 5 ? 127 : element(rng));
  std::vector<float> y(vectors * rows);
  const WeightMatrix m{WeightType::kQ8_0, rows, cols, blocks.data()};
  matmul(m, x.data(), cols, y.data(), rows, vectors, 1, MatmulMode::kInt8);
  for (std::size_t v = 0; v < vectors; ++v) {
    for (std::uint32_t r = 0; r < rows; ++r) {
      long long dot = 0;
      for (std::uint32_t j = 0; j < cols; ++j) dot += static_cast<long long>(w[std::size_t{r} * cols + j]) * x[v * cols + j];
      EXPECT_EQ(y[v * rows + r], static_cast<float>(dot)) << "row " << r << " vector " << v << on_target();
    }
  }
}

// Each output's bits are its own: a prompt's chunk, a batch, each vector
// alone, one thread or two -- so a prefill gives token-by-token decoding's
// logits in this mode as in the exact one.
TEST(WeightKernelsInt8, EachOutputIsTheSameWhateverTheVectorsAndThreads) {
  for (const WeightType type : {WeightType::kQ8_0, WeightType::kQ4_K}) {
    const std::uint32_t cols = type == WeightType::kQ8_0 ? 32 * 17 : 512;
    const Matrix m = random_matrix(type, 301, cols, 6);
    const std::size_t vectors = 37;  // shares of 16, 16 and 5; tiles of 4, 2 and 1
    const std::vector<float> x = random_vectors(vectors * cols, 12);
    std::vector<float> together(vectors * m.w.rows);
    matmul(m.w, x.data(), cols, together.data(), m.w.rows, vectors, 1, MatmulMode::kInt8);
    std::vector<float> threaded(vectors * m.w.rows);
    matmul(m.w, x.data(), cols, threaded.data(), m.w.rows, vectors, 2, MatmulMode::kInt8);
    EXPECT_EQ(together, threaded) << weight_type_info(type).name << on_target();
    std::vector<float> alone(m.w.rows);
    for (std::size_t v = 0; v < vectors; ++v) {
      matmul(m.w, x.data() + v * cols, cols, alone.data(), m.w.rows, 1, 2, MatmulMode::kInt8);
      for (std::uint32_t r = 0; r < m.w.rows; ++r) {
        ASSERT_EQ(alone[r], together[v * m.w.rows + r]) << weight_type_info(type).name << " row " << r << " vector " << v;
      }
    }
  }
}

// The types without an 8-bit kernel compute as the exact mode, to the bit.
TEST(WeightKernelsInt8, OtherTypesAreTheExactModes) {
  for (const WeightType type : {WeightType::kF32, WeightType::kF16, WeightType::kBF16, WeightType::kQ4_0,
                                WeightType::kQ6_K}) {
    EXPECT_FALSE(has_int8_kernel(type));
    const Matrix m = random_matrix(type, 17, 512, 1);
    const std::vector<float> x = random_vectors(3 * 512, 2);
    std::vector<float> a(3 * 17);
    std::vector<float> b(3 * 17);
    matmul(m.w, x.data(), 512, a.data(), 17, 3, 1, MatmulMode::kInt8);
    matmul(m.w, x.data(), 512, b.data(), 17, 3, 1, MatmulMode::kExact);
    EXPECT_EQ(a, b) << weight_type_info(type).name;
  }
  EXPECT_TRUE(has_int8_kernel(WeightType::kQ8_0));
  EXPECT_TRUE(has_int8_kernel(WeightType::kQ4_K));
}

TEST(WeightKernelsInt8, ModeNames) {
  EXPECT_EQ(parse_matmul_mode("exact"), MatmulMode::kExact);
  EXPECT_EQ(parse_matmul_mode("int8"), MatmulMode::kInt8);
  EXPECT_STREQ(matmul_mode_name(MatmulMode::kInt8), "int8");
  EXPECT_THROW(parse_matmul_mode("int4"), ParameterError);
}

}  // namespace
}  // namespace kvevict
