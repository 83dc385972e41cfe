// Library-internal SIMD helpers that are not kernels of a policy.
#pragma once

#include <cstddef>

namespace kvevict::simd {

// The sum of data[0, n), read as fast as memory allows (the bandwidth
// baseline of `kvevict bench`); its rounding differs between targets.
float sum_floats(const float* data, std::size_t n) noexcept;

}  // namespace kvevict::simd
