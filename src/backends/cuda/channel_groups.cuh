// How Lamina's per-channel CUDA kernels (channel_sums.cuh's reductions, channel_kernels.cu,
// batch_norm_kernels.cu) walk arrays viewed as (outer, channels, inner): in groups of W
// consecutive values of one row, W = kGroup<S> (one 16-byte load: 4 FP32 values or 8
// 16-bit ones) when inner is a multiple of it and every array is 16-byte aligned, else
// W = 1. Two-byte loads ran at about half the memory's speed; a group is one load.
//
// An elementwise operation (launch_channel_op) is a struct with alignment() (of its arrays,
// alignment.hpp) and apply<W>(i, c): it loads the W values from element i of channel c on,
// computes and stores them. A thread loads its whole group before it stores any of it, and
// no other thread touches the group, so each op works in place.
#pragma once

#include <cstdint>
#include <type_traits>

#include "backends/cuda/alignment.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {

template <class S>
constexpr int kGroup = 16 / static_cast<int>(sizeof(typename S::Stored));

// v[k] = the float stored at p[i + k], k < W: one 16-byte load for a whole group.
template <class S, int W>
__device__ __forceinline__ void load_group(const typename S::Stored* p, int64_t i,
                                           float (&v)[W]) {
  using Stored = typename S::Stored;
  if constexpr (W == 1) {
    v[0] = S::load(p[i]);
  } else {
    static_assert(W == kGroup<S>, "a group is one 16-byte load");
    const uint4 raw = *reinterpret_cast<const uint4*>(p + i);
    const Stored* values = reinterpret_cast<const Stored*>(&raw);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = S::load(values[k]);
  }
}

// p[i + k] = v[k] stored as S says, k < W: one 16-byte store for a whole group.
template <class S, int W>
__device__ __forceinline__ void store_group(typename S::Stored* p, int64_t i,
                                            const float (&v)[W]) {
  using Stored = typename S::Stored;
  if constexpr (W == 1) {
    p[i] = S::store(v[0]);
  } else {
    static_assert(W == kGroup<S>, "a group is one 16-byte store");
    uint4 raw;
    Stored* values = reinterpret_cast<Stored*>(&raw);
#pragma unroll
    for (int k = 0; k < W; ++k) values[k] = S::store(v[k]);
    *reinterpret_cast<uint4*>(p + i) = raw;
  }
}

// Calls f(std::integral_constant<int, W>{}): W = kGroup<S> when rows of `inner` values split
// into whole groups and the arrays' alignment (alignment_of) allows 16-byte loads, else 1.
template <class S, class F>
void with_group_width(int64_t inner, int alignment, F&& f) {
  constexpr int kWide = kGroup<S>;
  if (inner % kWide == 0 && alignment >= 16) {
    f(std::integral_constant<int, kWide>{});
  } else {
    f(std::integral_constant<int, 1>{});
  }
}

// Walks group j of row o of one channel, o < outer, j < groups (a row's groups), starting
// at the thread's index and stepping by the block size, without a division per group.
struct ChannelWalk {
  int64_t o, j, step_o, step_j;
  __device__ ChannelWalk(int64_t groups, int64_t start, int64_t step)
      : o(start / groups), j(start % groups), step_o(step / groups), step_j(step % groups) {}
  __device__ void next(int64_t groups) {
    o += step_o;
    j += step_j;
    if (j >= groups) {
      j -= groups;
      ++o;
    }
  }
};

// for each group (walk.o, walk.j) of the channel, over the block's threads
#define LAMINA_CHANNEL_LOOP(walk, outer, groups)                                    \
  for (ChannelWalk walk((groups), threadIdx.x, blockDim.x); walk.o < (outer); \
       walk.next(groups))

// op over every group: a block per row (a block-stride over the outer * channels rows) finds
// the row's channel once and its threads take the row's groups.
template <int W, class Op>
__global__ void channel_rows_kernel(int64_t rows, int64_t channels, int64_t groups, Op op) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const int64_t c = r % channels, base = r * groups;
    LAMINA_THREAD_STRIDE_LOOP(j, groups) op.template apply<W>((base + j) * W, c);
  }
}

// Rows of fewer than a warp's groups: a grid-stride loop that divides per group.
template <int W, class Op>
__global__ void channel_groups_kernel(int64_t n, int64_t channels, int64_t groups, Op op) {
  LAMINA_GRID_STRIDE_LOOP(g, n) op.template apply<W>(g * W, (g / groups) % channels);
}

// op (storage S) over every element of the (outer, channels, inner) arrays it names.
template <class S, class Op>
void launch_channel_op(cudaStream_t s, int64_t outer, int64_t channels, int64_t inner,
                       const Op& op) {
  const int64_t rows = outer * channels;
  if (rows * inner == 0) return;
  with_group_width<S>(inner, op.alignment(), [&](auto width) {
    constexpr int W = decltype(width)::value;
    const int64_t groups = inner / W;
    if (groups >= 32) {
      channel_rows_kernel<W><<<row_grid(rows), row_block(groups), 0, s>>>(rows, channels,
                                                                          groups, op);
      LAMINA_CUDA_LAUNCHED(channel_rows_kernel);
    } else {
      channel_groups_kernel<W><<<elementwise_grid(rows * groups), kBlock, 0, s>>>(
          rows * groups, channels, groups, op);
      LAMINA_CUDA_LAUNCHED(channel_groups_kernel);
    }
  });
}

}  // namespace lamina::cuda_detail
