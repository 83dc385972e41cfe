#include "kvevict/core/policies/keydiff.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "policies/common.h"
#include "policies/describe.h"
#include "policies/kernels.h"
#include "policies/key_signals.h"
#include "policies/key_signals_kernels.h"

namespace kvevict {

KeyDiff::KeyDiff(const KeyScoredParams& params)
    : KeyScoredPolicy("KeyDiff", params, /*keeps_keys=*/false, /*keeps_units=*/false) {
  // The keys and their quotients are kept here, in rows that stay put (the
  // base class's arrays, which an eviction slides down, stay empty).
  anchor_.resize(dim_);
  rows_ = (capacity_ + detail::kKeyTile - 1) / detail::kKeyTile * detail::kKeyTile;
  keys_t_.resize(rows_ * dim_);
  units_r_.resize(rows_ * dim_);
  row_of_.resize(capacity_);
  row_pos_.resize(rows_);
  dots_.resize(rows_);
  free_.resize(capacity_);
  // Slot 0 (position 0) holds row 0; the free rows pop 1, 2, ... first.
  row_of_[0] = 0;
  row_pos_[0] = 0;
  for (std::size_t r = 1; r < capacity_; ++r) free_[capacity_ - 1 - r] = static_cast<std::uint32_t>(r);
  free_count_ = capacity_ - 1;
}

void KeyDiff::store_newest(std::span<const float> key) noexcept {
  const std::size_t slot = kept_ - 1;
  const std::size_t row = slot < slots_ ? row_of_[slot] : free_[--free_count_];
  row_of_[slot] = static_cast<std::uint32_t>(row);
  row_pos_[row] = positions_[slot];
  slots_ = kept_;
  float* tile = keys_t_.data() + row / detail::kKeyTile * detail::kKeyTile * dim_ + row % detail::kKeyTile;
  for (std::size_t c = 0; c < dim_; ++c) tile[c * detail::kKeyTile] = key[c];
  // Each component's one correctly rounded division, as the anchor defines
  // it; a zero key has no direction and stays zeros.
  const double norm = squared_norms_[slot] == 0.0 ? 0.0 : std::sqrt(squared_norms_[slot]);
  double* unit = units_r_.data() + row * dim_;
  for (std::size_t c = 0; c < dim_; ++c) unit[c] = norm == 0.0 ? 0.0 : static_cast<double>(key[c]) / norm;
}

void KeyDiff::on_origin(const StepInputs& in) {
  KeyScoredPolicy::on_origin(in);  // checks first: throws with nothing changed
  store_newest(in.key);            // slot 0, its row 0
}

void KeyDiff::on_step(std::int64_t pos, const StepInputs& in) {
  KeyScoredPolicy::on_step(pos, in);
  store_newest(in.key);
}

void KeyDiff::sync_rows() noexcept {
  // Both lists ascend by position: a merge keeps the rows of the positions
  // still held, in slot order, and frees the others.
  std::size_t held = 0;
  for (std::size_t i = 0; i < slots_; ++i) {
    const std::uint32_t row = row_of_[i];
    if (held < kept_ && positions_[held] == row_pos_[row]) {
      row_of_[held++] = row;
    } else {
      free_[free_count_++] = row;
    }
  }
  slots_ = kept_;
}

std::span<const Position> KeyDiff::evict(std::int64_t budget) {
  const std::span<const Position> gone = KeyScoredPolicy::evict(budget);
  if (!gone.empty()) sync_rows();
  return gone;
}

void KeyDiff::remove(std::span<const Position> victims) {
  KeyScoredPolicy::remove(victims);
  sync_rows();
}

void KeyDiff::fill_scores() const noexcept {
  // The anchor: every held observed key normalised, added slot by slot in
  // float64. The sum, not kvpress's mean: the cosine is the same, and the sum
  // needs no division. A zero key has no direction and adds nothing.
  // score_ holds each slot's norm first (0: adds nothing, scores 0).
  for (std::size_t i = 0; i < kept_; ++i) {
    score_[i] = observed_[i] == 0 || squared_norms_[i] == 0.0 ? 0.0 : std::sqrt(squared_norms_[i]);
  }
  std::fill(anchor_.begin(), anchor_.end(), 0.0);
  // Each key's quotients k[c] / ||k|| were divided once, when it was admitted
  // (units_r_): the same correctly rounded quotients, added in slot order.
  detail::add_rows_indexed(units_r_.data(), row_of_.data(), kept_, dim_, score_.data(), anchor_.data());
  double anchor_squared = 0.0;
  for (const double a : anchor_) anchor_squared += a * a;
  const double anchor_norm = std::sqrt(anchor_squared);
  // The dot products in channel order, every row's at once (lanes are keys;
  // a free row's is computed and not read).
  detail::tiled_dots(keys_t_.data(), rows_, dim_, anchor_.data(), dots_.data());
  for (std::size_t i = 0; i < kept_; ++i) {
    // no direction: a cosine of 0
    score_[i] = score_[i] == 0.0 || anchor_norm == 0.0 ? -0.0 : -(dots_[row_of_[i]] / (score_[i] * anchor_norm));
  }
}

void KeyDiff::mark_victims(std::size_t needed) noexcept {
  fill_scores();  // once per call, before the first victim
  const SlotRange range = evictable();
  const std::size_t evictable_slots = range.end > range.first ? range.end - range.first : 0;
  const std::size_t count = std::min(needed, evictable_slots);
  for (std::size_t chosen = 0; chosen < count; ++chosen) {
    // Scores are finite (never NaN): the vector minimum is the scalar one,
    // and -0 == +0 as in the reference's strict comparison.
    const std::size_t best = detail::first_min(score_.data(), range.first, range.end);
    marked_[best] = 1;
    score_[best] = std::numeric_limits<double>::infinity();  // above every score: never chosen again
  }
}

double KeyDiff::cosine_of(std::int64_t pos) const noexcept {
  const std::size_t slot = detail::find_slot({positions_.data(), kept_}, pos);
  if (slot == detail::kNoSlot || observed_[slot] == 0) return -2.0;
  fill_scores();
  return -score_[slot] + 0.0;  // + 0.0: a cosine of 0 reads 0, not -0
}

namespace detail {
const PolicyInfo& keydiff_info() {
  static const PolicyInfo info = describe<KeyDiff, KeyScoredParams>(
      "keydiff", "KeyDiff",
      "Reads each new key, not attention: the held key most like the keys' mean direction goes.",
      {{"budget", &KeyScoredParams::budget, "positions held after each eviction"},
       {"headDim", &KeyScoredParams::head_dim, "floats in a key (the model's head size)"},
       {"sinks", &KeyScoredParams::sinks, "first positions that are never evicted (0: the paper's KeyDiff)"},
       {"recentWindow", &KeyScoredParams::recent_window,
        "newest held positions that are never evicted (0: the paper's KeyDiff)"}},
      {query1<KeyDiff>("cosineOf",
                       [](const KeyDiff& p, std::int64_t pos) { return p.cosine_of(pos); }),
       query1<KeyDiff>("keyNormOf", [](const KeyDiff& p, std::int64_t pos) { return p.key_norm_of(pos); })});
  return info;
}
}  // namespace detail

}  // namespace kvevict
