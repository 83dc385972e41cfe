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

 private:
  std::size_t start_;
};

}  // namespace kvevict::testing
