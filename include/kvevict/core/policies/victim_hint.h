// Internal to the policies; in a public header only because policies hold one
// by value (sizes fixed at construction, nothing allocated later).
#pragma once

#include <cstddef>

namespace kvevict::detail {

// What a decode step's pass learned about the next eviction: the minimum
// over the range [first, end) the eviction will search, and the first 64-slot
// block holding it. Any other change to the state invalidates it.
template <class Score>
struct VictimHint {
  bool valid = false;
  Score min{};
  std::size_t block = 0;
  std::size_t first = 0;
  std::size_t end = 0;

  void set(Score m, std::size_t b, std::size_t f, std::size_t e) noexcept {
    valid = true;
    min = m;
    block = b;
    first = f;
    end = e;
  }
};

}  // namespace kvevict::detail
