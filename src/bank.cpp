#include "kvevict/bank.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kvevict/errors.h"
#include "policies/common.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "PolicyBank";
constexpr std::uint64_t kNoKey = std::numeric_limits<std::uint64_t>::max();

// Folds the group's query rows into one weight per slot (in group order).
__attribute__((target_clones("avx512f", "avx2", "default")))
void aggregate(const float* rows, std::size_t stride, std::size_t group, std::size_t n, Aggregation how,
               float* out) {
  std::copy_n(rows, n, out);
  for (std::size_t g = 1; g < group; ++g) {
    const float* r = rows + g * stride;
    if (how == Aggregation::kMax) {
      for (std::size_t s = 0; s < n; ++s) out[s] = r[s] > out[s] ? r[s] : out[s];
    } else {
      for (std::size_t s = 0; s < n; ++s) out[s] += r[s];
    }
  }
  if (how == Aggregation::kMean) {
    const auto g = static_cast<float>(group);
    for (std::size_t s = 0; s < n; ++s) out[s] /= g;
  }
}

// Scissorhands: count the votes of held slots and find, in the same pass, the
// evictable slot with the fewest votes (ties: the lower position), as one
// 64-bit key votes << 32 | position. Written with vector types so the whole
// pass -- compares, adds, the 64-bit minimum -- runs eight slots at a time.
__attribute__((target_clones("avx512f", "avx2", "default")))
std::uint64_t vote_and_find(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n,
                            float threshold, std::uint32_t protect_from, std::size_t& slot, bool& valid) {
  constexpr float kMax = std::numeric_limits<float>::max();
  using U8 = std::uint32_t __attribute__((vector_size(32)));
  using F8 = float __attribute__((vector_size(32)));
  using Q8 = std::uint64_t __attribute__((vector_size(64)));
  constexpr std::uint32_t kFreeSlot = PolicyBank::kFree;
  Q8 lanes;
  Q8 lane_slots = {};
  Q8 here;
  for (std::size_t k = 0; k < 8; ++k) {
    lanes[k] = kNoKey;
    here[k] = k;
  }
  U8 bad = {};
  std::size_t s = 0;
  for (; s + 8 <= n; s += 8) {
    U8 p;
    U8 v;
    F8 x;
    std::memcpy(&p, pos + s, sizeof p);
    std::memcpy(&v, votes + s, sizeof v);
    std::memcpy(&x, w + s, sizeof x);
    const U8 held = reinterpret_cast<U8>(p != kFreeSlot);        // all ones or zero
    // A held weight must be finite and >= 0 (false for NaN): checked in the
    // same pass; the caller undoes the votes exactly if one is not.
    bad |= ~(reinterpret_cast<U8>(x >= 0.0F) & reinterpret_cast<U8>(x <= kMax)) & held;
    const U8 voted = reinterpret_cast<U8>(x >= threshold) & held;
    v -= voted;                                                  // -(-1) = +1
    std::memcpy(votes + s, &v, sizeof v);
    const U8 evictable = held & reinterpret_cast<U8>(p < protect_from);
    const Q8 key = (__builtin_convertvector(v, Q8) << 32) | __builtin_convertvector(p, Q8);
    const Q8 gate = __builtin_convertvector(reinterpret_cast<std::int32_t __attribute__((vector_size(32)))>(evictable), Q8);
    const Q8 masked = (key & gate) | ~gate;                      // not evictable: all ones
    const auto lower = masked < lanes;
    lanes = lower ? masked : lanes;
    lane_slots = lower ? here : lane_slots;
    here += 8;
  }
  // Keys are unique (positions are), so the smallest lane names one slot.
  std::uint64_t best = kNoKey;
  slot = n;
  std::uint32_t any_bad = 0;
  for (std::size_t k = 0; k < 8; ++k) {
    any_bad |= bad[k];
    if (lanes[k] < best) {
      best = lanes[k];
      slot = lane_slots[k];
    }
  }
  for (; s < n; ++s) {
    const bool held = pos[s] != kFreeSlot;
    if (held && !(w[s] >= 0.0F && w[s] <= kMax)) any_bad = 1;
    const std::uint32_t v = votes[s] + (held && w[s] >= threshold ? 1U : 0U);
    votes[s] = v;
    const std::uint64_t key = (std::uint64_t{v} << 32) | pos[s];
    if (held && pos[s] < protect_from && key < best) {
      best = key;
      slot = s;
    }
  }
  valid = any_bad == 0;
  return best;
}

// Takes back vote_and_find's votes (exact: they are integers).
__attribute__((target_clones("avx512f", "avx2", "default")))
void unvote(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n, float threshold) {
  for (std::size_t s = 0; s < n; ++s) {
    votes[s] -= (pos[s] != PolicyBank::kFree && w[s] >= threshold) ? 1U : 0U;
  }
}

// H2O: add the weights of held slots and find, in the same pass, the
// evictable slot with the lowest score (ties: the lower position), eight slots
// at a time. Scores are sums of weights >= 0, so they are never negative and
// their bit patterns order exactly as the values do: the search compares
// integers, which vectorise cleanly. Returns the slot, or n when none is
// evictable.
__attribute__((target_clones("avx512f", "avx2", "default")))
std::size_t add_and_find(double* scores, const std::uint32_t* pos, const float* w, std::size_t n,
                         std::uint32_t protect_from) {
  using U8 = std::uint32_t __attribute__((vector_size(32)));
  using I8 = std::int32_t __attribute__((vector_size(32)));
  using F8 = float __attribute__((vector_size(32)));
  using D8 = double __attribute__((vector_size(64)));
  using Q8 = std::uint64_t __attribute__((vector_size(64)));
  using M8 = std::int64_t __attribute__((vector_size(64)));
  constexpr std::uint32_t kFreeSlot = PolicyBank::kFree;
  constexpr std::uint64_t kNone = std::numeric_limits<std::uint64_t>::max();
  Q8 low;
  Q8 low_pos;
  Q8 low_slot = {};
  Q8 here;
  for (std::size_t k = 0; k < 8; ++k) {
    low[k] = kNone;
    low_pos[k] = kNone;
    here[k] = k;
  }
  std::size_t s = 0;
  for (; s + 8 <= n; s += 8) {
    U8 p;
    F8 x;
    D8 sc;
    std::memcpy(&p, pos + s, sizeof p);
    std::memcpy(&x, w + s, sizeof x);
    std::memcpy(&sc, scores + s, sizeof sc);
    const Q8 held = reinterpret_cast<Q8>(__builtin_convertvector(reinterpret_cast<I8>(p != kFreeSlot), M8));
    // Free slots add +0.0 (their weights are masked out bit by bit, NaN included).
    sc += reinterpret_cast<D8>(reinterpret_cast<Q8>(__builtin_convertvector(x, D8)) & held);
    std::memcpy(scores + s, &sc, sizeof sc);
    const Q8 evictable =
        held & reinterpret_cast<Q8>(__builtin_convertvector(reinterpret_cast<I8>(p < protect_from), M8));
    const Q8 bits = (reinterpret_cast<Q8>(sc) & evictable) | ~evictable;  // not evictable: all ones
    const Q8 p64 = __builtin_convertvector(p, Q8);
    const Q8 better = (bits < low) | ((bits == low) & (p64 < low_pos) & evictable);
    low = better ? bits : low;
    low_pos = better ? p64 : low_pos;
    low_slot = better ? here : low_slot;
    here += 8;
  }
  std::uint64_t best = kNone;
  std::uint64_t best_pos = kNone;
  std::size_t slot = n;
  for (std::size_t k = 0; k < 8; ++k) {
    if (low_pos[k] != kNone && (low[k] < best || (low[k] == best && low_pos[k] < best_pos))) {
      best = low[k];
      best_pos = low_pos[k];
      slot = low_slot[k];
    }
  }
  for (; s < n; ++s) {
    if (pos[s] == kFreeSlot) continue;
    scores[s] += static_cast<double>(w[s]);
    std::uint64_t b;
    std::memcpy(&b, scores + s, sizeof b);
    if (pos[s] < protect_from && (b < best || (b == best && pos[s] < best_pos))) {
      best = b;
      best_pos = pos[s];
      slot = s;
    }
  }
  return slot;
}

__attribute__((target_clones("avx512f", "avx2", "default")))
bool held_weights_valid(const std::uint32_t* pos, const float* w, std::size_t n) {
  constexpr float kMax = std::numeric_limits<float>::max();
  bool bad = false;
  for (std::size_t s = 0; s < n; ++s) bad |= pos[s] != PolicyBank::kFree && !(w[s] >= 0.0F && w[s] <= kMax);
  return !bad;
}
}  // namespace

PolicyBank::PolicyBank(const BankParams& p) : params_(p) {
  if (p.policy != "scissorhands" && p.policy != "h2o") {
    throw ParameterError(fmt::format("{}: policy '{}' has no bank (known: scissorhands, h2o)", kTitle, p.policy));
  }
  votes_mode_ = p.policy == "scissorhands";
  detail::check_at_least(kTitle, "instances", p.instances, 1);
  detail::check_at_most(kTitle, "instances", p.instances, std::int64_t{1} << 24);
  detail::check_budget(kTitle, p.budget);
  detail::check_recent_window(kTitle, p.recent_window, p.budget, votes_mode_ ? "the votes" : "the scores");
  detail::check_at_least(kTitle, "groupSize", p.group_size, 1);
  detail::check_at_most(kTitle, "groupSize", p.group_size, 256);
  detail::check_at_least(kTitle, "threads", p.threads, 0);
  instances_ = static_cast<std::size_t>(p.instances);
  capacity_ = static_cast<std::size_t>(p.budget) + 1;
  const std::size_t slots = instances_ * capacity_;
  if (slots > (std::size_t{1} << 34)) {
    throw ParameterError(fmt::format("{}: {} instances x {} slots is too large", kTitle, instances_, capacity_));
  }
  positions_.assign(slots, kFree);
  if (votes_mode_) {
    votes_.assign(slots, 0);
  } else {
    scores_.assign(slots, 0.0);
  }
  kept_.assign(instances_, 1);
  free_slot_.assign(instances_, 1);
  for (std::size_t k = 0; k < instances_; ++k) positions_[k * capacity_] = 0;  // position 0 in slot 0
  const int threads = p.threads > 0 ? p.threads : omp_get_max_threads();
  if (p.group_size > 1) scratch_.assign(static_cast<std::size_t>(threads) * capacity_, 0.0F);
  recent_.assign(static_cast<std::size_t>(std::max<std::int64_t>(p.recent_window, 1)), 0);
  admitted_ = 1;  // position 0
}

std::size_t PolicyBank::memory_bytes() const noexcept {
  return positions_.size() * 4 + votes_.size() * 4 + scores_.size() * 8 + scratch_.size() * 4 +
         (kept_.size() + free_slot_.size()) * 4;
}

double PolicyBank::score_of(std::size_t instance, Position pos) const noexcept {
  if (instance >= instances_) return -1.0;
  for (std::size_t s = 0; s < capacity_; ++s) {
    if (positions_[instance * capacity_ + s] == pos) {
      return votes_mode_ ? static_cast<double>(votes_[instance * capacity_ + s]) : scores_[instance * capacity_ + s];
    }
  }
  return -1.0;
}

template <class Score>
void PolicyBank::step_instance(std::size_t k, std::uint32_t pos, std::uint32_t protect_from, const float* rows,
                               std::size_t stride, Score* scores, Position& victim_pos, std::uint32_t& victim_slot) {
  const std::size_t base = k * capacity_;
  std::uint32_t* P = positions_.data() + base;
  Score* S = scores + base;
  const float* w = rows;
  if (params_.group_size > 1) {
    float* out = scratch_.data() + static_cast<std::size_t>(omp_get_thread_num()) * capacity_;
    aggregate(rows, stride, static_cast<std::size_t>(params_.group_size), capacity_, params_.aggregation, out);
    w = out;
  }
  std::size_t victim = capacity_;
  std::uint64_t best = kNoKey;
  if constexpr (std::is_same_v<Score, std::uint32_t>) {
    // Fair share over the held slots, as a float threshold (exact).
    const float threshold = detail::vote_threshold(1.0 / static_cast<double>(kept_[k]));
    bool valid = true;  // validated up front on this path
    best = vote_and_find(S, P, w, capacity_, threshold, protect_from, victim, valid);
  } else {
    victim = add_and_find(S, P, w, capacity_, protect_from);
  }
  finish_instance(k, pos, protect_from, best, victim, S, victim_pos, victim_slot);
}

template <class Score>
void PolicyBank::finish_instance(std::size_t k, std::uint32_t pos, std::uint32_t protect_from, std::uint64_t best,
                                 std::size_t victim, Score* S, Position& victim_pos, std::uint32_t& victim_slot) {
  std::uint32_t* P = positions_.data() + k * capacity_;
  // Admit the new token into the free slot, with a fresh record.
  const std::uint32_t f = free_slot_[k];
  P[f] = pos;
  S[f] = 0;
  ++kept_[k];
  victim_pos = kFree;
  victim_slot = kFree;
  if (kept_[k] <= params_.budget) {
    free_slot_[k] = kept_[k];  // slots fill in order until the first eviction
    return;
  }
  // The new token (fresh record: 0) competes only when it is not protected.
  if (pos < protect_from) {
    if constexpr (std::is_same_v<Score, std::uint32_t>) {
      if (std::uint64_t{pos} < best) victim = f;  // key 0 << 32 | pos
    } else {
      if (victim == capacity_ || S[victim] > 0.0 || (S[victim] == 0.0 && P[victim] > pos)) victim = f;
    }
  }
  if (victim == capacity_) return;  // everything protected (cannot happen with recentWindow < budget)
  victim_pos = P[victim];
  victim_slot = static_cast<std::uint32_t>(victim);
  P[victim] = kFree;
  --kept_[k];
  free_slot_[k] = static_cast<std::uint32_t>(victim);
}

void PolicyBank::step(std::int64_t pos, const float* attn, std::size_t stride, Position* victim_positions,
                      std::uint32_t* victim_slots) {
  if (attn == nullptr || victim_positions == nullptr || victim_slots == nullptr) {
    throw ContractError(fmt::format("{}: step needs attention and victim buffers", kTitle));
  }
  if (stride < capacity_) {
    throw ContractError(fmt::format("{}: row stride ({}) is smaller than the capacity ({})", kTitle, stride, capacity_));
  }
  if (pos <= newest_ || pos > std::int64_t{std::numeric_limits<Position>::max()} - 1) {
    throw ContractError(fmt::format("{}: position {} must be greater than every position held (the newest is {})",
                                    kTitle, pos, newest_));
  }
  const auto group = static_cast<std::size_t>(params_.group_size);
  const auto n = static_cast<std::int64_t>(instances_);
  const int threads = params_.threads > 0 ? params_.threads : omp_get_max_threads();

  // The newest recent_window admitted positions (this one included) are
  // protected: every one of them is still held. Committed only once the
  // step's weights are accepted.
  const auto p = static_cast<std::uint32_t>(pos);
  const auto rw = static_cast<std::size_t>(params_.recent_window);
  std::uint32_t protect_from = kFree;  // recentWindow 0: nothing protected
  if (rw > 0) protect_from = admitted_ + 1 <= rw ? 0 : (rw == 1 ? p : recent_[(admitted_ + 1) % rw]);
  auto commit = [&] {
    if (rw > 0) recent_[admitted_ % rw] = p;
    ++admitted_;
    newest_ = pos;
  };
  auto refuse = [&](std::int64_t instance) {
    throw ContractError(fmt::format("{}: instance {} has a NaN, infinite or negative weight in a held slot; "
                                    "weights must be finite and at least 0",
                                    kTitle, instance));
  };

  if (votes_mode_ && group == 1) {
    // Scissorhands without aggregation: one pass per instance reads the
    // attention once -- votes, validity and the victim together -- and a
    // refused step is taken back exactly (votes are integers).
    pending_best_.resize(instances_);
    pending_slot_.resize(instances_);
    pending_bad_.resize(instances_);
    int any_bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : any_bad)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      const float threshold = detail::vote_threshold(1.0 / static_cast<double>(kept_[kk]));
      std::size_t slot = capacity_;
      bool valid = true;
      pending_best_[kk] = vote_and_find(votes_.data() + kk * capacity_, positions_.data() + kk * capacity_,
                                        attn + kk * stride, capacity_, threshold, protect_from, slot, valid);
      pending_slot_[kk] = static_cast<std::uint32_t>(slot);
      pending_bad_[kk] = valid ? 0 : 1;
      any_bad = std::max(any_bad, valid ? 0 : 1);
    }
    if (any_bad != 0) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t k = 0; k < n; ++k) {
        const auto kk = static_cast<std::size_t>(k);
        const float threshold = detail::vote_threshold(1.0 / static_cast<double>(kept_[kk]));
        unvote(votes_.data() + kk * capacity_, positions_.data() + kk * capacity_, attn + kk * stride, capacity_,
               threshold);
      }
      refuse(std::find(pending_bad_.begin(), pending_bad_.end(), 1) - pending_bad_.begin());
    }
    commit();
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      finish_instance(kk, p, protect_from, pending_best_[kk], pending_slot_[kk], votes_.data() + kk * capacity_,
                      victim_positions[kk], victim_slots[kk]);
    }
    return;
  }

  // Otherwise refuse bad weights before any instance changes.
  std::int64_t bad_instance = -1;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : bad_instance)
  for (std::int64_t k = 0; k < n; ++k) {
    for (std::size_t g = 0; g < group; ++g) {
      const float* row = attn + (static_cast<std::size_t>(k) * group + g) * stride;
      if (!held_weights_valid(positions_.data() + static_cast<std::size_t>(k) * capacity_, row, capacity_)) {
        bad_instance = std::max(bad_instance, k);
      }
    }
  }
  if (bad_instance >= 0) refuse(bad_instance);
  commit();

#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    const float* rows = attn + kk * group * stride;
    if (votes_mode_) {
      step_instance(kk, p, protect_from, rows, stride, votes_.data(), victim_positions[kk], victim_slots[kk]);
    } else {
      step_instance(kk, p, protect_from, rows, stride, scores_.data(), victim_positions[kk], victim_slots[kk]);
    }
  }
}

}  // namespace kvevict
