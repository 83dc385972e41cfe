#include "kvevict/core/policies/streaming_llm.h"

#include <limits>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "StreamingLLM";
}

StreamingLLM::StreamingLLM(const StreamingLLMParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  detail::check_sinks(kTitle, params.sinks, params.budget);
  window_capacity_ = static_cast<std::size_t>(params.budget - params.sinks) + 1;
  window_.resize(window_capacity_);
  victims_.resize(window_capacity_);
  sink_positions_.resize(static_cast<std::size_t>(params.sinks));
  // Position 0 is a held sink when there are sinks, else the first window entry.
  if (params.sinks > 0) {
    sink_positions_[0] = 0;
    sinks_held_ = 1;
  } else {
    push_window(0);
  }
  newest_ = 0;
}

// Ring indices wrap with a compare, not a division (see sliding_window.cpp).
namespace {
inline std::size_t wrap(std::size_t i, std::size_t capacity) noexcept { return i >= capacity ? i - capacity : i; }
}  // namespace

void StreamingLLM::push_window(Position pos) noexcept {
  window_[wrap(head_ + window_size_, window_capacity_)] = pos;
  ++window_size_;
}

void StreamingLLM::on_decode_step(std::int64_t pos, Attention /*never read*/) {
  // The steady state in three compares: a window position, newer than the
  // newest, with room in the window (the slow path below repeats every check
  // and names what is wrong).
  if (pos >= params_.sinks && pos > newest_ && pos <= std::int64_t{std::numeric_limits<Position>::max()} &&
      window_size_ < window_capacity_) [[likely]] {
    push_window(static_cast<Position>(pos));
    newest_ = pos;
    return;
  }
  const bool sink = pos >= 0 && pos < params_.sinks;
  // Only the window is bounded; a sink never counts against its capacity.
  const std::size_t capacity =
      sink ? kept_count() + 1 : sinks_held_ + window_capacity_;
  detail::check_admission(kTitle, pos, newest_, kept_count() + 1, capacity, params_.budget);
  if (sink) {
    sink_positions_[sinks_held_] = static_cast<Position>(pos);
    ++sinks_held_;
  } else {
    push_window(static_cast<Position>(pos));
  }
  newest_ = pos;
}

std::span<const Position> StreamingLLM::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  std::size_t count = 0;
  if (kept_count() == b + 1 && window_size_ > 0) [[likely]] {  // the steady state: one goes
    victims_[0] = window_[head_];
    head_ = wrap(head_ + 1, window_capacity_);
    --window_size_;
    return {victims_.data(), 1};
  }
  // Pop the oldest window entries; the sinks are never victims, so a budget
  // below the sink count empties the window and stops.
  while (kept_count() > b && window_size_ > 0) {
    victims_[count++] = window_[head_];
    head_ = wrap(head_ + 1, window_capacity_);
    --window_size_;
  }
  return {victims_.data(), count};
}

namespace detail {
const PolicyInfo& streaming_llm_info() {
  static const PolicyInfo info = describe<StreamingLLM, StreamingLLMParams>(
      "streaming-llm", kTitle,
      "Keeps the first few positions (attention sinks) and a window of the most recent.",
      {{"budget", &StreamingLLMParams::budget, "positions held after each eviction"},
       {"sinks", &StreamingLLMParams::sinks, "first positions that are never evicted (< budget)"}},
      {query0<StreamingLLM>("sinkCount", [](const StreamingLLM& p) { return p.sink_count(); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

// The score interface: recency (the position itself), the sinks protected.
std::size_t StreamingLLM::scores(std::span<Position> positions, std::span<double> scores) {
  const std::size_t kept = kept_count();
  detail::check_score_spans(kTitle, positions.size(), scores.size(), kept);
  for (std::size_t i = 0; i < sinks_held_; ++i) {
    positions[i] = sink_positions_[i];
    scores[i] = detail::kProtectedScore;
  }
  for (std::size_t i = 0; i < window_size_; ++i) {
    const Position p = window_[wrap(head_ + i, window_capacity_)];
    positions[sinks_held_ + i] = p;
    scores[sinks_held_ + i] = static_cast<double>(p);
  }
  return kept;
}

void StreamingLLM::remove(std::span<const Position> victims) {
  std::size_t at = 0;
  for (std::size_t k = 0; k < victims.size(); ++k) {
    if (k > 0 && victims[k] <= victims[k - 1]) detail::fail_removal(kTitle, victims[k], "is not above the victim before it");
    if (std::int64_t{victims[k]} < params_.sinks) detail::fail_removal(kTitle, victims[k], "is protected (a sink)");
    while (at < window_size_ && window_[wrap(head_ + at, window_capacity_)] < victims[k]) ++at;
    if (at == window_size_ || window_[wrap(head_ + at, window_capacity_)] != victims[k]) {
      detail::fail_removal(kTitle, victims[k], "is not held");
    }
  }
  std::size_t write = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < window_size_; ++i) {
    const Position p = window_[wrap(head_ + i, window_capacity_)];
    if (next < victims.size() && victims[next] == p) {
      ++next;
      continue;
    }
    window_[wrap(head_ + write, window_capacity_)] = p;
    ++write;
  }
  window_size_ = write;
}

ScoreRules StreamingLLM::score_rules() const {
  ScoreRules rules;
  rules.protected_below = params_.sinks;
  return rules;
}

}  // namespace kvevict
