// The bank's per-instance passes (src/core/bank.cpp), Highway-dispatched like the
// policies' kernels. Slots hold a position or PolicyBank::kFree.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvevict/core/bank.h"

namespace kvevict::detail {

// Folds `group` query rows (`stride` floats apart) into one weight per slot,
// in group order: the sum, the sum divided by the group size, or the maximum.
void bank_aggregate(const float* rows, std::size_t stride, std::size_t group, std::size_t n, Aggregation how,
                    float* out) noexcept;

// Scissorhands: votes of held slots += w >= threshold; in the same pass the
// evictable slot (held, position < protect_from) with the smallest key
// votes << 32 | position, returned with `slot` (n and UINT64_MAX when none),
// and whether every held weight is finite and >= 0.
std::uint64_t bank_vote_and_find(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n,
                                 float threshold, std::uint32_t protect_from, std::size_t& slot,
                                 bool& valid) noexcept;

// Takes back bank_vote_and_find's votes (exact: they are integers).
void bank_unvote(std::uint32_t* votes, const std::uint32_t* pos, const float* w, std::size_t n,
                 float threshold) noexcept;

// H2O: dst = src + (double)w for held slots (src for free ones), checking in
// the same pass that every held weight is finite and >= 0 (src is never
// written); returns the evictable slot (held, position < protect_from) with
// the lowest new score (ties: the lower position), or n when none.
std::size_t bank_add_and_find_checked(double* dst, const double* src, const std::uint32_t* pos, const float* w,
                                      std::size_t n, std::uint32_t protect_from, bool& valid) noexcept;

// TOVA: dst = w + 0.0F for held slots (0 for free ones; -0.0 becomes +0.0,
// since the search compares bit patterns), checked as above, and the held
// slot with the lowest weight (ties: the lower position), or n.
std::size_t bank_store_and_find_checked(float* dst, const std::uint32_t* pos, const float* w, std::size_t n,
                                        bool& valid) noexcept;

// True when every held slot's weight is finite and >= 0.
bool bank_held_weights_valid(const std::uint32_t* pos, const float* w, std::size_t n) noexcept;

}  // namespace kvevict::detail
