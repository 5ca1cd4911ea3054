// Dropout (its x and y in FP32 or in 16 bits) and a data layer's batch: elementwise kernels
// whose results are bit-identical to the Native backend's (the same counter-based random
// numbers, the same float operations).
// Both read a PassCounter in every block and advance it when the last block is done
// (finish_pass, pass_counter.cuh), so one launch per pass does it all.
#include <algorithm>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/pass_counter.cuh"
#include "lamina/common.hpp"
#include "lamina/counter_rng.hpp"

namespace lamina::cuda_detail {
namespace {

// x, mask, y (n); element i is kept when counter_uniform(seed, offset + passes n + i) >= ratio.
// x and y stored as S says (half_storage.cuh), the mask FP32.
template <class S>
__global__ void dropout_forward_kernel(int64_t n, float ratio, float keep_scale, uint64_t seed,
                                       uint64_t offset, PassCounter* counter,
                                       const typename S::Stored* x, float* mask,
                                       typename S::Stored* y) {
  const uint64_t first = offset + static_cast<uint64_t>(counter->passes) * uint64_t(n);
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const bool keep = counter_uniform(seed, first + static_cast<uint64_t>(i)) >= ratio;
    const float m = keep ? keep_scale : 0.0f;
    mask[i] = m;
    y[i] = S::store(__fmul_rn(S::load(x[i]), m));
  }
  finish_pass(counter);
}

// Both tops of a batch: a block per row (block-stride over the rows) finds the row's sample
// once, then its threads copy the row's values of each top. (A thread per value found the
// sample per value: 64-bit divisions that made a batch of 1024 MNIST images take 33 us.)
__device__ void gather_row(const GatherTop& top, int64_t r, int64_t sample) {
  if (top.src == nullptr) return;
  const uint8_t* src = top.src + sample * top.cols;
  float* dst = top.dst + r * top.cols;
  LAMINA_THREAD_STRIDE_LOOP(j, top.cols) dst[j] = top.scale * static_cast<float>(src[j]);
}

__global__ void gather_batch_kernel(BatchOrder order, GatherTop data, GatherTop label) {
  const int64_t passes = order.counter->passes;
  LAMINA_BLOCK_STRIDE_LOOP(r, order.batch) {
    const int64_t sample = order.sample(passes, r);
    gather_row(data, r, sample);
    gather_row(label, r, sample);
  }
  finish_pass(order.counter);
}

template <class S>
void dropout_on(cudaStream_t s, int64_t n, float ratio, uint64_t seed, uint64_t offset,
                PassCounter* counter, const typename S::Stored* x, float* mask,
                typename S::Stored* y) {
  const float keep_scale = 1.0f / (1.0f - ratio);  // on the host, exactly as Native does
  dropout_forward_kernel<S><<<elementwise_grid(n), kBlock, 0, s>>>(n, ratio, keep_scale, seed,
                                                                   offset, counter, x, mask, y);
  LAMINA_CUDA_LAUNCHED(dropout_forward_kernel);
}

}  // namespace

void CudaBackend::dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                                  PassCounter* counter, const float* x, float* mask, float* y) {
  dropout_on<Fp32Storage>(on_device(), n, ratio, seed, offset, counter, x, mask, y);
}

void CudaBackend::dropout_forward(Half format, int64_t n, float ratio, uint64_t seed,
                                  uint64_t offset, PassCounter* counter, const uint16_t* x,
                                  float* mask, uint16_t* y) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    dropout_on<decltype(storage)>(s, n, ratio, seed, offset, counter, x, mask, y);
  });
}

void CudaBackend::gather_batch(const BatchOrder& order, const GatherTop& data,
                               const GatherTop& label) {
  const cudaStream_t s = on_device();
  const int64_t cols = std::max(data.src ? data.cols : 0, label.src ? label.cols : 0);
  gather_batch_kernel<<<row_grid(order.batch), row_block(cols), 0, s>>>(order, data, label);
  LAMINA_CUDA_LAUNCHED(gather_batch_kernel);
}

}  // namespace lamina::cuda_detail
