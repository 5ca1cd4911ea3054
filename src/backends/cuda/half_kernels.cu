// 16-bit storage on CUDA (Backend::to_half, from_half): elementwise kernels around
// rounding.hpp's conversions, the same functions the Native backend runs, so both give the
// same bits.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/rounding.hpp"

namespace lamina::cuda_detail {
namespace {

template <Half kFormat>
__global__ void to_half_kernel(int64_t n, const float* x, uint16_t* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    y[i] = kFormat == Half::kBF16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
  }
}

template <Half kFormat>
__global__ void from_half_kernel(int64_t n, const uint16_t* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    y[i] = kFormat == Half::kBF16 ? bf16_to_float(x[i]) : fp16_to_float(x[i]);
  }
}

}  // namespace

void CudaBackend::to_half(Half format, int64_t n, const float* x, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  if (format == Half::kBF16) {
    to_half_kernel<Half::kBF16><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  } else {
    to_half_kernel<Half::kFP16><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  }
  LAMINA_CUDA_LAUNCHED(to_half_kernel);
}

void CudaBackend::from_half(Half format, int64_t n, const uint16_t* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  if (format == Half::kBF16) {
    from_half_kernel<Half::kBF16><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  } else {
    from_half_kernel<Half::kFP16><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  }
  LAMINA_CUDA_LAUNCHED(from_half_kernel);
}

}  // namespace lamina::cuda_detail
