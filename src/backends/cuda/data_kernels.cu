// Dropout and gather_rows: elementwise kernels whose results are bit-identical to the Native
// backend's (the same counter-based random numbers, the same float operations).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/common.hpp"
#include "lamina/counter_rng.hpp"

namespace lamina::cuda_detail {
namespace {

// x, mask, y (n); element i is kept when counter_uniform(seed, offset + i) >= ratio.
__global__ void dropout_forward_kernel(int64_t n, float ratio, float keep_scale, uint64_t seed,
                                       uint64_t offset, const float* x, float* mask, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const bool keep = counter_uniform(seed, offset + static_cast<uint64_t>(i)) >= ratio;
    const float m = keep ? keep_scale : 0.0f;
    mask[i] = m;
    y[i] = x[i] * m;
  }
}

// src (*, cols) uint8; order (order_len) int32; dst (rows, cols):
// dst row r = scale * src row order[(start + r) % order_len].
__global__ void gather_rows_kernel(int64_t rows, int64_t cols, const uint8_t* src,
                                   const int32_t* order, int64_t order_len, int64_t start,
                                   float scale, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols;
    const int64_t j = i - r * cols;
    const int64_t src_row = order[(start + r) % order_len];
    dst[i] = scale * static_cast<float>(src[src_row * cols + j]);
  }
}

}  // namespace

void CudaBackend::dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                                  const float* x, float* mask, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  const float keep_scale = 1.0f / (1.0f - ratio);  // on the host, exactly as Native does
  dropout_forward_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, ratio, keep_scale, seed,
                                                                offset, x, mask, y);
  LAMINA_CUDA_LAUNCHED(dropout_forward_kernel);
}

void CudaBackend::gather_rows(int64_t rows, int64_t cols, const uint8_t* src,
                              const int32_t* order, int64_t order_len, int64_t start,
                              float scale, float* dst) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  LAMINA_REQUIRE(order_len > 0, "gather_rows: the order of ", order_len,
                 " rows is empty; the data set has no examples");
  gather_rows_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, src, order, order_len, start, scale, dst);
  LAMINA_CUDA_LAUNCHED(gather_rows_kernel);
}

}  // namespace lamina::cuda_detail
