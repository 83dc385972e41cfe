// Replaces the global operator new for the test program so that allocations
// made inside a CountAllocations scope can be counted. Everything still goes
// through malloc/free, so the sanitizers keep watching every block.
#include "alloc_counter.h"

#include <cstdlib>
#include <new>

namespace {
thread_local bool counting = false;
thread_local std::size_t allocations = 0;
thread_local std::size_t allocated_bytes = 0;

void* allocate(std::size_t n) {
  if (counting) {
    ++allocations;
    allocated_bytes += n;
  }
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
}  // namespace

void* operator new(std::size_t n) { return allocate(n); }
void* operator new[](std::size_t n) { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }
// The nothrow forms too (std::stable_sort's temporary buffer uses them), so
// every block is malloc'd and freed by the same pair.
void* operator new(std::size_t n, const std::nothrow_t&) noexcept {
  if (counting) ++allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept {
  if (counting) ++allocations;
  return std::malloc(n == 0 ? 1 : n);
}
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

namespace kvevict::testing {

CountAllocations::CountAllocations() : start_(allocations), start_bytes_(allocated_bytes) { counting = true; }
CountAllocations::~CountAllocations() { counting = false; }
std::size_t CountAllocations::count() const { return allocations - start_; }
std::size_t CountAllocations::bytes() const { return allocated_bytes - start_bytes_; }

}  // namespace kvevict::testing
