// Row-wise softmax and log-softmax, x, y, dy, dx (rows, cols); one block per row.
//   softmax:     y = exp(x - max) / sum             dx = y (dy - sum(dy y))
//   log-softmax: y = (x - max) - log(sum)           dx = dy - exp(y) sum(dy)
// with sum = sum_j exp(x_j - max) accumulated in double, as the Native backend does. In
// place is fine: a thread writes only the elements it read itself, after the row's
// reductions (which synchronise the block).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

__global__ void softmax_forward_kernel(int64_t rows, int64_t cols, bool log, const float* x,
                                       float* y) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    const RowSoftmaxStats stats = row_softmax_stats(cols, xr);
    if (log) {
      // (x - max) - log(sum), as the Native backend: subtracting the max first keeps
      // the small result exact for large logits.
      const float log_sum = static_cast<float>(::log(stats.sum));
      LAMINA_THREAD_STRIDE_LOOP(j, cols) yr[j] = (xr[j] - stats.max) - log_sum;
    } else {
      const float inv_sum = static_cast<float>(1.0 / stats.sum);
      LAMINA_THREAD_STRIDE_LOOP(j, cols) yr[j] = expf(xr[j] - stats.max) * inv_sum;
    }
  }
}

__global__ void softmax_backward_kernel(int64_t rows, int64_t cols, bool log, const float* y,
                                        const float* dy, float* dx) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    double sum = 0;
    if (log) {
      LAMINA_THREAD_STRIDE_LOOP(j, cols) sum += dyr[j];
    } else {
      LAMINA_THREAD_STRIDE_LOOP(j, cols) sum += static_cast<double>(dyr[j]) * yr[j];
    }
    const float s = static_cast<float>(block_sum(sum));
    if (log) {
      LAMINA_THREAD_STRIDE_LOOP(j, cols) dxr[j] = dyr[j] - expf(yr[j]) * s;
    } else {
      LAMINA_THREAD_STRIDE_LOOP(j, cols) dxr[j] = yr[j] * (dyr[j] - s);
    }
  }
}

}  // namespace

void CudaBackend::softmax_forward(int64_t rows, int64_t cols, bool log, const float* x,
                                  float* y) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  softmax_forward_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(rows, cols, log, x, y);
  LAMINA_CUDA_LAUNCHED(softmax_forward_kernel);
}

void CudaBackend::softmax_backward(int64_t rows, int64_t cols, bool log, const float* y,
                                   const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  softmax_backward_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(rows, cols, log, y, dy,
                                                                      dx);
  LAMINA_CUDA_LAUNCHED(softmax_backward_kernel);
}

}  // namespace lamina::cuda_detail
