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

namespace {

// murmur3's finaliser: a bijection of 32-bit words.
std::uint32_t mix32(std::uint32_t z) noexcept {
  z ^= z >> 16;
  z *= 0x85EBCA6BU;
  z ^= z >> 13;
  z *= 0xC2B2AE35U;
  z ^= z >> 16;
  return z;
}

}  // namespace

Rng Rng::from_key(const std::array<std::uint32_t, 4>& key) noexcept {
  Rng rng;
  rng.s_ = key;
  // Each round XORs one word with a function of another: invertible, so the
  // whole map is a bijection of the 128-bit key; three passes spread every
  // key word into every state word.
  for (std::uint32_t r = 0; r < 12; ++r) {
    rng.s_[(r + 1) & 3U] ^= mix32(rng.s_[r & 3U] + 0x9E3779B9U * (r + 1));
  }
  // The one key that maps to the all-zero state (xoshiro's fixed point).
  if (rng.s_[0] == 0 && rng.s_[1] == 0 && rng.s_[2] == 0 && rng.s_[3] == 0) rng.s_[0] = 1;
  return rng;
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
