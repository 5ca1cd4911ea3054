// The machinery of Lamina's per-channel CUDA operations (channel_kernels.cu: the affine map
// and per-channel sums; batch_norm_kernels.cu: batch normalisation) on arrays viewed as
// (outer, channels, inner), written once for arrays stored in FP32 and in 16 bits
// (half_storage.cuh's S: values load exactly, results are computed in FP32 and stored once).
//
// Reductions give each channel one block (block-stride over channels) that walks the channel's
// outer * inner elements and sums them in double with kernel_util.cuh's block_sum; or, with
// fewer channels than SMs and many elements each (batch normalisation of a convolution's
// output), split each channel's images among about 8 blocks per SM (ChannelParts) and add
// the parts' sums in order. A fixed tree either way, no atomics, so results are
// bit-identical run to run. Elementwise operations (launch_channel_op) find each row's
// channel once. Kernels here are templates or static, so each file that includes this one
// has its own.
#pragma once

#include <algorithm>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {

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

// An elementwise operation for launch_channel_op (the .cu files define them) acts on
// element i of channel c: load(i) reads what the element's result needs, apply(i, c, in)
// computes and writes it. A thread loads all its elements before it writes any, so each op
// works in place.
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
static __device__ double sum_of_parts(int64_t channels, int parts, const double* partial,
                                      int k, int64_t c) {
  double sum = 0;
  for (int p = 0; p < parts; ++p) sum += partial[(k * channels + c) * parts + p];
  return sum;
}

static __global__ void channel_parts_kernel(int64_t channels, int parts,
                                            const double* partial, float* out) {
  LAMINA_GRID_STRIDE_LOOP(c, channels) {
    out[c] += static_cast<float>(sum_of_parts(channels, parts, partial, 0, c));
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

}  // namespace lamina::cuda_detail
