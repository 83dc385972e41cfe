#include "kvevict/eval/rng.h"

#include <bit>

#include "kvevict/core/errors.h"

namespace kvevict {

Rng::Rng(std::uint32_t seed) noexcept {
  std::uint32_t state = seed;
  for (auto& s : s_) {  // splitmix32
    state += 0x9E3779B9U;
    std::uint32_t z = state;
    z ^= z >> 16;
    z *= 0x21F0AAADU;
    z ^= z >> 15;
    z *= 0x735A2D97U;
    z ^= z >> 15;
    s = z;
  }
  if (s_[0] == 0 && s_[1] == 0 && s_[2] == 0 && s_[3] == 0) s_[0] = 1;
}

std::uint32_t Rng::next_u32() noexcept {  // xoshiro128**
  const std::uint32_t result = std::rotl(s_[1] * 5U, 7) * 9U;
  const std::uint32_t t = s_[1] << 9;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = std::rotl(s_[3], 11);
  return result;
}

std::uint32_t Rng::next_int(std::uint32_t bound) {
  if (bound == 0) throw ParameterError("Rng: next_int bound (0) must be at least 1");
  // Reject the low values that would make `v % bound` favour small results.
  const std::uint32_t threshold = (0U - bound) % bound;  // (2^32 - bound) mod bound
  std::uint32_t v = next_u32();
  while (v < threshold) v = next_u32();
  return v % bound;
}

double Rng::next_float() noexcept { return static_cast<double>(next_u32()) / 4294967296.0; }

}  // namespace kvevict
