// StreamingLLM (Xiao et al., ICLR 2024, arXiv:2309.17453): keep the first
// `sinks` positions forever and a sliding window of the most recent ones.
// Never reads attention. See docs/policies/streaming-llm.md.
#pragma once

#include <cstdint>
#include <vector>

#include "kvevict/core/policy.h"

namespace kvevict {

struct StreamingLLMParams {
  std::int64_t budget = 512;
  std::int64_t sinks = 4;  // positions < sinks are never evicted; < budget
};

class StreamingLLM final : public Policy {
 public:
  static constexpr std::size_t kBytesPerSlot = 4;  // per window slot; sinks need none

  explicit StreamingLLM(const StreamingLLMParams& params = {});

  // Reads no signal: positions alone decide.
  static constexpr Signals kSignals = 0;
  Signals signals() const noexcept override { return kSignals; }
  std::string_view name() const noexcept override { return "streaming-llm"; }
  void on_decode_step(std::int64_t pos, Attention attn) override;
  std::span<const Position> evict(std::int64_t budget) override;
  std::size_t kept_count() const noexcept override { return sinks_held_ + window_size_; }
  std::size_t memory_bytes() const noexcept override { return window_capacity_ * kBytesPerSlot; }

  // Number of sink positions held.
  std::int64_t sink_count() const noexcept { return static_cast<std::int64_t>(sinks_held_); }
  const StreamingLLMParams& params() const noexcept { return params_; }

  // The score interface (policy.h, docs/paged.md).
  std::size_t scores(std::span<Position> positions, std::span<double> scores) override;
  void remove(std::span<const Position> victims) override;
  ScoreRules score_rules() const override;

 private:
  void push_window(Position pos) noexcept;

  StreamingLLMParams params_;
  std::size_t window_capacity_;
  std::size_t sinks_held_ = 0;
  std::int64_t newest_ = -1;
  // Ring buffer of window positions, oldest at head_.
  std::vector<Position> window_;
  std::size_t head_ = 0;
  std::size_t window_size_ = 0;
  std::vector<Position> victims_;
  std::vector<Position> sink_positions_;  // the held sinks (for scores(); `sinks` entries, not per slot)
};

}  // namespace kvevict
