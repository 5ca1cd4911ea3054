// The products of 16-bit storage on CUDA (backend.hpp, "16-bit storage"): supports_half and
// gemm with A and B in BF16 or FP16 and C in FP32 or the same 16-bit format.
//
// cuBLASLt (its algorithm timed, lt_matmul.cu), or cublasGemmEx where it has none, with
// compute type CUBLAS_COMPUTE_32F: the 16-bit operands are read exactly, products are
// accumulated in FP32 on tensor cores (whatever math() says: TF32 would change nothing,
// 16-bit values being exact in TF32), alpha and beta C are applied in FP32, and a 16-bit C
// is rounded once, to nearest even: by cuBLASLt from its FP32 sums (alpha A B), or from an
// FP32 C in the workspace (alpha A B + beta C). The row-major trick (lt_gemm_key, gemm_ex)
// and the empty sum (k == 0) are the float gemm's (cuda_backend.cpp).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"

namespace lamina::cuda_detail {

// Tensor cores took FP16 with compute capability 7.0 (Volta) and BF16 with 8.0 (Ampere).
bool CudaBackend::supports_half(Half format) const {
  return context_.properties().major >= (format == Half::kBF16 ? 8 : 7);
}

void CudaBackend::gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const uint16_t* a, const uint16_t* b, float beta,
                       float* c) {
  on_device();
  if (m == 0 || n == 0) return;
  if (k == 0) return empty_product(m * n, beta, c);
  lt_gemm(half_data_type(format), Math::kFP32, trans_a, trans_b, m, n, k, alpha, a, b, beta,
          c);
}

void CudaBackend::gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                       int64_t k, float alpha, const uint16_t* a, const uint16_t* b, float beta,
                       uint16_t* c) {
  on_device();
  if (m == 0 || n == 0) return;
  if (k == 0 && beta == 0) return zero(sizeof(uint16_t) * m * n, c);  // +0 in both formats
  if (k == 0 && beta == 1) return;
  // C = alpha op(A) op(B) straight into the 16-bit C where cuBLASLt has an algorithm that
  // rounds the FP32 sum once (lt_matmul.cu).
  if (beta == 0) {
    const LtKey key = lt_gemm_key(trans_a, trans_b, m, n, k, Math::kFP32, half_data_type(format),
                                  half_data_type(format), {a, b, c});
    if (lt_matmul(key, alpha, b, a, nullptr, 0.0f, c)) return;
  }
  // Otherwise: cuBLAS does not round a 16-bit C once: with beta != 0 it rounds the product
  // to C's type before it adds beta C (cuBLAS 13.1 on an H100 at 256x512x384: a quarter of
  // the results an ulp away from the sum rounded once, some two), and with beta == 0 some
  // shapes keep split sums in C's type (1024x10x4096 on an H200: 42% of the results off,
  // 12% by more than an ulp). So the product goes into an FP32 C in the workspace (with beta
  // C, widened, when beta != 0) and the sum is rounded once, as the Native backend does.
  float* wide = static_cast<float*>(context_.workspace(sizeof(float) * m * n));
  if (beta != 0) from_half(format, m * n, c, wide);
  gemm(format, trans_a, trans_b, m, n, k, alpha, a, b, beta, wide);
  to_half(format, m * n, wide, c);
}

}  // namespace lamina::cuda_detail
