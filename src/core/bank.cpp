#include "kvevict/core/bank.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/registry.h"
#include "policies/common.h"
#include "bank_kernels.h"
#include "policies/kernels.h"

namespace kvevict {

namespace {
constexpr const char* kTitle = "PolicyBank";
constexpr std::uint64_t kNoKey = std::numeric_limits<std::uint64_t>::max();
// TOVA: a record no attention has covered yet (weights are finite).
constexpr float kUnobserved = std::numeric_limits<float>::quiet_NaN();

}  // namespace

PolicyBank::PolicyBank(const BankParams& p) : params_(p) {
  if (p.policy == "scissorhands") {
    mode_ = Mode::kVotes;
  } else if (p.policy == "h2o") {
    mode_ = Mode::kScores;
  } else if (p.policy == "tova") {
    mode_ = Mode::kLastWeight;
  } else if (p.policy == "sliding-window" || p.policy == "streaming-llm") {
    mode_ = Mode::kRecency;
  } else if (p.policy == "snapkv" || p.policy == "pyramidkv") {
    throw ParameterError(fmt::format(
        "{}: policy '{}' has no bank: its max-pooling reads the scores of neighbouring positions, an order a "
        "slot-addressed bank does not keep (use one {} per instance)",
        kTitle, p.policy, p.policy == "snapkv" ? "SnapKV" : "PyramidKV"));
  } else {
    // The key-aware policies (knorm, keydiff, expected-attention) read a row
    // of their own each step -- the new token's key (value, queries) -- and
    // a bank's step carries attention weights only: name what is missing.
    const auto all = policies();
    const auto it = std::find_if(all.begin(), all.end(), [&](const PolicyInfo* i) { return i->name == p.policy; });
    if (it != all.end() && ((*it)->signals & ~kSignalAttention) != 0) {
      const PolicyInfo& info = **it;
      throw ParameterError(fmt::format(
          "{}: policy '{}' needs the new token's {} each step, a row per instance that a bank's step does not "
          "carry: PolicyBank::step takes attention weights only (use one {} per instance)",
          kTitle, p.policy, signal_names(info.signals & ~kSignalAttention), info.title));
    }
    throw ParameterError(fmt::format(
        "{}: policy '{}' has no bank (known: scissorhands, h2o, tova, sliding-window, streaming-llm)", kTitle,
        p.policy));
  }
  votes_mode_ = mode_ == Mode::kVotes;
  detail::check_at_least(kTitle, "instances", p.instances, 1);
  detail::check_at_most(kTitle, "instances", p.instances, std::int64_t{1} << 24);
  detail::check_budget(kTitle, p.budget);
  if (mode_ == Mode::kVotes || mode_ == Mode::kScores) {
    detail::check_recent_window(kTitle, p.recent_window, p.budget, votes_mode_ ? "the votes" : "the scores");
  } else if (p.recent_window != 0) {
    detail::fail_param(kTitle, "recentWindow", p.recent_window,
                       fmt::format("must be 0 for {}: it has no recent window", p.policy));
  }
  if (p.policy == "streaming-llm") {
    detail::check_sinks(kTitle, p.sinks, p.budget);
  } else if (p.sinks != 0) {
    detail::fail_param(kTitle, "sinks", p.sinks, fmt::format("must be 0 for {}: only streaming-llm has sinks", p.policy));
  }
  if (mode_ == Mode::kRecency && p.group_size != 1) {
    detail::fail_param(kTitle, "groupSize", p.group_size,
                       fmt::format("must be 1 for {}: it never reads attention", p.policy));
  }
  detail::check_at_least(kTitle, "groupSize", p.group_size, 1);
  detail::check_at_most(kTitle, "groupSize", p.group_size, 256);
  detail::check_at_least(kTitle, "threads", p.threads, 0);
  detail::check_flag(kTitle, "normalize", p.normalize);
  if (p.normalize != 0 && mode_ != Mode::kVotes && mode_ != Mode::kScores) {
    detail::fail_param(kTitle, "normalize", p.normalize,
                       fmt::format("must be 0 for {}: only h2o and scissorhands accumulate a score to normalise", p.policy));
  }
  instances_ = static_cast<std::size_t>(p.instances);
  capacity_ = static_cast<std::size_t>(p.budget) + 1;
  const std::size_t slots = instances_ * capacity_;
  if (slots > (std::size_t{1} << 34)) {
    throw ParameterError(fmt::format("{}: {} instances x {} slots is too large", kTitle, instances_, capacity_));
  }
  positions_.assign(slots, kFree);
  if (mode_ == Mode::kVotes) {
    votes_.assign(slots, 0);
  } else if (mode_ == Mode::kRecency) {
    window_.assign(slots, 0);
    window_head_.assign(instances_, 0);
    // Position 0 is a sink when there are sinks, else the window's first entry.
    window_size_.assign(instances_, p.sinks > 0 ? 0 : 1);
  } else if (mode_ == Mode::kLastWeight) {
    // TOVA: two float32 record buffers (a float32 weight is held exactly), for
    // the same reason and with the same gap as H2O's scores below.
    records_.assign(2 * slots + 2 * kScoreGap, 0.0F);
    record_buffer_[0] = records_.data();
    record_buffer_[1] = records_.data() + slots + 2 * kScoreGap;
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
  if (mode_ == Mode::kLastWeight) {
    // Position 0 starts unobserved.
    for (std::size_t k = 0; k < instances_; ++k) record_buffer_[current_scores_][k * capacity_] = kUnobserved;
  }
  // Aggregated rows need one scratch row per thread, sized now (the step
  // allocates nothing); step() never runs more threads than rows exist here,
  // even if OpenMP's thread count rises later (omp_set_num_threads, or
  // torch.set_num_threads in the same process).
  scratch_threads_ = p.threads > 0 ? p.threads : std::max(1, omp_get_max_threads());
  if (p.group_size > 1) scratch_.assign(static_cast<std::size_t>(scratch_threads_) * capacity_, 0.0F);
  recent_.assign(static_cast<std::size_t>(std::max<std::int64_t>(p.recent_window, 1)), 0);
  admitted_ = 1;  // position 0
  if (p.normalize != 0) born_.assign(slots, 1);  // position 0, admitted before the first step
}

std::size_t PolicyBank::memory_bytes() const noexcept {
  return positions_.size() * 4 + born_.size() * 4 + votes_.size() * 4 + scores_.size() * 8 + records_.size() * 4 + scratch_.size() * 4 +
         (kept_.size() + free_slot_.size()) * 4 + (window_.size() + window_head_.size() + window_size_.size()) * 4;
}

double PolicyBank::score_of(std::size_t instance, Position pos) const noexcept {
  if (instance >= instances_) return -1.0;
  for (std::size_t s = 0; s < capacity_; ++s) {
    if (positions_[instance * capacity_ + s] == pos) {
      if (mode_ == Mode::kRecency) return -1.0;
      const std::size_t at = instance * capacity_ + s;
      if (params_.normalize != 0) {
        const double score = mode_ == Mode::kVotes ? static_cast<double>(votes_[at]) : score_buffer_[current_scores_][at];
        return detail::rate(score, static_cast<std::uint32_t>(admitted_ - born_[at]));
      }
      if (mode_ == Mode::kVotes) return static_cast<double>(votes_[at]);
      if (mode_ == Mode::kLastWeight) {
        const float v = record_buffer_[current_scores_][instance * capacity_ + s];
        return std::isnan(v) ? -1.0 : static_cast<double>(v);
      }
      return score_buffer_[current_scores_][instance * capacity_ + s];
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
    // Into the spare buffer, as the one-pass path does (the weights were
    // checked up front here, so `valid` is always true); step() switches.
    double* spare = score_buffer_[1 - current_scores_] + base;
    bool valid = true;
    victim = detail::bank_add_and_find_checked(spare, S, P, w, capacity_, protect_from, valid);
    S = spare;
  }
  if (params_.normalize != 0) {
    victim = lowest_rate(k, S, protect_from);
    if constexpr (std::is_same_v<Score, std::uint32_t>) best = vote_key(k, victim);
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
  // Its rate is 0 (no step has scored it), so the comparisons below hold
  // for rates too: a held slot's rate is 0 exactly when its score is.
  if (params_.normalize != 0) born_[k * capacity_ + f] = static_cast<std::uint32_t>(admitted_);
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

template <class Score>
std::size_t PolicyBank::lowest_rate(std::size_t k, const Score* S, std::uint32_t protect_from) const noexcept {
  const std::uint32_t* P = positions_.data() + k * capacity_;
  const std::uint32_t* B = born_.data() + k * capacity_;
  std::size_t victim = capacity_;
  double lowest = 0.0;
  for (std::size_t s = 0; s < capacity_; ++s) {
    if (P[s] == kFree || P[s] >= protect_from) continue;
    const double r = detail::rate(static_cast<double>(S[s]), static_cast<std::uint32_t>(admitted_ - B[s]));
    if (victim == capacity_ || r < lowest || (r == lowest && P[s] < P[victim])) {
      victim = s;
      lowest = r;
    }
  }
  return victim;
}

std::uint64_t PolicyBank::vote_key(std::size_t k, std::size_t slot) const noexcept {
  if (slot == capacity_) return kNoKey;
  const std::size_t at = k * capacity_ + slot;
  return (std::uint64_t{votes_[at]} << 32) | positions_[at];
}

namespace {

[[noreturn]] void refuse_weights(std::int64_t instance) {
  throw ContractError(fmt::format("{}: instance {} has a NaN, infinite or negative weight in a held slot; "
                                  "weights must be finite and at least 0",
                                  kTitle, instance));
}

}  // namespace

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

  if (mode_ == Mode::kRecency) {
    commit(pos);
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t k = 0; k < n; ++k) {
      const auto kk = static_cast<std::size_t>(k);
      step_recency(kk, p, victim_positions[kk], victim_slots[kk]);
    }
    return;
  }
  if (mode_ == Mode::kLastWeight) {
    step_tova(pos, attn, stride, threads, victim_positions, victim_slots);
    return;
  }
  if (votes_mode_ && group == 1) {
    step_votes(pos, attn, stride, threads, protect_from, victim_positions, victim_slots);
  } else if (group == 1) {
    step_scores(pos, attn, stride, threads, protect_from, victim_positions, victim_slots);
  } else {
    step_grouped(pos, attn, stride, threads, protect_from, victim_positions, victim_slots);
  }
}

void PolicyBank::commit(std::int64_t pos) noexcept {
  const auto rw = static_cast<std::size_t>(params_.recent_window);
  if (rw > 0) recent_[admitted_ % rw] = static_cast<std::uint32_t>(pos);
  ++admitted_;
  newest_ = pos;
}

void PolicyBank::step_votes(std::int64_t pos, const float* attn, std::size_t stride, int threads,
                            std::uint32_t protect_from, Position* victim_positions, std::uint32_t* victim_slots) {
  const auto n = static_cast<std::int64_t>(instances_);
  const auto p = static_cast<std::uint32_t>(pos);
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
    refuse_weights(std::find(pending_bad_.begin(), pending_bad_.end(), 1) - pending_bad_.begin());
  }
  commit(pos);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    std::uint32_t* V = votes_.data() + kk * capacity_;
    if (params_.normalize != 0) {
      pending_slot_[kk] = static_cast<std::uint32_t>(lowest_rate(kk, V, protect_from));
      pending_best_[kk] = vote_key(kk, pending_slot_[kk]);
    }
    finish_instance(kk, p, protect_from, pending_best_[kk], pending_slot_[kk], V, victim_positions[kk],
                    victim_slots[kk]);
  }
}

void PolicyBank::step_scores(std::int64_t pos, const float* attn, std::size_t stride, int threads,
                             std::uint32_t protect_from, Position* victim_positions, std::uint32_t* victim_slots) {
  const auto n = static_cast<std::int64_t>(instances_);
  const auto p = static_cast<std::uint32_t>(pos);
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
  if (any_bad != 0) refuse_weights(std::find(pending_bad_.begin(), pending_bad_.end(), 1) - pending_bad_.begin());
  commit(pos);
  current_scores_ = 1 - current_scores_;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    if (params_.normalize != 0) {
      pending_slot_[kk] = static_cast<std::uint32_t>(lowest_rate(kk, spare + kk * capacity_, protect_from));
    }
    finish_instance(kk, p, protect_from, kNoKey, pending_slot_[kk], spare + kk * capacity_, victim_positions[kk],
                    victim_slots[kk]);
  }
}

void PolicyBank::step_grouped(std::int64_t pos, const float* attn, std::size_t stride, int threads,
                              std::uint32_t protect_from, Position* victim_positions, std::uint32_t* victim_slots) {
  const auto group = static_cast<std::size_t>(params_.group_size);
  const auto n = static_cast<std::int64_t>(instances_);
  const auto p = static_cast<std::uint32_t>(pos);
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
  if (bad_instance >= 0) refuse_weights(bad_instance);
  commit(pos);

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
  if (!votes_mode_) current_scores_ = 1 - current_scores_;  // the new scores are in the spare buffer
}

void PolicyBank::step_recency(std::size_t k, std::uint32_t pos, Position& victim_pos, std::uint32_t& victim_slot) {
  std::uint32_t* P = positions_.data() + k * capacity_;
  std::uint32_t* ring = window_.data() + k * capacity_;
  const auto cap = static_cast<std::uint32_t>(capacity_);
  const std::uint32_t f = free_slot_[k];
  P[f] = pos;
  ++kept_[k];
  if (pos >= params_.sinks) {  // a window entry (the sinks are never evicted and need no ring)
    const std::uint32_t at = window_head_[k] + window_size_[k];
    ring[at >= cap ? at - cap : at] = f;
    ++window_size_[k];
  }
  victim_pos = kFree;
  victim_slot = kFree;
  if (kept_[k] <= params_.budget) {
    free_slot_[k] = kept_[k];
    return;
  }
  // The oldest window entry goes (sinks < budget, so the window is never empty here).
  const std::uint32_t slot = ring[window_head_[k]];
  window_head_[k] = window_head_[k] + 1 == cap ? 0 : window_head_[k] + 1;
  --window_size_[k];
  victim_pos = P[slot];
  victim_slot = slot;
  P[slot] = kFree;
  --kept_[k];
  free_slot_[k] = slot;
}

void PolicyBank::step_tova(std::int64_t pos, const float* attn, std::size_t stride, int threads,
                           Position* victim_positions, std::uint32_t* victim_slots) {
  // Every held slot is covered by the row, so each becomes observed with this
  // step's weight: the victim is the held slot with the lowest weight in the
  // row (ties: the lower position); the token admitted now is unobserved and
  // never competes. One pass per instance checks the row and writes the new
  // records into the spare buffer, which becomes current only when every
  // instance's row was valid.
  const auto group = static_cast<std::size_t>(params_.group_size);
  const auto n = static_cast<std::int64_t>(instances_);
  const auto p = static_cast<std::uint32_t>(pos);
  pending_slot_.resize(instances_);
  pending_bad_.resize(instances_);
  float* spare = record_buffer_[1 - current_scores_];
  int any_bad = 0;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(max : any_bad)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    const std::uint32_t* P = positions_.data() + kk * capacity_;
    const float* w = attn + kk * group * stride;
    bool valid = true;
    if (group > 1) {
      // Each query row is checked before the rows are folded into one.
      for (std::size_t g = 0; g < group && valid; ++g) valid = detail::bank_held_weights_valid(P, w + g * stride, capacity_);
      float* out = scratch_.data() + static_cast<std::size_t>(omp_get_thread_num()) * capacity_;
      detail::bank_aggregate(w, stride, group, capacity_, params_.aggregation, out);
      w = out;
    }
    bool folded_valid = true;
    pending_slot_[kk] =
        static_cast<std::uint32_t>(detail::bank_store_and_find_checked(spare + kk * capacity_, P, w, capacity_, folded_valid));
    pending_bad_[kk] = valid && folded_valid ? 0 : 1;
    any_bad = std::max(any_bad, static_cast<int>(pending_bad_[kk]));
  }
  if (any_bad != 0) {
    throw ContractError(fmt::format("{}: instance {} has a NaN, infinite or negative weight in a held slot; "
                                    "weights must be finite and at least 0",
                                    kTitle, std::find(pending_bad_.begin(), pending_bad_.end(), 1) - pending_bad_.begin()));
  }
  ++admitted_;  // TOVA has no recent window, so no ring of recent positions to update
  newest_ = pos;
  current_scores_ = 1 - current_scores_;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t k = 0; k < n; ++k) {
    const auto kk = static_cast<std::size_t>(k);
    std::uint32_t* P = positions_.data() + kk * capacity_;
    float* S = spare + kk * capacity_;
    const std::uint32_t f = free_slot_[kk];
    const std::uint32_t victim = pending_slot_[kk];  // chosen before the admission, among held slots
    P[f] = p;
    S[f] = kUnobserved;
    ++kept_[kk];
    victim_positions[kk] = kFree;
    victim_slots[kk] = kFree;
    if (kept_[kk] <= params_.budget) {
      free_slot_[kk] = kept_[kk];
      continue;
    }
    victim_positions[kk] = P[victim];
    victim_slots[kk] = victim;
    P[victim] = kFree;
    --kept_[kk];
    free_slot_[kk] = victim;
  }
}

}  // namespace kvevict
