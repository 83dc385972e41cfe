// The bandwidth floor of `kvevict bench` (floor.cpp): evaluation code, kept
// out of the core's SIMD kernels.
#pragma once

#include <cstddef>

namespace kvevict::simd {

// The sum of data[0, n), read as fast as memory allows (the bandwidth
// baseline of `kvevict bench`); its rounding differs between targets.
float sum_floats(const float* data, std::size_t n) noexcept;

}  // namespace kvevict::simd
