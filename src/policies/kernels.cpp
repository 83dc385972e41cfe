#include "policies/kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
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


// Branch-free forms so the loops vectorise: a weight is valid when it is >= 0
// and <= FLT_MAX (false for NaN and infinities), counted as an integer.
namespace {
inline std::uint32_t invalid(float x) noexcept {
  constexpr float kMax = std::numeric_limits<float>::max();
  return (static_cast<std::uint32_t>(x >= 0.0F) & static_cast<std::uint32_t>(x <= kMax)) ^ 1U;
}
}  // namespace

constexpr std::size_t kBlock = 64;

KVEVICT_CLONES
VotePass count_votes_checked(std::uint32_t* votes, const float* w, std::size_t n, float threshold,
                             std::size_t begin, std::size_t end) noexcept {
  std::uint32_t bad = 0;
  std::uint32_t low = std::numeric_limits<std::uint32_t>::max();
  std::size_t low_block = 0;
  end = std::min(end, n);
  begin = std::min(begin, end);
  // Segments so each loop stays branch-free and vectorises; the searched range
  // goes in blocks of 64, remembering the first block that lowered the minimum.
  for (std::size_t i = 0; i < begin; ++i) {
    bad |= invalid(w[i]);
    votes[i] += static_cast<std::uint32_t>(w[i] >= threshold);
  }
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t stop = std::min(b + kBlock, end);
    std::uint32_t block_low = std::numeric_limits<std::uint32_t>::max();
    for (std::size_t i = b; i < stop; ++i) {
      bad |= invalid(w[i]);
      const std::uint32_t v = votes[i] + static_cast<std::uint32_t>(w[i] >= threshold);
      votes[i] = v;
      block_low = std::min(block_low, v);
    }
    if (block_low < low) {
      low = block_low;
      low_block = b;
    }
  }
  for (std::size_t i = end; i < n; ++i) {
    bad |= invalid(w[i]);
    votes[i] += static_cast<std::uint32_t>(w[i] >= threshold);
  }
  return {bad == 0, low, low_block};
}

KVEVICT_CLONES
ScorePass add_weights_min(double* scores, const float* w, std::size_t n, std::size_t begin,
                          std::size_t end) noexcept {
  double low = std::numeric_limits<double>::infinity();
  std::size_t low_block = 0;
  end = std::min(end, n);
  begin = std::min(begin, end);
  for (std::size_t i = 0; i < begin; ++i) scores[i] += static_cast<double>(w[i]);
  for (std::size_t b = begin; b < end; b += kBlock) {
    const std::size_t stop = std::min(b + kBlock, end);
    double block_low = std::numeric_limits<double>::infinity();
    if (stop - b == kBlock) {
      // Eight lanes as one vector: a floating-point min reduction does not
      // vectorise on its own (the compiler may not reorder it), a lane
      // vector does; v < lane ? v : lane is exactly the MINPD instruction.
      using F8 = float __attribute__((vector_size(32)));
      using D8 = double __attribute__((vector_size(64)));
      D8 lanes = {};
      for (std::size_t k = 0; k < 8; ++k) lanes[k] = std::numeric_limits<double>::infinity();
      for (std::size_t i = b; i < stop; i += 8) {
        F8 wf;
        D8 sc;
        std::memcpy(&wf, w + i, sizeof wf);
        std::memcpy(&sc, scores + i, sizeof sc);
        sc += __builtin_convertvector(wf, D8);
        std::memcpy(scores + i, &sc, sizeof sc);
        lanes = sc < lanes ? sc : lanes;
      }
      double lane[8];
      std::memcpy(lane, &lanes, sizeof lane);
      for (const double l : lane) block_low = l < block_low ? l : block_low;
    } else {
      for (std::size_t i = b; i < stop; ++i) {
        const double v = scores[i] + static_cast<double>(w[i]);
        scores[i] = v;
        block_low = v < block_low ? v : block_low;
      }
    }
    if (block_low < low) {
      low = block_low;
      low_block = b;
    }
  }
  for (std::size_t i = end; i < n; ++i) scores[i] += static_cast<double>(w[i]);
  return {low, low_block};
}


KVEVICT_CLONES
void uncount_votes(std::uint32_t* votes, const float* w, std::size_t n, float threshold) noexcept {
  for (std::size_t i = 0; i < n; ++i) votes[i] -= static_cast<std::uint32_t>(w[i] >= threshold);
}



KVEVICT_CLONES
bool weights_valid(const float* w, std::size_t n) noexcept {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= invalid(w[i]);
  return bad == 0;
}

namespace {
// The first v[i] == value in [begin, end): whole 64-element blocks are tested
// with one vectorised OR, then the block that holds it is scanned.
template <class T>
inline std::size_t find_first_impl(const T* v, std::size_t begin, std::size_t end, T value) noexcept {
  std::size_t i = begin;
  for (; i + 64 <= end; i += 64) {
    bool found = false;
    for (std::size_t k = 0; k < 64; ++k) found |= v[i + k] == value;
    if (found) break;
  }
  for (; i < end; ++i) {
    if (v[i] == value) return i;
  }
  return end;
}

// Two passes, both vectorised: the minimum, then its first occurrence.
template <class T>
inline std::size_t first_min_impl(const T* v, std::size_t begin, std::size_t end) noexcept {
  if (begin >= end) return end;
  T m = v[begin];
  for (std::size_t i = begin + 1; i < end; ++i) m = v[i] < m ? v[i] : m;
  return find_first_impl(v, begin, end, m);
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

KVEVICT_CLONES
std::size_t find_first(const std::uint32_t* v, std::size_t begin, std::size_t end, std::uint32_t value) noexcept {
  return find_first_impl(v, begin, end, value);
}

KVEVICT_CLONES
std::size_t find_first(const double* v, std::size_t begin, std::size_t end, double value) noexcept {
  return find_first_impl(v, begin, end, value);
}

}  // namespace kvevict::detail
