// The kPointwise group on CUDA (backend.hpp): the element-wise functions of Caffe's neuron
// layers, whose arithmetic is pointwise_math.hpp's (the Native backend's loops run the same
// code), and PReLU.
//   pointwise: one kernel per function and direction, kUnroll elements per thread loaded
//              before any is written (kernel_util.cuh), so each works in place.
//   PReLU:     (outer, channels, inner) arrays through channel_groups.cuh's launches (16-byte
//              groups); the slope gradient through channel_sums.cuh's per-channel sums
//              (double, a fixed order, no atomics: bit-identical run to run, and within a
//              rounding of the Native backend's double sums).
#include "backends/cuda/channel_sums.cuh"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/pointwise_math.hpp"

namespace lamina::cuda_detail {
namespace {

template <PointwiseFn F>
__global__ void pointwise_forward_kernel(int64_t n, Pointwise f, const float* x, float* y) {
  unrolled_elements<float>(
      n, [&](int64_t i) { return x[i]; },
      [&](int64_t i, float v) { y[i] = pointwise::pointwise_value<F>(f, v); });
}

// Loads dy and the operand the gradient reads (y for kExp, x for the others), then writes dx.
template <PointwiseFn F>
__global__ void pointwise_backward_kernel(int64_t n, Pointwise f, const float* x,
                                          const float* y, const float* dy, float* dx) {
  constexpr bool kReadsY = F == PointwiseFn::kExp;
  unrolled_elements<float2>(
      n, [&](int64_t i) { return make_float2(kReadsY ? y[i] : x[i], dy[i]); },
      [&](int64_t i, float2 v) {
        dx[i] = pointwise::pointwise_gradient<F>(f, v.x, v.x, v.y);
      });
}

// y = x > 0 ? x : slope[c] x over a group of W.
struct PreluOp {
  const float *x, *slope;
  float* y;
  int alignment() const { return alignment_of({x, y}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float a = slope[c];
    float v[W];
    load_group<Fp32Storage>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = v[k] > 0 ? v[k] : __fmul_rn(a, v[k]);
    store_group<Fp32Storage>(y, i, v);
  }
};

// dx = x > 0 ? dy : slope[c] dy over a group of W (in place on dy).
struct PreluGradientOp {
  const float *x, *dy, *slope;
  float* dx;
  int alignment() const { return alignment_of({x, dy, dx}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float a = slope[c];
    float v[W], g[W];
    load_group<Fp32Storage>(x, i, v);
    load_group<Fp32Storage>(dy, i, g);
#pragma unroll
    for (int k = 0; k < W; ++k) g[k] = v[k] > 0 ? g[k] : __fmul_rn(a, g[k]);
    store_group<Fp32Storage>(dx, i, g);
  }
};

// dy x where x is not > 0 (a NaN x counts, as on the Native backend): the slope gradient.
struct SlopeTerms {
  using Storage = Fp32Storage;
  static constexpr int kSums = 1;
  const float *dy, *x;
  int alignment() const { return alignment_of({dy, x}); }
  template <int W>
  __device__ void add(int64_t i, int64_t, double* sum) const {
    float g[W], v[W];
    load_group<Fp32Storage>(dy, i, g);
    load_group<Fp32Storage>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k)
      if (!(v[k] > 0)) sum[0] += static_cast<double>(g[k]) * v[k];
  }
};

}  // namespace

void CudaBackend::pointwise_forward(const Pointwise& f, int64_t n, const float* x, float* y) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  pointwise::with_function(f.fn, [&](auto fn) {
    constexpr PointwiseFn F = decltype(fn)::value;
    pointwise_forward_kernel<F><<<unrolled_grid(n), kBlock, 0, s>>>(n, f, x, y);
    LAMINA_CUDA_LAUNCHED(pointwise_forward_kernel);
  });
}

void CudaBackend::pointwise_backward(const Pointwise& f, int64_t n, const float* x,
                                     const float* y, const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  pointwise::with_function(f.fn, [&](auto fn) {
    constexpr PointwiseFn F = decltype(fn)::value;
    pointwise_backward_kernel<F><<<unrolled_grid(n), kBlock, 0, s>>>(n, f, x, y, dy, dx);
    LAMINA_CUDA_LAUNCHED(pointwise_backward_kernel);
  });
}

void CudaBackend::prelu_forward(int64_t outer, int64_t channels, int64_t inner,
                                const float* x, const float* slope, float* y) {
  launch_channel_op<Fp32Storage>(on_device(), outer, channels, inner, PreluOp{x, slope, y});
}

// The sum first: dx may be dy. Either output may be null (the layer's two calls).
void CudaBackend::prelu_backward(int64_t outer, int64_t channels, int64_t inner,
                                 const float* x, const float* dy, const float* slope,
                                 float* dx, float* dslope) {
  const cudaStream_t s = on_device();
  if (dslope != nullptr)
    reduce_channels(context_, s, outer, channels, inner, SlopeTerms{dy, x}, {{dslope}});
  if (dx != nullptr) {
    launch_channel_op<Fp32Storage>(s, outer, channels, inner,
                                   PreluGradientOp{x, dy, slope, dx});
  }
}

}  // namespace lamina::cuda_detail
