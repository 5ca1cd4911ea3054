// The elementwise BLAS-like operations cuBLAS does not have: fill, mul, axpby. x, y, a, b (n).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

__global__ void fill_kernel(int64_t n, float value, float* x) {
  LAMINA_GRID_STRIDE_LOOP(i, n) x[i] = value;
}

__global__ void mul_kernel(int64_t n, const float* a, const float* b, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = a[i] * b[i];
}

// y = alpha x + beta y; a zero coefficient does not read its operand (OpenBLAS's saxpby), so
// beta == 0 overwrites a y holding NaN.
__global__ void axpby_kernel(int64_t n, float alpha, const float* x, float beta, float* y) {
  if (beta == 0) {
    LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = alpha == 0 ? 0.0f : alpha * x[i];
  } else if (alpha == 0) {
    LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = beta * y[i];
  } else {
    LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = alpha * x[i] + beta * y[i];
  }
}

}  // namespace

void CudaBackend::fill(int64_t n, float value, float* x) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  fill_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, value, x);
  LAMINA_CUDA_LAUNCHED(fill_kernel);
}

void CudaBackend::mul(int64_t n, const float* a, const float* b, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  mul_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, a, b, y);
  LAMINA_CUDA_LAUNCHED(mul_kernel);
}

void CudaBackend::axpby(int64_t n, float alpha, const float* x, float beta, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  axpby_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, alpha, x, beta, y);
  LAMINA_CUDA_LAUNCHED(axpby_kernel);
}

}  // namespace lamina::cuda_detail
