// Per-channel operations on arrays viewed as (outer, channels, inner): batch statistics,
// batch normalisation, the per-channel affine map and per-channel sums, each written once for
// arrays stored in FP32 and in 16 bits (half_storage.cuh's S: values load exactly, results
// are computed in FP32 and stored once; statistics, scales and sums stay FP32).
//
// Reductions give each channel one block (block-stride over channels) that walks the channel's
// outer * inner elements and sums them in double with kernel_util.cuh's block_sum; or, with
// fewer channels than SMs and many elements each (batch normalisation of a convolution's
// output), split each channel's images among about 8 blocks per SM (ChannelParts) and add
// the parts' sums in order. A fixed tree either way, no atomics, so results are
// bit-identical run to run. Elementwise work multiplies and
// adds with explicit rounding (__fmul_rn, __fadd_rn) so that no fused multiply-add changes
// the result from the Native backend's.
#include <algorithm>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

constexpr int kChannelBlock = 512;  // threads of a per-channel reduction block

// Walks element o * inner + j of one channel, o < outer, j < inner, starting at the thread's
// index and stepping by the block size, without a division per element.
struct ChannelWalk {
  int64_t o, j, step_o, step_j;
  __device__ ChannelWalk(int64_t inner, int64_t start, int64_t step)
      : o(start / inner), j(start % inner), step_o(step / inner), step_j(step % inner) {}
  __device__ void next(int64_t inner) {
    o += step_o;
    j += step_j;
    if (j >= inner) {
      j -= inner;
      ++o;
    }
  }
};

#define LAMINA_CHANNEL_LOOP(walk, outer, inner)                          \
  for (ChannelWalk walk((inner), threadIdx.x, blockDim.x); walk.o < (outer); \
       walk.next(inner))

// The sums' terms of channel c's element i (index into the (outer, channels, inner) array),
// added into sum[0..kSums).
template <class S>  // a, stored as S says (half_storage.cuh)
struct StoredTerms {
  static constexpr int kSums = 1;
  const typename S::Stored* a;
  __device__ void operator()(int64_t i, int64_t, double* sum) const { sum[0] += S::load(a[i]); }
};
template <class S>
struct ProductTerms {  // a b
  static constexpr int kSums = 1;
  const typename S::Stored *a, *b;
  __device__ void operator()(int64_t i, int64_t, double* sum) const {
    sum[0] += static_cast<double>(S::load(a[i])) * S::load(b[i]);
  }
};
template <class S>
struct DeviationTerms {  // (x - mu[c])^2, mu in double
  static constexpr int kSums = 1;
  const typename S::Stored* x;
  const double* mu;
  __device__ void operator()(int64_t i, int64_t c, double* sum) const {
    const double d = S::load(x[i]) - mu[c];
    sum[0] += d * d;
  }
};
template <class S>
struct GradientTerms {  // dy and dy y: batch normalisation's backward pass
  static constexpr int kSums = 2;
  const typename S::Stored *dy, *y;
  __device__ void operator()(int64_t i, int64_t, double* sum) const {
    const float g = S::load(dy[i]);
    sum[0] += g;
    sum[1] += static_cast<double>(g) * S::load(y[i]);
  }
};

// The block's sums of terms over channel c, returned to every thread: a walk over the
// channel's outer * inner elements, each sum in double, then block_sum.
template <class Terms>
__device__ void channel_block_sums(int64_t outer, int64_t channels, int64_t inner, int64_t c,
                                   const Terms& terms, double (&sum)[Terms::kSums]) {
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) sum[k] = 0;
  LAMINA_CHANNEL_LOOP(e, outer, inner) terms((e.o * channels + c) * inner + e.j, c, sum);
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) sum[k] = block_sum(sum[k]);
}

// mean[c] and var[c] (biased) of x (outer, channels, inner): two passes in double.
template <class S>
__global__ void channel_moments_kernel(int64_t outer, int64_t channels, int64_t inner,
                                       const typename S::Stored* x, float* mean, float* var) {
  const int64_t m = outer * inner;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum[1];
    channel_block_sums(outer, channels, inner, c, StoredTerms<S>{x}, sum);
    const double mu = m > 0 ? sum[0] / static_cast<double>(m) : 0.0;
    double squares = 0;
    LAMINA_CHANNEL_LOOP(e, outer, inner) {
      const double d = S::load(x[(e.o * channels + c) * inner + e.j]) - mu;
      squares += d * d;
    }
    squares = block_sum(squares);
    if (threadIdx.x == 0) {
      mean[c] = static_cast<float>(mu);
      var[c] = static_cast<float>(m > 0 ? squares / static_cast<double>(m) : 0.0);
    }
  }
}

// 1 / sqrt(var + eps), in double and rounded once (as the Native backend does).
__device__ float inverse_std(float var, float eps) {
  return static_cast<float>(1.0 / sqrt(static_cast<double>(var) + static_cast<double>(eps)));
}

__global__ void inverse_std_kernel(int64_t channels, float eps, const float* var,
                                   float* inv_std) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) inv_std[c] = inverse_std(var[c], eps);
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

// Elementwise operations on element i of channel c, for launch_channel_op: load(i) reads
// what the element's result needs, apply(i, c, in) computes and writes it. A thread loads
// all its elements before it writes any, so each op works in place.
template <class S>
struct NormalizeOp {  // y = (x - mean[c]) * inv_std[c]
  const typename S::Stored* x;
  const float *mean, *inv_std;
  typename S::Stored* y;
  using In = float;
  __device__ In load(int64_t i) const { return S::load(x[i]); }
  __device__ void apply(int64_t i, int64_t c, In v) const {
    y[i] = S::store(__fmul_rn(__fsub_rn(v, mean[c]), inv_std[c]));
  }
};
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
// Batch normalisation's input gradient of one element: inv_std (dy - mean_dy - y mean_dy_y),
// with mean_dy = mean_c(dy) and mean_dy_y = mean_c(dy y) of its channel.
__device__ __forceinline__ float normalize_backward_value(float inv_std, float y, float dy,
                                                         float mean_dy, float mean_dy_y) {
  return __fmul_rn(inv_std, __fsub_rn(__fsub_rn(dy, mean_dy), __fmul_rn(y, mean_dy_y)));
}

// dx = normalize_backward_value with means[c] = mean_c(dy) and means[channels + c] =
// mean_c(dy y); dx may be dy or y.
template <class S>
struct NormalizeBackwardOp {
  const typename S::Stored *y, *dy;
  const float *inv_std, *means;
  int64_t channels;
  typename S::Stored* dx;
  using In = float2;  // (y, dy)
  __device__ In load(int64_t i) const { return make_float2(S::load(y[i]), S::load(dy[i])); }
  __device__ void apply(int64_t i, int64_t c, In v) const {
    dx[i] = S::store(
        normalize_backward_value(inv_std[c], v.x, v.y, means[c], means[channels + c]));
  }
};

constexpr int kRowUnroll = 4;  // elements a thread loads before it writes any

// op over every element: a block per row of inner values (a block-stride over the outer *
// channels rows) finds the row's channel once, and each thread loads kRowUnroll elements
// (a block's width apart, so each load is coalesced) before it writes them: enough loads in
// flight for the memory's speed. Rows shorter than a warp take a grid-stride loop that
// divides per element instead.
template <class Op>
__global__ void channel_rows_kernel(int64_t rows, int64_t channels, int64_t inner, Op op) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const int64_t c = r % channels, base = r * inner;
    for (int64_t j0 = threadIdx.x; j0 < inner; j0 += kRowUnroll * int64_t{blockDim.x}) {
      typename Op::In in[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t j = j0 + u * int64_t{blockDim.x};
        if (j < inner) in[u] = op.load(base + j);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t j = j0 + u * int64_t{blockDim.x};
        if (j < inner) op.apply(base + j, c, in[u]);
      }
    }
  }
}

template <class Op>
__global__ void channel_elements_kernel(int64_t n, int64_t channels, int64_t inner, Op op) {
  LAMINA_GRID_STRIDE_LOOP(i, n) op.apply(i, (i / inner) % channels, op.load(i));
}

template <class Op>
void launch_channel_op(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner,
                       const Op& op) {
  const int64_t rows = outer * channels, n = rows * inner;
  if (n == 0) return;
  if (inner >= 32) {
    channel_rows_kernel<<<row_grid(rows), row_block(inner), 0, s>>>(rows, channels, inner, op);
    LAMINA_CUDA_LAUNCHED(channel_rows_kernel);
  } else {
    channel_elements_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, channels, inner, op);
    LAMINA_CUDA_LAUNCHED(channel_elements_kernel);
  }
}

// dx = inv_std[c] (dy - mean_c(dy) - y mean_c(dy y)); dx may be dy or y.
template <class S>
__global__ void batch_norm_backward_kernel(int64_t outer, int64_t channels, int64_t inner,
                                           const typename S::Stored* y,
                                           const typename S::Stored* dy, const float* inv_std,
                                           typename S::Stored* dx) {
  const int64_t m = outer * inner;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    // After the block sums every thread has read its elements, before any writes.
    double sum[2];
    channel_block_sums(outer, channels, inner, c, GradientTerms<S>{dy, y}, sum);
    const float mean_dy = static_cast<float>(sum[0] / static_cast<double>(m));
    const float mean_dy_y = static_cast<float>(sum[1] / static_cast<double>(m));
    const float scale = inv_std[c];
    LAMINA_CHANNEL_LOOP(e, outer, inner) {
      const int64_t i = (e.o * channels + c) * inner + e.j;
      dx[i] = S::store(normalize_backward_value(scale, S::load(y[i]), S::load(dy[i]),
                                                mean_dy, mean_dy_y));
    }
  }
}

// out[c] += the sum of the channel's terms (StoredTerms or ProductTerms), in double.
template <class Terms>
__global__ void channel_reduce_kernel(int64_t outer, int64_t channels, int64_t inner,
                                      Terms terms, float* out) {
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum[1];
    channel_block_sums(outer, channels, inner, c, terms, sum);
    if (threadIdx.x == 0) out[c] += static_cast<float>(sum[0]);
  }
}

// Block (c, part) sums channel c's terms over the images [part * per_part, (part + 1) *
// per_part) into partial[(k * channels + c) * parts + part] for each sum k.
template <class Terms>
__global__ void channel_partial_kernel(int64_t outer, int64_t channels, int64_t inner,
                                       int64_t per_part, Terms terms, double* partial) {
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const int64_t end = min(outer, (part + 1) * per_part);
  double sum[Terms::kSums] = {};
  for (int64_t o = part * per_part; o < end; ++o) {
    const int64_t base = (o * channels + c) * inner;
    LAMINA_THREAD_STRIDE_LOOP(j, inner) terms(base + j, c, sum);
  }
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) {
    const double total = block_sum(sum[k]);
    if (threadIdx.x == 0) partial[(k * channels + c) * parts + part] = total;
  }
}

// The sum of channel c's parts of sum k, in order.
__device__ double sum_of_parts(int64_t channels, int parts, const double* partial, int k,
                               int64_t c) {
  double sum = 0;
  for (int p = 0; p < parts; ++p) sum += partial[(k * channels + c) * parts + p];
  return sum;
}

__global__ void channel_parts_kernel(int64_t channels, int parts, const double* partial,
                                     float* out) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    out[c] += static_cast<float>(sum_of_parts(channels, parts, partial, 0, c));
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

// means[k * channels + c] = sum k of channel c over m elements, in double and rounded once,
// for each of `sums` sums: the variance (the squared deviations' mean), or batch
// normalisation's backward means, mean_c(dy) then mean_c(dy y).
__global__ void channel_means_kernel(int64_t channels, int parts, int sums, double m,
                                     const double* partial, float* means) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    for (int k = 0; k < sums; ++k) {
      const double sum = sum_of_parts(channels, parts, partial, k, c);
      means[k * channels + c] = static_cast<float>(sum / m);
    }
  }
}

// How a per-channel reduction is split: `parts` blocks per channel of per_part images each,
// or none (parts 0: a block per channel). Split when there are fewer channels than SMs and
// each has many elements, into about 8 blocks per SM in all: enough loads in flight to run
// at the memory's speed (a block per channel of 64 channels left half the SMs idle).
struct ChannelParts {
  int parts = 0;
  int64_t per_part = 0;
  ChannelParts(int64_t outer, int64_t channels, int64_t inner, int64_t sms) {
    if (channels >= sms || outer < 2 || inner < 32 || outer * inner < 8192) return;
    const int64_t wanted = std::min(outer, (8 * sms + channels - 1) / channels);
    per_part = (outer + wanted - 1) / wanted;
    parts = static_cast<int>((outer + per_part - 1) / per_part);
  }
  dim3 grid(int64_t channels) const {
    return dim3(static_cast<unsigned>(channels), static_cast<unsigned>(parts));
  }
};

template <class Terms>
void launch_partial(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner,
                    const ChannelParts& split, const Terms& terms, double* partial) {
  channel_partial_kernel<<<split.grid(channels), row_block(inner), 0, s>>>(
      outer, channels, inner, split.per_part, terms, partial);
  LAMINA_CUDA_LAUNCHED(channel_partial_kernel);
}

// out[c] += the sum of each channel's terms: a block per channel, or split (ChannelParts) with
// the parts' sums in the context's workspace.
template <class Terms>
void reduce_channels(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
                     int64_t inner, const Terms& terms, float* out) {
  if (channels <= 0 || outer * inner == 0) return;
  const ChannelParts split(outer, channels, inner, context.sm_count());
  if (split.parts == 0) {
    channel_reduce_kernel<<<row_grid(channels), kChannelBlock, 0, s>>>(outer, channels, inner,
                                                                       terms, out);
    LAMINA_CUDA_LAUNCHED(channel_reduce_kernel);
    return;
  }
  auto* partial =
      static_cast<double*>(context.workspace(sizeof(double) * channels * split.parts));
  launch_partial(s, outer, channels, inner, split, terms, partial);
  channel_parts_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, split.parts,
                                                                     partial, out);
  LAMINA_CUDA_LAUNCHED(channel_parts_kernel);
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
    channel_moments_kernel<S><<<row_grid(channels), kChannelBlock, 0, s>>>(outer, channels,
                                                                           inner, x, mean, var);
    LAMINA_CUDA_LAUNCHED(channel_moments_kernel);
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

// y = (x - mean[c]) * inv_std[c] with inv_std = 1 / sqrt(var + eps), also written.
template <class S>
void normalize_batch(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, float eps,
                     const typename S::Stored* x, const float* mean, const float* var,
                     typename S::Stored* y, float* inv_std) {
  if (channels <= 0) return;
  inverse_std_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, eps, var, inv_std);
  LAMINA_CUDA_LAUNCHED(inverse_std_kernel);
  launch_channel_op(s, outer, channels, inner, NormalizeOp<S>{x, mean, inv_std, y});
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
  launch_channel_op(s, outer, channels, inner, NormalizeOp<S>{x, mean, inv_std, y});
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
    batch_norm_backward_kernel<S><<<row_grid(channels), kChannelBlock, 0, s>>>(
        outer, channels, inner, y, dy, inv_std, dx);
    LAMINA_CUDA_LAUNCHED(batch_norm_backward_kernel);
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
  launch_channel_op(s, outer, channels, inner,
                    NormalizeBackwardOp<S>{y, dy, inv_std, means, channels, dx});
}

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

// The FP32 entry points run the templates above for Fp32Storage; the 16-bit ones for the
// format's storage.

void CudaBackend::channel_moments(int64_t outer, int64_t channels, int64_t inner,
                                  const float* x, float* mean, float* var) {
  moments<Fp32Storage>(context_, on_device(), outer, channels, inner, x, mean, var);
}

void CudaBackend::batch_norm_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                                     const float* x, const float* mean, const float* var,
                                     float* y, float* inv_std) {
  normalize_batch<Fp32Storage>(on_device(), outer, channels, inner, eps, x, mean, var, y,
                               inv_std);
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
                                     float* inv_std) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    normalize_batch<decltype(storage)>(s, outer, channels, inner, eps, x, mean, var, y,
                                       inv_std);
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
