// The bandwidth floor of `kvevict bench`: a plain streaming sum, compiled for
// every SIMD target with Google Highway and dispatched like the library's
// kernels (the target kvevict::simd::select_target chose runs here too).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "floor.cpp"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace kvevict::simd::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Streaming sum for the read-bandwidth baseline: eight independent vector
// accumulators so the adds never wait on each other and the loop is limited
// by memory, not by add latency. Its value is irrelevant (only timed).
float SumFloats(const float* HWY_RESTRICT data, std::size_t n) {
  const hn::ScalableTag<float> d;
  const std::size_t N = hn::Lanes(d);
  auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
  auto a4 = hn::Zero(d), a5 = hn::Zero(d), a6 = hn::Zero(d), a7 = hn::Zero(d);
  std::size_t i = 0;
  for (; i + 8 * N <= n; i += 8 * N) {
    a0 = hn::Add(a0, hn::LoadU(d, data + i));
    a1 = hn::Add(a1, hn::LoadU(d, data + i + N));
    a2 = hn::Add(a2, hn::LoadU(d, data + i + 2 * N));
    a3 = hn::Add(a3, hn::LoadU(d, data + i + 3 * N));
    a4 = hn::Add(a4, hn::LoadU(d, data + i + 4 * N));
    a5 = hn::Add(a5, hn::LoadU(d, data + i + 5 * N));
    a6 = hn::Add(a6, hn::LoadU(d, data + i + 6 * N));
    a7 = hn::Add(a7, hn::LoadU(d, data + i + 7 * N));
  }
  const auto all = hn::Add(hn::Add(hn::Add(a0, a1), hn::Add(a2, a3)), hn::Add(hn::Add(a4, a5), hn::Add(a6, a7)));
  float total = hn::GetLane(hn::SumOfLanes(d, all));
  for (; i < n; ++i) total += data[i];
  return total;
}

}  // namespace kvevict::simd::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include "floor.h"

namespace kvevict::simd {

HWY_EXPORT(SumFloats);

float sum_floats(const float* data, std::size_t n) noexcept { return HWY_DYNAMIC_DISPATCH(SumFloats)(data, n); }

}  // namespace kvevict::simd
#endif  // HWY_ONCE
