// Launch geometry and deterministic block reductions shared by Lamina's kernels.
//
// Elementwise kernels use grid-stride loops with 64-bit indices over a grid capped at
// kMaxGrid blocks. Row-wise kernels give each block one row at a time (block-stride over
// rows) and reduce within the block: warp shuffles, then one warp over the per-warp results.
// The reduction tree depends only on blockDim, so a result is bit-identical run to run.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace lamina::cuda_detail {

constexpr int kBlock = 256;              // threads per block of elementwise kernels
constexpr int64_t kMaxGrid = 65536;      // blocks; grid-stride loops cover the rest
constexpr int64_t kMaxRowGrid = 1 << 20; // blocks of row-wise kernels; block-stride beyond

inline unsigned elementwise_grid(int64_t n) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + kBlock - 1) / kBlock, 1, kMaxGrid));
}

// Threads for a block that handles one row of cols values: a multiple of 32, at most 256.
inline unsigned row_block(int64_t cols) {
  return static_cast<unsigned>(std::clamp<int64_t>((cols + 31) / 32 * 32, 32, 256));
}

inline unsigned row_grid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, kMaxRowGrid));
}

// for (int64_t i = global thread index; i < n; i += all threads)
#define LAMINA_GRID_STRIDE_LOOP(i, n)                                          \
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n);  \
       i += int64_t{blockDim.x} * gridDim.x)

// Elementwise kernels that load several elements per thread before writing any (enough
// loads in flight for the memory's speed; in place stays safe): each thread takes up to
// kUnroll elements a grid's width apart, load(i) for all of them, then apply(i, loaded).
// Launch them with unrolled_grid(n) blocks of kBlock threads.
constexpr int kUnroll = 4;

inline unsigned unrolled_grid(int64_t n) { return elementwise_grid((n + kUnroll - 1) / kUnroll); }

template <class In, class Load, class Apply>
__device__ __forceinline__ void unrolled_elements(int64_t n, const Load& load,
                                                  const Apply& apply) {
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  for (int64_t i0 = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i0 < n;
       i0 += kUnroll * stride) {
    In in[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * stride < n) in[u] = load(i0 + u * stride);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (i0 + u * stride < n) apply(i0 + u * stride, in[u]);
  }
}

// for (int64_t r = block index; r < rows; r += blocks)
#define LAMINA_BLOCK_STRIDE_LOOP(r, rows) \
  for (int64_t r = blockIdx.x; r < (rows); r += gridDim.x)

// for (int64_t j = thread index in block; j < cols; j += block size)
#define LAMINA_THREAD_STRIDE_LOOP(j, cols) \
  for (int64_t j = threadIdx.x; j < (cols); j += blockDim.x)

// Block reductions: combine(a, b) over the warp's lanes by a xor butterfly, then over the
// block's warps (one warp over the per-warp results). The butterfly leaves the same value in
// every lane when combine is commutative: each step combines the same two operands (float
// addition and fmaxf commute exactly). Values move between lanes by shuffle_xor; a type
// that __shfl_xor_sync cannot move declares an overload beside it (ArgMax's Pick).
template <class T>
__device__ __forceinline__ T shuffle_xor(T v, int lane_mask) {
  return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

template <class T, class Combine>
__device__ __forceinline__ T warp_reduce(T v, Combine combine) {
  for (int offset = 16; offset > 0; offset >>= 1) v = combine(v, shuffle_xor(v, offset));
  return v;
}

// combine over the block, returned to every thread; `none` stands for the lanes past the
// last warp (combine(v, none) = v). blockDim.x must be a multiple of 32 and every thread of
// the block must call it (it synchronises the block).
template <class T, class Combine>
__device__ T block_reduce(T v, T none, Combine combine) {
  __shared__ T partial[32];
  v = warp_reduce(v, combine);
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  __syncthreads();  // an earlier call may still be reading partial
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  return warp_reduce(lane < (blockDim.x >> 5) ? partial[lane] : none, combine);
}

struct Plus {
  template <class T>
  __device__ T operator()(T a, T b) const { return a + b; }
};

struct Fmax {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <class T>
__device__ __forceinline__ T warp_sum(T v) { return warp_reduce(v, Plus{}); }

__device__ __forceinline__ float warp_max(float v) { return warp_reduce(v, Fmax{}); }

// Sum of v over the block, returned to every thread (block_reduce's rules).
template <class T>
__device__ T block_sum(T v) { return block_reduce(v, T(0), Plus{}); }

// The sum of values[0, count) over the block, in a fixed order, returned to every thread;
// for the one-block kernels that finish a grid-wide sum from its per-block partial sums.
__device__ inline double block_sum_of(int64_t count, const double* values) {
  double sum = 0;
  LAMINA_THREAD_STRIDE_LOOP(i, count) sum += values[i];
  return block_sum(sum);
}

// Maximum of v over the block, returned to every thread (block_reduce's rules).
__device__ inline float block_max(float v) { return block_reduce(v, -INFINITY, Fmax{}); }

// max_j x_j and sum_j exp(x_j - max) of one row, computed by the whole block as the Native
// backend does (float exp, double sum), so that softmax = exp(x - max) / sum and
// log softmax = x - (max + log(sum)).
struct RowSoftmaxStats {
  float max;
  double sum;
};

__device__ inline RowSoftmaxStats row_softmax_stats(int64_t cols, const float* x) {
  float max = -INFINITY;
  LAMINA_THREAD_STRIDE_LOOP(j, cols) max = fmaxf(max, x[j]);
  max = block_max(max);
  double sum = 0;
  LAMINA_THREAD_STRIDE_LOOP(j, cols) sum += static_cast<double>(expf(x[j] - max));
  sum = block_sum(sum);
  return {max, sum};
}

// The same computed by one warp (lanes stride over the row): for rows of at most 32 values
// it gives row_softmax_stats' bits (one value per lane, the same butterfly).
__device__ inline RowSoftmaxStats warp_softmax_stats(int64_t cols, const float* x) {
  const int64_t lane = threadIdx.x & 31u;
  float max = -INFINITY;
  for (int64_t j = lane; j < cols; j += 32) max = fmaxf(max, x[j]);
  max = warp_max(max);
  double sum = 0;
  for (int64_t j = lane; j < cols; j += 32) sum += static_cast<double>(expf(x[j] - max));
  sum = warp_sum(sum);
  return {max, sum};
}

// Labels are class indices stored as floats; the integer part counts, as in the Native
// backend. Whether a row's label is the ignore label:
__device__ __forceinline__ bool is_ignored(bool has_ignore_label, int ignore_label, float label) {
  return has_ignore_label && trunc(label) == static_cast<double>(ignore_label);
}

// A label's class index, or -1 when it names none of the cols classes (negative, NaN, or
// past the last class). Kernels never index with such a label: the loss becomes NaN.
__device__ __forceinline__ int64_t class_index(float label, int64_t cols) {
  return label >= 0 && static_cast<double>(label) < static_cast<double>(cols)
             ? static_cast<int64_t>(label)
             : -1;
}

}  // namespace lamina::cuda_detail
