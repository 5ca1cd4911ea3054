// The fused Linear's backward on CUDA: one kernel for the ReLU's derivative and the bias
// gradient's column sums in a fixed order (and a second one that adds the parts' sums, for
// more than 128 rows), with y, dy and dz in FP32 or in 16 bits (half_storage.cuh); db is
// FP32 either way. A 16-bit dz is exact (dy or 0 dy), and the sums add the 16-bit values
// exactly as read, in FP32.
#include <algorithm>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {
namespace {

// dz = y > 0 ? dy : 0 (y null: dz is dy), and the column sums of dz. A block covers 32
// columns and up to rows_per_part rows; its 8 rows of threads stride over those rows (each
// thread loads kRowUnroll rows before it writes any), then row 0 adds the 8 partial sums in
// order into out: db itself when one block covers all the rows (gridDim.y == 1), else row
// blockIdx.y of the (parts, n) partial sums that bias_parts_kernel adds in order. A fixed
// tree, no atomics: the same bits every run. (A block per 32 columns alone gave 128 blocks
// for 4096 columns, too few loads in flight: 66 us for 1024 x 4096 BF16 values.)
constexpr int kColumns = 32, kRowThreads = 8, kRowUnroll = 4;
constexpr int64_t kRowsPerPart = 128, kMaxParts = 65535;

template <class S>
__global__ void linear_bias_backward_kernel(int64_t rows, int64_t n, int64_t rows_per_part,
                                            const typename S::Stored* y,
                                            const typename S::Stored* dy,
                                            typename S::Stored* dz, float* out) {
  __shared__ float partial[kRowThreads][kColumns];
  const int64_t c = int64_t{blockIdx.x} * kColumns + threadIdx.x;
  const int64_t first = int64_t{blockIdx.y} * rows_per_part;
  const int64_t end = min(rows, first + rows_per_part);
  float sum = 0;
  if (c < n) {
    for (int64_t r0 = first + threadIdx.y; r0 < end; r0 += kRowThreads * kRowUnroll) {
      float v[kRowUnroll], yv[kRowUnroll];
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t r = r0 + u * kRowThreads;
        if (r >= end) continue;
        v[u] = S::load(dy[r * n + c]);
        if (y != nullptr) yv[u] = S::load(y[r * n + c]);
      }
#pragma unroll
      for (int u = 0; u < kRowUnroll; ++u) {
        const int64_t r = r0 + u * kRowThreads;
        if (r >= end) continue;
        if (y != nullptr) {
          v[u] = relu_backward_value(yv[u], v[u], 0.0f);
          dz[r * n + c] = S::store(v[u]);
        }
        sum += v[u];
      }
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= n || out == nullptr) return;
  float total = 0;
  for (int i = 0; i < kRowThreads; ++i) total += partial[i][threadIdx.x];
  if (gridDim.y == 1) {
    out[c] += total;
  } else {
    out[int64_t{blockIdx.y} * n + c] = total;
  }
}

// db[c] += the parts' sums of column c, in order.
__global__ void bias_parts_kernel(int64_t n, int64_t parts, const float* partial, float* db) {
  LAMINA_GRID_STRIDE_LOOP(c, n) {
    float total = 0;
    for (int64_t p = 0; p < parts; ++p) total += partial[p * n + c];
    db[c] += total;
  }
}

template <class S>
void launch(CudaContext& context, cudaStream_t s, int64_t rows, int64_t n,
            const typename S::Stored* y, const typename S::Stored* dy, typename S::Stored* dz,
            float* db) {
  // At most kMaxParts parts (a grid's y extent): more rows per part beyond 8 million rows.
  const int64_t rows_per_part = std::max(kRowsPerPart, (rows + kMaxParts - 1) / kMaxParts);
  const int64_t parts = (rows + rows_per_part - 1) / rows_per_part;
  float* out = db;
  if (parts > 1 && db != nullptr)
    out = static_cast<float*>(context.workspace(sizeof(float) * parts * n));
  const dim3 block(kColumns, kRowThreads);
  const dim3 grid(static_cast<unsigned>((n + kColumns - 1) / kColumns),
                  static_cast<unsigned>(parts));
  linear_bias_backward_kernel<S><<<grid, block, 0, s>>>(rows, n, rows_per_part, y, dy, dz, out);
  LAMINA_CUDA_LAUNCHED(linear_bias_backward_kernel);
  if (out == db) return;
  bias_parts_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, parts, out, db);
  LAMINA_CUDA_LAUNCHED(bias_parts_kernel);
}

}  // namespace

void CudaBackend::linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                                       float* dz, float* db) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0 || (y == nullptr && db == nullptr)) return;
  launch<Fp32Storage>(context_, s, rows, n, y, dy, dz, db);
}

void CudaBackend::linear_bias_backward(Half format, int64_t rows, int64_t n, const uint16_t* y,
                                       const uint16_t* dy, uint16_t* dz, float* db) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0 || (y == nullptr && db == nullptr)) return;
  with_half_storage(format, [&](auto storage) {
    launch<decltype(storage)>(context_, s, rows, n, y, dy, dz, db);
  });
}

}  // namespace lamina::cuda_detail
