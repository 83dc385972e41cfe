#include "kvevict/core/policies/sliding_window.h"

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "SlidingWindow";
}

SlidingWindow::SlidingWindow(const SlidingWindowParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  ring_.resize(capacity_);
  victims_.resize(capacity_);
  ring_[0] = 0;
  size_ = 1;
}

// Ring indices wrap with a compare, not a division: a step is a few
// nanoseconds and an integer division would be most of it.
namespace {
inline std::size_t wrap(std::size_t i, std::size_t capacity) noexcept { return i >= capacity ? i - capacity : i; }
}  // namespace

void SlidingWindow::on_decode_step(std::int64_t pos, Attention /*never read*/) {
  const std::int64_t newest = size_ == 0 ? -1 : newest_;
  detail::check_admission(kTitle, pos, newest, size_ + 1, capacity_, params_.budget);
  ring_[wrap(head_ + size_, capacity_)] = static_cast<Position>(pos);
  newest_ = pos;
  ++size_;
}

std::span<const Position> SlidingWindow::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  std::size_t count = 0;
  if (size_ == b + 1) [[likely]] {  // the steady state: one goes
    victims_[0] = ring_[head_];
    head_ = wrap(head_ + 1, capacity_);
    --size_;
    return {victims_.data(), 1};
  }
  // Oldest first: arrival order is ascending position order.
  while (size_ > b) {
    victims_[count++] = ring_[head_];
    head_ = wrap(head_ + 1, capacity_);
    --size_;
  }
  return {victims_.data(), count};
}

namespace detail {
const PolicyInfo& sliding_window_info() {
  static const PolicyInfo info = describe<SlidingWindow, SlidingWindowParams>(
      "sliding-window", kTitle, "Keeps the most recent positions; the baseline, sinks go first.",
      {{"budget", &SlidingWindowParams::budget, "positions held after each eviction"}}, {});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

// The score interface: recency -- the position itself, so the oldest goes
// first, as evict() does. Nothing is protected.
std::size_t SlidingWindow::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(kTitle, positions.size(), scores.size(), size_);
  for (std::size_t i = 0; i < size_; ++i) {
    positions[i] = ring_[wrap(head_ + i, capacity_)];
    scores[i] = static_cast<double>(positions[i]);
  }
  return size_;
}

void SlidingWindow::remove(std::span<const Position> victims) {
  // Check every victim first (held, ascending), then close the gaps in place:
  // survivors slide toward the head, keeping their order.
  std::size_t at = 0;
  for (std::size_t k = 0; k < victims.size(); ++k) {
    if (k > 0 && victims[k] <= victims[k - 1]) detail::fail_removal(kTitle, victims[k], "is not above the victim before it");
    while (at < size_ && ring_[wrap(head_ + at, capacity_)] < victims[k]) ++at;
    if (at == size_ || ring_[wrap(head_ + at, capacity_)] != victims[k]) detail::fail_removal(kTitle, victims[k], "is not held");
  }
  std::size_t write = 0;
  std::size_t next = 0;
  for (std::size_t i = 0; i < size_; ++i) {
    const Position p = ring_[wrap(head_ + i, capacity_)];
    if (next < victims.size() && victims[next] == p) {
      ++next;
      continue;
    }
    ring_[wrap(head_ + write, capacity_)] = p;
    ++write;
  }
  size_ = write;
  if (size_ > 0) newest_ = ring_[wrap(head_ + size_ - 1, capacity_)];
}

ScoreRules SlidingWindow::score_rules() const { return {}; }

}  // namespace kvevict
