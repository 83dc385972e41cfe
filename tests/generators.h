// rapidcheck generators shared by the property and differential tests:
// valid random parameters for any registered policy, and weights drawn to
// provoke ties and edge values.
#pragma once

#include <rapidcheck.h>

#include <cstdint>
#include <limits>
#include <string>

#include "kvevict/registry.h"

namespace kvevict {

// A valid parameter set for `policy`, each rule of the spec respected.
inline ParamMap random_params(const PolicyInfo& policy) {
  const auto budget = *rc::gen::inRange<std::int64_t>(1, 48);
  ParamMap p{{"budget", budget}};
  std::int64_t recent = 0;
  for (const ParamInfo& param : policy.params) {
    const std::string& n = param.name;
    if (n == "recentWindow") {
      recent = *rc::gen::inRange<std::int64_t>(0, budget);
      p.emplace_back(n, recent);
    } else if (n == "sinks") {
      // Sinks share the budget with the recent window (declared before it).
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(0, budget - recent));
    } else if (n == "historyWindow") {
      p.emplace_back(n, *rc::gen::element<std::int64_t>(0, 0, 1, 2, 3, 7, 64, 65, 130));
    } else if (n == "dropAmount") {
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(1, budget + 1));
    } else if (n == "obsWindow") {
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(1, 9));
    } else if (n == "poolKernel") {
      p.emplace_back(n, 2 * *rc::gen::inRange<std::int64_t>(0, 5) + 1);
    } else if (n == "numLayers") {
      const auto layers = *rc::gen::inRange<std::int64_t>(1, 7);
      p.emplace_back(n, layers);
      p.emplace_back("layer", *rc::gen::inRange<std::int64_t>(0, layers));
    } else if (n == "pyramidRatio") {
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(1, 7));
    }
  }
  return p;
}

inline std::int64_t param_or(const ParamMap& p, const std::string& key, std::int64_t fallback) {
  for (const auto& [k, v] : p) {
    if (k == key) return v;
  }
  return fallback;
}

// Weights drawn to provoke ties and edge values.
inline float random_weight() {
  switch (*rc::gen::inRange(0, 6)) {
    case 0: return 0.0F;
    case 1: return 1.0F;
    case 2: return std::numeric_limits<float>::denorm_min() * static_cast<float>(*rc::gen::inRange(1, 4));
    case 3: return static_cast<float>(*rc::gen::inRange(0, 17)) / 16.0F;
    default: return static_cast<float>(*rc::gen::inRange(0, 1 << 20)) / static_cast<float>(1 << 20);
  }
}

}  // namespace kvevict
