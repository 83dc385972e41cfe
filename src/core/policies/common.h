// Pieces every policy shares: parameter rules with the spec's messages, the
// admission checks of on_decode_step, and the reference eviction (repeated
// strict argmin over the evictable slots, then one compaction pass).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>

#include "kvevict/core/errors.h"
#include "kvevict/core/policy.h"

namespace kvevict::detail {

// Storage is allocated up front and positions are 32-bit; this bound keeps a
// mistyped budget from asking for gigabytes.
inline constexpr std::int64_t kMaxBudget = std::int64_t{1} << 24;
inline constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

// "<Title>: <param> (<value>) <rule>"
[[noreturn]] void fail_param(std::string_view title, std::string_view param, std::int64_t value,
                             std::string_view rule);

// budget in [1, kMaxBudget].
void check_budget(std::string_view title, std::int64_t budget);
// value >= minimum.
void check_at_least(std::string_view title, std::string_view param, std::int64_t value,
                    std::int64_t minimum);
// value <= maximum.
void check_at_most(std::string_view title, std::string_view param, std::int64_t value,
                   std::int64_t maximum, std::string_view why = {});
// A switch: 0 or 1 ("... must be 0 or 1").
void check_flag(std::string_view title, std::string_view param, std::int64_t value);

// normalize=1's score (H2O, Scissorhands): what a position accumulated
// divided by the steps that scored it -- kvpress's ObservedAttention and
// OpenVINO GenAI's NORM_SUM -- so a position is not ranked by how long it has
// been held. A position no step has scored yet ranks 0, as its sum does.
inline double rate(double accumulated, std::uint32_t scored_steps) noexcept {
  return scored_steps == 0 ? 0.0 : accumulated / static_cast<double>(scored_steps);
}

// A recent window must leave something to choose: recentWindow < budget.
// StreamingLLM's sinks: in [0, budget), so a recency window keeps room
// (shared by the policy and the bank's streaming-llm mode).
void check_sinks(std::string_view title, std::int64_t sinks, std::int64_t budget);

void check_recent_window(std::string_view title, std::int64_t recent_window, std::int64_t budget,
                         std::string_view what_chooses);
// Sinks and a recent window together must leave something to choose:
// sinks + recentWindow < budget ("... nothing for <what_chooses> to choose between").
void check_sinks_and_recent(std::string_view title, std::int64_t sinks, std::int64_t recent_window,
                            std::int64_t budget, std::string_view what_chooses);

// Refuses, before anything changes, a position that is not above the newest
// held one (`newest` is -1 when nothing is held) or that would not fit.
[[noreturn]] void fail_admission(std::string_view title, std::int64_t pos, std::int64_t newest,
                                std::size_t held_after, std::int64_t budget);
// Inline: the common case is one compare per rule, taken on every decode step
// (the cheapest policies cost a few nanoseconds a step); only a refusal leaves.
inline void check_admission(std::string_view title, std::int64_t pos, std::int64_t newest,
                            std::size_t held_after, std::size_t capacity, std::int64_t budget) {
  if (pos >= 0 && pos > newest && pos <= std::int64_t{std::numeric_limits<Position>::max()} && held_after <= capacity)
      [[likely]] {
    return;
  }
  fail_admission(title, pos, newest, held_after, budget);
}

// Refuses, before anything changes, a weight among the first `n` that is NaN,
// infinite or negative: comparisons with such values would make the victim
// depend on the order of a scan (or the compiler), so no rule is guessed.
void check_weights(std::string_view title, const float* w, std::size_t n);

// Number of leading held slots whose position is below `sinks` (the held
// positions are ascending, so the sinks are a prefix).
inline std::size_t sink_slots(std::span<const Position> held, std::int64_t sinks) noexcept {
  if (sinks <= 0) return 0;
  const auto limit = static_cast<Position>(std::min<std::int64_t>(sinks, std::numeric_limits<Position>::max()));
  return static_cast<std::size_t>(std::lower_bound(held.begin(), held.end(), limit) - held.begin());
}

// evict's budget must be >= 0.
[[noreturn]] void fail_evict_budget(std::string_view title, std::int64_t budget);
inline void check_evict_budget(std::string_view title, std::int64_t budget) {
  if (budget < 0) [[unlikely]] fail_evict_budget(title, budget);
}

// Number of weights a step may read: min(len(attn), kept).
inline std::size_t readable(const Attention& attn, std::size_t kept) noexcept {
  return attn ? std::min(attn->size(), kept) : 0;
}

// Slot of `pos` in an ascending array of held positions, kNoSlot if absent.
inline std::size_t find_slot(std::span<const Position> held, std::int64_t pos) noexcept {
  if (pos < 0 || pos > std::numeric_limits<Position>::max()) return kNoSlot;
  const auto p = static_cast<Position>(pos);
  const auto it = std::lower_bound(held.begin(), held.end(), p);
  return (it != held.end() && *it == p) ? static_cast<std::size_t>(it - held.begin()) : kNoSlot;
}

// Marks up to `needed` victims among slots [begin, end): each is the strict
// argmin of `score` over the unmarked slots, scanned ascending, so ties go to
// the lower position. Returns how many were marked.
template <class Score>
std::size_t mark_argmin_victims(const Score* score, std::uint8_t* marked, std::size_t begin,
                                std::size_t end, std::size_t needed) noexcept {
  std::size_t chosen = 0;
  for (; chosen < needed; ++chosen) {
    std::size_t best = kNoSlot;
    for (std::size_t i = begin; i < end; ++i) {
      if (marked[i] != 0) continue;
      if (best == kNoSlot || score[i] < score[best]) best = i;
    }
    if (best == kNoSlot) break;
    marked[best] = 1;
  }
  return chosen;
}

// Index of the first nonzero byte of marked[begin, end), `end` if none: eight
// bytes at a time (a steady-state eviction marks one slot among thousands).
inline std::size_t next_marked(const std::uint8_t* marked, std::size_t begin, std::size_t end) noexcept {
  std::size_t i = begin;
  for (; i + 8 <= end; i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, marked + i, sizeof word);
    if (word != 0) break;
  }
  while (i < end && marked[i] == 0) ++i;
  return i;
}

// Emits marked slots' positions ascending into `victims`, clears the marks and
// slides survivors down; `move(to, from, n)` moves the policy's other per-slot
// state of slots [from, from + n) to [to, to + n) (to < from: a forward
// copy, std::copy). The slots before the first mark stay where they are, and
// each run of survivors between marks moves as one block. Returns the number
// of victims; `kept` becomes the survivors' count.
template <class Move>
std::size_t compact(std::size_t& kept, std::uint8_t* marked, Position* positions, Position* victims,
                    Move&& move) noexcept {
  std::size_t i = next_marked(marked, 0, kept);
  std::size_t write = i;
  std::size_t count = 0;
  while (i < kept) {
    // slot i is marked
    victims[count++] = positions[i];
    marked[i] = 0;
    const std::size_t run = i + 1;
    const std::size_t run_end = next_marked(marked, run, kept);
    if (run_end > run) {
      std::copy(positions + run, positions + run_end, positions + write);
      move(write, run, run_end - run);
      write += run_end - run;
    }
    i = run_end;
  }
  kept = write;
  return count;
}

}  // namespace kvevict::detail
