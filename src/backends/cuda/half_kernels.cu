// 16-bit storage on CUDA (Backend::to_half, from_half, axpby and mul in 16 bits, add_half):
// elementwise kernels around half_storage.cuh's load and store, which give rounding.hpp's
// bits (by the hardware's conversions but for NaNs), the Native backend's.
#include <cstdint>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_by_eight.cuh"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

template <class S>
__global__ void to_half_kernel(int64_t n, const float* x, uint16_t* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::store(x[i]);
}

template <class S>
__global__ void add_half_kernel(int64_t n, const uint16_t* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = __fadd_rn(y[i], S::load(x[i]));
}

// alpha x + beta y, each product and the sum rounded in FP32, then stored; a zero
// coefficient does not read its operand (beta 0 overwrites a y holding NaN).
template <class S>
__device__ __forceinline__ uint16_t axpby_value(float alpha, uint16_t x, float beta,
                                                uint16_t y) {
  const float ax = alpha != 0 ? __fmul_rn(alpha, S::load(x)) : 0.0f;
  const float by = beta != 0 ? __fmul_rn(beta, S::load(y)) : 0.0f;
  return S::store(beta == 0 ? ax : (alpha == 0 ? by : __fadd_rn(ax, by)));  // -0 stays -0
}

// Element i of axpby, reading only the operands whose coefficient is not 0.
template <class S>
__device__ __forceinline__ void axpby_element(int64_t i, float alpha, const uint16_t* x,
                                              float beta, uint16_t* y) {
  y[i] = axpby_value<S>(alpha, alpha != 0 ? x[i] : uint16_t{0}, beta,
                        beta != 0 ? y[i] : uint16_t{0});
}

template <class S>
__global__ void half_axpby_kernel(int64_t n, float alpha, const uint16_t* x, float beta,
                                  uint16_t* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) axpby_element<S>(i, alpha, x, beta, y);
}

// The same eight values per load (half_by_eight.cuh), for x and y 16-byte aligned and a
// coefficient that is not 0; an operand whose coefficient is 0 is not read.
template <class S>
__global__ void half_axpby8_kernel(int64_t n, float alpha, const uint16_t* x, float beta,
                                   uint16_t* y) {
  if (alpha == 0) {
    by_eight(n, [=](uint16_t yv) { return axpby_value<S>(0.0f, 0, beta, yv); }, y, y);
  } else if (beta == 0) {
    by_eight(n, [=](uint16_t xv) { return axpby_value<S>(alpha, xv, 0.0f, 0); }, y, x);
  } else {
    by_eight(
        n, [=](uint16_t xv, uint16_t yv) { return axpby_value<S>(alpha, xv, beta, yv); }, y,
        x, y);
  }
}

// y = a * b, a and y stored as S says, b FP32.
template <class S>
__global__ void half_mul_kernel(int64_t n, const uint16_t* a, const float* b, uint16_t* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::store(__fmul_rn(S::load(a[i]), b[i]));
}

// y = a * b, all three stored as S says.
template <class S>
__global__ void half_mul2_kernel(int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::store(__fmul_rn(S::load(a[i]), S::load(b[i])));
}

template <class S>
__global__ void from_half_kernel(int64_t n, const uint16_t* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::load(x[i]);
}

}  // namespace

void CudaBackend::to_half(Half format, int64_t n, const float* x, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    to_half_kernel<decltype(storage)><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  });
  LAMINA_CUDA_LAUNCHED(to_half_kernel);
}

void CudaBackend::from_half(Half format, int64_t n, const uint16_t* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    from_half_kernel<decltype(storage)><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  });
  LAMINA_CUDA_LAUNCHED(from_half_kernel);
}

void CudaBackend::axpby(Half format, int64_t n, float alpha, const uint16_t* x, float beta,
                        uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  // (Both coefficients 0, which reads nothing, goes value by value.)
  const bool aligned = alignment_of({x, y}) >= 16 && (alpha != 0 || beta != 0);
  with_half_storage(format, [&](auto storage) {
    using S = decltype(storage);
    if (aligned) {
      half_axpby8_kernel<S><<<by_eight_grid(n), kBlock, 0, s>>>(n, alpha, x, beta, y);
    } else {
      half_axpby_kernel<S><<<elementwise_grid(n), kBlock, 0, s>>>(n, alpha, x, beta, y);
    }
  });
  LAMINA_CUDA_LAUNCHED(half_axpby_kernel or half_axpby8_kernel);
}

void CudaBackend::mul(Half format, int64_t n, const uint16_t* a, const float* b, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    half_mul_kernel<decltype(storage)><<<elementwise_grid(n), kBlock, 0, s>>>(n, a, b, y);
  });
  LAMINA_CUDA_LAUNCHED(half_mul_kernel);
}

void CudaBackend::mul(Half format, int64_t n, const uint16_t* a, const uint16_t* b,
                      uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    half_mul2_kernel<decltype(storage)><<<elementwise_grid(n), kBlock, 0, s>>>(n, a, b, y);
  });
  LAMINA_CUDA_LAUNCHED(half_mul2_kernel);
}

void CudaBackend::add_half(Half format, int64_t n, const uint16_t* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    add_half_kernel<decltype(storage)><<<elementwise_grid(n), kBlock, 0, s>>>(n, x, y);
  });
  LAMINA_CUDA_LAUNCHED(add_half_kernel);
}

}  // namespace lamina::cuda_detail
