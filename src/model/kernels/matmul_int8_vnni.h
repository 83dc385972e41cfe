// The 8-bit products on AVX-512 VNNI (matmul_int8_vnni.cpp), beside the
// Highway kernels of matmul_int8.cpp: built on x86-64 with GCC or Clang.
#pragma once

#include <cstddef>

#include "kvevict/model/kernels/matmul.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVEVICT_HAS_VNNI_KERNELS 1
#else
#define KVEVICT_HAS_VNNI_KERNELS 0
#endif

namespace kvevict::kernels {

#if KVEVICT_HAS_VNNI_KERNELS
// As matmul_int8: rows [begin, end) of a Q8_0 or Q4_K matrix against the
// rounded vectors. Only where kvevict::simd::vnni_active() (the CPU has
// AVX-512 F, BW, VL, DQ and VNNI, and the selection allows them).
void matmul_int8_vnni(const WeightMatrix& w, const Int8Vectors& x, float* y, std::size_t y_stride, std::size_t begin,
                      std::size_t end) noexcept;
#endif

}  // namespace kvevict::kernels
