// What every key-aware policy (knorm, keydiff, expected-attention) shares:
// the checks a step's signals pass before anything changes, with one error
// naming the policy and the signal, and the float64 arithmetic their scores
// are defined in (docs/signals.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "kvevict/core/policy.h"

namespace kvevict::detail {

// The sizes a key-aware policy was built for.
struct SignalShape {
  std::size_t head_dim = 0;  // floats in a key and in a value
  std::size_t groups = 1;    // query heads per KV head (queries hold groups x head_dim floats)
};

// Refuses, naming `title` and the signal, a step that lacks a signal in
// `needs` or gives one of the wrong length:
//   "KNorm: the step gives no key (KNorm reads the new token's key: headDim = 32 floats)"
//   "KNorm: the step's key has 16 floats; headDim is 32"
// A signal the policy does not read is not looked at.
void check_step_signals(std::string_view title, Signals needs, const StepInputs& in, const SignalShape& shape);

// on_decode_step on a key-aware policy: it has only the weights.
[[noreturn]] void fail_attention_only(std::string_view title, Signals needs);

// on_origin given twice, or after the first step.
[[noreturn]] void fail_origin(std::string_view title, bool again);

// Refuses a non-finite component, naming the signal and its index (a NaN key
// would make every comparison, and so the victim, depend on scan order).
void check_finite(std::string_view title, std::string_view signal, std::span<const float> values);

// Sum of x[i]^2, each component widened to float64, added in index order.
double squared_norm(const float* x, std::size_t n) noexcept;
// Sum of x[i] * y[i] in float64, in index order.
double dot64(const float* x, const double* y, std::size_t n) noexcept;

}  // namespace kvevict::detail
