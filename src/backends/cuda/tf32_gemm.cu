// The float gemm in TF32 on CUDA (math() == kTF32): a cuBLASLt product with
// CUBLAS_COMPUTE_32F_FAST_TF32, its algorithm timed (lt_matmul.cu), or cublasGemmEx where
// cuBLASLt has none.
//
// C = A^T B with A (k, m) and B (k, n) row-major, the sum running over their rows (a Linear's
// weight gradient, k the batch), is the layout cuBLAS's TF32 kernels read slowest: on an H200
// with cuBLAS 13.1, 231 us for m = n = 4096, k = 1024 against 113 us for the same product
// with both operands transposed (C = A' B'^T, the sum along rows, as a Linear's forward
// reads). For large products A and B are first transposed into the workspace (one pass over
// k (m + n) floats each way, about 20 us for that shape), then multiplied in that layout.
// The rule depends on the shape, and on whether an operand lies in the workspace (then it
// does not transpose), both fixed for a call site: the same call takes the same path every
// run.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

// The transposed copies' floats: A's at the workspace's start, B's after it at a 256-byte
// boundary (CudaContext::workspace_pieces).
int64_t b_offset(int64_t m, int64_t k) { return (m * k + 63) / 64 * 64; }

// Large enough that transposing costs less than it saves (both operands at least 512 wide,
// a sum of at least 256 terms), small enough that the copies take at most 256 MB of
// workspace.
bool transpose_first(int64_t m, int64_t n, int64_t k) {
  constexpr int64_t kMaxCopyBytes = int64_t{256} << 20;
  return m >= 512 && n >= 512 && k >= 256 &&
         int64_t{sizeof(float)} * (b_offset(m, k) + n * k) <= kMaxCopyBytes;
}

}  // namespace

void CudaBackend::tf32_gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                            int64_t k, float alpha, const float* a, const float* b, float beta,
                            float* c) {
  if (trans_a == Transpose::kYes && trans_b == Transpose::kNo && transpose_first(m, n, k) &&
      !context_.in_workspace(a) && !context_.in_workspace(b) && !context_.in_workspace(c)) {
    const auto [at, bt] = context_.workspace_pieces<2>(
        {sizeof(float) * size_t(m * k), sizeof(float) * size_t(n * k)});
    float* a_t = reinterpret_cast<float*>(at);
    float* b_t = reinterpret_cast<float*>(bt);
    transpose(1, k, m, a, a_t);  // (m, k)
    transpose(1, k, n, b, b_t);  // (n, k)
    return tf32_gemm(Transpose::kNo, Transpose::kYes, m, n, k, alpha, a_t, b_t, beta, c);
  }
  lt_gemm(CUDA_R_32F, Math::kTF32, trans_a, trans_b, m, n, k, alpha, a, b, beta, c);
}

}  // namespace lamina::cuda_detail
