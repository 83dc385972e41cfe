#include "kvevict/core/policies/h2o.h"

#include <algorithm>

#include <fmt/format.h>

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/describe.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "H2O";
}

H2O::H2O(const H2OParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  detail::check_recent_window(kTitle, params.recent_window, params.budget, "the scores");
  detail::check_at_least(kTitle, "sinks", params.sinks, 0);
  detail::check_sinks_and_recent(kTitle, params.sinks, params.recent_window, params.budget, "the scores");
  detail::check_flag(kTitle, "normalize", params.normalize);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  scores_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  if (params.normalize != 0) {
    steps_.assign(capacity_, 0);
    ranks_.assign(capacity_, 0.0);
  }
  positions_[0] = 0;
  scores_[0] = 0.0;
  kept_ = 1;
}

void H2O::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  const std::size_t n = detail::readable(attn, kept_);
  detail::check_weights(kTitle, n > 0 ? attn->data() : nullptr, n);
  hint_.valid = false;
  if (n > 0) {
    // Add the weights and, in the same pass, find the lowest score over the
    // range the next eviction will search (after this token is admitted).
    const std::size_t after = kept_ + 1;
    const std::size_t end = after - std::min(static_cast<std::size_t>(params_.recent_window), after);
    const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
    const detail::ScorePass pass = detail::add_weights_min(scores_.data(), attn->data(), n, first, end);
    if (params_.normalize != 0) {
      for (std::size_t i = 0; i < n; ++i) ++steps_[i];
    } else if (first < end && end <= n) {
      hint_.set(pass.min_score, pass.min_block, first, end);
    }
  }
  positions_[kept_] = static_cast<Position>(pos);
  scores_[kept_] = 0.0;
  if (params_.normalize != 0) steps_[kept_] = 0;
  ++kept_;
}

const double* H2O::ranks(std::size_t first, std::size_t end) {
  if (params_.normalize == 0) return scores_.data();
  for (std::size_t i = first; i < end; ++i) ranks_[i] = detail::rate(scores_[i], steps_[i]);
  return ranks_.data();
}

void H2O::compact_marked() {
  detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                  [this](std::size_t to, std::size_t from, std::size_t n) {
                    std::copy_n(scores_.begin() + static_cast<std::ptrdiff_t>(from), n,
                                scores_.begin() + static_cast<std::ptrdiff_t>(to));
                    if (params_.normalize != 0) {
                      std::copy_n(steps_.begin() + static_cast<std::ptrdiff_t>(from), n,
                                  steps_.begin() + static_cast<std::ptrdiff_t>(to));
                    }
                  });
}

std::span<const Position> H2O::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  const std::size_t needed = kept_ - b;
  const std::size_t recent = std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), kept_ - recent);
  if (needed == 1) {
    // The steady state: one victim, found by a vectorised first-minimum, and
    // removed by sliding the tail down once.
    const std::size_t j = detail::single_victim(ranks(first, kept_ - recent), first, kept_ - recent, hint_);
    if (j == kept_ - recent) return {};
    victims_[0] = positions_[j];
    detail::erase_slot(positions_, j, kept_);
    detail::erase_slot(scores_, j, kept_);
    if (params_.normalize != 0) detail::erase_slot(steps_, j, kept_);
    --kept_;
    return {victims_.data(), 1};
  }
  hint_.valid = false;
  detail::mark_argmin_victims(ranks(first, kept_ - recent), marked_.data(), first, kept_ - recent, needed);
  const std::size_t before = kept_;
  compact_marked();
  return {victims_.data(), before - kept_};
}

double H2O::score_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot) return -1.0;
  return params_.normalize != 0 ? detail::rate(scores_[slot], steps_[slot]) : scores_[slot];
}

namespace detail {
const PolicyInfo& h2o_info() {
  static const PolicyInfo info = describe<H2O, H2OParams>(
      "h2o", kTitle,
      "Sums the attention each position received; the lowest cumulative score goes.",
      {{"budget", &H2OParams::budget, "positions held after each eviction"},
       {"recentWindow", &H2OParams::recent_window,
        "newest held positions that are never evicted (< budget)"},
       {"sinks", &H2OParams::sinks, "first positions that are never evicted"},
       {"normalize", &H2OParams::normalize,
        "1: rank by the cumulative score / the steps that scored the position (kvpress ObservedAttention, "
        "OpenVINO NORM_SUM); 0: the sum"}},
      {query1<H2O>("scoreOf", [](const H2O& p, std::int64_t pos) { return p.score_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

// The score interface: the cumulative score; the sinks and the recent window
// are protected (+infinity), exactly the range evict() searches.
std::size_t H2O::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(kTitle, positions.size(), scores.size(), kept_);
  const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    const double score = params_.normalize != 0 ? detail::rate(scores_[i], steps_[i]) : scores_[i];
    scores[i] = i >= first && i < end ? score : detail::kProtectedScore;
  }
  return kept_;
}

void H2O::remove(std::span<const Position> victims) {
  const std::size_t end = kept_ - std::min(static_cast<std::size_t>(params_.recent_window), kept_);
  const std::size_t first = std::min(detail::sink_slots({positions_.data(), kept_}, params_.sinks), end);
  detail::mark_removal(kTitle, {positions_.data(), kept_}, victims, marked_.data(),
                       [&](std::size_t slot) { return slot >= first && slot < end; });
  hint_.valid = false;
  compact_marked();
}

ScoreRules H2O::score_rules() const {
  ScoreRules rules;
  rules.protected_newest = params_.recent_window;
  rules.protected_below = params_.sinks;
  return rules;
}

}  // namespace kvevict
