// Batch normalisation on CUDA (backend.hpp, kBatchNorm, in FP32 and in 16 bits): batch
// statistics, the normalised output from batch or running statistics, and the input gradient
// through batch statistics, each written once over half_storage.cuh's storage S with
// channel_sums.cuh's reductions. Statistics, inv_std and the backward pass's means are FP32
// (from sums in double); the elementwise arithmetic is batch_norm.cuh's.
#include "backends/cuda/batch_norm.cuh"
#include "backends/cuda/channel_sums.cuh"
#include "backends/cuda/cuda_backend.hpp"

namespace lamina::cuda_detail {
namespace {

template <class S>
struct DeviationTerms {  // (x - mu[c])^2, mu in double
  using Storage = S;
  static constexpr int kSums = 1;
  const typename S::Stored* x;
  const double* mu;
  int alignment() const { return alignment_of({x}); }
  template <int W>
  __device__ void add(int64_t i, int64_t c, double* sum) const {
    float v[W];
    load_group<S>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const double d = v[k] - mu[c];
      sum[0] += d * d;
    }
  }
};
template <class S>
struct GradientTerms {  // dy and dy y: batch normalisation's backward pass
  using Storage = S;
  static constexpr int kSums = 2;
  const typename S::Stored *dy, *y;
  int alignment() const { return alignment_of({dy, y}); }
  template <int W>
  __device__ void add(int64_t i, int64_t, double* sum) const {
    float g[W], v[W];
    load_group<S>(dy, i, g);
    load_group<S>(y, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sum[0] += g[k];
      sum[1] += static_cast<double>(g[k]) * v[k];
    }
  }
};

// mean[c] and var[c] (biased) of x (outer, channels, groups * W): two passes in double.
template <class S, int W>
__global__ void channel_moments_kernel(int64_t outer, int64_t channels, int64_t groups,
                                       const typename S::Stored* x, float* mean, float* var) {
  const int64_t m = outer * groups * W;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum[1];
    channel_block_sums<W>(outer, channels, groups, c, StoredTerms<S>{x}, sum);
    const double mu = m > 0 ? sum[0] / static_cast<double>(m) : 0.0;
    double squares = 0;
    LAMINA_CHANNEL_LOOP(e, outer, groups) {
      float v[W];
      load_group<S>(x, ((e.o * channels + c) * groups + e.j) * W, v);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const double d = v[k] - mu;
        squares += d * d;
      }
    }
    squares = block_sum(squares);
    if (threadIdx.x == 0) {
      mean[c] = static_cast<float>(mu);
      var[c] = static_cast<float>(m > 0 ? squares / static_cast<double>(m) : 0.0);
    }
  }
}

// mean = mean_sum / factor[0], inv_std from var_sum / factor[0]: each quotient in double,
// rounded once; 0 when factor[0] is 0 (Caffe's estimates before any update).
__global__ void running_statistics_kernel(int64_t channels, float eps, const float* mean_sum,
                                          const float* var_sum, const float* factor,
                                          float* mean, float* inv_std) {
  const double f = factor[0];
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    mean[c] = f == 0 ? 0.0f : static_cast<float>(static_cast<double>(mean_sum[c]) / f);
    const float var = f == 0 ? 0.0f : static_cast<float>(static_cast<double>(var_sum[c]) / f);
    inv_std[c] = inverse_std(var, eps);
  }
}

template <class S>
struct NormalizeOp {  // y = (x - mean[c]) * inv_std[c], and kept = y where kept is not null
  const typename S::Stored* x;
  const float *mean, *inv_std;
  typename S::Stored *y, *kept;
  int alignment() const { return alignment_of({x, y, kept}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    const float mu = mean[c], scale = inv_std[c];
    float v[W];
    load_group<S>(x, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = normalized(v[k], mu, scale);
    store_group<S>(y, i, v);
    if (kept != nullptr) store_group<S>(kept, i, v);
  }
};

// Batch normalisation's input gradient of the group of W elements from i, all of one
// channel: dx = inv_std (dy - mean_dy - y mean_dy_y), with mean_dy = mean_c(dy) and
// mean_dy_y = mean_c(dy y) of that channel.
template <class S, int W>
__device__ __forceinline__ void normalize_backward_group(const typename S::Stored* y,
                                                         const typename S::Stored* dy,
                                                         typename S::Stored* dx, int64_t i,
                                                         float inv_std, float mean_dy,
                                                         float mean_dy_y) {
  float v[W], g[W];
  load_group<S>(y, i, v);
  load_group<S>(dy, i, g);
#pragma unroll
  for (int k = 0; k < W; ++k)
    v[k] = normalized_gradient(inv_std, v[k], g[k], mean_dy, mean_dy_y);
  store_group<S>(dx, i, v);
}

// dx = normalize_backward_group's with means[c] = mean_c(dy) and means[channels + c] =
// mean_c(dy y); dx may be dy or y.
template <class S>
struct NormalizeBackwardOp {
  const typename S::Stored *y, *dy;
  const float *inv_std, *means;
  int64_t channels;
  typename S::Stored* dx;
  int alignment() const { return alignment_of({y, dy, dx}); }
  template <int W>
  __device__ void apply(int64_t i, int64_t c) const {
    normalize_backward_group<S, W>(y, dy, dx, i, inv_std[c], means[c], means[channels + c]);
  }
};

// dx = inv_std[c] (dy - mean_c(dy) - y mean_c(dy y)); dx may be dy or y.
template <class S, int W>
__global__ void batch_norm_backward_kernel(int64_t outer, int64_t channels, int64_t groups,
                                           const typename S::Stored* y,
                                           const typename S::Stored* dy, const float* inv_std,
                                           typename S::Stored* dx) {
  const int64_t m = outer * groups * W;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    // After the block sums every thread has read its elements, before any writes.
    double sum[2];
    channel_block_sums<W>(outer, channels, groups, c, GradientTerms<S>{dy, y}, sum);
    const float mean_dy = static_cast<float>(sum[0] / static_cast<double>(m));
    const float mean_dy_y = static_cast<float>(sum[1] / static_cast<double>(m));
    const float scale = inv_std[c];
    LAMINA_CHANNEL_LOOP(e, outer, groups) {
      const int64_t i = ((e.o * channels + c) * groups + e.j) * W;
      normalize_backward_group<S, W>(y, dy, dx, i, scale, mean_dy, mean_dy_y);
    }
  }
}

// mu[c] = the sum / m in double, mean[c] the same rounded once.
__global__ void channel_mean_kernel(int64_t channels, int parts, double m,
                                    const double* partial, double* mu, float* mean) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    mu[c] = sum_of_parts(channels, parts, partial, 0, c) / m;
    mean[c] = static_cast<float>(mu[c]);
  }
}

// Batch statistics of x: mean and the biased var (0 for channels with no elements).
template <class S>
void moments(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
             int64_t inner, const typename S::Stored* x, float* mean, float* var) {
  if (channels <= 0) return;
  if (outer * inner == 0) {  // no elements: report 0 rather than 0 / 0
    LAMINA_CUDA_CHECK(cudaMemsetAsync(mean, 0, sizeof(float) * channels, s));
    LAMINA_CUDA_CHECK(cudaMemsetAsync(var, 0, sizeof(float) * channels, s));
    return;
  }
  const ChannelParts split(outer, channels, inner, context.sm_count());
  if (split.parts == 0) {
    with_group_width<S>(inner, alignment_of({x}), [&](auto width) {
      constexpr int W = decltype(width)::value;
      channel_moments_kernel<S, W><<<row_grid(channels), kChannelBlock, 0, s>>>(
          outer, channels, inner / W, x, mean, var);
      LAMINA_CUDA_LAUNCHED(channel_moments_kernel);
    });
    return;
  }
  // The parts' sums, then the means in double (mu), then the squared deviations from them.
  const int64_t partials = channels * split.parts;
  auto* partial =
      static_cast<double*>(context.workspace(sizeof(double) * (partials + channels)));
  double* mu = partial + partials;
  const double m = static_cast<double>(outer * inner);
  launch_partial(s, outer, channels, inner, split, StoredTerms<S>{x}, partial);
  channel_mean_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, split.parts, m,
                                                                    partial, mu, mean);
  LAMINA_CUDA_LAUNCHED(channel_mean_kernel);
  launch_partial(s, outer, channels, inner, split, DeviationTerms<S>{x, mu}, partial);
  channel_means_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, split.parts, 1,
                                                                     m, partial, var);
  LAMINA_CUDA_LAUNCHED(channel_means_kernel);
}

// y = (x - mean[c]) * inv_std[c] with inv_std = 1 / sqrt(var + eps), also written, and
// kept = y where kept is not null.
template <class S>
void normalize_batch(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, float eps,
                     const typename S::Stored* x, const float* mean, const float* var,
                     typename S::Stored* y, float* inv_std, typename S::Stored* kept) {
  if (channels <= 0) return;
  inverse_std_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, eps, var, inv_std);
  LAMINA_CUDA_LAUNCHED(inverse_std_kernel);
  launch_channel_op<S>(s, outer, channels, inner, NormalizeOp<S>{x, mean, inv_std, y, kept});
}

// As normalize_batch with the running statistics (Caffe's sums and factor).
template <class S>
void normalize_running(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner,
                       float eps, const typename S::Stored* x, const float* mean_sum,
                       const float* var_sum, const float* factor, typename S::Stored* y,
                       float* mean, float* inv_std) {
  if (channels <= 0) return;
  running_statistics_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(
      channels, eps, mean_sum, var_sum, factor, mean, inv_std);
  LAMINA_CUDA_LAUNCHED(running_statistics_kernel);
  launch_channel_op<S>(s, outer, channels, inner,
                       NormalizeOp<S>{x, mean, inv_std, y, nullptr});
}

// dx = inv_std[c] (dy - mean_c(dy) - y mean_c(dy y)): a block per channel, or the parts'
// sums of dy and dy y, the channels' means of both, then dx elementwise.
template <class S>
void normalize_backward(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
                        int64_t inner, const typename S::Stored* y,
                        const typename S::Stored* dy, const float* inv_std,
                        typename S::Stored* dx) {
  if (outer * channels * inner == 0) return;
  const ChannelParts split(outer, channels, inner, context.sm_count());
  if (split.parts == 0) {
    with_group_width<S>(inner, alignment_of({y, dy, dx}), [&](auto width) {
      constexpr int W = decltype(width)::value;
      batch_norm_backward_kernel<S, W><<<row_grid(channels), kChannelBlock, 0, s>>>(
          outer, channels, inner / W, y, dy, inv_std, dx);
      LAMINA_CUDA_LAUNCHED(batch_norm_backward_kernel);
    });
    return;
  }
  const int64_t partials = 2 * channels * split.parts;
  auto* partial = static_cast<double*>(
      context.workspace(sizeof(double) * partials + sizeof(float) * 2 * channels));
  auto* means = reinterpret_cast<float*>(partial + partials);
  launch_partial(s, outer, channels, inner, split, GradientTerms<S>{dy, y}, partial);
  channel_means_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(
      channels, split.parts, 2, static_cast<double>(outer * inner), partial, means);
  LAMINA_CUDA_LAUNCHED(channel_means_kernel);
  launch_channel_op<S>(s, outer, channels, inner,
                       NormalizeBackwardOp<S>{y, dy, inv_std, means, channels, dx});
}

}  // namespace

void CudaBackend::channel_moments(int64_t outer, int64_t channels, int64_t inner,
                                  const float* x, float* mean, float* var) {
  moments<Fp32Storage>(context_, on_device(), outer, channels, inner, x, mean, var);
}

void CudaBackend::batch_norm_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                                     const float* x, const float* mean, const float* var,
                                     float* y, float* inv_std, float* kept) {
  normalize_batch<Fp32Storage>(on_device(), outer, channels, inner, eps, x, mean, var, y,
                               inv_std, kept);
}

void CudaBackend::batch_norm_inference(int64_t outer, int64_t channels, int64_t inner,
                                       float eps, const float* x, const float* mean_sum,
                                       const float* var_sum, const float* factor, float* y,
                                       float* mean, float* inv_std) {
  normalize_running<Fp32Storage>(on_device(), outer, channels, inner, eps, x, mean_sum, var_sum,
                                 factor, y, mean, inv_std);
}

void CudaBackend::batch_norm_backward(int64_t outer, int64_t channels, int64_t inner,
                                      const float* y, const float* dy, const float* inv_std,
                                      float* dx) {
  normalize_backward<Fp32Storage>(context_, on_device(), outer, channels, inner, y, dy, inv_std,
                                  dx);
}

void CudaBackend::channel_moments(Half format, int64_t outer, int64_t channels, int64_t inner,
                                  const uint16_t* x, float* mean, float* var) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    moments<decltype(storage)>(context_, s, outer, channels, inner, x, mean, var);
  });
}

void CudaBackend::batch_norm_forward(Half format, int64_t outer, int64_t channels,
                                     int64_t inner, float eps, const uint16_t* x,
                                     const float* mean, const float* var, uint16_t* y,
                                     float* inv_std, uint16_t* kept) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    normalize_batch<decltype(storage)>(s, outer, channels, inner, eps, x, mean, var, y,
                                       inv_std, kept);
  });
}

void CudaBackend::batch_norm_inference(Half format, int64_t outer, int64_t channels,
                                       int64_t inner, float eps, const uint16_t* x,
                                       const float* mean_sum, const float* var_sum,
                                       const float* factor, uint16_t* y, float* mean,
                                       float* inv_std) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    normalize_running<decltype(storage)>(s, outer, channels, inner, eps, x, mean_sum, var_sum,
                                         factor, y, mean, inv_std);
  });
}

void CudaBackend::batch_norm_backward(Half format, int64_t outer, int64_t channels,
                                      int64_t inner, const uint16_t* y, const uint16_t* dy,
                                      const float* inv_std, uint16_t* dx) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    normalize_backward<decltype(storage)>(context_, s, outer, channels, inner, y, dy, inv_std,
                                          dx);
  });
}

}  // namespace lamina::cuda_detail
