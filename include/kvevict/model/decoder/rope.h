// Rotary position embeddings (RoPE) as the decoder applies them, and the
// shift an engine applies to keys already stored when eviction moves them
// (llama.cpp's K-shift): rotation is additive, so a key rotated at position
// p and then shifted by delta equals, within float rounding, the same key
// rotated at p + delta directly.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace kvevict {

struct ModelConfig;

// Which pair of dimensions one rotary angle turns: NEOX pairs i with
// i + head_dim/2 (HF's rotate_half, kvevict-tiny, Qwen2), NORMAL pairs 2i
// with 2i+1 (llama.cpp's layout for GGUF llama files, whose Q/K rows the
// converter permuted to match).
enum class RopeMode : std::uint8_t { kNeox, kNormal };

// Where a stored key sits in rotary space (docs/streaming.md):
//  - kOriginal: at its token's position in the sequence, rotated once when it
//    is stored and never moved (the default; what every table before
//    streaming was measured with). Past the trained context the angles are
//    ones the model never saw.
//  - kCache: at its index among the positions its cache holds now, as
//    StreamingLLM does; the query sits at the index after the last. Keys are
//    stored before rotation and rotated at their current index when read, so
//    an eviction that moves them needs no pass over the store, a quantized
//    store quantizes the keys before rotation, and with nothing evicted the
//    indices are the positions and the arithmetic is kOriginal's to the bit.
enum class PositionMode : std::uint8_t { kOriginal, kCache };
std::string_view position_mode_name(PositionMode mode) noexcept;
// "original" or "cache"; InputError naming the text otherwise.
PositionMode parse_position_mode(std::string_view text);

// One model's rotary angles: angle i of position p is p * base^(-2i/d),
// divided by divisors[i] when given (Llama-3 scaling as ggml applies it),
// computed in float64 and rounded to float32 cos/sin, as the trainer makes
// them. Positions below `table` are read from a table built once; others are
// computed when asked, with the same arithmetic.
class Rope {
 public:
  Rope(std::uint32_t head_dim, float base, RopeMode mode, std::span<const float> divisors, std::uint32_t table);
  explicit Rope(const ModelConfig& config, std::uint32_t table);

  std::uint32_t head_dim() const noexcept { return head_dim_; }
  RopeMode mode() const noexcept { return mode_; }

  // Turns v ([head_dim]) to position p and multiplies by `scale`. Allocation
  // free for p below the table; above it uses the scratch row (not thread-safe
  // then: one Rope per decoder).
  void rotate(float* v, std::uint64_t p, float scale = 1.0F);
  // Turns v by `delta` positions (negative: back): the K-shift of a key stored
  // rotated, when eviction moves it. Not exact: each shift rounds once more.
  void shift(float* v, std::int64_t delta) const;

 private:
  void angles(double p, float* cos_out, float* sin_out) const noexcept;
  void turn(float* v, const float* c, const float* s, float scale) const noexcept;

  std::uint32_t head_dim_;
  RopeMode mode_;
  std::vector<double> inverse_;          // [head_dim / 2]: base^(-2i/d) / divisor
  std::uint32_t table_;
  std::vector<float> cos_, sin_;         // [table, head_dim / 2]
  std::vector<float> cos_row_, sin_row_;  // scratch for positions past the table
  std::uint64_t row_position_ = ~std::uint64_t{0};  // the position the scratch row holds
};

}  // namespace kvevict
