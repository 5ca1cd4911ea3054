// The TiledLinear layer's CUDA kernels (tiled_linear.hpp): a matrix product tiled through
// shared memory, and the bias gradient's column sums. Compiled only where Lamina has CUDA.
//
// The product C (M, N) = op(A) (M, L) op(B) (L, N), with = or +=, and a bias per column:
// each block of 16 x 16 threads computes a 64 x 64 tile of C. It walks L in steps of 16:
// the block copies the 64 x 16 slice of op(A) and the 16 x 64 slice of op(B) into shared
// memory (each thread 4 values of each, neighbouring threads reading neighbouring addresses
// of whichever layout A and B have), then every thread multiplies its 4 x 4 outputs
// (rows ty + 16 p, columns tx + 16 q) from them. So each value loaded from global memory is
// used 64 times. The three products of a Linear layer are this one kernel, with the
// operands' layouts as template arguments:
//   forward         y (N, K) = x (N, C) w^T, w stored (K, C)               <false, true>
//   input gradient  dx (N, C) = dy (N, K) w (K, C)                          <false, false>
//   weight gradient dw (K, C) += dy^T x, dy stored (N, K), x (N, C)         <true, false>, +=
// Every launch goes to the stream the layer was given (lamina::cuda::stream) and is
// checked with LAMINA_KERNEL_LAUNCHED, so a bad launch is an Error naming the layer.
#include <cuda_runtime.h>

#include "lamina/cuda_kernels.hpp"
#include "tiled_linear.hpp"

namespace example {
namespace {

constexpr int kTile = 64;    // rows and columns of C per block
constexpr int kDepth = 16;   // the step along L
constexpr int kSide = 16;    // threads per block: kSide x kSide
constexpr int kPer = kTile / kSide;  // outputs per thread along each side: 4
constexpr int kThreads = kSide * kSide;
constexpr int kLoads = kTile * kDepth / kThreads;  // values of each slice a thread copies: 4

// A is stored (M, L), or (L, M) when kTransA; B is stored (L, N), or (N, L) when kTransB.
template <bool kTransA, bool kTransB, bool kAccumulate>
__global__ void __launch_bounds__(kThreads)
    tiled_matmul(int64_t m, int64_t n, int64_t l, const float* __restrict__ a,
                 const float* __restrict__ b, const float* __restrict__ bias,
                 float* __restrict__ c) {
  // as[j][i] = op(A)[row0 + i][l0 + j], bs[j][i] = op(B)[l0 + j][col0 + i]. One column of
  // padding: the copies along L write a column, 65 floats apart, each to another bank.
  __shared__ float as[kDepth][kTile + 1];
  __shared__ float bs[kDepth][kTile + 1];
  const int tx = threadIdx.x, ty = threadIdx.y, t = ty * kSide + tx;
  const int64_t row0 = int64_t{blockIdx.y} * kTile, col0 = int64_t{blockIdx.x} * kTile;
  float acc[kPer][kPer] = {};
  for (int64_t l0 = 0; l0 < l; l0 += kDepth) {
#pragma unroll
    for (int r = 0; r < kLoads; ++r) {
      const int e = t + r * kThreads;
      // op(A)'s slice: along M when A is stored (L, M), along L otherwise.
      int i = kTransA ? e % kTile : e / kDepth;
      int j = kTransA ? e / kTile : e % kDepth;
      int64_t row = row0 + i, depth = l0 + j;
      as[j][i] = row < m && depth < l ? (kTransA ? a[depth * m + row] : a[row * l + depth]) : 0.0f;
      // op(B)'s slice: along L when B is stored (N, L), along N otherwise.
      i = kTransB ? e / kDepth : e % kTile;
      j = kTransB ? e % kDepth : e / kTile;
      const int64_t col = col0 + i;
      depth = l0 + j;
      bs[j][i] = col < n && depth < l ? (kTransB ? b[col * l + depth] : b[depth * n + col]) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int j = 0; j < kDepth; ++j) {
      float av[kPer], bv[kPer];
#pragma unroll
      for (int p = 0; p < kPer; ++p) {
        av[p] = as[j][ty + kSide * p];
        bv[p] = bs[j][tx + kSide * p];
      }
#pragma unroll
      for (int p = 0; p < kPer; ++p)
#pragma unroll
        for (int q = 0; q < kPer; ++q) acc[p][q] += av[p] * bv[q];
    }
    __syncthreads();  // before the next slice overwrites the tiles
  }
#pragma unroll
  for (int p = 0; p < kPer; ++p) {
    const int64_t row = row0 + ty + kSide * p;
    if (row >= m) continue;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int64_t col = col0 + tx + kSide * q;  // neighbouring threads, neighbouring columns
      if (col >= n) continue;
      float v = acc[p][q];
      if (bias != nullptr) v += bias[col];
      float* out = c + row * n + col;
      *out = kAccumulate ? *out + v : v;
    }
  }
}

// partial[r][col] = the sum of dy's column col over rows [r kBiasChunk, (r + 1) kBiasChunk)
// (fewer in the last chunk); one thread per column and chunk, reading a row's columns side by
// side.
__global__ void bias_chunk_sums(int64_t n, int64_t k, const float* __restrict__ dy,
                                float* __restrict__ partial) {
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= k) return;
  const int64_t first = int64_t{blockIdx.y} * kBiasChunk;
  const int64_t end = first + kBiasChunk < n ? first + kBiasChunk : n;
  float sum = 0;
  for (int64_t row = first; row < end; ++row) sum += dy[row * k + col];
  partial[blockIdx.y * k + col] = sum;
}

// db[col] += the chunks' sums, in chunk order.
__global__ void bias_add_chunks(int64_t chunks, int64_t k, const float* __restrict__ partial,
                                float* __restrict__ db) {
  const int64_t col = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (col >= k) return;
  float sum = 0;
  for (int64_t r = 0; r < chunks; ++r) sum += partial[r * k + col];
  db[col] += sum;
}

// The grid of 64 x 64 tiles over C (m, n).
dim3 tiles(int64_t m, int64_t n) {
  return dim3(unsigned((n + kTile - 1) / kTile), unsigned((m + kTile - 1) / kTile));
}

constexpr int kColumnBlock = 256;

}  // namespace

void tiled_linear_forward_gpu(const lamina::Layer& layer, cudaStream_t stream, int64_t n,
                              int64_t c, int64_t k, const float* x, const float* w,
                              const float* b, float* y) {
  if (n == 0 || k == 0) return;
  tiled_matmul<false, true, false>
      <<<tiles(n, k), dim3(kSide, kSide), 0, stream>>>(n, k, c, x, w, b, y);
  LAMINA_KERNEL_LAUNCHED(layer, tiled_matmul);
}

void tiled_linear_backward_input_gpu(const lamina::Layer& layer, cudaStream_t stream,
                                     int64_t n, int64_t c, int64_t k, const float* dy,
                                     const float* w, float* dx) {
  if (n == 0 || c == 0) return;
  tiled_matmul<false, false, false>
      <<<tiles(n, c), dim3(kSide, kSide), 0, stream>>>(n, c, k, dy, w, nullptr, dx);
  LAMINA_KERNEL_LAUNCHED(layer, tiled_matmul);
}

void tiled_linear_backward_params_gpu(const lamina::Layer& layer, cudaStream_t stream,
                                      int64_t n, int64_t c, int64_t k, const float* x,
                                      const float* dy, float* dw, float* db, float* workspace) {
  if (n == 0 || k == 0) return;  // nothing to add
  if (c > 0) {
    tiled_matmul<true, false, true>
        <<<tiles(k, c), dim3(kSide, kSide), 0, stream>>>(k, c, n, dy, x, nullptr, dw);
    LAMINA_KERNEL_LAUNCHED(layer, tiled_matmul);
  }
  if (db == nullptr) return;
  const int64_t chunks = (n + kBiasChunk - 1) / kBiasChunk;
  const unsigned column_blocks = unsigned((k + kColumnBlock - 1) / kColumnBlock);
  bias_chunk_sums<<<dim3(column_blocks, unsigned(chunks)), kColumnBlock, 0, stream>>>(
      n, k, dy, workspace);
  LAMINA_KERNEL_LAUNCHED(layer, bias_chunk_sums);
  bias_add_chunks<<<column_blocks, kColumnBlock, 0, stream>>>(chunks, k, workspace, db);
  LAMINA_KERNEL_LAUNCHED(layer, bias_add_chunks);
}

}  // namespace example
