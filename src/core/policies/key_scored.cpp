#include "kvevict/core/policies/key_scored.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/key_signals.h"
#include "policies/removal.h"

namespace kvevict {

KeyScoredPolicy::KeyScoredPolicy(std::string_view title, const KeyScoredParams& params, bool keeps_keys,
                                 bool keeps_units)
    : title_(title), params_(params) {
  detail::check_budget(title, params.budget);
  detail::check_at_least(title, "headDim", params.head_dim, 1);
  detail::check_at_most(title, "headDim", params.head_dim, 4096);
  detail::check_at_least(title, "sinks", params.sinks, 0);
  detail::check_at_least(title, "recentWindow", params.recent_window, 0);
  detail::check_sinks_and_recent(title, params.sinks, params.recent_window, params.budget, "the scores");
  dim_ = static_cast<std::size_t>(params.head_dim);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  squared_norms_.resize(capacity_);
  observed_.resize(capacity_);
  if (keeps_keys) keys_.resize(capacity_ * dim_);
  if (keeps_units) units_.resize(capacity_ * dim_);
  score_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // spec/domain.md 1.2: position 0 is held, unobserved until on_origin
  kept_ = 1;
}

void KeyScoredPolicy::on_decode_step(std::int64_t /*pos*/, Attention /*attn*/) {
  detail::fail_attention_only(title_, kSignals);
}

double KeyScoredPolicy::checked_squared_norm(const StepInputs& in) const {
  if (in.key.size() != dim_) detail::check_step_signals(title_, kSignals, in, {dim_, 1});  // throws
  const double squared = detail::squared_norm(in.key.data(), dim_);
  // Every component is finite exactly when this sum is: a square is >= 0 and
  // below 2^256, so 4096 of them stay far below float64's largest, while an
  // infinite component keeps the sum infinite and a NaN keeps it NaN. Only a
  // refused key is scanned again, for the error naming its component.
  if (!std::isfinite(squared)) detail::check_step_signals(title_, kSignals, in, {dim_, 1});  // throws
  return squared;
}

void KeyScoredPolicy::admit(std::size_t slot, std::span<const float> key, double squared) noexcept {
  squared_norms_[slot] = squared;
  observed_[slot] = 1;
  if (!keys_.empty()) std::copy_n(key.data(), dim_, keys_.data() + slot * dim_);
  if (!units_.empty()) {
    // Each component's one correctly rounded division, as KeyDiff's anchor
    // defines it; a zero key has no direction and stays zeros.
    const double norm = squared_norms_[slot] == 0.0 ? 0.0 : std::sqrt(squared_norms_[slot]);
    double* unit = units_.data() + slot * dim_;
    for (std::size_t c = 0; c < dim_; ++c) unit[c] = norm == 0.0 ? 0.0 : static_cast<double>(key[c]) / norm;
  }
}

void KeyScoredPolicy::on_origin(const StepInputs& in) {
  if (stepped_ || observed_[0] != 0 || kept_ == 0 || positions_[0] != 0) detail::fail_origin(title_, !stepped_);
  admit(0, in.key, checked_squared_norm(in));
}

void KeyScoredPolicy::on_step(std::int64_t pos, const StepInputs& in) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(title_, pos, newest, kept_ + 1, capacity_, params_.budget);
  const double squared = checked_squared_norm(in);
  positions_[kept_] = static_cast<Position>(pos);
  admit(kept_, in.key, squared);
  ++kept_;
  stepped_ = true;
}

bool KeyScoredPolicy::is_protected(std::size_t slot) const noexcept {
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  return observed_[slot] == 0 || slot >= kept_ - recent ||
         std::int64_t{positions_[slot]} < params_.sinks;
}

std::size_t KeyScoredPolicy::compact_marked() noexcept {
  return detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(), [this](std::size_t to, std::size_t from, std::size_t n) {
    std::copy_n(squared_norms_.data() + from, n, squared_norms_.data() + to);
    std::copy_n(observed_.data() + from, n, observed_.data() + to);
    if (!keys_.empty()) std::copy_n(keys_.data() + from * dim_, n * dim_, keys_.data() + to * dim_);
    if (!units_.empty()) std::copy_n(units_.data() + from * dim_, n * dim_, units_.data() + to * dim_);
  });
}

KeyScoredPolicy::SlotRange KeyScoredPolicy::evictable() const noexcept {
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t end = kept_ - recent;
  std::size_t first = 0;
  while (first < end && (observed_[first] == 0 || std::int64_t{positions_[first]} < params_.sinks)) ++first;
  return {first, end};
}

void KeyScoredPolicy::mark_victims(std::size_t needed) noexcept {
  fill_scores();  // once per call, before the first victim
  for (std::size_t chosen = 0; chosen < needed; ++chosen) {
    std::size_t best = detail::kNoSlot;
    for (std::size_t i = 0; i < kept_; ++i) {
      if (marked_[i] != 0 || is_protected(i)) continue;
      if (best == detail::kNoSlot || score_[i] < score_[best]) best = i;
    }
    if (best == detail::kNoSlot) break;  // only protected slots are left
    marked_[best] = 1;
  }
}

std::span<const Position> KeyScoredPolicy::evict(std::int64_t budget) {
  detail::check_evict_budget(title_, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  mark_victims(kept_ - b);
  return {victims_.data(), compact_marked()};
}

double KeyScoredPolicy::key_norm_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  return slot == detail::kNoSlot || observed_[slot] == 0 ? -1.0 : std::sqrt(squared_norms_[slot]);
}

std::size_t KeyScoredPolicy::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(title_, positions.size(), scores.size(), kept_);
  fill_scores();
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    scores[i] = is_protected(i) ? detail::kProtectedScore : score_[i];
  }
  return kept_;
}

void KeyScoredPolicy::remove(std::span<const Position> victims) {
  detail::mark_removal(title_, {positions_.data(), kept_}, victims, marked_.data(),
                       [&](std::size_t slot) { return !is_protected(slot); });
  compact_marked();
}

ScoreRules KeyScoredPolicy::score_rules() const {
  ScoreRules rules;
  // The unobserved position 0 is protected too: one more at the start.
  rules.protected_newest = params_.recent_window;
  rules.protected_below = std::max<std::int64_t>(params_.sinks, 1);
  return rules;
}

}  // namespace kvevict
