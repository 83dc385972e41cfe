// The weight types a model file may hold, as ggml numbers them, and their
// block layouts (ggml's ggml-common.h; ../shared notes, "ggml block
// formats"): dequantization to float32 per block, and a reference quantizer
// for each (our own writer's, for tiny test models and round trips).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace kvevict {

// ggml's type ids for the types kvevict reads.
enum class WeightType : std::uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ5_0 = 6,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ6_K = 14,
  kBF16 = 30,
};

struct WeightTypeInfo {
  WeightType type;
  std::string_view name;        // "F32", "Q4_K", ... as ggml spells it
  std::uint32_t block_elements;  // 1 for F32/F16/BF16, 32 for Q4_0/Q5_0/Q8_0, 256 for K-quants
  std::uint32_t block_bytes;
};

// The types kvevict reads, in ggml id order.
std::span<const WeightTypeInfo> weight_types() noexcept;
// The entry of a ggml type id, or null when kvevict does not read that type.
const WeightTypeInfo* weight_type_info(std::uint32_t ggml_id) noexcept;
const WeightTypeInfo& weight_type_info(WeightType type) noexcept;
// The size of one block of any ggml type id a file may hold (read or not:
// a reader checks every tensor's extent), false for an id ggml does not
// define (or one it removed).
bool ggml_block_size(std::uint32_t ggml_id, std::uint32_t& elements, std::uint32_t& bytes) noexcept;
// ggml's name for any type id ("Q4_1", "IQ2_XXS", ...), or "type N" for an
// id ggml does not define.
std::string ggml_type_name(std::uint32_t ggml_id);
// "q4_k", "Q4_K", "f16" (any case) -> the type; throws ParameterError naming
// the text and listing the supported names.
WeightType parse_weight_type(std::string_view name);
// "F32, F16, BF16, Q8_0, Q4_0, Q5_0, Q4_K, Q6_K": for error messages.
std::string supported_weight_types();

// Bytes that n elements take (n must be a multiple of the block's elements;
// callers check, this asserts nothing and rounds down).
std::uint64_t weight_bytes(WeightType type, std::uint64_t n) noexcept;

// n elements (a multiple of the block's) from their blocks to float32.
void dequantize(WeightType type, const void* blocks, float* out, std::uint64_t n) noexcept;
// n float32 values into blocks of `type` (ggml's reference rounding where it
// is simple; any valid blocks otherwise -- the dequantizer is the contract).
void quantize(WeightType type, const float* values, void* blocks, std::uint64_t n) noexcept;

// IEEE half and bfloat16 (round to nearest even; NaN stays NaN).
float half_to_float(std::uint16_t bits) noexcept;
std::uint16_t float_to_half(float value) noexcept;
float bf16_to_float(std::uint16_t bits) noexcept;
std::uint16_t float_to_bf16(float value) noexcept;

}  // namespace kvevict
