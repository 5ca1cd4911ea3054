// Batch normalisation's per-channel and per-element arithmetic on CUDA, shared by
// batch_norm_kernels.cu (BatchNorm alone) and batch_norm_scale_kernels.cu (BatchNorm with the
// Scale it absorbed), so that both give the same bits. Multiplies and adds round explicitly
// (__fmul_rn, __fsub_rn) so that no fused multiply-add changes a result from the Native
// backend's.
#pragma once

#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {

// 1 / sqrt(var + eps), in double and rounded once (as the Native backend does).
__device__ __forceinline__ float inverse_std(float var, float eps) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(var) + static_cast<double>(eps)));
}

static __global__ void inverse_std_kernel(int64_t channels, float eps, const float* var,
                                          float* inv_std) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) inv_std[c] = inverse_std(var[c], eps);
}

// The normalised value of x: (x - mean) inv_std.
__device__ __forceinline__ float normalized(float x, float mean, float inv_std) {
  return __fmul_rn(__fsub_rn(x, mean), inv_std);
}

// The input gradient of one element through batch statistics, inv_std (dy - mean_dy - y
// mean_dy_y), with mean_dy = mean_c(dy) and mean_dy_y = mean_c(dy y) of its channel.
__device__ __forceinline__ float normalized_gradient(float inv_std, float y, float dy,
                                                     float mean_dy, float mean_dy_y) {
  return __fmul_rn(inv_std, __fsub_rn(__fsub_rn(dy, mean_dy), __fmul_rn(y, mean_dy_y)));
}

}  // namespace lamina::cuda_detail
