// The per-channel affine map and per-channel sums on CUDA (backend.hpp, kChannelAffine, in
// FP32 and in 16 bits): Scale, Bias, a convolution's bias gradient and batch normalisation
// with running statistics in its backward pass. Written once over half_storage.cuh's storage
// S with channel_sums.cuh's machinery; the affine map multiplies and adds with explicit
// rounding (__fmul_rn, __fadd_rn), as the Native backend does.
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
  using In = float;
  __device__ In load(int64_t i) const { return S::load(x[i]); }
  __device__ void apply(int64_t i, int64_t c, In v) const {
    const float sc = scale != nullptr ? scale[c] : 1.0f, b = bias != nullptr ? bias[c] : 0.0f;
    y[i] = S::store(__fadd_rn(__fmul_rn(v, sc), b));
  }
};

// out[c] += the sum of a (b null) or of a b per channel.
template <class S>
void reduce(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
            int64_t inner, const typename S::Stored* a, const typename S::Stored* b,
            float* out) {
  if (b == nullptr)
    reduce_channels(context, s, outer, channels, inner, StoredTerms<S>{a}, out);
  else
    reduce_channels(context, s, outer, channels, inner, ProductTerms<S>{a, b}, out);
}

}  // namespace

void CudaBackend::channel_affine(int64_t outer, int64_t channels, int64_t inner,
                                 const float* x, const float* scale, const float* bias,
                                 float* y) {
  launch_channel_op(on_device(), outer, channels, inner,
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
    using Op = StoredAffineOp<decltype(storage)>;
    launch_channel_op(s, outer, channels, inner, Op{x, scale, bias, y});
  });
}

void CudaBackend::channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                                 const uint16_t* a, const uint16_t* b, float* out) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    reduce<decltype(storage)>(context_, s, outer, channels, inner, a, b, out);
  });
}

}  // namespace lamina::cuda_detail
