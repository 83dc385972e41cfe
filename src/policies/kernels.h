// The hot loops of the attention-reading policies, compiled for AVX-512, AVX2
// and baseline x86-64 and chosen at load time (target_clones). Each is the
// plain loop of the spec; the differential tests hold them to the oracle.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvevict::detail {

// The smallest float t with (double)t > share: for every float w,
// (double)w > share exactly when w >= t. Lets the vote test run on floats.
float vote_threshold(double share) noexcept;

// votes[i] += w[i] >= threshold, for i < n.
void count_votes(std::uint32_t* votes, const float* w, std::size_t n, float threshold) noexcept;

// scores[i] += (double)w[i], for i < n.
void add_weights(double* scores, const float* w, std::size_t n) noexcept;

// True when every w[i] (i < n) is finite and >= 0.
bool weights_valid(const float* w, std::size_t n) noexcept;

// Index of the first minimum of v[begin, end) (ties: the lowest index);
// `end` when the range is empty.
std::size_t first_min(const std::uint32_t* v, std::size_t begin, std::size_t end) noexcept;
std::size_t first_min(const double* v, std::size_t begin, std::size_t end) noexcept;

}  // namespace kvevict::detail
