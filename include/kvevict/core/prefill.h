// Prefill compression (docs/prefill.md): compress a prompt's KV cache once,
// after the prompt has been processed and before decoding starts. A policy
// scores the prompt's positions from a window of attention rows -- the last
// `rows` query positions' softmax weights -- and keeps `budget` of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "kvevict/core/params.h"
#include "kvevict/core/policy.h"

namespace kvevict {

// The last `rows` rows of a prompt's causal attention, row-major, rows x
// length floats. Row i is the query at position q = length - rows + i; its
// columns 0 ... q are that query's weights over the prompt (its own position
// q included), and its columns after q must be 0 (a causal model attends
// nothing there). Weights must be finite and >= 0; they need not sum to 1.
struct PrefillWindow {
  std::span<const float> weights;
  std::size_t rows = 0;
  std::size_t length = 0;  // the prompt's length n: positions 0 ... n-1
};

// The positions (ascending) that policy `policy` keeps of the prompt, at most
// `budget` of them; every position when budget >= length. `params` are the
// policy's parameters without "budget" (omitted ones take their defaults) and
// are checked by the same rules as the decode-time policy built with this
// budget. What each policy scores and protects is in docs/prefill.md; ties
// evict the lower position, as at decode time.
//
// Throws ParameterError for an unknown policy, a bad parameter, a budget
// below 1 or a "budget" in params, and for SnapKV/PyramidKV when the window is
// larger than the budget (or the layer's share); InputError for a window of
// the wrong shape or with a weight that is NaN, infinite, negative, or not 0
// after the causal diagonal. Every message is one line naming what was wrong.
std::vector<Position> prefill(std::string_view policy, const ParamMap& params, std::int64_t budget,
                              const PrefillWindow& window);

// A prompt as a key-aware policy reads it (docs/signals.md): every
// position's key as stored, value and queries, row-major and ascending, one
// row per position 0 ... length-1. A policy's unread signals may be empty.
struct PrefillSignals {
  std::size_t length = 0;
  std::size_t head_dim = 0;
  std::span<const float> keys;     // length x head_dim
  std::span<const float> values;   // length x head_dim
  std::span<const float> queries;  // length x (groups x head_dim), before RoPE
  std::size_t query_width = 0;     // groups x head_dim
};

// The positions (ascending) a key-aware policy keeps of the prompt: the
// policy, built with room for the whole prompt, is given position 0's
// signals (on_origin) and every later position's (on_step), then evicts once
// down to `budget` -- so it scores the whole prompt at once, as kvpress's
// presses do after a prefill. Every position when budget >= length. The
// parameters are checked with `budget` as prefill() checks them; a policy
// that does not read keys is refused (use prefill() with attention rows).
std::vector<Position> prefill_signals(std::string_view policy, const ParamMap& params, std::int64_t budget,
                                      const PrefillSignals& prompt);

// Checks a prefill request before there is a window to compress: the policy's
// parameters and budget, as prefill() does, and for SnapKV/PyramidKV that a
// window of `rows` rows fits in the budget (or the layer's share), which
// prefill() requires whenever the prompt is longer than the budget. Throws
// the ParameterError prefill() would; lets a caller refuse a request before
// any work starts.
void check_prefill(std::string_view policy, const ParamMap& params, std::int64_t budget, std::size_t rows);

}  // namespace kvevict
