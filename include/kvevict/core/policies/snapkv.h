// SnapKV (Li et al., NeurIPS 2024, arXiv:2404.14469), adapted to decode time:
// score each position by the attention it got over the last `obsWindow` steps,
// max-pool the scores over neighbouring held positions, and evict the lowest
// outside the recent window. See docs/policies/snapkv.md.
//
// PyramidKV (pyramidkv.h) reuses this engine with a per-layer share.
#pragma once

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct SnapKVParams {
  std::int64_t budget = 512;
  std::int64_t recent_window = 32;  // < budget
  std::int64_t obs_window = 16;     // steps of attention each position remembers, >= 1
  std::int64_t pool_kernel = 7;     // odd width of the max-pool; 1 disables pooling
};

namespace detail {

// How often each way of choosing a single victim ran (see snapkv.cpp): from
// the running sums alone, after the exact ring-order sums of a few
// candidates, or by recomputing every sum in ring order.
// `screened` counts the choices whose lowest pooled score came from the
// screen (only the windows below a limit pooled) rather than from pooling
// every position.
struct SnapKVPathCounts {
  std::uint64_t running = 0;
  std::uint64_t candidates = 0;
  std::uint64_t exact = 0;
  std::uint64_t screened = 0;
};

// The SnapKV mechanism with a capacity and name chosen by its owner.
class SnapKVCore {
 public:
  SnapKVCore(const char* title, const SnapKVParams& params, std::size_t capacity);

  void on_decode_step(std::int64_t pos, Attention attn);
  // Evicts down to `target` held positions.
  std::span<const Position> evict_to(std::size_t target);
  std::size_t kept_count() const noexcept { return kept_; }
  std::size_t capacity() const noexcept { return capacity_; }
  std::size_t memory_bytes() const noexcept;
  double window_score_of(std::int64_t pos) const noexcept;
  // The score interface (policy.h): the pooled window sum; the recent window protected.
  std::size_t scores(std::span<Position> positions, std::span<double> scores);
  void remove(std::span<const Position> victims);
  const SnapKVPathCounts& path_counts() const noexcept { return counts_; }

 private:
  // Calls f(first held slot, its ring, length) for each run of held slots
  // [0, n) whose rings are consecutive (the holes split them).
  template <class F>
  void for_each_run(std::size_t n, F&& f) const;
  // The ring of held slot i.
  std::size_t ring_of(std::size_t i) const noexcept;
  // Removes the marked slots; their rings become holes.
  std::span<const Position> compact_marked();
  void add_hole(std::uint32_t ring);
  // Closes the holes once as many wait as there are spare rings.
  void close_holes_when_full();
  // Held slots [lo, hi]: the pooling window of slot i, clipped.
  std::pair<std::size_t, std::size_t> pool_window(std::size_t i) const noexcept;
  // Closes the holes: held slot i's ring becomes ring i.
  void close_holes();
  // Every running sum set to the exact ring-order sum.
  void resync();
  // The one victim of the steady state in [0, end), exactly the spec's.
  std::size_t single_victim(std::size_t end);
  // Held slot i's exact pooled score, from the ring-order sums of the
  // neighbours whose running sums are within 2·bound of its pooled one.
  double exact_pooled(std::size_t i, double pooled, double bound);
  double cached_window_sum(std::size_t i);
  // True when the window of each of the first `count` candidates holds
  // exactly one neighbour whose running sum is within 2·bound of the
  // candidate's pooled score, and it is the same neighbour for all of them.
  bool shared_source(std::size_t count, double bound) const noexcept;
  // |running sum - ring-order sum| is at most this for every held ring.
  double drift_bound() const noexcept;
  double window_sum(std::size_t slot) const noexcept;

  const char* title_;
  std::size_t recent_window_;
  std::size_t obs_window_;
  std::size_t pool_radius_;
  std::size_t capacity_;
  std::size_t ring_capacity_;  // capacity_ + room for the holes between compactions
  std::int64_t budget_;
  std::size_t kept_ = 0;
  std::size_t cursor_ = 0;
  std::vector<Position> positions_;
  // Ring cell c of ring r at [c * ring_capacity_ + r]: one row per ring cell,
  // so sums vectorise across rings. Rings are handed out in position order at
  // ring_end_ and never move between compactions: the i-th held position's
  // ring is the i-th ring below ring_end_ that is not a hole (holes_,
  // ascending: the victims' rings, until close_holes() closes them).
  std::vector<float> history_;
  std::vector<std::uint32_t> holes_;
  std::size_t ring_end_ = 0;
  // Per held slot, the running float64 sum of its ring's cells (updated as
  // each cell is overwritten), within drift_bound() of the ring-order sum.
  std::vector<double> running_;
  float weight_bound_ = 0.0F;  // no held ring's cell exceeds it
  // The smallest nonzero weight ever written (+infinity: none yet).
  float least_weight_ = std::numeric_limits<float>::infinity();
  std::size_t steps_since_sync_ = 0;
  std::vector<double> pooled_;  // held order
  // The screen (single_victim): windows found, then the candidates among
  // them, ascending, with their pooled scores; its bit scratch; its limit
  // (negative: none yet) and margin.
  std::vector<std::uint32_t> candidate_index_;
  std::vector<double> candidate_score_;
  std::vector<std::uint64_t> bits_;
  double screen_limit_ = -1.0;
  double screen_margin_ = 1.0;
  std::vector<std::uint8_t> marked_;
  std::vector<Position> victims_;
  // Exact ring-order sums worked out during one eviction (a few at most).
  static constexpr std::size_t kSumCache = 16;
  std::size_t cached_ = 0;
  std::size_t cache_slot_[kSumCache] = {};
  double cache_sum_[kSumCache] = {};
  SnapKVPathCounts counts_;
};

// Throws ParameterError when a SnapKV-family parameter breaks a rule.
void validate_snapkv_params(const char* title, const SnapKVParams& params);

}  // namespace detail

class SnapKV final : public Policy {
 public:
  explicit SnapKV(const SnapKVParams& params = {});

  std::string_view name() const noexcept override { return "snapkv"; }
  void on_decode_step(std::int64_t pos, Attention attn) override { core_.on_decode_step(pos, attn); }
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return core_.kept_count(); }
  std::size_t memory_bytes() const noexcept override { return core_.memory_bytes(); }

  // Unpooled sum of the position's remembered weights, -1 when not held.
  double window_score_of(std::int64_t pos) const noexcept { return core_.window_score_of(pos); }
  const SnapKVParams& params() const noexcept { return params_; }
  // How the single victims were chosen so far (for tests and benchmarks).
  const detail::SnapKVPathCounts& path_counts() const noexcept { return core_.path_counts(); }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  SnapKVParams params_;
  detail::SnapKVCore core_;
};

}  // namespace kvevict
