// Sliding Window: keep the most recent `budget` positions. The folklore
// baseline; drops the attention sinks first. See docs/policies/sliding-window.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct SlidingWindowParams {
  std::int64_t budget = 512;
};

class SlidingWindow final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 4;  // position

  explicit SlidingWindow(const SlidingWindowParams& params = {});

  // Reads no signal: positions alone decide.
  static constexpr Signals kSignals = 0;
  Signals signals() const noexcept override { return kSignals; }
  std::string_view name() const noexcept override { return "sliding-window"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return size_; }
  std::size_t memory_bytes() const noexcept override { return capacity_ * kBytesPerSlot; }
  const SlidingWindowParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  SlidingWindowParams params_;
  std::size_t capacity_;
  std::vector<Position> ring_;  // oldest at head_
  std::size_t head_ = 0;
  std::size_t size_ = 0;
  std::int64_t newest_ = 0;  // the newest held position, while size_ > 0
  std::vector<Position> victims_;
};

}  // namespace kvevict
