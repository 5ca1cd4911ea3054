// What the CUDA losses share (loss_kernels.cu, caffe_loss_kernels.cu): the normaliser of
// LossParameter.normalization, the one-block finish of a loss from per-row values, and the
// launch sizes of such sums.
#pragma once

#include "backends/cuda/kernel_util.cuh"
#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

constexpr int kFinishBlock = 256;        // threads of the one-block kernels that finish a sum
constexpr unsigned kMaxPartials = 1024;  // blocks of a grid-wide partial sum

// What a loss over `count` values (rows, or targets), `valid` of them not ignored, is divided
// by: at least 1, as in Caffe. BATCH_SIZE divides by batch where it is set (> 0), else by
// count.
__device__ inline float loss_normalizer(Normalization mode, int64_t batch, int64_t count,
                                        int64_t valid) {
  int64_t norm = 1;
  switch (mode) {
    case Normalization::kFull: norm = count; break;
    case Normalization::kBatchSize: norm = batch > 0 ? batch : count; break;
    case Normalization::kValid: norm = valid; break;
    case Normalization::kNone: norm = 1; break;
  }
  return static_cast<float>(norm > 1 ? norm : 1);
}

// By the whole (one) block: loss[0] = sum(row_loss) / norm, norm[0] = norm, with the valid
// rows those whose label is not the ignore label; summed in a fixed order.
__device__ inline void finish_loss(int64_t rows, const double* row_loss, const float* labels,
                                   const LossOptions& options, float* loss, float* norm) {
  double total = 0;
  long long valid = 0;
  LAMINA_THREAD_STRIDE_LOOP(r, rows) {
    total += row_loss[r];
    valid += !is_ignored(options.has_ignore_label, options.ignore_label, labels[r]);
  }
  total = block_sum(total);
  valid = block_sum(valid);
  if (threadIdx.x == 0) {
    const float normalizer = loss_normalizer(options.normalization, options.batch, rows, valid);
    loss[0] = static_cast<float>(total / normalizer);
    norm[0] = normalizer;
  }
}

}  // namespace lamina::cuda_detail
