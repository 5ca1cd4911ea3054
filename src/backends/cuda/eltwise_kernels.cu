// copy_rows (Concat's forward and backward) and the element-wise max of Eltwise, of floats
// or 16-bit values: one thread per element.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

// Row r of dst (rows, cols) at dst + r dst_stride = row r of src at src + r src_stride;
// T float, or uint16_t for 16-bit values (bits copied).
template <class T>
__global__ void copy_rows_kernel(int64_t rows, int64_t cols, const T* src, int64_t src_stride,
                                 T* dst, int64_t dst_stride) {
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, j = i - r * cols;
    dst[r * dst_stride + j] = src[r * src_stride + j];
  }
}

// x, y, mask (n), x and y stored as S says (half_storage.cuh). Input index 0 starts y and
// mask; a later one replaces y where x > y (compared as numbers), so ties keep the earlier
// input. mask may be null (no backward pass). Values are copied, never rounded.
template <class S>
__global__ void eltwise_max_forward_kernel(int64_t n, int index, const typename S::Stored* x,
                                           typename S::Stored* y, int32_t* mask) {
  if (index == 0) {
    LAMINA_GRID_STRIDE_LOOP(i, n) {
      y[i] = x[i];
      if (mask != nullptr) mask[i] = 0;
    }
  } else {
    LAMINA_GRID_STRIDE_LOOP(i, n) {
      if (S::load(x[i]) > S::load(y[i])) {
        y[i] = x[i];
        if (mask != nullptr) mask[i] = index;
      }
    }
  }
}

template <class S>
__global__ void eltwise_max_backward_kernel(int64_t n, int index, const typename S::Stored* dy,
                                            const int32_t* mask, typename S::Stored* dx) {
  LAMINA_GRID_STRIDE_LOOP(i, n) dx[i] = mask[i] == index ? dy[i] : S::store(0.0f);
}

template <class S>
void max_forward_on(cudaStream_t s, int64_t n, int index, const typename S::Stored* x,
                    typename S::Stored* y, int32_t* mask) {
  if (n <= 0) return;
  eltwise_max_forward_kernel<S><<<elementwise_grid(n), kBlock, 0, s>>>(n, index, x, y, mask);
  LAMINA_CUDA_LAUNCHED(eltwise_max_forward_kernel);
}

template <class S>
void max_backward_on(cudaStream_t s, int64_t n, int index, const typename S::Stored* dy,
                     const int32_t* mask, typename S::Stored* dx) {
  if (n <= 0) return;
  eltwise_max_backward_kernel<S><<<elementwise_grid(n), kBlock, 0, s>>>(n, index, dy, mask, dx);
  LAMINA_CUDA_LAUNCHED(eltwise_max_backward_kernel);
}

template <class T>
void copy_rows_on(cudaStream_t s, int64_t rows, int64_t cols, const T* src, int64_t src_stride,
                  T* dst, int64_t dst_stride) {
  if (rows <= 0 || cols <= 0) return;
  copy_rows_kernel<T><<<elementwise_grid(rows * cols), kBlock, 0, s>>>(rows, cols, src,
                                                                       src_stride, dst,
                                                                       dst_stride);
  LAMINA_CUDA_LAUNCHED(copy_rows_kernel);
}

}  // namespace

void CudaBackend::copy_rows(int64_t rows, int64_t cols, const float* src, int64_t src_stride,
                            float* dst, int64_t dst_stride) {
  copy_rows_on(on_device(), rows, cols, src, src_stride, dst, dst_stride);
}

void CudaBackend::copy_rows(int64_t rows, int64_t cols, const uint16_t* src,
                            int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  copy_rows_on(on_device(), rows, cols, src, src_stride, dst, dst_stride);
}

void CudaBackend::eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                                      int32_t* mask) {
  max_forward_on<Fp32Storage>(on_device(), n, index, x, y, mask);
}

void CudaBackend::eltwise_max_backward(int64_t n, int index, const float* dy,
                                       const int32_t* mask, float* dx) {
  max_backward_on<Fp32Storage>(on_device(), n, index, dy, mask, dx);
}

void CudaBackend::eltwise_max_forward(Half format, int64_t n, int index, const uint16_t* x,
                                      uint16_t* y, int32_t* mask) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    max_forward_on<decltype(storage)>(s, n, index, x, y, mask);
  });
}

void CudaBackend::eltwise_max_backward(Half format, int64_t n, int index, const uint16_t* dy,
                                       const int32_t* mask, uint16_t* dx) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    max_backward_on<decltype(storage)>(s, n, index, dy, mask, dx);
  });
}

}  // namespace lamina::cuda_detail
