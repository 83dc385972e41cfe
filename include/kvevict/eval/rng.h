// xoshiro128** seeded by splitmix32, exactly as spec/trace.md §1: the one
// generator every port shares, so generated traces reproduce to the bit.
#pragma once

#include <array>
#include <cstdint>

namespace kvevict {

class Rng {
 public:
  explicit Rng(std::uint32_t seed) noexcept;

  // A generator whose whole 128-bit state comes from `key` through a
  // bijection: distinct keys give distinct streams, so a caller that packs
  // its coordinates into the key without loss (kvevict tasks: seed, task,
  // length, depth, sample) gives every coordinate its own stream, which a
  // 32-bit seed cannot promise. Not part of spec/trace.md (the trace uses
  // the seed constructor).
  static Rng from_key(const std::array<std::uint32_t, 4>& key) noexcept;

  std::uint32_t next_u32() noexcept;
  // Uniform in [0, bound) without modulo bias; bound must be >= 1.
  std::uint32_t next_int(std::uint32_t bound);
  // next_u32 / 2^32, in [0, 1).
  double next_float() noexcept;

 private:
  Rng() = default;
  std::array<std::uint32_t, 4> s_{};
};

}  // namespace kvevict
