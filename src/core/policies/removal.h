// Shared pieces of the score interface (Policy::scores / remove, docs/paged.md):
// checking and marking the positions an outside evictor chose.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

#include "kvevict/core/policy.h"

namespace kvevict::detail {

inline constexpr double kProtectedScore = std::numeric_limits<double>::infinity();

// Checks that `victims` are ascending, held (in the ascending `held`) and each
// in a removable slot (`removable(slot)` true), then marks their slots in
// `marked`. Throws ContractError naming `title` and the position before
// marking anything.
template <class Removable>
void mark_removal(std::string_view title, std::span<const Position> held, std::span<const Position> victims,
                  std::uint8_t* marked, Removable&& removable);

[[noreturn]] void fail_removal(std::string_view title, Position victim, std::string_view why);

template <class Removable>
void mark_removal(std::string_view title, std::span<const Position> held, std::span<const Position> victims,
                  std::uint8_t* marked, Removable&& removable) {
  std::size_t from = 0;
  for (std::size_t k = 0; k < victims.size(); ++k) {
    if (k > 0 && victims[k] <= victims[k - 1]) fail_removal(title, victims[k], "is not above the victim before it");
    while (from < held.size() && held[from] < victims[k]) ++from;
    if (from == held.size() || held[from] != victims[k]) fail_removal(title, victims[k], "is not held");
    if (!removable(from)) fail_removal(title, victims[k], "is protected (the policy never evicts it)");
  }
  from = 0;
  for (const Position v : victims) {
    while (held[from] < v) ++from;
    marked[from] = 1;
  }
}

}  // namespace kvevict::detail

namespace kvevict::detail {

[[noreturn]] void fail_score_spans(std::string_view title, std::size_t positions, std::size_t scores,
                                   std::size_t kept);
// Policy::scores' spans must each hold kept_count() entries.
inline void check_score_spans(std::string_view title, std::size_t positions, std::size_t scores, std::size_t kept) {
  if (positions < kept || scores < kept) [[unlikely]] fail_score_spans(title, positions, scores, kept);
}

}  // namespace kvevict::detail
