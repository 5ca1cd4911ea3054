// Activations, elementwise over x, y, dy, dx (n); every kernel works in place (each element
// is read before the same thread writes it). Backward uses the output y:
//   ReLU:    y = x > 0 ? x : slope x          dx = y > 0 ? dy : slope dy
//   Sigmoid: y = 1 / (1 + exp(-x))            dx = dy y (1 - y)
//   TanH:    y = tanh(x)                      dx = dy (1 - y^2)
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {
namespace {

__global__ void relu_forward_kernel(int64_t n, float slope, const float* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float v = x[i];
    y[i] = v > 0 ? v : slope * v;
  }
}

__global__ void sigmoid_forward_kernel(int64_t n, const float* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = 1.0f / (1.0f + expf(-x[i]));
}

__global__ void tanh_forward_kernel(int64_t n, const float* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) y[i] = tanhf(x[i]);
}

__global__ void relu_backward_kernel(int64_t n, float slope, const float* y, const float* dy,
                                     float* dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) dx[i] = relu_backward_value(y[i], dy[i], slope);
}

__global__ void sigmoid_backward_kernel(int64_t n, const float* y, const float* dy, float* dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float v = y[i];
    dx[i] = dy[i] * v * (1.0f - v);
  }
}

__global__ void tanh_backward_kernel(int64_t n, const float* y, const float* dy, float* dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float v = y[i];
    dx[i] = dy[i] * (1.0f - v * v);
  }
}

}  // namespace

void CudaBackend::activation_forward(Activation f, int64_t n, float negative_slope,
                                     const float* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  const unsigned grid = elementwise_grid(n);
  switch (f) {
    case Activation::kReLU:
      relu_forward_kernel<<<grid, kBlock, 0, s>>>(n, negative_slope, x, y);
      LAMINA_CUDA_LAUNCHED(relu_forward_kernel);
      break;
    case Activation::kSigmoid:
      sigmoid_forward_kernel<<<grid, kBlock, 0, s>>>(n, x, y);
      LAMINA_CUDA_LAUNCHED(sigmoid_forward_kernel);
      break;
    case Activation::kTanH:
      tanh_forward_kernel<<<grid, kBlock, 0, s>>>(n, x, y);
      LAMINA_CUDA_LAUNCHED(tanh_forward_kernel);
      break;
  }
}

void CudaBackend::activation_backward(Activation f, int64_t n, float negative_slope,
                                      const float* y, const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  const unsigned grid = elementwise_grid(n);
  switch (f) {
    case Activation::kReLU:
      relu_backward_kernel<<<grid, kBlock, 0, s>>>(n, negative_slope, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(relu_backward_kernel);
      break;
    case Activation::kSigmoid:
      sigmoid_backward_kernel<<<grid, kBlock, 0, s>>>(n, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(sigmoid_backward_kernel);
      break;
    case Activation::kTanH:
      tanh_backward_kernel<<<grid, kBlock, 0, s>>>(n, y, dy, dx);
      LAMINA_CUDA_LAUNCHED(tanh_backward_kernel);
      break;
  }
}

}  // namespace lamina::cuda_detail
