// CudaBackend::transpose: y (outer, cols, rows) = each x (outer, rows, cols) transposed (the
// softmax layers over a class axis with positions after it; backend.hpp).
//
// A block moves one kTile x kTile tile at a time through shared memory: its threads read
// the tile's rows of x (consecutive threads, consecutive addresses) and write the tile's
// columns as rows of y (consecutive again), so both sides are coalesced; the tile has one
// padding column, so reading a column of it hits 32 different banks. Blocks stride over the
// tiles of all the matrices. Out of place only.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

constexpr int kTile = 32;      // a tile's side; the block is kTile threads wide
constexpr int kTileRows = 8;   // the block's height: each thread moves kTile / kTileRows values

__global__ void transpose_kernel(int64_t outer, int64_t rows, int64_t cols, int64_t tile_rows,
                                 int64_t tile_cols, const float* x, float* y) {
  __shared__ float tile[kTile][kTile + 1];
  const int64_t per_matrix = tile_rows * tile_cols;
  for (int64_t t = blockIdx.x; t < outer * per_matrix; t += gridDim.x) {
    const int64_t o = t / per_matrix, within = t - o * per_matrix;
    const int64_t r0 = within / tile_cols * kTile, c0 = within % tile_cols * kTile;
    const float* xo = x + o * rows * cols;
    float* yo = y + o * rows * cols;
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t r = r0 + i, c = c0 + threadIdx.x;
      if (r < rows && c < cols) tile[i][threadIdx.x] = xo[r * cols + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < kTile; i += kTileRows) {
      const int64_t c = c0 + i, r = r0 + threadIdx.x;  // y's row c, column r
      if (r < rows && c < cols) yo[c * rows + r] = tile[threadIdx.x][i];
    }
    __syncthreads();  // the tile is read before the next one is written
  }
}

}  // namespace

void CudaBackend::transpose(int64_t outer, int64_t rows, int64_t cols, const float* x,
                            float* y) {
  if (outer <= 0 || rows <= 0 || cols <= 0) return;
  const cudaStream_t s = on_device();
  const int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>(outer * tile_rows * tile_cols, kMaxGrid));
  transpose_kernel<<<blocks, dim3(kTile, kTileRows), 0, s>>>(outer, rows, cols, tile_rows,
                                                             tile_cols, x, y);
  LAMINA_CUDA_LAUNCHED(transpose_kernel);
}

}  // namespace lamina::cuda_detail
