// Lamina's per-channel CUDA reductions (channel_kernels.cu: per-channel sums;
// batch_norm_kernels.cu: batch normalisation's statistics and gradient) over arrays viewed
// as (outer, channels, inner), written once for arrays stored in FP32 and in 16 bits
// (half_storage.cuh's S: values load exactly, sums are in double) and read in
// channel_groups.cuh's groups of W values.
//
// Reductions give each channel one block (block-stride over channels) that walks the channel's
// groups and sums them in double with kernel_util.cuh's block_sum; or, with fewer channels
// than SMs and many elements each (batch normalisation of a convolution's output), split each
// channel's images among about 8 blocks per SM (ChannelParts) and add the parts' sums in
// order. A fixed tree either way, no atomics, so results are bit-identical run to run.
// Kernels here are templates or static, so each file that includes this one has its own.
#pragma once

#include <algorithm>

#include "backends/cuda/channel_groups.cuh"
#include "backends/cuda/cuda_context.hpp"

namespace lamina::cuda_detail {

constexpr int kChannelBlock = 512;  // threads of a per-channel reduction block

// Terms of per-channel sums: add<W>(i, c, sum) adds the terms of channel c's group of W
// elements from index i into sum[0..kSums); alignment() is that of the arrays they read.
template <class S>  // a, stored as S says (half_storage.cuh)
struct StoredTerms {
  using Storage = S;
  static constexpr int kSums = 1;
  const typename S::Stored* a;
  int alignment() const { return alignment_of({a}); }
  template <int W>
  __device__ void add(int64_t i, int64_t, double* sum) const {
    float v[W];
    load_group<S>(a, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) sum[0] += v[k];
  }
};
template <class S>
struct ProductTerms {  // a b
  using Storage = S;
  static constexpr int kSums = 1;
  const typename S::Stored *a, *b;
  int alignment() const { return alignment_of({a, b}); }
  template <int W>
  __device__ void add(int64_t i, int64_t, double* sum) const {
    float u[W], v[W];
    load_group<S>(a, i, u);
    load_group<S>(b, i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) sum[0] += static_cast<double>(u[k]) * v[k];
  }
};

// The block's sums of terms over channel c, returned to every thread: a walk over the
// channel's outer rows of `groups` groups of W, each sum in double, then block_sum.
template <int W, class Terms>
__device__ void channel_block_sums(int64_t outer, int64_t channels, int64_t groups, int64_t c,
                                   const Terms& terms, double (&sum)[Terms::kSums]) {
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) sum[k] = 0;
  LAMINA_CHANNEL_LOOP(e, outer, groups) {
    terms.template add<W>(((e.o * channels + c) * groups + e.j) * W, c, sum);
  }
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) sum[k] = block_sum(sum[k]);
}

// Where per-channel sums go: out[k][c] += sum k of channel c.
template <int K>
struct ChannelOuts {
  float* out[K];
};

// outs: the channels' sums of terms, in double, each rounded once.
template <int W, class Terms>
__global__ void channel_reduce_kernel(int64_t outer, int64_t channels, int64_t groups,
                                      Terms terms, ChannelOuts<Terms::kSums> outs) {
  LAMINA_BLOCK_STRIDE_LOOP(c, channels) {
    double sum[Terms::kSums];
    channel_block_sums<W>(outer, channels, groups, c, terms, sum);
    if (threadIdx.x == 0) {
#pragma unroll
      for (int k = 0; k < Terms::kSums; ++k) outs.out[k][c] += static_cast<float>(sum[k]);
    }
  }
}

// Block (c, part) sums channel c's terms over the images [part * per_part, (part + 1) *
// per_part) into partial[(k * channels + c) * parts + part] for each sum k.
template <int W, class Terms>
__global__ void channel_partial_kernel(int64_t outer, int64_t channels, int64_t groups,
                                       int64_t per_part, Terms terms, double* partial) {
  const int64_t c = blockIdx.x, part = blockIdx.y, parts = gridDim.y;
  const int64_t end = min(outer, (part + 1) * per_part);
  double sum[Terms::kSums] = {};
  for (int64_t o = part * per_part; o < end; ++o) {
    const int64_t base = (o * channels + c) * groups;
    LAMINA_THREAD_STRIDE_LOOP(j, groups) terms.template add<W>((base + j) * W, c, sum);
  }
#pragma unroll
  for (int k = 0; k < Terms::kSums; ++k) {
    const double total = block_sum(sum[k]);
    if (threadIdx.x == 0) partial[(k * channels + c) * parts + part] = total;
  }
}

// The sum of channel c's parts of sum k, in order.
static __device__ double sum_of_parts(int64_t channels, int parts, const double* partial,
                                      int k, int64_t c) {
  double sum = 0;
  for (int p = 0; p < parts; ++p) sum += partial[(k * channels + c) * parts + p];
  return sum;
}

// outs: the sums of channel c's parts of each sum, each rounded once.
template <int K>
__global__ void channel_parts_kernel(int64_t channels, int parts, const double* partial,
                                     ChannelOuts<K> outs) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
#pragma unroll
    for (int k = 0; k < K; ++k)
      outs.out[k][c] += static_cast<float>(sum_of_parts(channels, parts, partial, k, c));
  }
}

// means[k * channels + c] = sum k of channel c over m elements, in double and rounded once,
// for each of `sums` sums: the variance (the squared deviations' mean), or batch
// normalisation's backward means, mean_c(dy) then mean_c(dy y).
static __global__ void channel_means_kernel(int64_t channels, int parts, int sums, double m,
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
  with_group_width<typename Terms::Storage>(inner, terms.alignment(), [&](auto width) {
    constexpr int W = decltype(width)::value;
    channel_partial_kernel<W><<<split.grid(channels), row_block(inner / W), 0, s>>>(
        outer, channels, inner / W, split.per_part, terms, partial);
    LAMINA_CUDA_LAUNCHED(channel_partial_kernel);
  });
}

// outs.out[k][c] += the sum k of each channel's terms: a block per channel, or split
// (ChannelParts) with the parts' sums in the context's workspace.
template <class Terms>
void reduce_channels(CudaContext& context, cudaStream_t s, int64_t outer, int64_t channels,
                     int64_t inner, const Terms& terms, ChannelOuts<Terms::kSums> outs) {
  if (channels <= 0 || outer * inner == 0) return;
  const ChannelParts split(outer, channels, inner, context.sm_count());
  if (split.parts == 0) {
    with_group_width<typename Terms::Storage>(inner, terms.alignment(), [&](auto width) {
      constexpr int W = decltype(width)::value;
      channel_reduce_kernel<W><<<row_grid(channels), kChannelBlock, 0, s>>>(
          outer, channels, inner / W, terms, outs);
      LAMINA_CUDA_LAUNCHED(channel_reduce_kernel);
    });
    return;
  }
  auto* partial = static_cast<double*>(
      context.workspace(sizeof(double) * Terms::kSums * channels * split.parts));
  launch_partial(s, outer, channels, inner, split, terms, partial);
  channel_parts_kernel<<<elementwise_grid(channels), kBlock, 0, s>>>(channels, split.parts,
                                                                     partial, outs);
  LAMINA_CUDA_LAUNCHED(channel_parts_kernel);
}

}  // namespace lamina::cuda_detail
