// The fused Linear forward on CUDA: one cuBLASLt matmul whose epilogue adds the bias and
// applies the ReLU, with x, W and y in FP32 (the product in the backend's math(): FP32, or
// TF32 on tensor cores) or in 16 bits (BF16, FP16: the product accumulated in FP32 on tensor
// cores, y rounded once), planned once per shape (lt_matmul.cu); where cuBLASLt offers no
// algorithm, the product runs as a gemm with the bias and the ReLU apart.
//
// A 16-bit y with a bias is never fused: cuBLASLt's bias has y's type (cublasLt.h,
// CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: FP32 only for integer and FP8 products; an FP32 bias
// with a BF16 or FP16 y is CUBLAS_STATUS_INVALID_VALUE, seen with cuBLAS 13.1), and a bias
// rounded to 16 bits first would round y twice. Such a product runs in FP32 into the
// workspace, and one kernel adds the FP32 bias, applies the ReLU and rounds y once.
// The backward's kernel is in linear_bias_backward.cu.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/lt_matmul.hpp"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {

namespace {

// y (rows, n) = act(product + bias), rounded once when y is 16-bit: a block per row
// (block-stride over the rows), its threads over the row's n values of the FP32 product
// (which may be y itself, in FP32); bias (n) may be null. The ReLU is fused_relu_value, what
// the Native backend's gives.
template <class S>
__global__ void bias_relu_kernel(int64_t rows, int64_t n, const float* product,
                                 const float* bias, bool relu, typename S::Stored* y) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    LAMINA_THREAD_STRIDE_LOOP(j, n) {
      float v = product[r * n + j];
      if (bias != nullptr) v += bias[j];
      if (relu) v = fused_relu_value(v);
      y[r * n + j] = S::store(v);
    }
  }
}

}  // namespace

// Row-major y (rows, n) = x (rows, k) W (n, k)^T is, column-major, y^T (n, rows) =
// op_T(W as k x n) * (x as k x rows).
bool CudaBackend::fused_linear(cudaDataType_t storage, int64_t rows, int64_t n, int64_t k,
                               const void* x, const void* w, const float* bias, bool relu,
                               void* y) {
  if (bias != nullptr && storage != CUDA_R_32F) return false;  // see the top of this file
  LtKey key;
  key.trans_a = true;
  key.m = n;
  key.n = rows;
  key.k = k;
  key.epilogue = relu ? (bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU)
                      : (bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  key.align = alignment_of({x, w, bias, y});
  key.math = storage == CUDA_R_32F ? math() : Math::kFP32;
  key.ab = key.d = storage;
  return lt_matmul(key, 1.0f, w, x, bias, 0.0f, y);
}

void CudaBackend::linear_forward(int64_t rows, int64_t n, int64_t k, const float* x,
                                 const float* w, const float* bias, bool relu, float* y) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0) return;
  if (k > 0 && fused_linear(CUDA_R_32F, rows, n, k, x, w, bias, relu, y)) return;
  // The product, then the bias and the ReLU in one pass over y: for an empty product (k = 0:
  // y = act(bias)) and shapes cuBLASLt has no algorithm for.
  gemm(Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, y);
  if (bias == nullptr && !relu) return;
  bias_relu_kernel<Fp32Storage><<<row_grid(rows), row_block(n), 0, s>>>(rows, n, y, bias, relu,
                                                                        y);
  LAMINA_CUDA_LAUNCHED(bias_relu_kernel);
}

void CudaBackend::linear_forward(Half format, int64_t rows, int64_t n, int64_t k,
                                 const uint16_t* x, const uint16_t* w, const float* bias,
                                 bool relu, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0) return;
  if (k > 0 && fused_linear(half_data_type(format), rows, n, k, x, w, bias, relu, y)) return;
  // Unfused (a bias, k = 0, or no cuBLASLt algorithm), still with y rounded once: the
  // product in FP32 in the workspace, then the bias, the ReLU and the rounding in one pass.
  const int64_t count = rows * n;
  float* product = static_cast<float*>(context_.workspace(sizeof(float) * count));
  gemm(format, Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, product);
  with_half_storage(format, [&](auto storage) {
    bias_relu_kernel<decltype(storage)>
        <<<row_grid(rows), row_block(n), 0, s>>>(rows, n, product, bias, relu, y);
  });
  LAMINA_CUDA_LAUNCHED(bias_relu_kernel);
}

}  // namespace lamina::cuda_detail
