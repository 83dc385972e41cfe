// ggml's weight types: the type table, IEEE half / bfloat16 conversions, the
// block dequantizers (bit-exact with ggml's reference ones, including the
// order in which floats are multiplied) and our own quantizers.
//
// Block layouts (../shared notes, "ggml block formats"; ggml's
// ggml-common.h): every block is a packed little-endian struct, so fields are
// read with memcpy -- blocks inside a file are not aligned for any type.
#include "kvevict/model/kernels/weight_types.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>

#include <fmt/format.h>

#include "kvevict/core/errors.h"

namespace kvevict {

namespace {

constexpr std::array<WeightTypeInfo, 8> kWeightTypes = {{
    {WeightType::kF32, "F32", 1, 4},
    {WeightType::kF16, "F16", 1, 2},
    {WeightType::kQ4_0, "Q4_0", 32, 18},
    {WeightType::kQ5_0, "Q5_0", 32, 22},
    {WeightType::kQ8_0, "Q8_0", 32, 34},
    {WeightType::kQ4_K, "Q4_K", 256, 144},
    {WeightType::kQ6_K, "Q6_K", 256, 210},
    {WeightType::kBF16, "BF16", 1, 2},
}};

// Every type id ggml defines (include/ggml.h), with its block size
// (ggml.c's type traits; gguf-py's GGML_QUANT_SIZES). Ids 4, 5 and 31..33,
// 36..38 were removed from ggml and are absent here on purpose.
struct GgmlTypeRow {
  std::uint32_t id;
  std::string_view name;
  std::uint32_t elements;
  std::uint32_t bytes;
};
constexpr std::array<GgmlTypeRow, 33> kGgmlTypes = {{
    {0, "F32", 1, 4},         {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},     {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},      {7, "Q5_1", 32, 24},       {8, "Q8_0", 32, 34},     {9, "Q8_1", 32, 36},
    {10, "Q2_K", 256, 84},    {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},  {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},   {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66}, {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},    {20, "IQ4_NL", 32, 18},  {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},   {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},        {25, "I16", 1, 2},
    {26, "I32", 1, 4},        {27, "I64", 1, 8},         {28, "F64", 1, 8},       {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},       {34, "TQ1_0", 256, 54},    {35, "TQ2_0", 256, 66},  {39, "MXFP4", 32, 17},
    {40, "NVFP4", 64, 36},
}};

const GgmlTypeRow* ggml_row(std::uint32_t id) noexcept {
  for (const GgmlTypeRow& row : kGgmlTypes) {
    if (row.id == id) return &row;
  }
  return nullptr;
}

std::uint16_t load_u16(const std::uint8_t* p) noexcept {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}
void store_u16(std::uint8_t* p, std::uint16_t v) noexcept {
  p[0] = static_cast<std::uint8_t>(v & 0xFF);
  p[1] = static_cast<std::uint8_t>(v >> 8);
}
float load_half(const std::uint8_t* p) noexcept { return half_to_float(load_u16(p)); }

// The smallest half >= v (v >= 0): a block scale rounded up, so that the
// quantized range still covers every value of the block.
std::uint16_t half_at_least(float v) noexcept {
  std::uint16_t h = float_to_half(v);
  if (half_to_float(h) < v && h < 0x7C00) ++h;
  return h;
}

// A float to an int clamped to [lo, hi]; NaN counts as lo (no UB on a cast).
int clamp_to_int(float v, int lo, int hi) noexcept {
  if (!(v >= static_cast<float>(lo))) return lo;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// ---- dequantizers: one block each ---------------------------------------------

void dequantize_q8_0(const std::uint8_t* b, float* y) noexcept {
  const float d = load_half(b);
  for (int j = 0; j < 32; ++j) y[j] = static_cast<float>(static_cast<std::int8_t>(b[2 + j])) * d;
}

void dequantize_q4_0(const std::uint8_t* b, float* y) noexcept {
  const float d = load_half(b);
  const std::uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0F) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void dequantize_q5_0(const std::uint8_t* b, float* y) noexcept {
  const float d = load_half(b);
  const std::uint32_t qh = static_cast<std::uint32_t>(b[2]) | (static_cast<std::uint32_t>(b[3]) << 8) |
                           (static_cast<std::uint32_t>(b[4]) << 16) | (static_cast<std::uint32_t>(b[5]) << 24);
  const std::uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int high0 = static_cast<int>((qh >> j) & 1U) << 4;
    const int high1 = static_cast<int>((qh >> (j + 16)) & 1U) << 4;
    y[j] = static_cast<float>(((qs[j] & 0x0F) | high0) - 16) * d;
    y[j + 16] = static_cast<float>(((qs[j] >> 4) | high1) - 16) * d;
  }
}

// Sub-block j's 6-bit scale and min from Q4_K's 12 packed bytes.
void q4_k_scale_min(const std::uint8_t* scales, int j, int& sc, int& m) noexcept {
  if (j < 4) {
    sc = scales[j] & 63;
    m = scales[j + 4] & 63;
  } else {
    sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}

void dequantize_q4_k(const std::uint8_t* b, float* y) noexcept {
  const float d = load_half(b);
  const float dmin = load_half(b + 2);
  const std::uint8_t* scales = b + 4;
  const std::uint8_t* qs = b + 16;
  for (int g = 0; g < 4; ++g) {
    int sc = 0;
    int m = 0;
    q4_k_scale_min(scales, 2 * g, sc, m);
    // As ggml: both products first, in float, then one multiply-subtract
    // per element (-ffp-contract=off keeps it two roundings).
    const float d1 = d * static_cast<float>(sc);
    const float m1 = dmin * static_cast<float>(m);
    q4_k_scale_min(scales, 2 * g + 1, sc, m);
    const float d2 = d * static_cast<float>(sc);
    const float m2 = dmin * static_cast<float>(m);
    for (int l = 0; l < 32; ++l) {
      y[64 * g + l] = d1 * static_cast<float>(qs[32 * g + l] & 0x0F) - m1;
      y[64 * g + 32 + l] = d2 * static_cast<float>(qs[32 * g + l] >> 4) - m2;
    }
  }
}

void dequantize_q6_k(const std::uint8_t* b, float* y) noexcept {
  const std::uint8_t* ql_all = b;
  const std::uint8_t* qh_all = b + 128;
  const std::uint8_t* sc_all = b + 192;
  const float d = load_half(b + 208);
  for (int n = 0; n < 2; ++n) {
    const std::uint8_t* ql = ql_all + 64 * n;
    const std::uint8_t* qh = qh_all + 32 * n;
    const std::uint8_t* sc = sc_all + 8 * n;
    float* out = y + 128 * n;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      // (d * scale) * q, left to right as ggml evaluates it.
      out[l] = d * static_cast<float>(static_cast<std::int8_t>(sc[is + 0])) * static_cast<float>(q1);
      out[l + 32] = d * static_cast<float>(static_cast<std::int8_t>(sc[is + 2])) * static_cast<float>(q2);
      out[l + 64] = d * static_cast<float>(static_cast<std::int8_t>(sc[is + 4])) * static_cast<float>(q3);
      out[l + 96] = d * static_cast<float>(static_cast<std::int8_t>(sc[is + 6])) * static_cast<float>(q4);
    }
  }
}

// ---- quantizers: one block each -------------------------------------------------

void quantize_q8_0(const float* x, std::uint8_t* b) noexcept {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, float_to_half(d));
  for (int j = 0; j < 32; ++j) {
    const float v = std::round(x[j] * id);
    b[2 + j] = static_cast<std::uint8_t>(static_cast<std::int8_t>(clamp_to_int(v, -128, 127)));
  }
}

// The value of largest magnitude, with its sign (ggml's Q4_0/Q5_0 map it to
// the most negative level, which has no positive twin).
float signed_max(const float* x, int n) noexcept {
  float amax = 0.0f;
  float max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

void quantize_q4_0(const float* x, std::uint8_t* b) noexcept {
  const float d = signed_max(x, 32) / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, float_to_half(d));
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(15, clamp_to_int(x[j] * id + 8.5f, 0, 127));
    const int q1 = std::min(15, clamp_to_int(x[j + 16] * id + 8.5f, 0, 127));
    b[2 + j] = static_cast<std::uint8_t>(q0 | (q1 << 4));
  }
}

void quantize_q5_0(const float* x, std::uint8_t* b) noexcept {
  const float d = signed_max(x, 32) / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  store_u16(b, float_to_half(d));
  std::uint32_t qh = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(31, clamp_to_int(x[j] * id + 16.5f, 0, 127));
    const int q1 = std::min(31, clamp_to_int(x[j + 16] * id + 16.5f, 0, 127));
    b[6 + j] = static_cast<std::uint8_t>((q0 & 0x0F) | ((q1 & 0x0F) << 4));
    qh |= static_cast<std::uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<std::uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  for (int i = 0; i < 4; ++i) b[2 + i] = static_cast<std::uint8_t>((qh >> (8 * i)) & 0xFF);
}

// Q4_K, simply: each sub-block of 32 gets min m = max(0, -min x) and scale
// (max x + m)/15; the super-block's d and dmin are the largest of those over
// 63, rounded *up* to a half, and each 6-bit code is rounded up too, so the
// stored levels always span the sub-block. Error <= one level / 2.
void quantize_q4_k(const float* x, std::uint8_t* b) noexcept {
  std::array<float, 8> mins{};
  float max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float lo = 0.0f;
    for (int l = 0; l < 32; ++l) lo = std::min(lo, x[32 * j + l]);
    mins[static_cast<std::size_t>(j)] = -lo;
    max_min = std::max(max_min, -lo);
  }
  const std::uint16_t dmin_bits = half_at_least(max_min / 63.0f);
  const float dmin = half_to_float(dmin_bits);
  std::array<int, 8> m_codes{};
  std::array<float, 8> scales{};
  float max_scale = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const auto u = static_cast<std::size_t>(j);
    m_codes[u] = dmin > 0.0f ? clamp_to_int(std::ceil(mins[u] / dmin), 0, 63) : 0;
    const float offset = dmin * static_cast<float>(m_codes[u]);
    float hi = 0.0f;
    for (int l = 0; l < 32; ++l) hi = std::max(hi, x[32 * j + l] + offset);
    scales[u] = hi / 15.0f;
    max_scale = std::max(max_scale, scales[u]);
  }
  const std::uint16_t d_bits = half_at_least(max_scale / 63.0f);
  const float d = half_to_float(d_bits);
  std::array<int, 8> sc_codes{};
  for (std::size_t j = 0; j < 8; ++j) {
    sc_codes[j] = d > 0.0f ? clamp_to_int(std::ceil(scales[j] / d), 0, 63) : 0;
  }
  store_u16(b, d_bits);
  store_u16(b + 2, dmin_bits);
  std::uint8_t* packed = b + 4;
  for (std::size_t j = 0; j < 4; ++j) {
    packed[j] = static_cast<std::uint8_t>(sc_codes[j] | ((sc_codes[j + 4] >> 4) << 6));
    packed[j + 4] = static_cast<std::uint8_t>(m_codes[j] | ((m_codes[j + 4] >> 4) << 6));
    packed[j + 8] = static_cast<std::uint8_t>((sc_codes[j + 4] & 0x0F) | ((m_codes[j + 4] & 0x0F) << 4));
  }
  std::array<int, 256> q{};
  for (int j = 0; j < 8; ++j) {
    const auto u = static_cast<std::size_t>(j);
    const float step = d * static_cast<float>(sc_codes[u]);
    const float offset = dmin * static_cast<float>(m_codes[u]);
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    for (int l = 0; l < 32; ++l) {
      q[static_cast<std::size_t>(32 * j + l)] = clamp_to_int(std::round((x[32 * j + l] + offset) * inv), 0, 15);
    }
  }
  std::uint8_t* qs = b + 16;
  for (std::size_t g = 0; g < 4; ++g) {
    for (std::size_t l = 0; l < 32; ++l) {
      qs[32 * g + l] = static_cast<std::uint8_t>(q[64 * g + l] | (q[64 * g + 32 + l] << 4));
    }
  }
}

// Q6_K, simply: each sub-block of 16 gets scale amax/31 (levels -31..31 of
// the 6-bit range); d is the largest over 127, rounded up to a half, and each
// signed 8-bit code is rounded up in magnitude.
void quantize_q6_k(const float* x, std::uint8_t* b) noexcept {
  std::array<float, 16> scales{};
  float max_scale = 0.0f;
  for (std::size_t j = 0; j < 16; ++j) {
    float amax = 0.0f;
    for (std::size_t l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
    scales[j] = amax / 31.0f;
    max_scale = std::max(max_scale, scales[j]);
  }
  const std::uint16_t d_bits = half_at_least(max_scale / 127.0f);
  const float d = half_to_float(d_bits);
  std::array<int, 256> q{};
  std::uint8_t* sc = b + 192;
  for (std::size_t j = 0; j < 16; ++j) {
    const int code = d > 0.0f ? clamp_to_int(std::ceil(scales[j] / d), 0, 127) : 0;
    sc[j] = static_cast<std::uint8_t>(code);
    const float step = d * static_cast<float>(code);
    const float inv = step > 0.0f ? 1.0f / step : 0.0f;
    for (std::size_t l = 0; l < 16; ++l) {
      q[16 * j + l] = clamp_to_int(std::round(x[16 * j + l] * inv), -32, 31) + 32;
    }
  }
  std::uint8_t* ql_all = b;
  std::uint8_t* qh_all = b + 128;
  for (std::size_t n = 0; n < 2; ++n) {
    std::uint8_t* ql = ql_all + 64 * n;
    std::uint8_t* qh = qh_all + 32 * n;
    const int* h = q.data() + 128 * n;
    for (std::size_t l = 0; l < 32; ++l) {
      ql[l] = static_cast<std::uint8_t>((h[l] & 0x0F) | ((h[l + 64] & 0x0F) << 4));
      ql[l + 32] = static_cast<std::uint8_t>((h[l + 32] & 0x0F) | ((h[l + 96] & 0x0F) << 4));
      qh[l] = static_cast<std::uint8_t>((h[l] >> 4) | ((h[l + 32] >> 4) << 2) | ((h[l + 64] >> 4) << 4) |
                                        ((h[l + 96] >> 4) << 6));
    }
  }
  store_u16(b + 208, d_bits);
}

}  // namespace

std::span<const WeightTypeInfo> weight_types() noexcept { return kWeightTypes; }

const WeightTypeInfo* weight_type_info(std::uint32_t ggml_id) noexcept {
  for (const WeightTypeInfo& info : kWeightTypes) {
    if (static_cast<std::uint32_t>(info.type) == ggml_id) return &info;
  }
  return nullptr;
}

const WeightTypeInfo& weight_type_info(WeightType type) noexcept {
  const WeightTypeInfo* info = weight_type_info(static_cast<std::uint32_t>(type));
  return info != nullptr ? *info : kWeightTypes[0];
}

bool ggml_block_size(std::uint32_t ggml_id, std::uint32_t& elements, std::uint32_t& bytes) noexcept {
  const GgmlTypeRow* row = ggml_row(ggml_id);
  if (row == nullptr) return false;
  elements = row->elements;
  bytes = row->bytes;
  return true;
}

std::string ggml_type_name(std::uint32_t ggml_id) {
  const GgmlTypeRow* row = ggml_row(ggml_id);
  return row != nullptr ? std::string(row->name) : fmt::format("type {}", ggml_id);
}

WeightType parse_weight_type(std::string_view name) {
  for (const WeightTypeInfo& info : kWeightTypes) {
    if (info.name.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) {
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(info.name[i]);
    }
    if (same) return info.type;
  }
  throw ParameterError(fmt::format("unknown weight type '{}' (supported: {})", name, supported_weight_types()));
}

std::string supported_weight_types() { return "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K"; }

std::uint64_t weight_bytes(WeightType type, std::uint64_t n) noexcept {
  const WeightTypeInfo& info = weight_type_info(type);
  return n / info.block_elements * info.block_bytes;
}

void dequantize(WeightType type, const void* blocks, float* out, std::uint64_t n) noexcept {
  const auto* b = static_cast<const std::uint8_t*>(blocks);
  const WeightTypeInfo& info = weight_type_info(type);
  const std::uint64_t count = n / info.block_elements;
  for (std::uint64_t i = 0; i < count; ++i, b += info.block_bytes, out += info.block_elements) {
    switch (type) {
      case WeightType::kF32: std::memcpy(out, b, 4); break;
      case WeightType::kF16: *out = half_to_float(load_u16(b)); break;
      case WeightType::kBF16: *out = bf16_to_float(load_u16(b)); break;
      case WeightType::kQ8_0: dequantize_q8_0(b, out); break;
      case WeightType::kQ4_0: dequantize_q4_0(b, out); break;
      case WeightType::kQ5_0: dequantize_q5_0(b, out); break;
      case WeightType::kQ4_K: dequantize_q4_k(b, out); break;
      case WeightType::kQ6_K: dequantize_q6_k(b, out); break;
    }
  }
}

void quantize(WeightType type, const float* values, void* blocks, std::uint64_t n) noexcept {
  auto* b = static_cast<std::uint8_t*>(blocks);
  const WeightTypeInfo& info = weight_type_info(type);
  const std::uint64_t count = n / info.block_elements;
  for (std::uint64_t i = 0; i < count; ++i, b += info.block_bytes, values += info.block_elements) {
    switch (type) {
      case WeightType::kF32: std::memcpy(b, values, 4); break;
      case WeightType::kF16: store_u16(b, float_to_half(*values)); break;
      case WeightType::kBF16: store_u16(b, float_to_bf16(*values)); break;
      case WeightType::kQ8_0: quantize_q8_0(values, b); break;
      case WeightType::kQ4_0: quantize_q4_0(values, b); break;
      case WeightType::kQ5_0: quantize_q5_0(values, b); break;
      case WeightType::kQ4_K: quantize_q4_k(values, b); break;
      case WeightType::kQ6_K: quantize_q6_k(values, b); break;
    }
  }
}

float half_to_float(std::uint16_t bits) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000U) << 16;
  const std::uint32_t exponent = (bits >> 10) & 0x1FU;
  const std::uint32_t mantissa = bits & 0x3FFU;
  if (exponent == 0) {
    // Zero or subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign != 0 ? -magnitude : magnitude;
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7F800000U | (mantissa << 13));  // inf, NaN (payload kept)
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

std::uint16_t float_to_half(float value) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((bits >> 16) & 0x8000U);
  const std::uint32_t magnitude = bits & 0x7FFFFFFFU;
  if (magnitude > 0x7F800000U) {  // NaN: quiet, top payload bits kept
    return static_cast<std::uint16_t>(sign | 0x7E00U | ((magnitude >> 13) & 0x3FFU));
  }
  // 65520 is halfway between the largest half (65504) and 2^16; ties go to
  // even, which is 2^16: infinity.
  if (magnitude >= 0x477FF000U) return static_cast<std::uint16_t>(sign | 0x7C00U);
  if (magnitude < 0x38800000U) {
    // Below the smallest normal half (2^-14): a subnormal in units of 2^-24.
    const std::uint32_t exponent = magnitude >> 23;
    if (exponent == 0) return sign;  // float subnormals are far below 2^-25
    const std::uint32_t m = (magnitude & 0x7FFFFFU) | 0x800000U;
    const std::uint32_t shift = std::min<std::uint32_t>(126U - exponent, 31U);
    std::uint32_t h = m >> shift;
    const std::uint32_t rest = m & ((1U << shift) - 1U);
    const std::uint32_t half = 1U << (shift - 1U);
    if (rest > half || (rest == half && (h & 1U) != 0)) ++h;  // may carry into the smallest normal: right
    return static_cast<std::uint16_t>(sign | h);
  }
  std::uint32_t h = ((((magnitude >> 23) - 112U) << 10) | ((magnitude >> 13) & 0x3FFU));
  const std::uint32_t rest = magnitude & 0x1FFFU;
  if (rest > 0x1000U || (rest == 0x1000U && (h & 1U) != 0)) ++h;  // a carry moves the exponent up: right
  return static_cast<std::uint16_t>(sign | h);
}

float bf16_to_float(std::uint16_t bits) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t float_to_bf16(float value) noexcept {
  const auto bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7FFFFFFFU) > 0x7F800000U) return static_cast<std::uint16_t>((bits >> 16) | 0x40U);  // NaN stays NaN
  const std::uint32_t rounded = bits + 0x7FFFU + ((bits >> 16) & 1U);
  return static_cast<std::uint16_t>(rounded >> 16);
}

}  // namespace kvevict
