#include "kvevict/core/policies/snapkv.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/kernels.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "SnapKV";
// Rings are allocated up front; refuse configurations that would need more.
// (Found by fuzzing: obsWindow=222222 at the default budget allocated and
// zeroed 456 MB, which took seconds.)
constexpr std::int64_t kMaxRingBytes = std::int64_t{1} << 28;
constexpr std::int64_t kMaxObsWindow = 4096;
}  // namespace

namespace detail {

void validate_snapkv_params(const char* title, const SnapKVParams& p) {
  check_budget(title, p.budget);
  check_recent_window(title, p.recent_window, p.budget, "the pooled scores");
  check_at_least(title, "obsWindow", p.obs_window, 1);
  check_at_most(title, "obsWindow", p.obs_window, kMaxObsWindow);
  const std::int64_t max_obs = kMaxRingBytes / (4 * (p.budget + 1));
  check_at_most(title, "obsWindow", p.obs_window, max_obs,
                fmt::format("at budget {} (the rings would need more than 256 MiB)", p.budget));
  check_at_least(title, "poolKernel", p.pool_kernel, 1);
  if (p.pool_kernel % 2 == 0) {
    fail_param(title, "poolKernel", p.pool_kernel,
               "must be odd: the pooling window is centred on each position");
  }
  check_at_most(title, "poolKernel", p.pool_kernel, 2 * kMaxBudget + 1);
}

SnapKVCore::SnapKVCore(const char* title, const SnapKVParams& params, std::size_t capacity)
    : title_(title),
      recent_window_(static_cast<std::size_t>(params.recent_window)),
      obs_window_(static_cast<std::size_t>(params.obs_window)),
      pool_radius_(static_cast<std::size_t>((params.pool_kernel - 1) / 2)),
      capacity_(capacity),
      budget_(params.budget) {
  positions_.resize(capacity_);
  ring_slot_.resize(capacity_);
  for (std::size_t i = 0; i < capacity_; ++i) ring_slot_[i] = static_cast<std::uint32_t>(i);
  freed_.resize(capacity_);
  history_.assign(capacity_ * obs_window_, 0.0F);
  sums_.resize(capacity_);
  pooled_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // with an all-zero ring
  kept_ = 1;
}

std::size_t SnapKVCore::memory_bytes() const noexcept {
  // position 4 + ring 4*obsWindow + sum 8 + pooled 8 + scratch 1 (the spec's
  // layout), + ring slot 4 + freed-slot scratch 4 (ours: rings never move).
  return capacity_ * (4 + 4 * obs_window_ + 17 + 8);
}

void SnapKVCore::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  check_admission(title_, pos, newest, kept_ + 1, capacity_, budget_);
  check_weights(title_, attn ? attn->data() : nullptr, readable(attn, kept_));
  if (attn) {  // present, even when empty, advances the ring
    const std::size_t n = readable(attn, kept_);
    const float* w = attn->data();
    float* row = history_.data() + cursor_ * capacity_;  // ring cell `cursor_` of every ring
    const std::uint32_t* slot = ring_slot_.data();
    for (std::size_t i = 0; i < n; ++i) row[slot[i]] = w[i];
    cursor_ = cursor_ + 1 == obs_window_ ? 0 : cursor_ + 1;
  }
  // The new position takes the first free ring (they wait past kept_), zeroed.
  positions_[kept_] = static_cast<Position>(pos);
  const std::uint32_t fresh = ring_slot_[kept_];
  for (std::size_t c = 0; c < obs_window_; ++c) history_[c * capacity_ + fresh] = 0.0F;
  ++kept_;
}

double SnapKVCore::window_sum(std::size_t i) const noexcept {
  // Ring-index order 0 ... obsWindow-1, in float64.
  const std::uint32_t slot = ring_slot_[i];
  double sum = 0.0;
  for (std::size_t c = 0; c < obs_window_; ++c) sum += static_cast<double>(history_[c * capacity_ + slot]);
  return sum;
}

std::span<const Position> SnapKVCore::evict_to(std::size_t target) {
  if (kept_ <= target) return {};
  const std::size_t needed = kept_ - target;
  // Scores are computed once per call, before the first victim: every ring
  // summed in ring order (vectorised across rings), put in position order,
  // then pooled over neighbouring held positions.
  ring_sums(history_.data(), obs_window_, capacity_, capacity_, sums_.data());
  for (std::size_t i = 0; i < kept_; ++i) pooled_[i] = sums_[ring_slot_[i]];
  pool_max(pooled_.data(), kept_, pool_radius_, sums_.data());
  const double* score = sums_.data();  // pooled, in position order
  const std::size_t recent = std::min(recent_window_, kept_);
  const std::size_t end = kept_ - recent;
  if (needed == 1) {
    // The steady state: one victim; its ring stays where it is and becomes
    // the next position's (no ring moves, only the two slot arrays shift).
    const std::size_t j = first_min(score, 0, end);
    if (j == end) return {};
    victims_[0] = positions_[j];
    const std::uint32_t freed = ring_slot_[j];
    const std::size_t tail = kept_ - j - 1;
    std::memmove(positions_.data() + j, positions_.data() + j + 1, tail * sizeof(Position));
    std::memmove(ring_slot_.data() + j, ring_slot_.data() + j + 1, tail * sizeof(std::uint32_t));
    --kept_;
    ring_slot_[kept_] = freed;
    return {victims_.data(), 1};
  }
  mark_argmin_victims(score, marked_.data(), 0, end, needed);
  return compact_marked();
}

std::span<const Position> SnapKVCore::compact_marked() {
  std::size_t freed = 0;
  for (std::size_t i = 0; i < kept_; ++i) {
    if (marked_[i] != 0) freed_[freed++] = ring_slot_[i];
  }
  const std::size_t count =
      compact(kept_, marked_.data(), positions_.data(), victims_.data(),
              [this](std::size_t to, std::size_t from, std::size_t n) {
                std::copy_n(ring_slot_.begin() + static_cast<std::ptrdiff_t>(from), n,
                            ring_slot_.begin() + static_cast<std::ptrdiff_t>(to));
              });
  // The victims' rings wait right past the survivors (the rings free before
  // this call still follow them).
  std::copy_n(freed_.begin(), freed, ring_slot_.begin() + static_cast<std::ptrdiff_t>(kept_));
  return {victims_.data(), count};
}

double SnapKVCore::window_score_of(std::int64_t pos) const noexcept {
  const std::size_t slot = find_slot({positions_.data(), kept_}, pos);
  return slot == kNoSlot ? -1.0 : window_sum(slot);
}

}  // namespace detail

SnapKV::SnapKV(const SnapKVParams& params)
    : params_((detail::validate_snapkv_params(kTitle, params), params)),
      core_(kTitle, params, static_cast<std::size_t>(params.budget) + 1) {}

std::span<const Position> SnapKV::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  return core_.evict_to(static_cast<std::size_t>(budget));
}

namespace detail {
const PolicyInfo& snapkv_info() {
  static const PolicyInfo info = describe<SnapKV, SnapKVParams>(
      "snapkv", kTitle,
      "Sums each position's attention over a recent observation window, max-pools "
      "neighbours; lowest goes.",
      {{"budget", &SnapKVParams::budget, "positions held after each eviction"},
       {"recentWindow", &SnapKVParams::recent_window,
        "newest held positions that are never evicted (< budget)"},
       {"obsWindow", &SnapKVParams::obs_window, "steps of attention each position remembers"},
       {"poolKernel", &SnapKVParams::pool_kernel, "odd max-pool width; 1 disables pooling"}},
      {query1<SnapKV>("windowScoreOf",
                      [](const SnapKV& p, std::int64_t pos) { return p.window_score_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

namespace detail {

// The pooled window sum, computed as evict_to() computes it (once, over every
// held position); the recent window is protected.
std::size_t SnapKVCore::scores(std::span<Position> positions, std::span<double> scores) {
  check_score_spans(title_, positions.size(), scores.size(), kept_);
  ring_sums(history_.data(), obs_window_, capacity_, capacity_, sums_.data());
  for (std::size_t i = 0; i < kept_; ++i) pooled_[i] = sums_[ring_slot_[i]];
  pool_max(pooled_.data(), kept_, pool_radius_, scores.data());
  const std::size_t end = kept_ - std::min(recent_window_, kept_);
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    if (i >= end) scores[i] = kProtectedScore;
  }
  return kept_;
}

void SnapKVCore::remove(std::span<const Position> victims) {
  const std::size_t end = kept_ - std::min(recent_window_, kept_);
  mark_removal(title_, {positions_.data(), kept_}, victims, marked_.data(),
               [end](std::size_t slot) { return slot < end; });
  compact_marked();
}

}  // namespace detail

std::size_t SnapKV::scores(std::span<Position> positions, std::span<double> scores) {
  return core_.scores(positions, scores);
}
void SnapKV::remove(std::span<const Position> victims) { core_.remove(victims); }
ScoreRules SnapKV::score_rules() const {
  ScoreRules rules;
  rules.protected_newest = params_.recent_window;
  return rules;
}

}  // namespace kvevict
