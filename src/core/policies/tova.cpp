#include "kvevict/core/policies/tova.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "policies/common.h"
#include "policies/removal.h"
#include "policies/describe.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "TOVA";
// A record no attention has covered yet. Weights are finite, so NaN is free
// to mean "unobserved", and a NaN never wins a strict comparison.
constexpr float kUnobserved = std::numeric_limits<float>::quiet_NaN();
}  // namespace

// Why two record buffers: a step must refuse a bad row before anything
// changes, and the spec's weights replace the records. Writing the row into
// the spare buffer while checking it, and switching buffers only when it was
// valid, reads the row once -- from memory, as a decode step must -- instead
// of once to check and once to copy. The switch also drops the slot the last
// eviction left in the records for free: the spare buffer is written from
// scratch, so only the positions are shifted at eviction time.
TOVA::TOVA(const TOVAParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  for (auto& buffer : last_) buffer.assign(capacity_, kUnobserved);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // held, unobserved
  kept_ = 1;
}

std::size_t TOVA::storage(std::size_t slot) const noexcept { return slot < hole_ ? slot : slot + 1; }

void TOVA::close_hole() noexcept {
  if (hole_ == detail::kNoSlot) return;
  float* last = last_[current_].data();
  std::memmove(last + hole_, last + hole_ + 1, (kept_ - hole_) * sizeof(float));
  hole_ = detail::kNoSlot;
}

void TOVA::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  const std::size_t n = detail::readable(attn, kept_);
  hint_.valid = false;
  if (n > 0) {
    // Replace, never accumulate: only the latest observation counts. When
    // the row covers every held slot, it wrote all the observed records (the
    // token admitted below is not one), so the next victim is the first
    // occurrence of the minimum the pass found.
    const std::size_t spare = 1 - current_;
    const detail::ObserveResult pass =
        detail::tova_observe(last_[spare].data(), last_[current_].data(), attn->data(), n, kept_,
                             hole_ == detail::kNoSlot ? kept_ : hole_);
    if (!pass.valid) detail::check_weights(kTitle, attn->data(), n);  // throws, naming the weight
    current_ = spare;
    hole_ = detail::kNoSlot;
    if (n == kept_) hint_.set(static_cast<double>(pass.min_weight), pass.min_block, 0, n);
  } else {
    close_hole();
  }
  positions_[kept_] = static_cast<Position>(pos);
  last_[current_][kept_] = kUnobserved;
  ++kept_;
}

std::span<const Position> TOVA::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  const std::size_t needed = kept_ - b;
  float* last = last_[current_].data();
  if (needed == 1 && hint_.valid && hint_.end + 1 == kept_ && hole_ == detail::kNoSlot) {
    // The steady state: one victim, found in the block the step's pass named;
    // its record stays behind as a hole the next step's pass skips.
    const std::size_t j = detail::find_first(last, hint_.block, hint_.end, static_cast<float>(hint_.min));
    hint_.valid = false;
    victims_[0] = positions_[j];
    std::memmove(positions_.data() + j, positions_.data() + j + 1, (kept_ - j - 1) * sizeof(Position));
    --kept_;
    hole_ = j;
    return {victims_.data(), 1};
  }
  hint_.valid = false;
  close_hole();
  // No recent window: an unobserved position (the one just admitted) is the
  // only immunity. Stop early when every observed slot is taken.
  for (std::size_t chosen = 0; chosen < needed; ++chosen) {
    std::size_t best = detail::kNoSlot;
    for (std::size_t i = 0; i < kept_; ++i) {
      if (marked_[i] != 0 || std::isnan(last[i])) continue;
      if (best == detail::kNoSlot || last[i] < last[best]) best = i;
    }
    if (best == detail::kNoSlot) break;
    marked_[best] = 1;
  }
  const std::size_t count = detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                                            [last](std::size_t to, std::size_t from, std::size_t n) { std::copy_n(last + from, n, last + to); });
  return {victims_.data(), count};
}

double TOVA::last_attention_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot) return -1.0;
  const float last = last_[current_][storage(slot)];
  return std::isnan(last) ? -1.0 : static_cast<double>(last);
}

namespace detail {
const PolicyInfo& tova_info() {
  static const PolicyInfo info = describe<TOVA, TOVAParams>(
      "tova", kTitle,
      "Evicts the position with the lowest weight on the latest step that observed it.",
      {{"budget", &TOVAParams::budget, "positions held after each eviction"}},
      {query1<TOVA>("lastAttentionOf",
                    [](const TOVA& p, std::int64_t pos) { return p.last_attention_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict

namespace kvevict {

// The score interface: the last observed weight; an unobserved position is
// protected (evict() skips it).
std::size_t TOVA::scores(std::span<Position> positions, std::span<double> scores) {
  detail::check_score_spans(kTitle, positions.size(), scores.size(), kept_);
  const float* last = last_[current_].data();
  for (std::size_t i = 0; i < kept_; ++i) {
    positions[i] = positions_[i];
    const float w = last[storage(i)];
    scores[i] = std::isnan(w) ? detail::kProtectedScore : static_cast<double>(w);
  }
  return kept_;
}

void TOVA::remove(std::span<const Position> victims) {
  const float* records = last_[current_].data();
  detail::mark_removal(kTitle, {positions_.data(), kept_}, victims, marked_.data(),
                       [&](std::size_t slot) { return !std::isnan(records[storage(slot)]); });
  hint_.valid = false;
  close_hole();
  float* last = last_[current_].data();
  detail::compact(kept_, marked_.data(), positions_.data(), victims_.data(),
                  [last](std::size_t to, std::size_t from, std::size_t n) { std::copy_n(last + from, n, last + to); });
}

ScoreRules TOVA::score_rules() const {
  ScoreRules rules;
  rules.protected_newest = 1;  // the token just admitted, until a step observes it
  return rules;
}

}  // namespace kvevict
