// Attention from queries and keys (docs/signals.md): the softmax weights an
// attention policy reads, computed from what a fused-attention engine always
// has -- the step's queries and the cache's held keys -- so the engine never
// writes the weights. One extra row per step (decode) or `w` rows (a SnapKV
// window at prefill): float32 dot products in index order, the row's maximum
// subtracted, exp in float32, the sum added in order, each weight divided by
// it; with several query heads per cache (grouped-query attention) the mean
// of their rows, as the decoder gives a policy. The same steps as the
// decoder's, not the same bits: its dot products are summed in another order,
// so the weights differ from the ones it writes by less than 1e-5 (on the
// committed model the policies fed from either hold the same positions;
// docs/signals.md, tests/signals_test.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvevict {

// Rotates `x` (head_dim floats, head_dim even) to position `pos` in place:
// RoPE in the GPT-NeoX layout (dimension i pairs with i + head_dim/2), angle
// pos * base^(-2i/head_dim) in float64, cos and sin rounded to float32, as
// the committed model's trainer does.
void rope_neox(std::span<float> x, std::int64_t pos, double base);

// The weights `groups` query heads (queries: groups x head_dim, head-major,
// already rotated to their position; each multiplied by `scale` before the
// dot products, as the model scales q) pay to `n` keys (keys: n x head_dim,
// row-major, as the cache stores them), averaged over the query heads, into
// out[0, n). `scratch` needs n floats. For a decode step the keys are the held
// positions then the new token's own: the policy reads the first n - 1.
// Throws ContractError for spans of the wrong sizes.
void attention_from_keys(std::span<const float> queries, std::size_t groups, std::span<const float> keys,
                         std::size_t n, std::size_t head_dim, float scale, std::span<float> out,
                         std::span<float> scratch);

}  // namespace kvevict
