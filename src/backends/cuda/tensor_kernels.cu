// Tensor copies and reductions on CUDA (kTensorOps; semantics in backend.hpp): box copies
// (Crop, Tile), sums over a middle axis (Reduction, Tile's backward), the top-k along an
// axis (ArgMax), and rows gathered or scatter-added by index (Embed, BatchReindex).
//
// Each result is computed as the Native backend computes it (tensor_ops.cpp), so the two
// agree bit for bit: reduce_middle sums in double in order of m, one thread per output;
// scatter_add_rows gives each column one thread that walks the rows in order (no atomics);
// argmax scans the channels top_k times in the same order. An index that names no row is
// never used as one: gather_rows writes NaN to its row, scatter_add_rows skips it.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/tensor_ops_math.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

using tensor_ops::reduce_term;
using tensor_ops::row_of;

// One thread per element of the box (n of them): its offsets in src and dst from its digits.
__global__ void copy_block_kernel(BlockCopy box, int64_t n, const float* src, float* dst,
                                  bool accumulate) {
  LAMINA_GRID_STRIDE_LOOP(e, n) {
    int64_t rest = e, s = 0, d = 0;
    for (int a = box.axes - 1; a >= 0; --a) {
      const int64_t i = rest % box.shape[a];
      rest /= box.shape[a];
      s += i * box.src_stride[a];
      d += i * box.dst_stride[a];
    }
    dst[d] = accumulate ? dst[d] + src[s] : src[s];
  }
}

// y (outer, inner) = coeff * sum over m of op(x (outer, mid, inner)), one thread per (o, i).
template <ReduceOp Op>
__global__ void reduce_middle_kernel(int64_t outer, int64_t mid, int64_t inner, float coeff,
                                     const float* x, float* y) {
  LAMINA_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, i = p - o * inner;
    const float* xs = x + o * mid * inner + i;
    double sum = 0;
    for (int64_t m = 0; m < mid; ++m) sum += reduce_term<Op>(xs[m * inner]);
    y[p] = static_cast<float>(static_cast<double>(coeff) * sum);
  }
}

// dx (outer, mid, inner) = (coeff dy[o, i]) op'(x).
__global__ void reduce_middle_backward_kernel(ReduceOp op, int64_t outer, int64_t mid,
                                              int64_t inner, float coeff, const float* x,
                                              const float* dy, float* dx) {
  LAMINA_GRID_STRIDE_LOOP(e, outer * mid * inner) {
    const int64_t row = e / inner, i = e - row * inner;
    const float g = coeff * dy[(row / mid) * inner + i];
    dx[e] = tensor_ops::reduce_gradient(op, g, x == nullptr ? 0.0f : x[e]);
  }
}

// x (outer, channels, inner) -> index, value (outer, top_k, inner), one thread per (o, i)
// (tensor_ops::top_k: top_k scans of the channels, as on the Native backend).
__global__ void argmax_kernel(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                              const float* x, float* index, float* value) {
  LAMINA_GRID_STRIDE_LOOP(p, outer * inner) {
    const int64_t o = p / inner, i = p - o * inner, at = o * top_k * inner + i;
    tensor_ops::top_k(channels, inner, top_k, x + o * channels * inner + i, inner,
                      index == nullptr ? nullptr : index + at,
                      value == nullptr ? nullptr : value + at);
  }
}

// dst (rows, cols) row r = src row index[r]; NaN where the index names no row.
__global__ void gather_rows_kernel(int64_t rows, int64_t cols, const float* index,
                                   int64_t src_rows, const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(e, rows * cols) {
    const int64_t r = e / cols, j = e - r * cols;
    const int64_t from = row_of(index[r], src_rows);
    dst[e] = from >= 0 ? src[from * cols + j] : __int_as_float(0x7fc00000);
  }
}

// dst row index[r] += src row r for r in order, one thread per column.
__global__ void scatter_add_rows_kernel(int64_t rows, int64_t cols, const float* index,
                                        int64_t dst_rows, const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(j, cols) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = row_of(index[r], dst_rows);
      if (to >= 0) dst[to * cols + j] += src[r * cols + j];
    }
  }
}

}  // namespace

void CudaBackend::copy_block(const BlockCopy& box, const float* src, float* dst,
                             bool accumulate) {
  LAMINA_REQUIRE(box.axes >= 0 && box.axes <= kMaxBlockAxes, "copy_block: ", box.axes,
                 " axes; at most ", kMaxBlockAxes);
  int64_t n = 1;
  for (int a = 0; a < box.axes; ++a) n *= box.shape[a];
  if (n <= 0) return;
  copy_block_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(box, n, src, dst,
                                                                      accumulate);
  LAMINA_CUDA_LAUNCHED(copy_block_kernel);
}

void CudaBackend::reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                                float coeff, const float* x, float* y) {
  const int64_t n = outer * inner;
  if (n <= 0) return;
  const cudaStream_t s = on_device();
  const unsigned grid = elementwise_grid(n);
  switch (op) {
    case ReduceOp::kSum:
      reduce_middle_kernel<ReduceOp::kSum><<<grid, kBlock, 0, s>>>(outer, mid, inner, coeff,
                                                                    x, y);
      break;
    case ReduceOp::kAbsSum:
      reduce_middle_kernel<ReduceOp::kAbsSum><<<grid, kBlock, 0, s>>>(outer, mid, inner,
                                                                       coeff, x, y);
      break;
    case ReduceOp::kSumSquares:
      reduce_middle_kernel<ReduceOp::kSumSquares><<<grid, kBlock, 0, s>>>(outer, mid, inner,
                                                                           coeff, x, y);
      break;
  }
  LAMINA_CUDA_LAUNCHED(reduce_middle_kernel);
}

void CudaBackend::reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid,
                                         int64_t inner, float coeff, const float* x,
                                         const float* dy, float* dx) {
  const int64_t n = outer * mid * inner;
  if (n <= 0) return;
  reduce_middle_backward_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(
      op, outer, mid, inner, coeff, x, dy, dx);
  LAMINA_CUDA_LAUNCHED(reduce_middle_backward_kernel);
}

void CudaBackend::argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                         const float* x, float* index, float* value) {
  const int64_t n = outer * inner;
  if (n <= 0 || top_k <= 0) return;
  argmax_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(outer, channels, inner, top_k,
                                                                 x, index, value);
  LAMINA_CUDA_LAUNCHED(argmax_kernel);
}

void CudaBackend::gather_rows(int64_t rows, int64_t cols, const float* index, int64_t src_rows,
                              const float* src, float* dst) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  gather_rows_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(rows, cols, index,
                                                                      src_rows, src, dst);
  LAMINA_CUDA_LAUNCHED(gather_rows_kernel);
}

void CudaBackend::scatter_add_rows(int64_t rows, int64_t cols, const float* index,
                                   int64_t dst_rows, const float* src, float* dst) {
  if (rows <= 0 || cols <= 0) return;
  scatter_add_rows_kernel<<<elementwise_grid(cols), kBlock, 0, on_device()>>>(
      rows, cols, index, dst_rows, src, dst);
  LAMINA_CUDA_LAUNCHED(scatter_add_rows_kernel);
}

}  // namespace lamina::cuda_detail
