// The Native backend's matrix products (products.hpp).
#include "products.hpp"

#include <cblas.h>

#include "lamina/rounding.hpp"
#include "parallel.hpp"

namespace lamina::native {
namespace {

// The (rows, cols) matrix at m with leading dimension ld, rounded to TF32 into scratch slot
// `slot`, packed (leading dimension cols). The convolutions' operands live in their own slots.
const float* rounded_to_tf32(Scratch slot, int64_t rows, int64_t cols, const float* m,
                             int64_t ld) {
  float* out = scratch(slot, rows * cols);
  parallel_rows(rows, cols, [=](int64_t r) {
    const float* in = m + r * ld;
    float* o = out + r * cols;
    for (int64_t j = 0; j < cols; ++j) o[j] = round_to_tf32(in[j]);
  });
  return out;
}

}  // namespace

void sgemm(Math math, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha,
           const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
           int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // the empty sum; cblas would reject the zero leading dimension
    for (int64_t r = 0; r < m; ++r) scale_output(n, beta, c + r * ldc);
    return;
  }
  if (math == Math::kTF32) {
    // Stored op(A) is (k, m) when transposed, else (m, k); op(B) likewise.
    const int64_t a_cols = trans_a ? m : k, b_cols = trans_b ? k : n;
    a = rounded_to_tf32(Scratch::kOperandA, trans_a ? k : m, a_cols, a, lda);
    b = rounded_to_tf32(Scratch::kOperandB, trans_b ? n : k, b_cols, b, ldb);
    lda = a_cols;
    ldb = b_cols;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, blas_size(m, "gemm m"),
              blas_size(n, "gemm n"), blas_size(k, "gemm k"), alpha, a,
              blas_size(lda, "gemm lda"), b, blas_size(ldb, "gemm ldb"), beta, c,
              blas_size(ldc, "gemm ldc"));
}

}  // namespace lamina::native
