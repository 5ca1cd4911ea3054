// The per-channel affine map and per-channel sums on CUDA (backend.hpp, kChannelAffine, in
// FP32 and in 16 bits): Scale (its two gradients in one pass), Bias, a convolution's bias
// gradient and batch normalisation with running statistics in its backward pass. Written
// once over half_storage.cuh's storage S with channel_sums.cuh's machinery; the affine map
// multiplies and adds with explicit rounding (__fmul_rn, __fadd_rn), as the Native backend
// does.
#include "backends/cuda/channel_sums.cuh"
#include "backends/cuda/cuda_backend.hpp"

namespace lamina::cuda_detail {
namespace {

// y = x * scale[c] + bias[c]; null scale means 1, null bias 0; x and y stored as S says.
template <class S>
struct StoredAffineOp {
  const typename S::Stored* x;
  const float *scale, *bias;
  typename S::Stored* y;
  int alignment() const { return alignment_of({x, y}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float sc = scale != nullptr ? scale[c] : 1.0f, b = bias != nullptr ? bias[c] : 0.0f;
    float v[W];
    load_group<S>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = __fadd_rn(__fmul_rn(v[k], sc), b);
    store_group<S>(y, i, v);
  }
};

// dy x and dy: a Scale layer's two gradients in one pass.
template <class S>
struct ScaleGradientTerms {
  using Storage = S;
  static constexpr int kSums = 2;
  const typename S::Stored *dy, *x;
  int alignment() const { return alignment_of({dy, x}); }
  template <int W>
  __device__ void add(int64_t i, int64_t, double* sum) const {
    float g[W], v[W];
    load_group<S>(dy, i, g);
    load_group<S>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sum[0] += static_cast<double>(g[k]) * v[k];
      sum[1] += g[k];
    }
  }
};

// out[c] += the sum of a (b null) or of a b per channel.
template <class S>
void reduce(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
            int64_t inner, const typename S::Stored* a, const typename S::Stored* b,
            float* out) {
  if (b == nullptr)
    reduce_channels(context, s, outer, channels, inner, StoredTerms<S>{a}, {{out}});
  else
    reduce_channels(context, s, outer, channels, inner, ProductTerms<S>{a, b}, {{out}});
}

// dscale[c] += the sum of dy x and dbias[c] += that of dy; with no dbias, the first alone.
template <class S>
void scale_gradient_sums(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
                         int64_t inner, const typename S::Stored* dy,
                         const typename S::Stored* x, float* dscale, float* dbias) {
  if (dbias == nullptr) {
    reduce<S>(context, s, outer, channels, inner, dy, x, dscale);
    return;
  }
  reduce_channels(context, s, outer, channels, inner, ScaleGradientTerms<S>{dy, x},
                  {{dscale, dbias}});
}

}  // namespace

void CudaBackend::channel_affine(int64_t outer, int64_t channels, int64_t inner,
                                 const float* x, const float* scale, const float* bias,
                                 float* y) {
  launch_channel_op<Fp32Storage>(on_device(), outer, channels, inner,
                                 StoredAffineOp<Fp32Storage>{x, scale, bias, y});
}

void CudaBackend::channel_reduce(int64_t outer, int64_t channels, int64_t inner,
                                 const float* a, const float* b, float* out) {
  reduce<Fp32Storage>(context_, on_device(), outer, channels, inner, a, b, out);
}

void CudaBackend::channel_affine(Half format, int64_t outer, int64_t channels, int64_t inner,
                                 const uint16_t* x, const float* scale, const float* bias,
                                 uint16_t* y) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    using S = decltype(storage);
    launch_channel_op<S>(s, outer, channels, inner, StoredAffineOp<S>{x, scale, bias, y});
  });
}

void CudaBackend::channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                                 const uint16_t* a, const uint16_t* b, float* out) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    reduce<decltype(storage)>(context_, s, outer, channels, inner, a, b, out);
  });
}

void CudaBackend::scale_gradients(int64_t outer, int64_t channels, int64_t inner,
                                  const float* dy, const float* x, float* dscale,
                                  float* dbias) {
  scale_gradient_sums<Fp32Storage>(context_, on_device(), outer, channels, inner, dy, x, dscale,
                                   dbias);
}

void CudaBackend::scale_gradients(Half format, int64_t outer, int64_t channels, int64_t inner,
                                  const uint16_t* dy, const uint16_t* x, float* dscale,
                                  float* dbias) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    scale_gradient_sums<decltype(storage)>(context_, s, outer, channels, inner, dy, x, dscale,
                                           dbias);
  });
}

}  // namespace lamina::cuda_detail
