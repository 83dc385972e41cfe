#include "kvevict/core/policies/snapkv.h"

#include <algorithm>
#include <cmath>
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
// Rings for the victims of up to this many single evictions wait as holes
// before one pass closes them: the steps walk one more run of rings per
// hole, the pass moves every ring once.
// A sixteenth of the capacity at most, so the extra rings stay a small share.
constexpr std::size_t kMaxHoleRoom = 32;
std::size_t hole_room(std::size_t capacity) { return std::clamp<std::size_t>(capacity / 16, 1, kMaxHoleRoom); }
// Running sums drift by a few roundings a step: past this many steps without
// a resynchronisation, the next eviction recomputes them first (one pass over
// every cell, a thousandth of the plain rule's work).
constexpr std::size_t kMaxStepsUnsynced = 1024;
// More candidates than this to sum exactly (ties) and every sum is
// recomputed instead.
constexpr std::size_t kMaxCandidates = 8;
// Windows the screen may find before every position is pooled instead, and
// the most it should find (past this the margin narrows).
constexpr std::size_t kScreenRoom = 128;
constexpr std::size_t kScreenTarget = 16;
// The screen's limit is last step's lowest pooled score times a margin whose
// excess over 1 doubles when the limit proved too low (up to this margin) and
// halves when more than kScreenTarget windows passed.
constexpr double kFirstScreenMargin = 1.125;
constexpr double kMaxScreenMargin = 4.0;
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
      ring_capacity_(capacity + hole_room(capacity)),
      budget_(params.budget) {
  positions_.resize(capacity_);
  holes_.reserve(ring_capacity_);  // a batch may leave a hole per held slot
  history_.assign(ring_capacity_ * obs_window_, 0.0F);
  running_.assign(capacity_, 0.0);
  pooled_.resize(capacity_);
  marked_.resize(capacity_);
  victims_.resize(capacity_);
  candidate_index_.resize(std::min(capacity_, kScreenRoom));
  candidate_score_.resize(std::min(capacity_, kScreenRoom));
  bits_.resize(capacity_ / 64 + 2);
  screen_margin_ = kFirstScreenMargin;
  positions_[0] = 0;  // with an all-zero ring
  ring_end_ = 1;
  kept_ = 1;
}

std::size_t SnapKVCore::memory_bytes() const noexcept {
  // Per held slot: position 4, running sum 8, pooled score 8, scratch byte 1,
  // a screen bit. Per ring (a few more rings than slots: the victims' wait
  // as holes): the obsWindow float32 cells and a hole name 4. And the
  // screen's list of windows, 12 bytes an entry.
  return capacity_ * (4 + 8 + 8 + 1) + bits_.size() * 8 + ring_capacity_ * (4 * obs_window_ + 4) +
         candidate_index_.size() * (4 + 8);
}

template <class F>
void SnapKVCore::for_each_run(std::size_t n, F&& f) const {
  std::size_t slot = 0;
  std::size_t ring = 0;
  for (const std::uint32_t hole : holes_) {
    if (slot >= n) return;
    const std::size_t run = hole - ring;  // rings [ring, hole) hold the next `run` slots
    if (run > 0) f(slot, ring, std::min(run, n - slot));
    slot += run;
    ring = std::size_t{hole} + 1;
  }
  if (slot < n) f(slot, ring, n - slot);
}

std::size_t SnapKVCore::ring_of(std::size_t i) const noexcept {
  std::size_t ring = i;
  for (const std::uint32_t hole : holes_) {
    if (hole > ring) break;
    ++ring;
  }
  return ring;
}

void SnapKVCore::on_decode_step(std::int64_t pos, Attention attn) {
  const std::int64_t newest = kept_ == 0 ? -1 : std::int64_t{positions_[kept_ - 1]};
  check_admission(title_, pos, newest, kept_ + 1, capacity_, budget_);
  check_weights(title_, attn ? attn->data() : nullptr, readable(attn, kept_));
  if (attn) {  // present, even when empty, advances the ring
    const std::size_t n = readable(attn, kept_);
    const float* w = attn->data();
    float* row = history_.data() + cursor_ * ring_capacity_;  // ring cell `cursor_` of every ring
    const SnapExtremes seen = snap_observe(row, running_.data(), w, n, holes_.data(), holes_.size());
    weight_bound_ = std::max(weight_bound_, seen.top);
    least_weight_ = std::min(least_weight_, seen.least_nonzero);
    cursor_ = cursor_ + 1 == obs_window_ ? 0 : cursor_ + 1;
    ++steps_since_sync_;
  }
  // The new position takes the next ring, zeroed (its running sum exact).
  // There is one: admission leaves kept_ < capacity_, and fewer holes than
  // spare rings wait (close_holes_when_full), so ring_end_ < ring_capacity_.
  const std::size_t fresh = ring_end_++;
  for (std::size_t c = 0; c < obs_window_; ++c) history_[c * ring_capacity_ + fresh] = 0.0F;
  running_[kept_] = 0.0;
  positions_[kept_] = static_cast<Position>(pos);
  ++kept_;
}

double SnapKVCore::window_sum(std::size_t i) const noexcept {
  // Ring-index order 0 ... obsWindow-1, in float64.
  const std::size_t ring = ring_of(i);
  double sum = 0.0;
  for (std::size_t c = 0; c < obs_window_; ++c) sum += static_cast<double>(history_[c * ring_capacity_ + ring]);
  return sum;
}

void SnapKVCore::close_holes() {
  if (holes_.empty()) return;
  for (std::size_t c = 0; c < obs_window_; ++c) {
    float* row = history_.data() + c * ring_capacity_;
    for_each_run(kept_, [row](std::size_t slot, std::size_t ring, std::size_t len) {
      if (slot != ring) std::memmove(row + slot, row + ring, len * sizeof(float));
    });
  }
  holes_.clear();
  ring_end_ = kept_;
}

void SnapKVCore::resync() {
  // Each run of consecutive rings summed where it lies (no ring moves).
  float top = 0.0F;
  for_each_run(kept_, [&](std::size_t slot, std::size_t ring, std::size_t len) {
    top = std::max(top, ring_sums_max(history_.data() + ring, obs_window_, ring_capacity_, len, running_.data() + slot));
  });
  weight_bound_ = top;
  steps_since_sync_ = 0;
}

void SnapKVCore::add_hole(std::uint32_t ring) {
  holes_.insert(std::upper_bound(holes_.begin(), holes_.end(), ring), ring);
  close_holes_when_full();
}

void SnapKVCore::close_holes_when_full() {
  if (holes_.size() >= ring_capacity_ - capacity_) close_holes();
}

std::pair<std::size_t, std::size_t> SnapKVCore::pool_window(std::size_t i) const noexcept {
  return {i >= pool_radius_ ? i - pool_radius_ : 0, std::min(kept_ - 1, i + pool_radius_)};
}

double SnapKVCore::drift_bound() const noexcept {
  // With every cell in [0, W] (W = weight_bound_) and u = 2^-53: a ring-order
  // sum of obsWindow cells is within (obsWindow-1)·u·obsWindow·W of the true
  // sum, so the running sums start (at a compaction) within obsWindow²·u·W of
  // it; each update (two roundings, operands below (obsWindow+1)·W) moves a
  // running sum at most 2.01·u·(obsWindow+1)·W further; and the ring-order
  // sum compared with is itself within obsWindow²·u·W. The bound is twice
  // their total, covering the rounding of the threshold it sets.
  constexpr double kUnitRoundoff = 0x1p-53;
  const auto obs = static_cast<double>(obs_window_);
  // Exact arithmetic: every weight ever written is a multiple of the quantum
  // of the smallest nonzero one (its last significant bit: 2^(exponent -
  // 23), 2^-149 below the normal range), so every sum and difference of the
  // cells is too; when the largest of them, (obsWindow + 1)·W, is at most
  // 2^53 quanta, float64 holds each exactly, nothing rounds, and the running
  // sums are the ring-order sums themselves. (Attention weights of one
  // model step -- a few orders of magnitude apart -- are usually here.)
  if (least_weight_ > 0.0F && std::isfinite(least_weight_)) {
    const int quantum = std::max(std::ilogb(least_weight_), -126) - 23;
    if ((obs + 1.0) * static_cast<double>(weight_bound_) <= std::ldexp(1.0, 53 + quantum)) return 0.0;
  }
  const auto steps = static_cast<double>(steps_since_sync_);
  return 2.0 * kUnitRoundoff * static_cast<double>(weight_bound_) * (2.0 * obs * obs + 4.0 * (obs + 1.0) * steps);
}

double SnapKVCore::cached_window_sum(std::size_t i) {
  for (std::size_t k = 0; k < cached_; ++k) {
    if (cache_slot_[k] == i) return cache_sum_[k];
  }
  const double sum = window_sum(i);
  if (cached_ < kSumCache) {
    cache_slot_[cached_] = i;
    cache_sum_[cached_] = sum;
    ++cached_;
  }
  return sum;
}

double SnapKVCore::exact_pooled(std::size_t i, double pooled, double bound) {
  // A neighbour whose running sum is more than 2·bound below the pooled one
  // is below the exact maximum too, so only the others are summed exactly.
  const auto [lo, hi] = pool_window(i);
  const double floor = pooled - 2.0 * bound;
  double best = -1.0;
  for (std::size_t k = lo; k <= hi; ++k) {
    if (running_[k] >= floor) best = std::max(best, cached_window_sum(k));
  }
  return best;
}

bool SnapKVCore::shared_source(std::size_t count, double bound) const noexcept {
  std::size_t source = kNoSlot;
  for (std::size_t c = 0; c < count; ++c) {
    const auto [lo, hi] = pool_window(candidate_index_[c]);
    const double floor = candidate_score_[c] - 2.0 * bound;
    for (std::size_t k = lo; k <= hi; ++k) {
      if (running_[k] < floor) continue;
      if (source != kNoSlot && source != k) return false;
      source = k;
    }
  }
  return true;
}

// The steady state's victim without summing every ring: the running sums,
// pooled, name the lowest pooled score m; every held slot whose exact pooled
// score could be the minimum has a running one within 2·bound of m (pooling
// is a maximum, so it moves no score by more than the sums' own bound). One
// such slot is the victim as it stands; a few are settled by their exact
// ring-order sums (the first strict minimum among them, which no other slot
// can beat); many -- ties -- recompute every sum exactly, as the spec does.
//
// The pooled scores themselves are mostly not computed: last step's lowest,
// times a margin, is a limit no candidate exceeds when this step's lowest
// plus 2·bound stays below it, and screen_pool pools only the windows whose
// every sum is below the limit. When the limit was too low (no window, or a
// candidate could lie above it) or too high (too many windows) every
// position is pooled instead, and the margin adapts.
std::size_t SnapKVCore::single_victim(std::size_t end) {
  if (steps_since_sync_ > kMaxStepsUnsynced) resync();
  const double bound = drift_bound();
  const std::size_t room = candidate_index_.size();
  double low = 0.0;
  double threshold = 0.0;
  std::size_t listed = 0;  // screened or enumerated scores in candidate_*_
  std::size_t count = 0;   // pooled scores <= threshold (listed when count <= listed)
  bool screened = false;
  if (screen_limit_ >= 0.0 && pool_radius_ <= kMaxScreenRadius) {
    const std::size_t found = screen_pool(running_.data(), kept_, pool_radius_, end, screen_limit_,
                                          candidate_index_.data(), candidate_score_.data(), room, bits_.data());
    if (found >= 1 && found <= room) {
      low = *std::min_element(candidate_score_.begin(), candidate_score_.begin() + static_cast<std::ptrdiff_t>(found));
      threshold = low + 2.0 * bound;
      screened = threshold <= screen_limit_;
      listed = found;
    }
    if (found > kScreenTarget) {
      screen_margin_ = 1.0 + (screen_margin_ - 1.0) / 2.0;
    } else if (!screened) {
      screen_margin_ = std::min(1.0 + (screen_margin_ - 1.0) * 2.0, kMaxScreenMargin);
    }
  }
  if (screened) {
    ++counts_.screened;
    // Keep the candidates (<= threshold) at the front, in order.
    for (std::size_t e = 0; e < listed; ++e) {
      if (candidate_score_[e] > threshold) continue;
      candidate_index_[count] = candidate_index_[e];
      candidate_score_[count] = candidate_score_[e];
      ++count;
    }
    listed = count;
  } else {
    low = pool_max_min(running_.data(), kept_, pool_radius_, pooled_.data(), end);
    threshold = low + 2.0 * bound;
    const AtMost near = count_at_most(pooled_.data(), 0, end, threshold);
    count = near.count;
    listed = 0;
    for (std::size_t i = near.first; i < end && listed < std::min(count, room); ++i) {
      if (pooled_[i] > threshold) continue;
      candidate_index_[listed] = static_cast<std::uint32_t>(i);
      candidate_score_[listed] = pooled_[i];
      ++listed;
    }
  }
  screen_limit_ = low * screen_margin_;
  const std::size_t first = candidate_index_[0];
  // One candidate; or a zero bound (every cell 0, every sum exact), where
  // the first minimum is the first candidate.
  if (count == 1 || bound == 0.0) {
    ++counts_.running;
    return first;
  }
  // Ties of pooling: candidates whose windows each hold one neighbour near
  // their maximum, the same one for all, have the same exact score (that
  // neighbour's sum), so the first of them is the first minimum.
  if (count <= listed && shared_source(count, bound)) {
    ++counts_.running;
    return first;
  }
  // The candidates in order, each settled by its exact score, while no
  // candidate yet beats max(0, low - bound) -- below which no exact score
  // lies -- and no more than kMaxCandidates are summed. At a tie at zero
  // (positions no step attended) the first candidate settles it.
  const double least = std::max(0.0, low - bound);
  cached_ = 0;
  std::size_t best = end;
  double best_score = 0.0;
  std::size_t summed = 0;
  const auto settle = [&](std::size_t i, double pooled) {
    const double score = exact_pooled(i, pooled, bound);
    ++summed;
    if (best == end || score < best_score) {
      best = i;
      best_score = score;
    }
    return best_score <= least;
  };
  bool settled = false;
  // Past kMaxCandidates only a tie at zero can settle early: elsewhere the
  // plain recomputation below is cheaper than summing candidates in vain.
  const bool worth_settling = count <= kMaxCandidates || least == 0.0;
  if (worth_settling && count <= listed) {
    for (std::size_t c = 0; c < count && !settled && summed < kMaxCandidates; ++c) {
      settled = settle(candidate_index_[c], candidate_score_[c]);
    }
    settled = settled || summed == count;
  } else if (worth_settling) {  // (pooled every position: pooled_ holds them all)
    for (std::size_t i = first; i < end && !settled && summed < kMaxCandidates; ++i) {
      if (pooled_[i] <= threshold) settled = settle(i, pooled_[i]);
    }
  }
  if (settled) {
    ++counts_.candidates;
    return best;
  }
  ++counts_.exact;
  resync();  // the running sums become the exact ones
  pool_max(running_.data(), kept_, pool_radius_, pooled_.data());
  return first_min(pooled_.data(), 0, end);
}

std::span<const Position> SnapKVCore::evict_to(std::size_t target) {
  if (kept_ <= target) return {};
  const std::size_t needed = kept_ - target;
  const std::size_t recent = std::min(recent_window_, kept_);
  const std::size_t end = kept_ - recent;
  if (needed == 1) {
    // The steady state: one victim; its ring becomes a hole (no ring moves,
    // only the held slots' arrays shift).
    if (end == 0) return {};
    const std::size_t j = single_victim(end);
    victims_[0] = positions_[j];
    const std::size_t freed = ring_of(j);
    const std::size_t tail = kept_ - j - 1;
    std::memmove(positions_.data() + j, positions_.data() + j + 1, tail * sizeof(Position));
    std::memmove(running_.data() + j, running_.data() + j + 1, tail * sizeof(double));
    --kept_;
    add_hole(static_cast<std::uint32_t>(freed));
    return {victims_.data(), 1};
  }
  // Several at once: scores are computed once per call, before the first
  // victim -- every ring summed in ring order, then pooled over neighbouring
  // held positions.
  resync();
  pool_max(running_.data(), kept_, pool_radius_, pooled_.data());
  mark_argmin_victims(pooled_.data(), marked_.data(), 0, end, needed);
  return compact_marked();
}

std::span<const Position> SnapKVCore::compact_marked() {
  // The marked slots' rings join the holes (kept in order: sorted in place,
  // without the buffer a merge would allocate).
  for_each_run(kept_, [this](std::size_t slot, std::size_t ring, std::size_t len) {
    for (std::size_t k = 0; k < len; ++k) {
      if (marked_[slot + k] != 0) holes_.push_back(static_cast<std::uint32_t>(ring + k));
    }
  });
  std::sort(holes_.begin(), holes_.end());
  const std::size_t count =
      compact(kept_, marked_.data(), positions_.data(), victims_.data(),
              [this](std::size_t to, std::size_t from, std::size_t n) {
                std::copy_n(running_.begin() + static_cast<std::ptrdiff_t>(from), n,
                            running_.begin() + static_cast<std::ptrdiff_t>(to));
              });
  close_holes_when_full();
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
  resync();  // the running sums become the exact ones
  pool_max(running_.data(), kept_, pool_radius_, scores.data());
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
