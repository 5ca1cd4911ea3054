// Per-channel operations on arrays viewed as (outer, channels, inner): batch statistics,
// batch normalisation, the per-channel affine map and per-channel sums.
//
// Reductions give each channel one block (block-stride over channels) that walks the channel's
// outer * inner elements and sums them in double with kernel_util.cuh's block_sum: a fixed
// tree, no atomics, so results are bit-identical run to run. Elementwise work multiplies and
// adds with explicit rounding (__fmul_rn, __fadd_rn) so that no fused multiply-add changes
// the result from the Native backend's.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
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

// mean[c] and var[c] (biased) of x (outer, channels, inner): two passes in double.
__global__ void channel_moments_kernel(int64_t outer, int64_t channels, int64_t inner,
                                       const float* x, float* mean, float* var) {
  const int64_t m = outer * inner;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum = 0;
    LAMINA_CHANNEL_LOOP(e, outer, inner) sum += x[(e.o * channels + c) * inner + e.j];
    sum = block_sum(sum);
    const double mu = m > 0 ? sum / static_cast<double>(m) : 0.0;
    double squares = 0;
    LAMINA_CHANNEL_LOOP(e, outer, inner) {
      const double d = x[(e.o * channels + c) * inner + e.j] - mu;
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

// y = (x - mean[c]) * inv_std[c]; works in place.
__global__ void batch_norm_forward_kernel(int64_t n, int64_t channels, int64_t inner,
                                          const float* x, const float* mean,
                                          const float* inv_std, float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    y[i] = __fmul_rn(__fsub_rn(x[i], mean[c]), inv_std[c]);
  }
}

// dx = inv_std[c] (dy - mean_c(dy) - y mean_c(dy y)); dx may be dy or y.
__global__ void batch_norm_backward_kernel(int64_t outer, int64_t channels, int64_t inner,
                                           const float* y, const float* dy,
                                           const float* inv_std, float* dx) {
  const int64_t m = outer * inner;
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum_dy = 0, sum_dy_y = 0;
    LAMINA_CHANNEL_LOOP(e, outer, inner) {
      const int64_t i = (e.o * channels + c) * inner + e.j;
      sum_dy += dy[i];
      sum_dy_y += static_cast<double>(dy[i]) * y[i];
    }
    sum_dy = block_sum(sum_dy);
    sum_dy_y = block_sum(sum_dy_y);  // every thread has read its elements before any writes
    const float mean_dy = static_cast<float>(sum_dy / static_cast<double>(m));
    const float mean_dy_y = static_cast<float>(sum_dy_y / static_cast<double>(m));
    const float scale = inv_std[c];
    LAMINA_CHANNEL_LOOP(e, outer, inner) {
      const int64_t i = (e.o * channels + c) * inner + e.j;
      dx[i] = __fmul_rn(scale, __fsub_rn(__fsub_rn(dy[i], mean_dy), __fmul_rn(y[i], mean_dy_y)));
    }
  }
}

// y = x * scale[c] + bias[c]; null scale means 1, null bias 0. Works in place.
__global__ void channel_affine_kernel(int64_t n, int64_t channels, int64_t inner,
                                      const float* x, const float* scale, const float* bias,
                                      float* y) {
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const int64_t c = (i / inner) % channels;
    const float s = scale != nullptr ? scale[c] : 1.0f, b = bias != nullptr ? bias[c] : 0.0f;
    y[i] = __fadd_rn(__fmul_rn(x[i], s), b);
  }
}

// out[c] += the sum of a * b (b null: of a) over the channel, in double.
__global__ void channel_reduce_kernel(int64_t outer, int64_t channels, int64_t inner,
                                      const float* a, const float* b, float* out) {
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum = 0;
    if (b == nullptr) {
      LAMINA_CHANNEL_LOOP(e, outer, inner) sum += a[(e.o * channels + c) * inner + e.j];
    } else {
      LAMINA_CHANNEL_LOOP(e, outer, inner) {
        const int64_t i = (e.o * channels + c) * inner + e.j;
        sum += static_cast<double>(a[i]) * b[i];
      }
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) out[c] += static_cast<float>(sum);
  }
}

// channel_reduce for few channels with many elements each (a convolution's bias gradient):
// block (c, part) sums channel c over the images [part * per_part, (part + 1) * per_part)
// into partial[c * parts + part]; channel_parts_kernel then adds a channel's parts in order.
__global__ void channel_partial_kernel(int64_t outer, int64_t channels, int64_t inner,
                                       int64_t per_part, const float* a, const float* b,
                                       double* partial) {
  const int64_t c = blockIdx.x, part = blockIdx.y;
  const int64_t end = min(outer, (part + 1) * per_part);
  double sum = 0;
  for (int64_t o = part * per_part; o < end; ++o) {
    const int64_t base = (o * channels + c) * inner;
    if (b == nullptr) {
      LAMINA_THREAD_STRIDE_LOOP(j, inner) sum += a[base + j];
    } else {
      LAMINA_THREAD_STRIDE_LOOP(j, inner) sum += static_cast<double>(a[base + j]) * b[base + j];
    }
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[c * gridDim.y + part] = sum;
}

__global__ void channel_parts_kernel(int64_t channels, int parts, const double* partial,
                                     float* out) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    double sum = 0;
    for (int p = 0; p < parts; ++p) sum += partial[c * parts + p];
    out[c] += static_cast<float>(sum);
  }
}

// y = (x - mean[c]) * inv_std[c] over (outer, channels, inner).
void normalize(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner, const float* x,
               const float* mean, const float* inv_std, float* y) {
  const int64_t n = outer * channels * inner;
  if (n == 0) return;
  batch_norm_forward_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, channels, inner, x, mean,
                                                                  inv_std, y);
  LAMINA_CUDA_LAUNCHED(batch_norm_forward_kernel);
}

}  // namespace

void CudaBackend::channel_moments(int64_t outer, int64_t channels, int64_t inner,
                                  const float* x, float* mean, float* var) {
  const cudaStream_t s = on_device();
  if (channels <= 0) return;
  if (outer * inner == 0) {  // no elements: report 0 rather than 0 / 0
    fill(channels, 0.0f, mean);
    fill(channels, 0.0f, var);
    return;
  }
  channel_moments_kernel<<<row_grid(channels), kChannelBlock, 0, s>>>(outer, channels, inner,
                                                                      x, mean, var);
  LAMINA_CUDA_LAUNCHED(channel_moments_kernel);
}

void CudaBackend::batch_norm_forward(int64_t outer, int64_t channels, int64_t inner, float eps,
                                     const float* x, const float* mean, const float* var,
                                     float* y, float* inv_std) {
  const cudaStream_t s = on_device();
  if (channels <= 0) return;
  inverse_std_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, eps, var, inv_std);
  LAMINA_CUDA_LAUNCHED(inverse_std_kernel);
  normalize(s, outer, channels, inner, x, mean, inv_std, y);
}

void CudaBackend::batch_norm_inference(int64_t outer, int64_t channels, int64_t inner,
                                       float eps, const float* x, const float* mean_sum,
                                       const float* var_sum, const float* factor, float* y,
                                       float* mean, float* inv_std) {
  const cudaStream_t s = on_device();
  if (channels <= 0) return;
  running_statistics_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(
      channels, eps, mean_sum, var_sum, factor, mean, inv_std);
  LAMINA_CUDA_LAUNCHED(running_statistics_kernel);
  normalize(s, outer, channels, inner, x, mean, inv_std, y);
}

void CudaBackend::batch_norm_backward(int64_t outer, int64_t channels, int64_t inner,
                                      const float* y, const float* dy, const float* inv_std,
                                      float* dx) {
  const cudaStream_t s = on_device();
  if (outer * channels * inner == 0) return;
  batch_norm_backward_kernel<<<row_grid(channels), kChannelBlock, 0, s>>>(
      outer, channels, inner, y, dy, inv_std, dx);
  LAMINA_CUDA_LAUNCHED(batch_norm_backward_kernel);
}

void CudaBackend::channel_affine(int64_t outer, int64_t channels, int64_t inner,
                                 const float* x, const float* scale, const float* bias,
                                 float* y) {
  const cudaStream_t s = on_device();
  const int64_t n = outer * channels * inner;
  if (n == 0) return;
  channel_affine_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, channels, inner, x, scale,
                                                              bias, y);
  LAMINA_CUDA_LAUNCHED(channel_affine_kernel);
}

void CudaBackend::channel_reduce(int64_t outer, int64_t channels, int64_t inner,
                                 const float* a, const float* b, float* out) {
  const cudaStream_t s = on_device();
  if (channels <= 0 || outer * inner == 0) return;
  // A block per channel keeps the device busy when there are enough channels, or little to
  // sum; otherwise each channel's images are split among blocks (about two per SM in all).
  const int64_t sms = context_.sm_count();
  if (channels >= sms || outer < 2 || inner < 32 || outer * inner < 8192) {
    channel_reduce_kernel<<<row_grid(channels), kChannelBlock, 0, s>>>(outer, channels, inner,
                                                                       a, b, out);
    LAMINA_CUDA_LAUNCHED(channel_reduce_kernel);
    return;
  }
  const int64_t wanted = std::min(outer, (2 * sms + channels - 1) / channels);
  const int64_t per_part = (outer + wanted - 1) / wanted;
  const int parts = static_cast<int>((outer + per_part - 1) / per_part);
  auto* partial = static_cast<double*>(context_.workspace(sizeof(double) * channels * parts));
  const dim3 grid(static_cast<unsigned>(channels), static_cast<unsigned>(parts));
  channel_partial_kernel<<<grid, row_block(inner), 0, s>>>(outer, channels, inner, per_part, a,
                                                           b, partial);
  LAMINA_CUDA_LAUNCHED(channel_partial_kernel);
  channel_parts_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, parts, partial,
                                                                     out);
  LAMINA_CUDA_LAUNCHED(channel_parts_kernel);
}

}  // namespace lamina::cuda_detail
