// Kernels that fail on purpose, for the tests of tiled_linear_test.cpp: how Lamina reports a
// custom layer's bad launch and its kernel's illegal address (the FaultyKernel layer there).
#include <cuda_runtime.h>

#include "lamina/cuda_kernels.hpp"

namespace example {
namespace {

__global__ void fill_ones(float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 1.0f;
}

}  // namespace

// Launches with 2048 threads per block, twice the most a block may have: the launch fails
// (cudaErrorInvalidConfiguration; CUDA 13 reports cudaErrorInvalidValue), the device stays
// usable.
void launch_too_many_threads(const lamina::Layer& layer, cudaStream_t stream, float* y, int n) {
  fill_ones<<<1, 2048, 0, stream>>>(y, n);
  LAMINA_KERNEL_LAUNCHED(layer, fill_ones);
}

// Launches correctly, but the kernel writes through `y`, an address outside every allocation
// (the caller passes one): it fails while it runs (cudaErrorIllegalAddress), and the device
// is unusable afterwards.
void launch_stray_store(const lamina::Layer& layer, cudaStream_t stream, float* y, int n) {
  fill_ones<<<1, 32, 0, stream>>>(y, n);
  LAMINA_KERNEL_LAUNCHED(layer, fill_ones);
}

}  // namespace example
