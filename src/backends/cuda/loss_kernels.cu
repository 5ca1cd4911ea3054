// Losses and accuracy. x, prob, logp, diff, dx (rows, cols); labels (rows), class indices
// stored as floats (the integer part counts, as in the Native backend). A label that is not
// a class index (nor the ignore label) is never used as an index: it makes the loss NaN and
// its row wrong for accuracy, where the Native backend throws (backend.hpp).
//
// A scalar result (loss, norm, accuracy) is written to device memory by a second kernel of
// one block that sums per-row (or per-block) partial results from the context's workspace in
// a fixed order, in double (a small batch's softmax cross-entropy does it all in one block,
// the rows' losses in shared memory); nothing is read back to the host and nothing uses
// atomics, so results are bit-identical run to run. Backward kernels read dloss[0] and norm[0] from
// device memory.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/loss_util.cuh"

namespace lamina::cuda_detail {
namespace {

// ---- softmax + cross-entropy ----

// Row r of a softmax cross-entropy: prob row r = softmax(x row r) with the stats of the row
// (computed by the calling block or warp), and its loss -log prob[label], computed as
// -(x[label] - max - log(sum)), finite where prob underflows; 0 for an ignored row. The
// caller's threads stride over the row from `first` by `stride`.
__device__ double softmax_cross_entropy_row(int64_t cols, const float* xr, float x_label,
                                            bool valid, RowSoftmaxStats stats, int64_t first,
                                            int64_t stride, float* pr) {
  const float inv_sum = static_cast<float>(1.0 / stats.sum);
  for (int64_t j = first; j < cols; j += stride) pr[j] = expf(xr[j] - stats.max) * inv_sum;
  return valid ? -(static_cast<double>(x_label) - stats.max - ::log(stats.sum)) : 0.0;
}

// The label's score, read before prob may overwrite x; NaN for a label that names no class.
__device__ float label_score(int64_t cols, const float* xr, float label_value, bool valid) {
  const int64_t label = class_index(label_value, cols);
  return label >= 0 ? xr[label] : (valid ? NAN : 0.0f);
}

// A block per row: prob and row_loss[r].
__global__ void softmax_cross_entropy_rows_kernel(int64_t rows, int64_t cols, const float* x,
                                                  const float* labels, bool has_ignore_label,
                                                  int ignore_label, float* prob,
                                                  double* row_loss) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const float* xr = x + r * cols;
    const bool valid = !is_ignored(has_ignore_label, ignore_label, labels[r]);
    const float x_label = label_score(cols, xr, labels[r], valid);
    const RowSoftmaxStats stats = row_softmax_stats(cols, xr);
    const double loss = softmax_cross_entropy_row(cols, xr, x_label, valid, stats, threadIdx.x,
                                                  blockDim.x, prob + r * cols);
    if (threadIdx.x == 0) row_loss[r] = loss;
  }
}

// One block: the loss from the rows' losses (loss_util.cuh).
__global__ void finish_loss_kernel(int64_t rows, const double* row_loss, const float* labels,
                                   LossOptions options, float* loss, float* norm) {
  finish_loss(rows, row_loss, labels, options, loss, norm);
}

// Small batches in one launch (rows <= kFusedLossRows, cols <= kFusedLossCols, rows * cols
// <= kFusedLossValues): a warp per row, the rows' losses in shared memory, then the block's
// sum in a fixed order. Rows of at most 32 classes get the bits of the block-per-row kernel;
// wider rows are summed in another order (the same every run). Each warp's rows run one
// after another, a chain of dependent loads, reductions and a log: at 1024 rows (32 per
// warp) the one block took 67 us on an H200, against a few for a block per row and the
// finishing block, so larger batches take those two launches.
constexpr int64_t kFusedLossRows = 64, kFusedLossCols = 1024, kFusedLossValues = 1 << 16;

__global__ void softmax_cross_entropy_fused_kernel(int64_t rows, int64_t cols, const float* x,
                                                   const float* labels, LossOptions options,
                                                   float* prob, float* loss, float* norm) {
  __shared__ double row_loss[kFusedLossRows];
  const int64_t lane = threadIdx.x & 31u, warps = blockDim.x >> 5;
  for (int64_t r = threadIdx.x >> 5; r < rows; r += warps) {
    const float* xr = x + r * cols;
    const bool valid = !is_ignored(options.has_ignore_label, options.ignore_label, labels[r]);
    const float x_label = label_score(cols, xr, labels[r], valid);
    const RowSoftmaxStats stats = warp_softmax_stats(cols, xr);
    __syncwarp();  // every lane has read x_label before prob (which may be x) is written
    const double value =
        softmax_cross_entropy_row(cols, xr, x_label, valid, stats, lane, 32, prob + r * cols);
    if (lane == 0) row_loss[r] = value;
  }
  __syncthreads();
  finish_loss(rows, row_loss, labels, options, loss, norm);
}

// dx = (prob - onehot(label)) * dloss[0] / norm[0]; ignored rows get 0.
__global__ void softmax_cross_entropy_backward_kernel(int64_t rows, int64_t cols,
                                                      const float* prob, const float* labels,
                                                      bool has_ignore_label, int ignore_label,
                                                      const float* norm, const float* dloss,
                                                      float* dx) {
  const float scale = dloss[0] / norm[0];
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols;
    const int64_t j = i - r * cols;
    const int64_t label = class_index(labels[r], cols);
    if (is_ignored(has_ignore_label, ignore_label, labels[r])) {
      dx[i] = 0.0f;
    } else {
      dx[i] = (prob[i] - (j == label ? 1.0f : 0.0f)) * scale;
    }
  }
}

// ---- negative log-likelihood ----

// One block: loss[0] = -sum logp[label] / norm over non-ignored rows, norm[0] = norm.
__global__ void nll_loss_forward_kernel(int64_t rows, int64_t cols, const float* logp,
                                        const float* labels, LossOptions options, float* loss,
                                        float* norm) {
  double total = 0;
  long long valid = 0;
  LAMINA_THREAD_STRIDE_LOOP(r, rows) {
    if (is_ignored(options.has_ignore_label, options.ignore_label, labels[r])) continue;
    const int64_t label = class_index(labels[r], cols);
    total -= label >= 0 ? logp[r * cols + label] : NAN;
    ++valid;
  }
  total = block_sum(total);
  valid = block_sum(valid);
  if (threadIdx.x == 0) {
    const float normalizer =
        loss_normalizer(options.normalization, options.batch, rows, valid);
    loss[0] = static_cast<float>(total / normalizer);
    norm[0] = normalizer;
  }
}

// dx = -onehot(label) * dloss[0] / norm[0]; ignored rows get 0.
__global__ void nll_loss_backward_kernel(int64_t rows, int64_t cols, const float* labels,
                                         bool has_ignore_label, int ignore_label,
                                         const float* norm, const float* dloss, float* dx) {
  const float scale = dloss[0] / norm[0];
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols;
    const int64_t j = i - r * cols;
    const bool hit = !is_ignored(has_ignore_label, ignore_label, labels[r]) &&
                     j == class_index(labels[r], cols);
    dx[i] = hit ? -scale : 0.0f;
  }
}

// ---- euclidean ----

// diff = a - b (n); partial[block] = this block's sum of diff^2.
__global__ void euclidean_partial_kernel(int64_t n, const float* a, const float* b, float* diff,
                                         double* partial) {
  double sum = 0;
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float d = a[i] - b[i];
    diff[i] = d;
    sum += static_cast<double>(d) * d;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// One block: loss[0] = sum(partial) / (2 rows).
__global__ void euclidean_finish_kernel(int64_t blocks, const double* partial, int64_t rows,
                                        float* loss) {
  const double sum = block_sum_of(blocks, partial);
  if (threadIdx.x == 0) {
    loss[0] = static_cast<float>(sum / (2.0 * static_cast<double>(rows > 1 ? rows : 1)));
  }
}

// dx = sign * dloss[0] / rows * diff
__global__ void euclidean_loss_backward_kernel(int64_t n, int64_t rows, float sign,
                                               const float* diff, const float* dloss,
                                               float* dx) {
  const float scale = sign * dloss[0] / static_cast<float>(rows > 1 ? rows : 1);
  LAMINA_GRID_STRIDE_LOOP(i, n) dx[i] = scale * diff[i];
}

// ---- accuracy ----

// row_correct[r] = 1 when fewer than top_k other classes of row r score at least the label's
// score (Caffe 1.0's rule: ties count against the label); 0 otherwise and for ignored rows.
__global__ void accuracy_rows_kernel(int64_t rows, int64_t cols, int top_k, const float* x,
                                     const float* labels, bool has_ignore_label,
                                     int ignore_label, int* row_correct) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const int64_t label = class_index(labels[r], cols);
    // The same for the whole block; a label that names no class counts as wrong.
    if (label < 0 || is_ignored(has_ignore_label, ignore_label, labels[r])) {
      if (threadIdx.x == 0) row_correct[r] = 0;
      continue;
    }
    const float* xr = x + r * cols;
    const float score = xr[label];
    long long at_least = 0;  // other classes scoring >= the label's score
    LAMINA_THREAD_STRIDE_LOOP(j, cols) at_least += j != label && xr[j] >= score;
    at_least = block_sum(at_least);
    if (threadIdx.x == 0) row_correct[r] = at_least < top_k ? 1 : 0;
  }
}

// One block: out[0] = correct rows / non-ignored rows (0 when every row is ignored).
__global__ void accuracy_finish_kernel(int64_t rows, const int* row_correct,
                                       const float* labels, bool has_ignore_label,
                                       int ignore_label, float* out) {
  long long correct = 0;
  long long valid = 0;
  LAMINA_THREAD_STRIDE_LOOP(r, rows) {
    correct += row_correct[r];
    valid += !is_ignored(has_ignore_label, ignore_label, labels[r]);
  }
  correct = block_sum(correct);
  valid = block_sum(valid);
  if (threadIdx.x == 0) {
    out[0] = valid > 0 ? static_cast<float>(double(correct) / double(valid)) : 0.0f;
  }
}

}  // namespace

void CudaBackend::softmax_cross_entropy_forward(int64_t rows, int64_t cols, const float* x,
                                                const float* labels,
                                                const LossOptions& options, float* prob,
                                                float* loss, float* norm) {
  const cudaStream_t s = on_device();
  if (rows > 0 && cols > 0 && rows <= kFusedLossRows && cols <= kFusedLossCols &&
      rows * cols <= kFusedLossValues) {
    const unsigned threads = static_cast<unsigned>(std::min<int64_t>(rows * 32, 1024));
    softmax_cross_entropy_fused_kernel<<<1, threads, 0, s>>>(rows, cols, x, labels, options,
                                                             prob, loss, norm);
    LAMINA_CUDA_LAUNCHED(softmax_cross_entropy_fused_kernel);
    return;
  }
  double* row_loss = static_cast<double*>(context_.workspace(sizeof(double) * (rows > 0 ? rows : 1)));
  if (rows > 0 && cols > 0) {
    softmax_cross_entropy_rows_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(
        rows, cols, x, labels, options.has_ignore_label, options.ignore_label, prob, row_loss);
    LAMINA_CUDA_LAUNCHED(softmax_cross_entropy_rows_kernel);
  } else if (rows > 0) {
    LAMINA_CUDA_CHECK(cudaMemsetAsync(row_loss, 0, sizeof(double) * rows, s));
  }
  finish_loss_kernel<<<1, kFinishBlock, 0, s>>>(rows, row_loss, labels, options, loss, norm);
  LAMINA_CUDA_LAUNCHED(finish_loss_kernel);
}

void CudaBackend::softmax_cross_entropy_backward(int64_t rows, int64_t cols, const float* prob,
                                                 const float* labels,
                                                 const LossOptions& options, const float* norm,
                                                 const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  softmax_cross_entropy_backward_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, prob, labels, options.has_ignore_label, options.ignore_label, norm, dloss,
      dx);
  LAMINA_CUDA_LAUNCHED(softmax_cross_entropy_backward_kernel);
}

void CudaBackend::nll_loss_forward(int64_t rows, int64_t cols, const float* logp,
                                   const float* labels, const LossOptions& options,
                                   float* loss, float* norm) {
  const cudaStream_t s = on_device();
  nll_loss_forward_kernel<<<1, kFinishBlock, 0, s>>>(rows, cols, logp, labels, options, loss,
                                                     norm);
  LAMINA_CUDA_LAUNCHED(nll_loss_forward_kernel);
}

void CudaBackend::nll_loss_backward(int64_t rows, int64_t cols, const float* labels,
                                    const LossOptions& options, const float* norm,
                                    const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  nll_loss_backward_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, labels, options.has_ignore_label, options.ignore_label, norm, dloss, dx);
  LAMINA_CUDA_LAUNCHED(nll_loss_backward_kernel);
}

void CudaBackend::euclidean_loss_forward(int64_t rows, int64_t cols, const float* a,
                                         const float* b, float* diff, float* loss) {
  const cudaStream_t s = on_device();
  const int64_t n = rows * cols;
  // The grid depends only on n, so the partial sums and their order do too.
  const unsigned blocks = std::min(elementwise_grid(n), kMaxPartials);
  double* partial = static_cast<double*>(context_.workspace(sizeof(double) * blocks));
  euclidean_partial_kernel<<<blocks, kBlock, 0, s>>>(n, a, b, diff, partial);
  LAMINA_CUDA_LAUNCHED(euclidean_partial_kernel);
  euclidean_finish_kernel<<<1, kFinishBlock, 0, s>>>(blocks, partial, rows, loss);
  LAMINA_CUDA_LAUNCHED(euclidean_finish_kernel);
}

void CudaBackend::euclidean_loss_backward(int64_t rows, int64_t cols, float sign,
                                          const float* diff, const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  const int64_t n = rows * cols;
  if (n <= 0) return;
  euclidean_loss_backward_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(n, rows, sign, diff,
                                                                        dloss, dx);
  LAMINA_CUDA_LAUNCHED(euclidean_loss_backward_kernel);
}

void CudaBackend::accuracy(int64_t rows, int64_t cols, int top_k, const float* x,
                           const float* labels, const LossOptions& options, float* out) {
  const cudaStream_t s = on_device();
  int* row_correct = static_cast<int*>(context_.workspace(sizeof(int) * (rows > 0 ? rows : 1)));
  if (rows > 0) {
    accuracy_rows_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(
        rows, cols, top_k, x, labels, options.has_ignore_label, options.ignore_label,
        row_correct);
    LAMINA_CUDA_LAUNCHED(accuracy_rows_kernel);
  }
  accuracy_finish_kernel<<<1, kFinishBlock, 0, s>>>(rows, row_correct, labels,
                                                    options.has_ignore_label,
                                                    options.ignore_label, out);
  LAMINA_CUDA_LAUNCHED(accuracy_finish_kernel);
}

}  // namespace lamina::cuda_detail
