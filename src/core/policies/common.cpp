#include "policies/common.h"

#include "policies/kernels.h"

#include <cmath>

#include <fmt/format.h>

namespace kvevict::detail {

void fail_param(std::string_view title, std::string_view param, std::int64_t value,
                std::string_view rule) {
  throw ParameterError(fmt::format("{}: {} ({}) {}", title, param, value, rule));
}

void check_budget(std::string_view title, std::int64_t budget) {
  check_at_least(title, "budget", budget, 1);
  check_at_most(title, "budget", budget, kMaxBudget,
                "(storage is sized from it at construction)");
}

void check_at_least(std::string_view title, std::string_view param, std::int64_t value,
                    std::int64_t minimum) {
  if (value < minimum) fail_param(title, param, value, fmt::format("must be at least {}", minimum));
}

void check_flag(std::string_view title, std::string_view param, std::int64_t value) {
  if (value != 0 && value != 1) fail_param(title, param, value, "must be 0 or 1");
}

void check_at_most(std::string_view title, std::string_view param, std::int64_t value,
                   std::int64_t maximum, std::string_view why) {
  if (value > maximum) {
    fail_param(title, param, value,
               why.empty() ? fmt::format("must be at most {}", maximum)
                           : fmt::format("must be at most {} {}", maximum, why));
  }
}

void check_recent_window(std::string_view title, std::int64_t recent_window, std::int64_t budget,
                         std::string_view what_chooses) {
  check_at_least(title, "recentWindow", recent_window, 0);
  if (recent_window >= budget) {
    fail_param(title, "recentWindow", recent_window,
               fmt::format("must be smaller than budget ({}): there would be nothing for {} to "
                           "choose between",
                           budget, what_chooses));
  }
}

void fail_admission(std::string_view title, std::int64_t pos, std::int64_t newest, std::size_t held_after,
                    std::int64_t budget) {
  if (pos < 0) throw ContractError(fmt::format("{}: position {} is negative", title, pos));
  if (pos > std::int64_t{std::numeric_limits<Position>::max()}) {
    throw ContractError(fmt::format("{}: position {} does not fit in 32 bits", title, pos));
  }
  if (pos <= newest) {
    throw ContractError(fmt::format(
        "{}: position {} must be greater than every position held (the newest is {})", title, pos,
        newest));
  }
  throw ContractError(fmt::format(
      "{}: asked to hold {} positions with a budget of {}; the caller's budget must match the "
      "policy's",
      title, held_after, budget));
}

void check_sinks_and_recent(std::string_view title, std::int64_t sinks, std::int64_t recent_window,
                            std::int64_t budget, std::string_view what_chooses) {
  if (sinks + recent_window >= budget) {
    fail_param(title, "sinks", sinks,
               fmt::format("plus recentWindow ({}) must be smaller than budget ({}): there would be nothing for {} "
                           "to choose between",
                           recent_window, budget, what_chooses));
  }
}

void check_sinks(std::string_view title, std::int64_t sinks, std::int64_t budget) {
  check_at_least(title, "sinks", sinks, 0);
  if (sinks >= budget) {
    fail_param(title, "sinks", sinks,
               fmt::format("must be smaller than budget ({}): no room would be left for a recency window", budget));
  }
}

void check_weights(std::string_view title, const float* w, std::size_t n) {
  // One branch-free vectorised pass; the search for the culprit runs only on failure.
  if (weights_valid(w, n)) return;
  for (std::size_t i = 0; i < n; ++i) {
    if (!(w[i] >= 0.0F && w[i] <= std::numeric_limits<float>::max())) {
      throw ContractError(fmt::format(
          "{}: attention weight {} is {}; weights must be finite and at least 0", title, i,
          std::isnan(w[i]) ? std::string("NaN") : fmt::format("{}", w[i])));
    }
  }
}

void fail_evict_budget(std::string_view title, std::int64_t budget) {
  throw ContractError(
      fmt::format("{}: evict was asked for a budget of {}; it must be at least 0", title, budget));
}

}  // namespace kvevict::detail
