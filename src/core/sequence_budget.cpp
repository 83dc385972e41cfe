#include "kvevict/core/sequence_budget.h"

#include <algorithm>
#include <limits>

#include <fmt/format.h>

#include "kvevict/core/errors.h"
#include "kvevict/core/layer_budget.h"
#include "kvevict/core/registry.h"

namespace kvevict {

namespace {

constexpr const char* kTitle = "SequenceBudget";
constexpr std::int64_t kMaxCaches = 65536;
constexpr double kProtected = std::numeric_limits<double>::infinity();
// The most one SequenceBudget may allocate, its caches' policies included.
constexpr std::uint64_t kMaxSequenceBytes = std::uint64_t{1} << 30;

[[noreturn]] void fail(std::string_view name, std::int64_t value, std::string_view rule) {
  throw ParameterError(fmt::format("{}: {} ({}) {}", kTitle, name, value, rule));
}

}  // namespace

SequenceBudget::SequenceBudget(std::string_view policy, const ParamMap& params, const SequenceBudgetParams& sequence)
    : sequence_(sequence) {
  if (sequence.caches < 1) fail("caches", sequence.caches, "must be at least 1");
  if (sequence.caches > kMaxCaches) fail("caches", sequence.caches, fmt::format("must be at most {}", kMaxCaches));
  if (sequence.budget < 1) fail("budget", sequence.budget, "must be at least 1");
  if (sequence.budget > kMaxLayerBudget) fail("budget", sequence.budget, fmt::format("must be at most {}", kMaxLayerBudget));
  const PolicyInfo& info = find_policy(policy);
  ParamMap given = params;
  for (const auto& [key, value] : params) {
    if (key == "budget" && value != sequence.budget) {
      throw ParameterError(fmt::format("{}: the policy's budget ({}) must equal the sequence's ({}), or be left out",
                                       kTitle, value, sequence.budget));
    }
  }
  set_param(given, "budget", sequence.budget);
  caches_.push_back(info.make(given));
  rules_ = caches_.front()->score_rules();
  // Storage is sized before it is taken: every cache's policy as large as the
  // first, and this class's own arrays once.
  capacity_ = static_cast<std::size_t>(sequence.budget) + 1;
  const std::uint64_t own = capacity_ * kBytesPerSlot;
  const std::uint64_t per_cache = caches_.front()->memory_bytes();
  if (own > kMaxSequenceBytes ||
      per_cache > (kMaxSequenceBytes - own) / static_cast<std::uint64_t>(sequence.caches)) {
    throw ParameterError(fmt::format(
        "{}: caches ({}) x {} bytes a cache ({}, budget {}) would be more than the {} bytes one sequence may hold: "
        "lower caches or budget",
        kTitle, sequence.caches, per_cache, info.name, sequence.budget, kMaxSequenceBytes));
  }
  for (std::int64_t c = 1; c < sequence.caches; ++c) caches_.push_back(info.make(given));
  cap_ = rules_.budget_cap;
  const std::int64_t target = std::min(sequence.budget, cap_);
  const std::int64_t keeps = std::max<std::int64_t>(rules_.protected_newest, sequence.keep_newest ? 1 : 0) +
                             rules_.protected_below;
  if (keeps > target) {
    throw ParameterError(fmt::format("{}: budget ({}) cannot be met: {} protects {} newest and {} first positions, "
                                     "{} in all, above the {} a cache may hold",
                                     kTitle, sequence.budget, info.name, rules_.protected_newest,
                                     rules_.protected_below, keeps, target));
  }
  positions_.resize(capacity_);
  others_.resize(capacity_);
  scores_.resize(capacity_);
  combined_.resize(capacity_);
  order_.resize(capacity_);
  victims_.resize(capacity_);
}

void SequenceBudget::check_cache(std::size_t cache, const char* what) const {
  if (cache >= caches_.size()) {
    throw ContractError(fmt::format("{}: {}: cache {} is out of range (the sequence has {} caches)", kTitle, what,
                                    cache, caches_.size()));
  }
}

void SequenceBudget::on_decode_step(std::size_t cache, std::int64_t pos, Attention attn) {
  check_cache(cache, "on_decode_step");
  caches_[cache]->on_decode_step(pos, attn);
}

void SequenceBudget::on_step(std::size_t cache, std::int64_t pos, const StepInputs& in) {
  check_cache(cache, "on_step");
  caches_[cache]->on_step(pos, in);
}

void SequenceBudget::on_origin(std::size_t cache, const StepInputs& in) {
  check_cache(cache, "on_origin");
  caches_[cache]->on_origin(in);
}

Policy& SequenceBudget::cache(std::size_t c) {
  check_cache(c, "cache");
  return *caches_[c];
}

// Adds cache c's scores, scaled to [0, 1] by its own least and greatest
// finite one, into combined_ (+infinity where it protects a position).
void SequenceBudget::add_scaled_scores(std::size_t c, std::size_t kept) {
  if (c > 0) {
    const std::size_t held = caches_[c]->scores({others_.data(), capacity_}, {scores_.data(), capacity_});
    if (held != kept || !std::equal(others_.begin(), others_.begin() + static_cast<std::ptrdiff_t>(held),
                                    positions_.begin())) {
      throw ContractError(fmt::format("{}: cache {} holds {} positions, cache 0 {}; every cache must hold the same "
                                      "ones (step each cache once a step)",
                                      kTitle, c, held, kept));
    }
  }
  double low = kProtected, high = -kProtected;
  for (std::size_t i = 0; i < kept; ++i) {
    if (scores_[i] != kProtected) {
      low = std::min(low, scores_[i]);
      high = std::max(high, scores_[i]);
    }
  }
  const double span = high - low;
  for (std::size_t i = 0; i < kept; ++i) {
    if (scores_[i] == kProtected) {
      combined_[i] = kProtected;
    } else if (combined_[i] != kProtected) {
      combined_[i] += span > 0.0 ? (scores_[i] - low) / span : 0.0;
    }
  }
}

std::span<const Position> SequenceBudget::evict(std::int64_t budget) {
  if (budget < 0) {
    throw ContractError(fmt::format("{}: evict was asked for a budget of {}; it must be at least 0", kTitle, budget));
  }
  victim_count_ = 0;
  if (caches_.front()->kept_count() > capacity_) {
    throw ContractError(fmt::format("{}: the sequence holds {} positions, more than its budget ({}) and the one "
                                    "admitted since: evict after every step",
                                    kTitle, caches_.front()->kept_count(), sequence_.budget));
  }
  const auto target = static_cast<std::size_t>(std::min(budget, cap_));
  const std::size_t kept = caches_.front()->scores({positions_.data(), capacity_}, {scores_.data(), capacity_});
  if (kept <= target) return {};
  const std::size_t n = caches_.size();
  // One cache: its own scores, so that it decides as its evict() does.
  if (n == 1) {
    std::copy_n(scores_.begin(), kept, combined_.begin());
  } else {
    std::fill_n(combined_.begin(), kept, 0.0);
    for (std::size_t c = 0; c < n; ++c) add_scaled_scores(c, kept);
  }
  if (sequence_.keep_newest) combined_[kept - 1] = kProtected;  // positions_ ascend: the newest is last
  std::size_t count = 0;
  for (std::size_t i = 0; i < kept; ++i) {
    if (combined_[i] == kProtected) continue;
    if (n > 1) combined_[i] /= static_cast<double>(n);
    order_[count++] = static_cast<std::uint32_t>(i);
  }
  std::sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(count), [&](std::uint32_t a, std::uint32_t b) {
    if (combined_[a] != combined_[b]) return combined_[a] < combined_[b];
    return a < b;  // positions are ascending: the lower one
  });
  const std::size_t needed = std::min(std::max(kept - target, rules_.min_victims), count);
  for (std::size_t k = 0; k < needed; ++k) victims_[k] = positions_[order_[k]];
  std::sort(victims_.begin(), victims_.begin() + static_cast<std::ptrdiff_t>(needed));
  victim_count_ = needed;
  if (needed > 0) {
    for (const auto& cache : caches_) cache->remove({victims_.data(), needed});
  }
  return {victims_.data(), victim_count_};
}

std::size_t SequenceBudget::memory_bytes() const noexcept {
  std::size_t bytes = 0;
  for (const auto& c : caches_) bytes += c->memory_bytes();
  return bytes + capacity_ * kBytesPerSlot;
}

}  // namespace kvevict
