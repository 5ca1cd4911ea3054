// Tensor copies on CUDA (kTensorOps; semantics in backend.hpp): box copies (Crop, Tile), and
// rows gathered or scatter-added by index (Embed, BatchReindex). The reductions of the group
// (reduce_middle, argmax) are in reduce_kernels.cu.
//
// Each result is the Native backend's (tensor_ops.cpp), bit for bit. scatter_add_rows adds
// every destination row's sources in order of r with no atomics: the block of the first r
// that names a row (and a tile of columns) owns that row; it finds the later r naming the
// same row by scanning the index list a tile of kBlock entries at a time, and adds their
// rows in order, one thread per column. Blocks of the other r find an earlier one and stop.
// The work is rows x (the rows scanned) / kBlock index reads plus one add per source value,
// parallel over the distinct rows and the column tiles, so few columns (Embed's small
// embeddings) and few rows of many columns (BatchReindex) both spread over the device. An
// index that names no row is never used as one: gather_rows writes NaN to its row,
// scatter_add_rows skips it.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/tensor_ops_math.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

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

// dst (rows, cols) row r = src row index[r]; NaN where the index names no row.
__global__ void gather_rows_kernel(int64_t rows, int64_t cols, const float* index,
                                   int64_t src_rows, const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(e, rows * cols) {
    const int64_t r = e / cols, j = e - r * cols;
    const int64_t from = row_of(index[r], src_rows);
    dst[e] = from >= 0 ? src[from * cols + j] : __int_as_float(0x7fc00000);
  }
}

// Whether some r' < r names row `to`: scanned a tile at a time by the whole block, which
// gets the same answer in every thread.
__device__ bool named_before(int64_t r, int64_t to, const float* index, int64_t dst_rows) {
  for (int64_t r0 = 0; r0 < r; r0 += blockDim.x) {
    const int64_t q = r0 + threadIdx.x;
    if (__syncthreads_or(q < r && row_of(index[q], dst_rows) == to)) return true;
  }
  return false;
}

// dst (dst_rows, cols) row index[r] += src (rows, cols) row r, in order of r. Block (x, y)
// takes r = x, x + gridDim.x, ... and the tiles of kBlock columns y, y + gridDim.y, ...; it
// adds into row `to` = index[r] only when r is the first to name it (see the file's top):
// acc = dst[to, j], then for each tile of r' >= r, the r' naming `to` are listed in order
// in shared memory (a ballot per warp, counts per warp) and each thread adds their values
// of its column j.
__global__ void scatter_add_rows_kernel(int64_t rows, int64_t cols, const float* index,
                                        int64_t dst_rows, const float* src, float* dst) {
  __shared__ int picks[kBlock];            // positions in the tile naming `to`, in order
  __shared__ int warp_picks[kBlock / 32];  // how many each warp holds
  const unsigned lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const int64_t column_tiles = (cols + kBlock - 1) / kBlock;
  for (int64_t tile = blockIdx.y; tile < column_tiles; tile += gridDim.y) {
    const int64_t j = tile * kBlock + threadIdx.x;
    LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
      const int64_t to = row_of(index[r], dst_rows);
      if (to < 0 || named_before(r, to, index, dst_rows)) continue;
      float acc = j < cols ? dst[to * cols + j] : 0.0f;
      for (int64_t r0 = r; r0 < rows; r0 += kBlock) {
        const int64_t q = r0 + threadIdx.x;
        const bool pick = q < rows && row_of(index[q], dst_rows) == to;
        const unsigned ballot = __ballot_sync(0xffffffffu, pick);
        if (lane == 0) warp_picks[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, count = 0;
        for (unsigned w = 0; w < kBlock / 32; ++w) {
          before += w < warp ? warp_picks[w] : 0;
          count += warp_picks[w];
        }
        if (pick) picks[before + __popc(ballot & ((1u << lane) - 1u))] = threadIdx.x;
        __syncthreads();
        if (j < cols) {
          for (int k = 0; k < count; ++k) acc += src[(r0 + picks[k]) * cols + j];
        }
        __syncthreads();  // the next tile rewrites picks and warp_picks
      }
      if (j < cols) dst[to * cols + j] = acc;
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
  const int64_t column_tiles = (cols + kBlock - 1) / kBlock;
  const dim3 grid(row_grid(rows), static_cast<unsigned>(std::min<int64_t>(column_tiles, 65535)));
  scatter_add_rows_kernel<<<grid, kBlock, 0, on_device()>>>(rows, cols, index, dst_rows, src,
                                                            dst);
  LAMINA_CUDA_LAUNCHED(scatter_add_rows_kernel);
}

}  // namespace lamina::cuda_detail
