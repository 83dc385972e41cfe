#include "kvevict/core/policies/pyramidkv.h"

#include <algorithm>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "PyramidKV";
// Keeps 2*budget*ratio*(layers-1) well inside 64 bits.
constexpr std::int64_t kMaxLayers = 1024;
constexpr std::int64_t kMaxRatio = 1024;

void check_pyramid(std::int64_t budget, std::int64_t layer, std::int64_t num_layers,
                   std::int64_t ratio) {
  detail::check_budget(kTitle, budget);
  detail::check_at_least(kTitle, "numLayers", num_layers, 1);
  detail::check_at_most(kTitle, "numLayers", num_layers, kMaxLayers);
  if (layer < 0 || layer >= num_layers) {
    detail::fail_param(kTitle, "layer", layer,
                       fmt::format("must be in [0, numLayers) = [0, {})", num_layers));
  }
  detail::check_at_least(kTitle, "pyramidRatio", ratio, 1);
  detail::check_at_most(kTitle, "pyramidRatio", ratio, kMaxRatio);
}

SnapKVParams snap_params(const PyramidKVParams& p) {
  return SnapKVParams{p.budget, p.recent_window, p.obs_window, p.pool_kernel};
}
}  // namespace

std::int64_t pyramid_budget(std::int64_t budget, std::int64_t layer, std::int64_t num_layers,
                            std::int64_t ratio) {
  check_pyramid(budget, layer, num_layers, ratio);
  if (num_layers <= 1) return budget;
  const std::int64_t l1 = num_layers - 1;
  // One exact integer division: an arithmetic sequence from 2*budget*r/(r+1)
  // at layer 0 down to 2*budget/(r+1).
  return (2 * budget * (ratio * l1 - layer * (ratio - 1))) / ((ratio + 1) * l1);
}

namespace {
std::int64_t effective_of(const PyramidKVParams& p) {
  check_pyramid(p.budget, p.layer, p.num_layers, p.pyramid_ratio);
  detail::validate_snapkv_params(kTitle, snap_params(p));
  // Keep at least one choosable position beyond the recent window.
  return std::max(pyramid_budget(p.budget, p.layer, p.num_layers, p.pyramid_ratio),
                  p.recent_window + 1);
}
}  // namespace

PyramidKV::PyramidKV(const PyramidKVParams& params)
    : params_(params),
      effective_(effective_of(params)),
      core_(kTitle, snap_params(params),
            static_cast<std::size_t>(std::max(effective_, params.budget)) + 1) {}

std::span<const Position> PyramidKV::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  return core_.evict_to(static_cast<std::size_t>(std::min(budget, effective_)));
}

namespace detail {
const PolicyInfo& pyramidkv_info() {
  static const PolicyInfo info = describe<PyramidKV, PyramidKVParams>(
      "pyramidkv", kTitle,
      "SnapKV with a per-layer share: shallow layers keep more, deep layers less.",
      {{"budget", &PyramidKVParams::budget, "average positions held per layer"},
       {"layer", &PyramidKVParams::layer, "this instance's layer, in [0, numLayers)"},
       {"numLayers", &PyramidKVParams::num_layers, "layers in the stack"},
       {"pyramidRatio", &PyramidKVParams::pyramid_ratio,
        "share of the first layer over the last (1 = uniform)"},
       {"recentWindow", &PyramidKVParams::recent_window,
        "newest held positions that are never evicted (< budget)"},
       {"obsWindow", &PyramidKVParams::obs_window, "steps of attention each position remembers"},
       {"poolKernel", &PyramidKVParams::pool_kernel, "odd max-pool width; 1 disables pooling"}},
      {query0<PyramidKV>("effectiveBudget", [](const PyramidKV& p) { return p.effective_budget(); }),
       query1<PyramidKV>("windowScoreOf",
                         [](const PyramidKV& p, std::int64_t pos) { return p.window_score_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

std::size_t PyramidKV::scores(std::span<Position> positions, std::span<double> scores) {
  return core_.scores(positions, scores);
}
void PyramidKV::remove(std::span<const Position> victims) { core_.remove(victims); }
ScoreRules PyramidKV::score_rules() const {
  ScoreRules rules;
  rules.budget_cap = effective_;
  rules.protected_newest = params_.recent_window;
  return rules;
}

}  // namespace kvevict
