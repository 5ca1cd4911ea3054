// The key of a cuBLASLt product (lt_matmul.cu), column-major as cuBLASLt sees it:
// D (m, n) = op(A) (m, k) op(B) (k, n), with an epilogue, every pointer aligned to `align`
// bytes (alignment_of), the product in `math` (kFP32 for 16-bit A and B), A and B of type
// ab and D of type d, on sm_target SMs. Row-major callers pass their operands swapped, as
// gemm does.
#pragma once

#include <cublasLt.h>

#include <cstdint>
#include <initializer_list>
#include <tuple>

#include "backends/cuda/alignment.hpp"
#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

struct LtKey {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  int align = 256;
  Math math = Math::kFP32;
  cudaDataType_t ab = CUDA_R_32F, d = CUDA_R_32F;
  int sm_target = 0;  // the SMs it may use (CudaContext::leave_sms), 0: all; set by lt_matmul

  auto tied() const {
    return std::tie(trans_a, trans_b, m, n, k, epilogue, align, math, ab, d, sm_target);
  }
  bool operator<(const LtKey& other) const { return tied() < other.tied(); }
};

// The key of a row-major gemm C (m, n) = op(A) (m, k) op(B) (k, n): column-major, C^T =
// op(B)^T op(A)^T, so lt_matmul takes B as its A and A as its B.
inline LtKey lt_gemm_key(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n, int64_t k,
                         Math math, cudaDataType_t ab, cudaDataType_t d,
                         std::initializer_list<const void*> pointers) {
  LtKey key;
  key.trans_a = trans_b == Transpose::kYes;
  key.trans_b = trans_a == Transpose::kYes;
  key.m = n;
  key.n = m;
  key.k = k;
  key.align = alignment_of(pointers);
  key.math = math;
  key.ab = ab;
  key.d = d;
  return key;
}

}  // namespace lamina::cuda_detail
