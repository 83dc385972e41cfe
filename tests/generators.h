// rapidcheck generators shared by the property, differential and bank tests:
// budgets at the sizes where the fast paths run, valid random parameters for
// any registered policy, and weights drawn to provoke ties and edge values.
#pragma once

#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "kvevict/core/registry.h"
#include "kvevict/eval/rng.h"

namespace kvevict {

// A draw from [min, max) uniform at every size: rapidcheck scales inRange by
// the case's size, so the early cases would all draw `min`.
template <class T>
T uniform(T min, T max) {
  return *rc::gen::resize(rc::kNominalSize, rc::gen::inRange<T>(min, max));
}

// Budgets from a mix: half the cases small (1..47), where every corner is
// cheap to reach, half large (60..300), so the fast paths' 64-slot
// blocks (the vote and score passes, the first-minimum and find-first
// searches, the victim hint) run on whole and partial blocks.
inline constexpr std::int64_t kLargeBudget = 60;
inline std::int64_t random_budget() {
  if (uniform(0, 2) == 0) return uniform<std::int64_t>(kLargeBudget, 301);
  return *rc::gen::inRange<std::int64_t>(1, 48);
}

// Decode steps for a run at `budget`: a small budget draws from [1, small_max);
// a large one fills the budget (the first eviction comes at step budget) and
// then evicts for up to 150 steps at that size.
inline int random_steps(std::int64_t budget, int small_max) {
  if (budget < kLargeBudget) return *rc::gen::inRange(1, small_max);
  return static_cast<int>(budget) + uniform(0, 150);
}

// A protected window (recentWindow, or sinks) of at most `limit`: half the time
// a short one (below 34), so a large budget keeps most slots searchable.
inline std::int64_t random_window(std::int64_t limit) {
  if (limit <= 0) return 0;
  if (uniform(0, 2) == 0) return uniform<std::int64_t>(0, std::min<std::int64_t>(limit, 33) + 1);
  return uniform<std::int64_t>(0, limit + 1);
}

// A valid parameter set for `policy` at `budget`, each rule of the spec respected.
inline ParamMap random_params(const PolicyInfo& policy, std::int64_t budget) {
  ParamMap p{{"budget", budget}};
  std::int64_t recent = 0;
  for (const ParamInfo& param : policy.params) {
    const std::string& n = param.name;
    if (n == "recentWindow") {
      recent = random_window(budget - 1);
      p.emplace_back(n, recent);
    } else if (n == "sinks") {
      // Sinks share the budget with the recent window (declared before it).
      p.emplace_back(n, random_window(budget - recent - 1));
    } else if (n == "historyWindow") {
      // 0 (all votes count) two times in three: the one-pass kernel and its hint.
      constexpr std::int64_t kHistory[] = {1, 2, 3, 7, 64, 65, 130};
      p.emplace_back(n, uniform(0, 3) != 0 ? 0 : kHistory[uniform(0, 7)]);
    } else if (n == "dropAmount") {
      // 1 three times in four: the single-victim path.
      p.emplace_back(n, uniform(0, 4) != 0 ? 1 : uniform<std::int64_t>(1, budget + 1));
    } else if (n == "obsWindow") {
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(1, 9));
    } else if (n == "poolKernel") {
      p.emplace_back(n, 2 * *rc::gen::inRange<std::int64_t>(0, 5) + 1);
    } else if (n == "numLayers") {
      const auto layers = *rc::gen::inRange<std::int64_t>(1, 7);
      p.emplace_back(n, layers);
      p.emplace_back("layer", *rc::gen::inRange<std::int64_t>(0, layers));
    } else if (n == "pyramidRatio") {
      p.emplace_back(n, *rc::gen::inRange<std::int64_t>(1, 7));
    } else if (n == "normalize") {
      // 1 one time in three (never beside a history window: a rule).
      bool history = false;
      for (const auto& [k, v] : p) history = history || (k == "historyWindow" && v > 0);
      p.emplace_back(n, !history && uniform(0, 3) == 0 ? 1 : 0);
    }
  }
  return p;
}

inline std::int64_t param_or(const ParamMap& p, const std::string& key, std::int64_t fallback) {
  for (const auto& [k, v] : p) {
    if (k == key) return v;
  }
  return fallback;
}

// One case's attention weights, from a distribution drawn once per case; most
// are tie-heavy:
//   mixed      0, 1, denormals, sixteenths, 20-bit fractions, and floats of
//              24 significant bits down to 2^-71 (float64 sums then round, so
//              the order of additions shows);
//   sixteenths k/16: sums of sixteenths are exact, so H2O scores tie often;
//   sparse     exact zeros but for one weight in 2, 8, 32, 256 or 4096 (or
//              none): runs of equal scores and votes, at 0 and above, across
//              many 64-slot blocks (drawn twice as often as the others);
//   profile    a fixed weight per position (a hash of it; a quarter or three
//              quarters of them 0, or none), some steps 0: heavy hitters and
//              never-attended positions, so the lowest score sits anywhere in
//              the range, not only at its young end, alone or tied;
//   flat       one value per step for every weight (a sixteenth, or the fair
//              share 1/len as a float or a float either side of it):
//              everything ties;
//   edge       the fair share and its neighbours among zeros and sixteenths,
//              where a vote is won or lost by one ulp.
// Runs at small budgets draw each value through rapidcheck (so a counterexample
// shrinks); `streamed` runs (the long ones at large budgets, hundreds of
// thousands of weights) take them from a stream seeded by rapidcheck. The step's other
// choices (absent, short, long) come from the same source (pick).
class WeightSource {
 public:
  enum class Mix { kMixed, kSixteenths, kSparse, kProfile, kFlat, kEdge };

  // `mix` when given, else one drawn.
  static WeightSource draw(bool streamed, std::optional<Mix> mix = std::nullopt) {
    WeightSource s;
    constexpr Mix kMixes[] = {Mix::kMixed, Mix::kSixteenths, Mix::kSparse, Mix::kSparse,
                              Mix::kProfile, Mix::kFlat, Mix::kEdge};
    constexpr int kSparseBits[] = {1, 3, 5, 8, 12, 32};  // 32: all zeros
    s.mix_ = mix ? *mix : kMixes[uniform(0, 7)];
    s.sparse_bits_ = kSparseBits[uniform(0, 6)];
    s.zeros_ = uniform(0, 3) * 3 / 2;  // of 4: 0, 1 or 3
    s.fine_ = uniform(0, 2) == 0;
    s.salt_ = *rc::gen::arbitrary<std::uint32_t>();
    s.streamed_ = streamed;
    if (streamed) s.rng_ = Rng(*rc::gen::arbitrary<std::uint32_t>());
    return s;
  }

  // A choice in [0, bound) for the shape of a step.
  std::uint32_t pick(std::uint32_t bound) {
    return streamed_ ? rng_.next_int(bound) : *rc::gen::inRange<std::uint32_t>(0, bound);
  }

  // Begins a step whose attention vector has `len` weights (the fair share is 1/len).
  void begin_step(std::size_t len) {
    share_ = 1.0F / static_cast<float>(std::max<std::size_t>(len, 1));
    if (mix_ == Mix::kFlat) flat_ = pick(2) == 0 ? sixteenth() : edge();
  }

  // The next weight; `pos` is the position it falls on (any value past the held ones).
  float next(std::int64_t pos) {
    switch (mix_) {
      case Mix::kMixed:
        switch (pick(7)) {
          case 0: return 0.0F;
          case 1: return 1.0F;
          case 2: return std::numeric_limits<float>::denorm_min() * static_cast<float>(1 + pick(3));
          case 3: return sixteenth();
          case 4:  // 24 significant bits at an exponent down to 2^-71: float64 sums round
            return std::ldexp(static_cast<float>(pick(1U << 24)), -24 - static_cast<int>(pick(48)));
          default: return static_cast<float>(pick(1U << 20)) / static_cast<float>(1 << 20);
        }
      case Mix::kSixteenths: return sixteenth();
      case Mix::kSparse:
        if (sparse_bits_ >= 32 || pick(1U << sparse_bits_) != 0) return 0.0F;
        return sixteenth();
      case Mix::kProfile: {
        if (pick(8) == 0) return 0.0F;
        const std::uint32_t h = hash(static_cast<std::uint32_t>(pos));
        if (static_cast<int>(h % 4) < zeros_) return 0.0F;
        if (fine_) return static_cast<float>((h >> 8) & 0xFFFFFU) / static_cast<float>(1 << 20);
        return static_cast<float>((h >> 8) % 17) / 16.0F;
      }
      case Mix::kFlat: return flat_;
      case Mix::kEdge:
        switch (pick(4)) {
          case 0: return 0.0F;
          case 1: return sixteenth();
          default: return edge();
        }
    }
    return 0.0F;
  }

 private:
  WeightSource() : rng_(0) {}

  std::uint32_t hash(std::uint32_t x) const noexcept {  // splitmix32
    std::uint32_t z = salt_ + x * 0x9E3779B9U;
    z ^= z >> 16;
    z *= 0x21F0AAADU;
    z ^= z >> 15;
    z *= 0x735A2D97U;
    z ^= z >> 15;
    return z;
  }
  float sixteenth() { return static_cast<float>(pick(17)) / 16.0F; }
  float edge() {
    switch (pick(3)) {
      case 0: return share_;
      case 1: return std::nextafter(share_, 2.0F);
      default: return std::nextafter(share_, 0.0F);
    }
  }

  Mix mix_ = Mix::kMixed;
  int sparse_bits_ = 1;
  int zeros_ = 0;
  bool fine_ = false;
  std::uint32_t salt_ = 0;
  bool streamed_ = false;
  Rng rng_;
  float share_ = 1.0F;
  float flat_ = 0.0F;
};

}  // namespace kvevict
