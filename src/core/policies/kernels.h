// The hot loops of the attention-reading policies, compiled for every SIMD
// target with Google Highway and dispatched to the best one the CPU runs
// (include/kvevict/core/simd.h). Each is the plain loop of the spec; the
// differential tests hold them to the oracle on every supported target.
#pragma once

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <vector>

#include "kvevict/core/policies/victim_hint.h"

namespace kvevict::detail {

// The smallest float t with (double)t > share: for every float w,
// (double)w > share exactly when w >= t. Lets the vote test run on floats.
float vote_threshold(double share) noexcept;

// The Scissorhands step in one pass over the attention: votes[i] += w[i] >=
// threshold for i < n, and, in the same pass, whether every w[i] is finite and
// >= 0 and the minimum of the updated votes[begin, end) (UINT32_MAX when the
// range is empty). On invalid weights the caller undoes the pass with
// uncount_votes (integer votes make the undo exact).
struct VotePass {
  bool valid;
  std::uint32_t min_votes;
  std::size_t min_block;  // start of the first 64-slot block holding the minimum
};
VotePass count_votes_checked(std::uint32_t* votes, const float* w, std::size_t n, float threshold,
                             std::size_t begin, std::size_t end) noexcept;
void uncount_votes(std::uint32_t* votes, const float* w, std::size_t n, float threshold) noexcept;

// Index of the first element equal to `value` in v[begin, end), `end` if none.
std::size_t find_first(const std::uint32_t* v, std::size_t begin, std::size_t end, std::uint32_t value) noexcept;

// The H2O step: scores[i] += (double)w[i] for i < n, and the minimum of the
// updated scores[begin, end) with the first 64-slot block holding it
// (+infinity when the range is empty). The weights must be valid already.
struct ScorePass {
  double min_score;
  std::size_t min_block;
};
ScorePass add_weights_min(double* scores, const float* w, std::size_t n, std::size_t begin,
                          std::size_t end) noexcept;
std::size_t find_first(const double* v, std::size_t begin, std::size_t end, double value) noexcept;

// TOVA's step in one pass over the row: dst[i] = w[i] for i < n, whether
// every one is finite and >= 0, and their minimum with the first 64-slot
// block holding it; then, when valid, dst[i] = src[i + (i >= hole)] for i in
// [n, kept) (hole >= kept: none). When not valid, dst is garbage.
struct ObserveResult {
  bool valid;
  float min_weight;
  std::size_t min_block;
};
ObserveResult tova_observe(float* dst, const float* src, const float* w, std::size_t n, std::size_t kept,
                           std::size_t hole) noexcept;
std::size_t find_first(const float* v, std::size_t begin, std::size_t end, float value) noexcept;

// SnapKV: out[i] = max of v over [i - radius, i + radius] clipped to [0, n).
// v holds no NaN.
void pool_max(const double* v, std::size_t n, std::size_t radius, double* out) noexcept;

// SnapKV's running sums, over held slots i < n: slot i's cell is row[r], r
// the i-th ring not among holes[0, hole_count) (ascending), and its running
// sum run[i] becomes (run[i] + (double)w[i]) - (double)row[r], then row[r] =
// w[i]. Returns the largest w[i] (0 if n is 0) and the smallest nonzero one
// (+infinity if none).
struct SnapExtremes {
  float top;
  float least_nonzero;
};
SnapExtremes snap_observe(float* row, double* run, const float* w, std::size_t n, const std::uint32_t* holes,
                          std::size_t hole_count) noexcept;

// SnapKV: out[i] = the float64 sum of ring[c * stride + i] over c = 0 ...
// rows - 1, in that order, for i < n; returns the largest cell read (0 when none).
float ring_sums_max(const float* ring, std::size_t rows, std::size_t stride, std::size_t n, double* out) noexcept;

// pool_max, returning the minimum of out[0, end) as well (+infinity when
// end is 0); end <= n.
double pool_max_min(const double* v, std::size_t n, std::size_t radius, double* out, std::size_t end) noexcept;

// Every i in [0, end) whose pooled score (pool_max's out[i]) is <= limit,
// ascending with that score, while there is room in index/score; returns how
// many there are, or room + 1 when there are more. radius <= kMaxScreenRadius;
// `bits` is scratch of n / 64 + 2 words. end <= n.
inline constexpr std::size_t kMaxScreenRadius = 31;
std::size_t screen_pool(const double* v, std::size_t n, std::size_t radius, std::size_t end, double limit,
                        std::uint32_t* index, double* score, std::size_t room, std::uint64_t* bits) noexcept;

// How many of v[begin, end) are <= t, and the first of them (end if none).
struct AtMost {
  std::size_t count;
  std::size_t first;
};
AtMost count_at_most(const double* v, std::size_t begin, std::size_t end, double t) noexcept;

// True when every w[i] (i < n) is finite and >= 0.
bool weights_valid(const float* w, std::size_t n) noexcept;

// Index of the first minimum of v[begin, end) (ties: the lowest index);
// `end` when the range is empty.
std::size_t first_min(const std::uint32_t* v, std::size_t begin, std::size_t end) noexcept;
std::size_t first_min(const double* v, std::size_t begin, std::size_t end) noexcept;
// Index of the first maximum of v[begin, end) (ties: the lowest index);
// `end` when the range is empty. v holds no NaN.
std::size_t first_max(const double* v, std::size_t begin, std::size_t end) noexcept;

// KeyDiff's anchor from its stored quotients k / ||k||: for r = 0 ... rows - 1
// in that order, skipping a row whose skip[r] is 0, sums[c] += values[r * dim
// + c] for every c < dim -- each channel's sum in row order, exactly the plain
// loop's (the lanes run across channels).
void add_rows(const double* values, std::size_t rows, std::size_t dim, const double* skip, double* sums) noexcept;

// The steady state's one victim in [first, end): the first minimum, found in
// one block when the hint covers this range, else by a full scan. `end` when
// the range is empty. Consumes the hint.
template <class Score>
std::size_t single_victim(const Score* score, std::size_t first, std::size_t end, VictimHint<Score>& hint) noexcept {
  const bool hit = hint.valid && hint.first == first && hint.end == end;
  hint.valid = false;
  return hit ? find_first(score, hint.block, end, hint.min) : first_min(score, first, end);
}

// Removes slot j from each array (stride elements per slot) by sliding the
// tail [j + 1, kept) down once.
template <class T>
void erase_slot(std::vector<T>& array, std::size_t j, std::size_t kept, std::size_t stride = 1) noexcept {
  const auto at = [&](std::size_t slot) { return array.begin() + static_cast<std::ptrdiff_t>(slot * stride); };
  std::copy(at(j + 1), at(kept), at(j));
}

}  // namespace kvevict::detail
