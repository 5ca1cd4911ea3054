// Batch normalisation followed by Scale, and perhaps a ReLU, on CUDA (backend.hpp,
// batch_norm_scale_*: a BatchNorm layer that absorbed the layers after it), in FP32 and in
// 16 bits. Each result has the bits that batch_norm_kernels.cu, channel_kernels.cu and
// activation_kernels.cu give the layers one after the other: kept, the Scale's output and
// its input gradient g are rounded to the storage before they are used, the ReLU's mask
// comes from its output computed again from kept, the sums walk the elements in the same
// order (channel_sums.cuh), and the arithmetic is batch_norm.cuh's and the ReLU's. What the
// fusion saves is passes over memory: the forward reads x once and writes kept and y (3
// passes; BatchNorm and Scale 7, with the in-place Scale's copy of its input, and a ReLU 2
// more); the backward reads dy and kept once for all four sums and once more for dx (5
// passes; BatchNorm and Scale 9, a ReLU 3 more).
#include "backends/cuda/batch_norm.cuh"
#include "backends/cuda/channel_sums.cuh"
#include "backends/cuda/cuda_backend.hpp"

namespace lamina::cuda_detail {
namespace {

// v rounded to the storage and read back: the value an array stored as S would hold.
template <class S>
__device__ __forceinline__ float stored(float v) {
  return S::load(S::store(v));
}

// g = dy scale + 0 (Scale's input gradient, as channel_affine computes it with no bias),
// rounded to the storage.
template <class S>
__device__ __forceinline__ float scaled_gradient(float dy, float scale) {
  return stored<S>(__fadd_rn(__fmul_rn(dy, scale), 0.0f));
}

// The Scale's output from a stored kept value (rounded to the storage), and with relu the
// ReLU's of it (activation_kernels.cu's: v > 0 ? v : 0 v).
template <class S>
__device__ __forceinline__ float scaled_output(float kept, float scale, float bias, bool relu) {
  const float v = stored<S>(__fadd_rn(__fmul_rn(kept, scale), bias));
  return relu ? (v > 0 ? v : 0.0f * v) : v;
}

// Half the smallest positive value stored as S: a float above it is stored as a positive
// value, one at or below it as 0 or less (rounding to nearest even sends the half to 0), and
// a NaN compares false either way.
template <class S>
constexpr float kRoundsPositiveAbove = 0.0f;
template <>
constexpr float kRoundsPositiveAbove<Bf16Storage> = 0x1p-134f;
template <>
constexpr float kRoundsPositiveAbove<Fp16Storage> = 0x1p-25f;

// The ReLU's input gradient (dy itself without relu) from a stored kept value: dy where the
// Scale's stored output is > 0, else 0 dy (relu_backward_value), deciding "stored > 0" on
// the FP32 value without rounding it.
template <class S>
__device__ __forceinline__ float relu_input_gradient(float dy, float kept, float scale,
                                                     float bias, bool relu) {
  if (!relu) return dy;
  const float v = __fadd_rn(__fmul_rn(kept, scale), bias);
  return v > kRoundsPositiveAbove<S> ? dy : 0.0f * dy;
}

// kept = (x - mean[c]) inv_std[c]; y = kept scale[c] + bias[c] (null bias: 0), with relu its
// ReLU; y may be x.
template <class S>
struct NormalizeScaleOp {
  const typename S::Stored* x;
  const float *mean, *inv_std, *scale, *bias;
  bool relu;
  typename S::Stored *y, *kept;
  int alignment() const { return alignment_of({x, y, kept}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float mu = mean[c], is = inv_std[c], sc = scale[c];
    const float b = bias != nullptr ? bias[c] : 0.0f;
    float v[W];
    load_group<S>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = normalized(v[k], mu, is);
    store_group<S>(kept, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = scaled_output<S>(stored<S>(v[k]), sc, b, relu);
    store_group<S>(y, i, v);
  }
};

// g and g kept (batch normalisation's backward sums); with K = 4 also d kept and d (Scale's
// gradients), for d = relu_input_gradient(dy) and g = scaled_gradient(d, scale[c]).
template <class S, int K>
struct ScaledGradientTerms {
  using Storage = S;
  static constexpr int kSums = K;
  const typename S::Stored *dy, *kept;
  const float *scale, *bias;
  bool relu;
  int alignment() const { return alignment_of({dy, kept}); }
  template <int W>
  __device__ void add(int64_t i, int64_t c, double* sum) const {
    const float sc = scale[c], b = bias != nullptr ? bias[c] : 0.0f;
    float g[W], v[W];
    load_group<S>(dy, i, g);
    load_group<S>(kept, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      g[k] = relu_input_gradient<S>(g[k], v[k], sc, b, relu);
      const float scaled = scaled_gradient<S>(g[k], sc);
      sum[0] += scaled;
      sum[1] += static_cast<double>(scaled) * v[k];
      if constexpr (K == 4) {
        sum[2] += static_cast<double>(g[k]) * v[k];
        sum[3] += g[k];
      }
    }
  }
};

// Channel c's sums (`sums` of them, in double) to where they go: the means of the first two
// over m elements, and where dscale is not null, dscale[c] += the third and dbias[c] += the
// fourth (dbias may be null), each rounded once.
__device__ void store_sums(int64_t channels, int64_t c, double m, const double* sum, int sums,
                           float* means, float* dscale, float* dbias) {
  means[c] = static_cast<float>(sum[0] / m);
  means[channels + c] = static_cast<float>(sum[1] / m);
  if (sums < 4) return;
  dscale[c] += static_cast<float>(sum[2]);
  if (dbias != nullptr) dbias[c] += static_cast<float>(sum[3]);
}

// A block per channel walks its groups for all the sums.
template <int W, class Terms>
__global__ void scale_sums_kernel(int64_t outer, int64_t channels, int64_t groups, double m,
                                  Terms terms, float* means, float* dscale, float* dbias) {
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum[Terms::kSums];
    channel_block_sums<W>(outer, channels, groups, c, terms, sum);
    if (threadIdx.x == 0)
      store_sums(channels, c, m, sum, Terms::kSums, means, dscale, dbias);
  }
}

// The parts' sums (ChannelParts), added in order.
__global__ void scale_parts_kernel(int64_t channels, int parts, int sums, double m,
                                   const double* partial, float* means, float* dscale,
                                   float* dbias) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    double sum[4];
    for (int k = 0; k < sums; ++k) sum[k] = sum_of_parts(channels, parts, partial, k, c);
    store_sums(channels, c, m, sum, sums, means, dscale, dbias);
  }
}

template <class S, int K>
void scale_sums(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
                int64_t inner, const typename S::Stored* kept, const typename S::Stored* dy,
                const float* scale, const float* bias, bool relu, float* means, float* dscale,
                float* dbias) {
  const ScaledGradientTerms<S, K> terms{dy, kept, scale, bias, relu};
  const double m = static_cast<double>(outer * inner);
  const ChannelParts split(outer, channels, inner, context.sm_count());
  if (split.parts == 0) {
    with_group_width<S>(inner, terms.alignment(), [&](auto width) {
      constexpr int W = decltype(width)::value;
      scale_sums_kernel<W><<<row_grid(channels), kChannelBlock, 0, s>>>(
          outer, channels, inner / W, m, terms, means, dscale, dbias);
      LAMINA_CUDA_LAUNCHED(scale_sums_kernel);
    });
    return;
  }
  auto* partial =
      static_cast<double*>(context.workspace(sizeof(double) * K * channels * split.parts));
  launch_partial(s, outer, channels, inner, split, terms, partial);
  scale_parts_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(
      channels, split.parts, K, m, partial, means, dscale, dbias);
  LAMINA_CUDA_LAUNCHED(scale_parts_kernel);
}

// means and, with dscale, Scale's gradients; nothing when there are no elements.
template <class S>
void batch_norm_scale_sums_of(CudaContext& context, cudaStream_t s, int64_t outer,
                              int64_t channels, int64_t inner, const typename S::Stored* kept,
                              const typename S::Stored* dy, const float* scale,
                              const float* bias, bool relu, float* means, float* dscale,
                              float* dbias) {
  if (channels <= 0 || outer * inner == 0) return;
  if (dscale == nullptr) {
    scale_sums<S, 2>(context, s, outer, channels, inner, kept, dy, scale, bias, relu, means,
                     dscale, dbias);
  } else {
    scale_sums<S, 4>(context, s, outer, channels, inner, kept, dy, scale, bias, relu, means,
                     dscale, dbias);
  }
}

// dx = normalized_gradient(inv_std[c], kept, g, means[c], means[channels + c]), g as in
// ScaledGradientTerms; dx may be dy.
template <class S>
struct NormalizeScaleBackwardOp {
  const typename S::Stored *kept, *dy;
  const float *inv_std, *scale, *bias, *means;
  bool relu;
  int64_t channels;
  typename S::Stored* dx;
  int alignment() const { return alignment_of({kept, dy, dx}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float is = inv_std[c], sc = scale[c], b = bias != nullptr ? bias[c] : 0.0f;
    const float mean_dy = means[c], mean_dy_y = means[channels + c];
    float v[W], g[W];
    load_group<S>(kept, i, v);
    load_group<S>(dy, i, g);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float d = relu_input_gradient<S>(g[k], v[k], sc, b, relu);
      v[k] = normalized_gradient(is, v[k], scaled_gradient<S>(d, sc), mean_dy, mean_dy_y);
    }
    store_group<S>(dx, i, v);
  }
};

template <class S>
void normalize_scale(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, float eps,
                     const typename S::Stored* x, const float* mean, const float* var,
                     const float* scale, const float* bias, bool relu, typename S::Stored* y,
                     float* inv_std, typename S::Stored* kept) {
  if (channels <= 0) return;
  inverse_std_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, eps, var, inv_std);
  LAMINA_CUDA_LAUNCHED(inverse_std_kernel);
  launch_channel_op<S>(s, outer, channels, inner,
                       NormalizeScaleOp<S>{x, mean, inv_std, scale, bias, relu, y, kept});
}

}  // namespace

void CudaBackend::batch_norm_scale_forward(int64_t outer, int64_t channels, int64_t inner,
                                           float eps, const float* x, const float* mean,
                                           const float* var, const float* scale,
                                           const float* bias, bool relu, float* y,
                                           float* inv_std, float* kept) {
  normalize_scale<Fp32Storage>(on_device(), outer, channels, inner, eps, x, mean, var, scale,
                               bias, relu, y, inv_std, kept);
}

void CudaBackend::batch_norm_scale_sums(int64_t outer, int64_t channels, int64_t inner,
                                        const float* kept, const float* dy, const float* scale,
                                        const float* bias, bool relu, float* means,
                                        float* dscale, float* dbias) {
  batch_norm_scale_sums_of<Fp32Storage>(context_, on_device(), outer, channels, inner, kept, dy,
                                        scale, bias, relu, means, dscale, dbias);
}

void CudaBackend::batch_norm_scale_backward(int64_t outer, int64_t channels, int64_t inner,
                                            const float* kept, const float* dy,
                                            const float* inv_std, const float* scale,
                                            const float* bias, bool relu, const float* means,
                                            float* dx) {
  launch_channel_op<Fp32Storage>(on_device(), outer, channels, inner,
                                 NormalizeScaleBackwardOp<Fp32Storage>{
                                     kept, dy, inv_std, scale, bias, means, relu, channels, dx});
}

void CudaBackend::batch_norm_scale_forward(Half format, int64_t outer, int64_t channels,
                                           int64_t inner, float eps, const uint16_t* x,
                                           const float* mean, const float* var,
                                           const float* scale, const float* bias, bool relu,
                                           uint16_t* y, float* inv_std, uint16_t* kept) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    normalize_scale<decltype(storage)>(s, outer, channels, inner, eps, x, mean, var, scale,
                                       bias, relu, y, inv_std, kept);
  });
}

void CudaBackend::batch_norm_scale_sums(Half format, int64_t outer, int64_t channels,
                                        int64_t inner, const uint16_t* kept, const uint16_t* dy,
                                        const float* scale, const float* bias, bool relu,
                                        float* means, float* dscale, float* dbias) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    batch_norm_scale_sums_of<decltype(storage)>(context_, s, outer, channels, inner, kept, dy,
                                                scale, bias, relu, means, dscale, dbias);
  });
}

void CudaBackend::batch_norm_scale_backward(Half format, int64_t outer, int64_t channels,
                                            int64_t inner, const uint16_t* kept,
                                            const uint16_t* dy, const float* inv_std,
                                            const float* scale, const float* bias, bool relu,
                                            const float* means, uint16_t* dx) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    using S = decltype(storage);
    launch_channel_op<S>(s, outer, channels, inner,
                         NormalizeScaleBackwardOp<S>{kept, dy, inv_std, scale, bias, means,
                                                     relu, channels, dx});
  });
}

}  // namespace lamina::cuda_detail
