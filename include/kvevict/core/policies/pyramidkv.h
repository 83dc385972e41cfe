// PyramidKV (Cai et al., arXiv:2406.02069): shallow layers keep more, deep
// layers less -- an arithmetic share per layer -- and SnapKV's rule picks the
// victims within each layer's share. See docs/policies/pyramidkv.md.
#pragma once

#include <cstdint>

#include "kvevict/core/policies/snapkv.h"

namespace kvevict {

struct PyramidKVParams {
  std::int64_t budget = 512;  // the average share per layer
  std::int64_t layer = 0;     // in [0, num_layers)
  std::int64_t num_layers = 1;
  std::int64_t pyramid_ratio = 4;  // share of layer 0 over the last layer, >= 1
  std::int64_t recent_window = 32;
  std::int64_t obs_window = 16;
  std::int64_t pool_kernel = 7;
};

// The share of `layer` in a stack of `num_layers` with average `budget`:
// floor(2*budget*(r*(L-1) - layer*(r-1)) / ((r+1)*(L-1))), or `budget` when L <= 1.
// Throws ParameterError for arguments outside their ranges.
std::int64_t pyramid_budget(std::int64_t budget, std::int64_t layer, std::int64_t num_layers,
                            std::int64_t ratio);

class PyramidKV final : public Policy {
 public:
  explicit PyramidKV(const PyramidKVParams& params = {});

  std::string_view name() const noexcept override { return "pyramidkv"; }
  void on_decode_step(std::int64_t pos, Attention attn) override { core_.on_decode_step(pos, attn); }
  // Evicts down to min(budget, effective_budget()), even when kept <= budget.
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return core_.kept_count(); }
  std::size_t memory_bytes() const noexcept override { return core_.memory_bytes(); }

  // max(pyramid_budget(...), recentWindow + 1).
  std::int64_t effective_budget() const noexcept { return effective_; }
  double window_score_of(std::int64_t pos) const noexcept { return core_.window_score_of(pos); }
  const PyramidKVParams& params() const noexcept { return params_; }
  // How the single victims were chosen so far (for tests and benchmarks).
  const detail::SnapKVPathCounts& path_counts() const noexcept { return core_.path_counts(); }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  PyramidKVParams params_;
  std::int64_t effective_;
  detail::SnapKVCore core_;
};

}  // namespace kvevict
