// The fused Linear's backward on CUDA: one kernel for the ReLU's derivative and the bias
// gradient's column sums, in a fixed order, with y, dy and dz in FP32 or in 16 bits
// (half_storage.cuh); db is FP32 either way. A 16-bit dz is exact (dy or 0 dy), and the
// sums add the 16-bit values exactly as read, in FP32.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {
namespace {

// dz = y > 0 ? dy : 0 (y null: dz is dy), db[c] += sum over rows of dz[., c]. A block
// covers 32 columns; its 8 rows of threads stride over the rows, then row 0 adds the 8
// partial sums in order: the same bits every run.
constexpr int kColumns = 32, kRowThreads = 8;

template <class S>
__global__ void linear_bias_backward_kernel(int64_t rows, int64_t n,
                                            const typename S::Stored* y,
                                            const typename S::Stored* dy,
                                            typename S::Stored* dz, float* db) {
  __shared__ float partial[kRowThreads][kColumns];
  const int64_t c = int64_t{blockIdx.x} * kColumns + threadIdx.x;
  float sum = 0;
  if (c < n) {
    for (int64_t r = threadIdx.y; r < rows; r += kRowThreads) {
      float v = S::load(dy[r * n + c]);
      if (y != nullptr) {
        v = relu_backward_value(S::load(y[r * n + c]), v, 0.0f);
        dz[r * n + c] = S::store(v);
      }
      sum += v;
    }
  }
  partial[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y != 0 || c >= n || db == nullptr) return;
  float total = 0;
  for (int i = 0; i < kRowThreads; ++i) total += partial[i][threadIdx.x];
  db[c] += total;
}

template <class S>
void launch(cudaStream_t s, int64_t rows, int64_t n, const typename S::Stored* y,
            const typename S::Stored* dy, typename S::Stored* dz, float* db) {
  const dim3 block(kColumns, kRowThreads);
  const unsigned grid = static_cast<unsigned>((n + kColumns - 1) / kColumns);
  linear_bias_backward_kernel<S><<<grid, block, 0, s>>>(rows, n, y, dy, dz, db);
  LAMINA_CUDA_LAUNCHED(linear_bias_backward_kernel);
}

}  // namespace

void CudaBackend::linear_bias_backward(int64_t rows, int64_t n, const float* y, const float* dy,
                                       float* dz, float* db) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0 || (y == nullptr && db == nullptr)) return;
  launch<Fp32Storage>(s, rows, n, y, dy, dz, db);
}

void CudaBackend::linear_bias_backward(Half format, int64_t rows, int64_t n, const uint16_t* y,
                                       const uint16_t* dy, uint16_t* dz, float* db) {
  const cudaStream_t s = on_device();
  if (rows == 0 || n == 0 || (y == nullptr && db == nullptr)) return;
  with_half_storage(format, [&](auto storage) {
    launch<decltype(storage)>(s, rows, n, y, dy, dz, db);
  });
}

}  // namespace lamina::cuda_detail
