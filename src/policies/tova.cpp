#include "kvevict/policies/tova.h"

#include <algorithm>

#include "policies/common.h"
#include "policies/kernels.h"
#include "policies/describe.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "TOVA";
constexpr std::uint8_t kObserved = 1;
constexpr std::uint8_t kMarked = 2;
}  // namespace

TOVA::TOVA(const TOVAParams& params) : params_(params) {
  detail::check_budget(kTitle, params.budget);
  capacity_ = static_cast<std::size_t>(params.budget) + 1;
  positions_.resize(capacity_);
  last_.resize(capacity_);
  flags_.resize(capacity_);
  victims_.resize(capacity_);
  positions_[0] = 0;  // held, unobserved
  kept_ = 1;
}

void TOVA::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  detail::check_admission(kTitle, pos, newest, kept_ + 1, capacity_, params_.budget);
  const std::size_t n = detail::readable(attn, kept_);
  detail::check_weights(kTitle, n > 0 ? attn->data() : nullptr, n);
  hint_.valid = false;
  if (n > 0) {
    // Replace, never accumulate: only the latest observation counts. The
    // same pass finds the minimum: when the row covers every held slot, the
    // slots it wrote are all the observed ones (the token admitted below is
    // not), so the next eviction's victim is that minimum's first occurrence.
    const detail::ScorePass pass = detail::store_weights_min(last_.data(), attn->data(), n);
    std::fill_n(flags_.begin(), n, kObserved);
    if (n == kept_) hint_.set(pass.min_score, pass.min_block, 0, n);
  }
  positions_[kept_] = static_cast<Position>(pos);
  last_[kept_] = 0.0;
  flags_[kept_] = 0;
  ++kept_;
}

std::span<const Position> TOVA::evict(std::int64_t budget) {
  detail::check_evict_budget(kTitle, budget);
  const auto b = static_cast<std::size_t>(budget);
  if (kept_ <= b) return {};
  const std::size_t needed = kept_ - b;
  if (needed == 1 && hint_.valid && hint_.end + 1 == kept_) {
    // The steady state: one victim, found in the block the step's pass named.
    const std::size_t j = detail::find_first(last_.data(), hint_.block, hint_.end, hint_.min);
    hint_.valid = false;
    victims_[0] = positions_[j];
    detail::erase_slot(positions_, j, kept_);
    detail::erase_slot(last_, j, kept_);
    detail::erase_slot(flags_, j, kept_);
    --kept_;
    return {victims_.data(), 1};
  }
  hint_.valid = false;
  // No recent window: an unobserved position (the one just admitted) is the
  // only immunity. Stop early when every observed slot is taken.
  for (std::size_t chosen = 0; chosen < needed; ++chosen) {
    std::size_t best = detail::kNoSlot;
    for (std::size_t i = 0; i < kept_; ++i) {
      if (flags_[i] != kObserved) continue;
      if (best == detail::kNoSlot || last_[i] < last_[best]) best = i;
    }
    if (best == detail::kNoSlot) break;
    flags_[best] |= kMarked;
  }
  std::size_t write = 0;
  std::size_t count = 0;
  for (std::size_t i = 0; i < kept_; ++i) {
    if ((flags_[i] & kMarked) != 0) {
      victims_[count++] = positions_[i];
      continue;
    }
    positions_[write] = positions_[i];
    last_[write] = last_[i];
    flags_[write] = flags_[i];
    ++write;
  }
  kept_ = write;
  return {victims_.data(), count};
}

double TOVA::last_attention_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot || (flags_[slot] & kObserved) == 0) return -1.0;
  return last_[slot];
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
