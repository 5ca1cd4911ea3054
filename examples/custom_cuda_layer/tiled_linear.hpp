// The TiledLinear layer's computations, twice: CUDA kernels (tiled_linear_kernels.cu, built
// only where Lamina has CUDA) and their CPU twin (tiled_linear_cpu.cpp), which the Native
// backend runs and the tests compare the kernels with.
//
// Shapes: x (N, C) the input rows, w (K, C) the weight in Caffe's InnerProduct layout,
// b (K) the bias (may be null), y (N, K) the output: y = x w^T + b.
// Conventions (Lamina's): outputs and input gradients are written with =, parameter
// gradients are added to with += (the solver zeroes them once per iteration; shared
// weights and iter_size add several passes).
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/cuda_kernels.hpp"

namespace lamina {
class Layer;
}

namespace example {

// ---- CPU (any build) ----
// y = x w^T + b
void tiled_linear_forward_cpu(int64_t n, int64_t c, int64_t k, const float* x, const float* w,
                              const float* b, float* y);
// dx (N, C) = dy (N, K) w
void tiled_linear_backward_input_cpu(int64_t n, int64_t c, int64_t k, const float* dy,
                                     const float* w, float* dx);
// dw (K, C) += dy^T x;  db (K) += the column sums of dy (db may be null)
void tiled_linear_backward_params_cpu(int64_t n, int64_t c, int64_t k, const float* x,
                                      const float* dy, float* dw, float* db);

#ifdef LAMINA_WITH_CUDA
// ---- CUDA (device pointers; launched on `stream`, checked as `layer`'s) ----
// Each launcher queues its kernels and returns without waiting.
void tiled_linear_forward_gpu(const lamina::Layer& layer, lamina::cuda::Stream stream,
                              int64_t n, int64_t c, int64_t k, const float* x, const float* w,
                              const float* b, float* y);
void tiled_linear_backward_input_gpu(const lamina::Layer& layer, lamina::cuda::Stream stream,
                                     int64_t n, int64_t c, int64_t k, const float* dy,
                                     const float* w, float* dx);
// The bias gradient sums dy's columns in chunks of kBiasChunk rows into `workspace` (the
// partial sums, tiled_linear_workspace_bytes), then adds the chunks' sums in order: the same
// result every run, without atomics.
void tiled_linear_backward_params_gpu(const lamina::Layer& layer, lamina::cuda::Stream stream,
                                      int64_t n, int64_t c, int64_t k, const float* x,
                                      const float* dy, float* dw, float* db, float* workspace);
#endif
constexpr int64_t kBiasChunk = 64;
inline size_t tiled_linear_workspace_bytes(int64_t n, int64_t k) {
  return sizeof(float) * size_t((n + kBiasChunk - 1) / kBiasChunk) * size_t(k);
}

}  // namespace example
