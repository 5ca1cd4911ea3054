// The Native backend's matrix products in a Math (backend.hpp): every gemm of the backend,
// the convolutions' included, runs through sgemm here.
#pragma once

#include <cstdint>

#include "lamina/backend.hpp"

namespace lamina::native {

// Row-major C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C with explicit leading
// dimensions, by OpenBLAS. Under Math::kTF32 the operands are first rounded to TF32
// (round_to_tf32) into per-thread scratch matrices; the product is then FP32's. k = 0 is
// the empty sum: C = beta C (C not read when beta is 0).
void sgemm(Math math, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc);

}  // namespace lamina::native
