// Counts heap allocations made by the current thread while a scope is open:
// the proof that a policy's hot path allocates nothing after construction.
#pragma once

#include <cstddef>

namespace kvevict::testing {

class CountAllocations {
 public:
  CountAllocations();
  ~CountAllocations();
  CountAllocations(const CountAllocations&) = delete;
  CountAllocations& operator=(const CountAllocations&) = delete;
  std::size_t count() const;
  // The bytes those allocations asked for (freed or not).
  std::size_t bytes() const;

 private:
  std::size_t start_;
  std::size_t start_bytes_;
};

}  // namespace kvevict::testing
