#include "policies/kernels.h"

#include <cmath>
#include <limits>

#define KVEVICT_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

namespace kvevict::detail {

float vote_threshold(double share) noexcept {
  float t = static_cast<float>(share);
  if (static_cast<double>(t) <= share) {
    t = std::nextafter(t, std::numeric_limits<float>::infinity());
  } else {
    while (static_cast<double>(std::nextafter(t, -std::numeric_limits<float>::infinity())) > share) {
      t = std::nextafter(t, -std::numeric_limits<float>::infinity());
    }
  }
  return t;
}

KVEVICT_CLONES
void count_votes(std::uint32_t* votes, const float* w, std::size_t n, float threshold) noexcept {
  for (std::size_t i = 0; i < n; ++i) votes[i] += w[i] >= threshold ? 1U : 0U;
}

KVEVICT_CLONES
void add_weights(double* scores, const float* w, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i) scores[i] += static_cast<double>(w[i]);
}

KVEVICT_CLONES
bool weights_valid(const float* w, std::size_t n) noexcept {
  constexpr float kMax = std::numeric_limits<float>::max();
  bool bad = false;
  for (std::size_t i = 0; i < n; ++i) bad |= !(w[i] >= 0.0F && w[i] <= kMax);
  return !bad;
}

namespace {
// Two passes, both vectorised: the minimum, then the first block of 64 that
// holds it, then the index inside that block.
template <class T>
inline std::size_t first_min_impl(const T* v, std::size_t begin, std::size_t end) noexcept {
  if (begin >= end) return end;
  T m = v[begin];
  for (std::size_t i = begin + 1; i < end; ++i) m = v[i] < m ? v[i] : m;
  std::size_t i = begin;
  for (; i + 64 <= end; i += 64) {
    bool found = false;
    for (std::size_t k = 0; k < 64; ++k) found |= v[i + k] == m;
    if (found) break;
  }
  for (; i < end; ++i) {
    if (v[i] == m) return i;
  }
  return end;
}
}  // namespace

KVEVICT_CLONES
std::size_t first_min(const std::uint32_t* v, std::size_t begin, std::size_t end) noexcept {
  return first_min_impl(v, begin, end);
}

KVEVICT_CLONES
std::size_t first_min(const double* v, std::size_t begin, std::size_t end) noexcept {
  return first_min_impl(v, begin, end);
}

}  // namespace kvevict::detail
