// xoshiro128** seeded by splitmix32, exactly as spec/trace.md §1: the one
// generator every port shares, so generated traces reproduce to the bit.
#pragma once

#include <array>
#include <cstdint>

namespace kvevict {

class Rng {
 public:
  explicit Rng(std::uint32_t seed) noexcept;

  std::uint32_t next_u32() noexcept;
  // Uniform in [0, bound) without modulo bias; bound must be >= 1.
  std::uint32_t next_int(std::uint32_t bound);
  // next_u32 / 2^32, in [0, 1).
  double next_float() noexcept;

 private:
  std::array<std::uint32_t, 4> s_{};
};

}  // namespace kvevict
