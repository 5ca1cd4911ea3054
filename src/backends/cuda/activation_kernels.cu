// Activations, elementwise over x, y, dy, dx (n); every kernel works in place (each element
// is read before the same thread writes it). Backward uses the output y:
//   ReLU:    y = x > 0 ? x : slope x          dx = y > 0 ? dy : slope dy
//   Sigmoid: y = 1 / (1 + exp(-x))            dx = dy y (1 - y)
//   TanH:    y = tanh(x)                      dx = dy (1 - y^2)
// Written once for arrays in FP32 and in 16 bits (half_storage.cuh): computed in FP32, a
// 16-bit result rounded once.
#include <type_traits>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_by_eight.cuh"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {
namespace {

template <class S>
using Array = typename S::Stored*;
template <class S>
using ConstArray = const typename S::Stored*;

// ReLU, the activation between most layers, loads kUnroll elements per thread before it
// writes (kernel_util.cuh's unrolled_elements; launched on unrolled_grid).
template <class S>
__global__ void relu_forward_kernel(int64_t n, float slope, ConstArray<S> x, Array<S> y) {
  unrolled_elements<float>(
      n, [&](int64_t i) { return S::load(x[i]); },
      [&](int64_t i, float v) { y[i] = S::store(v > 0 ? v : slope * v); });
}

// The same for 16-bit arrays, all 16-byte aligned: eight values per load (half_by_eight.cuh).
template <class S>
__global__ void relu_forward8_kernel(int64_t n, float slope, const uint16_t* x, uint16_t* y) {
  by_eight(
      n,
      [slope](uint16_t h) {
        const float v = S::load(h);
        return S::store(v > 0 ? v : slope * v);
      },
      y, x);
}

template <class S>
__global__ void relu_backward8_kernel(int64_t n, float slope, const uint16_t* y,
                                      const uint16_t* dy, uint16_t* dx) {
  by_eight(
      n,
      [slope](uint16_t yh, uint16_t dyh) {
        return S::store(relu_backward_value(S::load(yh), S::load(dyh), slope));
      },
      dx, y, dy);
}

template <class S>
__global__ void sigmoid_forward_kernel(int64_t n, ConstArray<S> x, Array<S> y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::store(1.0f / (1.0f + expf(-S::load(x[i]))));
}

template <class S>
__global__ void tanh_forward_kernel(int64_t n, ConstArray<S> x, Array<S> y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = S::store(tanhf(S::load(x[i])));
}

template <class S>
__global__ void relu_backward_kernel(int64_t n, float slope, ConstArray<S> y, ConstArray<S> dy,
                                     Array<S> dx) {
  unrolled_elements<float2>(
      n, [&](int64_t i) { return make_float2(S::load(y[i]), S::load(dy[i])); },
      [&](int64_t i, float2 v) { dx[i] = S::store(relu_backward_value(v.x, v.y, slope)); });
}

template <class S>
__global__ void sigmoid_backward_kernel(int64_t n, ConstArray<S> y, ConstArray<S> dy,
                                        Array<S> dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float v = S::load(y[i]);
    dx[i] = S::store(S::load(dy[i]) * v * (1.0f - v));
  }
}

template <class S>
__global__ void tanh_backward_kernel(int64_t n, ConstArray<S> y, ConstArray<S> dy, Array<S> dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float v = S::load(y[i]);
    dx[i] = S::store(S::load(dy[i]) * (1.0f - v * v));
  }
}

template <class S>
void forward(cudaStream_t s, Activation f, int64_t n, float slope, ConstArray<S> x, Array<S> y) {
  const unsigned grid = elementwise_grid(n);
  switch (f) {
    case Activation::kReLU:
      if constexpr (std::is_same_v<typename S::Stored, uint16_t>) {
        if (alignment_of({x, y}) >= 16) {
          relu_forward8_kernel<S><<<by_eight_grid(n), kBlock, 0, s>>>(n, slope, x, y);
          LAMINA_CUDA_LAUNCHED(relu_forward8_kernel);
          break;
        }
      }
      relu_forward_kernel<S><<<unrolled_grid(n), kBlock, 0, s>>>(n, slope, x, y);
      LAMINA_CUDA_LAUNCHED(relu_forward_kernel);
      break;
    case Activation::kSigmoid:
      sigmoid_forward_kernel<S><<<grid, kBlock, 0, s>>>(n, x, y);
      LAMINA_CUDA_LAUNCHED(sigmoid_forward_kernel);
      break;
    case Activation::kTanH:
      tanh_forward_kernel<S><<<grid, kBlock, 0, s>>>(n, x, y);
      LAMINA_CUDA_LAUNCHED(tanh_forward_kernel);
      break;
  }
}

template <class S>
void backward(cudaStream_t s, Activation f, int64_t n, float slope, ConstArray<S> y,
              ConstArray<S> dy, Array<S> dx) {
  const unsigned grid = elementwise_grid(n);
  switch (f) {
    case Activation::kReLU:
      if constexpr (std::is_same_v<typename S::Stored, uint16_t>) {
        if (alignment_of({y, dy, dx}) >= 16) {
          relu_backward8_kernel<S><<<by_eight_grid(n), kBlock, 0, s>>>(n, slope, y, dy, dx);
          LAMINA_CUDA_LAUNCHED(relu_backward8_kernel);
          break;
        }
      }
      relu_backward_kernel<S><<<unrolled_grid(n), kBlock, 0, s>>>(n, slope, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(relu_backward_kernel);
      break;
    case Activation::kSigmoid:
      sigmoid_backward_kernel<S><<<grid, kBlock, 0, s>>>(n, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(sigmoid_backward_kernel);
      break;
    case Activation::kTanH:
      tanh_backward_kernel<S><<<grid, kBlock, 0, s>>>(n, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(tanh_backward_kernel);
      break;
  }
}

}  // namespace

void CudaBackend::activation_forward(Activation f, int64_t n, float negative_slope,
                                     const float* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  forward<Fp32Storage>(s, f, n, negative_slope, x, y);
}

void CudaBackend::activation_backward(Activation f, int64_t n, float negative_slope,
                                      const float* y, const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  backward<Fp32Storage>(s, f, n, negative_slope, y, dy, dx);
}

void CudaBackend::activation_forward(Half format, Activation f, int64_t n, float negative_slope,
                                     const uint16_t* x, uint16_t* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    forward<decltype(storage)>(s, f, n, negative_slope, x, y);
  });
}

void CudaBackend::activation_backward(Half format, Activation f, int64_t n, float negative_slope,
                                      const uint16_t* y, const uint16_t* dy, uint16_t* dx) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  with_half_storage(format, [&](auto storage) {
    backward<decltype(storage)>(s, f, n, negative_slope, y, dy, dx);
  });
}

}  // namespace lamina::cuda_detail
