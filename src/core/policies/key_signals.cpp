#include "policies/key_signals.h"

#include <cmath>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"

namespace kvevict::detail {

namespace {
// The rule text is formatted only on a refusal: a step that passes allocates
// nothing (a long rule would outgrow the string's small buffer).
[[noreturn]] void fail_length(std::string_view title, std::string_view signal, std::size_t got,
                              const std::string& rule) {
  if (got == 0) {
    throw ContractError(fmt::format("{}: the step gives no {} ({} reads the new token's {}: {} floats)", title,
                                    signal, title, signal, rule));
  }
  throw ContractError(fmt::format("{}: the step's {} has {} floats; {}", title, signal, got, rule));
}
std::string head_dim_rule(const SignalShape& shape) { return fmt::format("headDim = {}", shape.head_dim); }
}  // namespace

void check_finite(std::string_view title, std::string_view signal, std::span<const float> values) {
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      throw ContractError(fmt::format("{}: {} component {} is {}; it must be finite", title, signal, i,
                                      std::isnan(values[i]) ? std::string("NaN") : fmt::format("{}", values[i])));
    }
  }
}

void check_step_signals(std::string_view title, Signals needs, const StepInputs& in, const SignalShape& shape) {
  if ((needs & kSignalKey) != 0) {
    if (in.key.size() != shape.head_dim) fail_length(title, "key", in.key.size(), head_dim_rule(shape));
    check_finite(title, "key", in.key);
  }
  if ((needs & kSignalValue) != 0) {
    if (in.value.size() != shape.head_dim) fail_length(title, "value", in.value.size(), head_dim_rule(shape));
    check_finite(title, "value", in.value);
  }
  if ((needs & kSignalQueries) != 0) {
    if (in.queries.size() != shape.groups * shape.head_dim) {
      fail_length(title, "queries", in.queries.size(),
                  fmt::format("groups x headDim = {} x {}", shape.groups, shape.head_dim));
    }
    check_finite(title, "queries", in.queries);
  }
}

void fail_attention_only(std::string_view title, Signals needs) {
  throw ContractError(fmt::format("{}: reads the new token's {}, not attention weights: give each step with "
                                  "on_step (the key as the cache stores it)",
                                  title, signal_names(needs)));
}

void fail_origin(std::string_view title, bool again) {
  throw ContractError(fmt::format("{}: on_origin gives position 0's signals once, before the first step; {}", title,
                                  again ? "it was given already" : "a step has already run"));
}

double squared_norm(const float* x, std::size_t n) noexcept {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  return sum;
}

double dot64(const float* x, const double* y, std::size_t n) noexcept {
  double sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]) * y[i];
  return sum;
}

}  // namespace kvevict::detail
