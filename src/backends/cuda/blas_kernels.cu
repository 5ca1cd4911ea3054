// The BLAS-like operations cuBLAS does not have or does not do as Lamina needs: fill, mul,
// axpby, and dot accumulated in double. x, y, a, b (n).
#include <algorithm>
#include <cstdint>

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

constexpr unsigned kMaxPartials = 1024;  // blocks of the dot product's partial sums
constexpr int kFinishBlock = 256;        // threads of the block that adds them

// partial[block] = this block's share of x . y, in double. With kVector (x and y 16-byte
// aligned) each thread reads four floats of each at a time, and the last n % 4 elements
// one by one. At most 32 registers, so that all 1024 blocks of a large n fit on the device
// at once (8 per SM): at 34 registers, 6 fitted and the rest ran as a second wave.
template <bool kVector>
__global__ void __launch_bounds__(kBlock, 2048 / kBlock)
    dot_partial_kernel(int64_t n, const float* x, const float* y, double* partial) {
  double sum = 0;
  if constexpr (kVector) {
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* y4 = reinterpret_cast<const float4*>(y);
    LAMINA_GRID_STRIDE_LOOP(i, n / 4) {
      const float4 a = x4[i], b = y4[i];
      sum += (static_cast<double>(a.x) * b.x + static_cast<double>(a.y) * b.y) +
             (static_cast<double>(a.z) * b.z + static_cast<double>(a.w) * b.w);
    }
    const int64_t tail = n / 4 * 4;
    LAMINA_GRID_STRIDE_LOOP(i, n - tail) sum += static_cast<double>(x[tail + i]) * y[tail + i];
  } else {
    LAMINA_GRID_STRIDE_LOOP(i, n) sum += static_cast<double>(x[i]) * y[i];
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// One block: result[0] = the sum of the partial sums, rounded once.
__global__ void dot_finish_kernel(int64_t blocks, const double* partial, float* result) {
  const double sum = block_sum_of(blocks, partial);
  if (threadIdx.x == 0) result[0] = static_cast<float>(sum);
}

// The grid depends only on n (and the kernel on the arrays' alignment), so the partial sums
// and their order do too: bit-identical results run to run. partial holds dot_blocks(n)
// doubles.
unsigned dot_blocks(int64_t n) { return std::min(elementwise_grid(n), kMaxPartials); }

void launch_dot(cudaStream_t s, int64_t n, const float* x, const float* y, double* partial,
                float* result) {
  const unsigned blocks = dot_blocks(n);
  const auto aligned = [](const float* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (aligned(x) && aligned(y))
    dot_partial_kernel<true><<<blocks, kBlock, 0, s>>>(n, x, y, partial);
  else
    dot_partial_kernel<false><<<blocks, kBlock, 0, s>>>(n, x, y, partial);
  LAMINA_CUDA_LAUNCHED(dot_partial_kernel);
  dot_finish_kernel<<<1, kFinishBlock, 0, s>>>(blocks, partial, result);
  LAMINA_CUDA_LAUNCHED(dot_finish_kernel);
}

}  // namespace

void CudaBackend::dot(int64_t n, const float* x, const float* y, float* result) {
  const cudaStream_t s = on_device();
  auto* partial = static_cast<double*>(context_.workspace(sizeof(double) * dot_blocks(n)));
  launch_dot(s, n, x, y, partial, result);
}

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
