#include "kvevict/policies/snapkv.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "policies/common.h"
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
  history_.assign(capacity_ * obs_window_, 0.0F);
  sums_.resize(capacity_);
  pooled_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // with an all-zero ring
  kept_ = 1;
}

std::size_t SnapKVCore::memory_bytes() const noexcept {
  // position 4 + ring 4*obsWindow + sum 8 + pooled 8 + scratch 1
  return capacity_ * (4 + 4 * obs_window_ + 17);
}

void SnapKVCore::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  check_admission(title_, pos, newest, kept_ + 1, capacity_, budget_);
  check_weights(title_, attn ? attn->data() : nullptr, readable(attn, kept_));
  if (attn) {  // present, even when empty, advances the ring
    const std::size_t n = readable(attn, kept_);
    const float* w = attn->data();
    for (std::size_t i = 0; i < n; ++i) history_[i * obs_window_ + cursor_] = w[i];
    cursor_ = (cursor_ + 1) % obs_window_;
  }
  positions_[kept_] = static_cast<Position>(pos);
  std::fill_n(history_.begin() + static_cast<std::ptrdiff_t>(kept_ * obs_window_), obs_window_,
              0.0F);
  ++kept_;
}

double SnapKVCore::window_sum(std::size_t slot) const noexcept {
  // Ring-index order 0 ... obsWindow-1, in float64.
  const float* ring = history_.data() + slot * obs_window_;
  double sum = 0.0;
  for (std::size_t c = 0; c < obs_window_; ++c) sum += static_cast<double>(ring[c]);
  return sum;
}

std::span<const Position> SnapKVCore::evict_to(std::size_t target) {
  if (kept_ <= target) return {};
  const std::size_t needed = kept_ - target;
  // Scores are computed once per call, before the first victim.
  for (std::size_t i = 0; i < kept_; ++i) sums_[i] = window_sum(i);
  for (std::size_t i = 0; i < kept_; ++i) {
    const std::size_t lo = i >= pool_radius_ ? i - pool_radius_ : 0;
    const std::size_t hi = std::min(kept_ - 1, i + pool_radius_);
    double best = sums_[lo];
    for (std::size_t j = lo + 1; j <= hi; ++j) best = std::max(best, sums_[j]);
    pooled_[i] = best;
  }
  const std::size_t recent = std::min(recent_window_, kept_);
  mark_argmin_victims(pooled_.data(), marked_.data(), 0, kept_ - recent, needed);
  const std::size_t count =
      compact(kept_, marked_.data(), positions_.data(), victims_.data(),
              [this](std::size_t to, std::size_t from) {
                std::memcpy(history_.data() + to * obs_window_,
                            history_.data() + from * obs_window_, obs_window_ * sizeof(float));
              });
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
