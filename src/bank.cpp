#include "kvevict/bank.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "kvevict/errors.h"
#include "policies/common.h"
#include "bank_kernels.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "PolicyBank";
constexpr std::uint64_t kNoKey = std::numeric_limits<std::uint64_t>::max();

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
    // Two score buffers in one block (64 doubles apart, so a pass that loads
    // one and stores the other at the same index does not alias 4 KiB
    // apart): a step adds into the spare one while checking the weights and
    // switches only when every instance's row was valid (see step()).
    scores_.assign(2 * slots + kScoreGap, 0.0);
    score_buffer_[0] = scores_.data();
    score_buffer_[1] = scores_.data() + slots + kScoreGap;
  }
  kept_.assign(instances_, 1);
  free_slot_.assign(instances_, 1);
  for (std::size_t k = 0; k < instances_; ++k) positions_[k * capacity_] = 0;  // position 0 in slot 0
  // Aggregated rows need one scratch row per thread, sized now (the step
  // allocates nothing); step() never runs more threads than rows exist here,
  // even if OpenMP's thread count rises later (omp_set_num_threads, or
  // torch.set_num_threads in the same process).
  scratch_threads_ = p.threads > 0 ? p.threads : std::max(1, omp_get_max_threads());
  if (p.group_size > 1) scratch_.assign(static_cast<std::size_t>(scratch_threads_) * capacity_, 0.0F);
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
      return votes_mode_ ? static_cast<double>(votes_[instance * capacity_ + s])
                         : score_buffer_[current_scores_][instance * capacity_ + s];
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
    detail::bank_aggregate(rows, stride, static_cast<std::size_t>(params_.group_size), capacity_, params_.aggregation, out);
    w = out;
  }
  std::size_t victim = capacity_;
  std::uint64_t best = kNoKey;
  if constexpr (std::is_same_v<Score, std::uint32_t>) {
    // Fair share over the held slots, as a float threshold (exact).
    const float threshold = detail::vote_threshold(1.0 / static_cast<double>(kept_[k]));
    bool valid = true;  // validated up front on this path
    best = detail::bank_vote_and_find(S, P, w, capacity_, threshold, protect_from, victim, valid);
  } else {
    victim = detail::bank_add_and_find(S, P, w, capacity_, protect_from);
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
  int threads = params_.threads > 0 ? params_.threads : omp_get_max_threads();
  if (group > 1) threads = std::min(threads, scratch_threads_);  // one scratch row per thread

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
      pending_best_[kk] = detail::bank_vote_and_find(votes_.data() + kk * capacity_, positions_.data() + kk * capacity_,
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
        detail::bank_unvote(votes_.data() + kk * capacity_, positions_.data() + kk * capacity_, attn + kk * stride, capacity_,
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

  if (group == 1) {
    // H2O without aggregation: one pass per instance reads the attention
    // once -- validity, the new scores and the victim together -- adding into
    // the spare buffer, so a refused step leaves the current scores as they
    // were (a float64 sum cannot be taken back exactly).
    pending_slot_.resize(instances_);
    pending_bad_.resize(instances_);
    double* current = score_buffer_[current_scores_];
    double* spare = score_buffer_[1 - current_scores_];
    int any_bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : any_bad)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      bool valid = true;
      pending_slot_[kk] = static_cast<std::uint32_t>(
          detail::bank_add_and_find_checked(spare + kk * capacity_, current + kk * capacity_,
                                            positions_.data() + kk * capacity_, attn + kk * stride, capacity_,
                                            protect_from, valid));
      pending_bad_[kk] = valid ? 0 : 1;
      any_bad = std::max(any_bad, valid ? 0 : 1);
    }
    if (any_bad != 0) refuse(std::find(pending_bad_.begin(), pending_bad_.end(), 1) - pending_bad_.begin());
    commit();
    current_scores_ = 1 - current_scores_;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      finish_instance(kk, p, protect_from, kNoKey, pending_slot_[kk], spare + kk * capacity_, victim_positions[kk],
                      victim_slots[kk]);
    }
    return;
  }

  // Otherwise (grouped queries) refuse bad weights before any instance changes.
  std::int64_t bad_instance = -1;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : bad_instance)
  for (std::int64_t k = 0; k < n; ++k) {
    for (std::size_t g = 0; g < group; ++g) {
      const float* row = attn + (static_cast<std::size_t>(k) * group + g) * stride;
      if (!detail::bank_held_weights_valid(positions_.data() + static_cast<std::size_t>(k) * capacity_, row, capacity_)) {
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
      step_instance(kk, p, protect_from, rows, stride, score_buffer_[current_scores_], victim_positions[kk],
                    victim_slots[kk]);
    }
  }
}

}  // namespace kvevict
