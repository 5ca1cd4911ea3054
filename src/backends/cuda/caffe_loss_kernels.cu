// Caffe's losses (backend.hpp, kCaffeLosses): sigmoid cross-entropy, hinge, contrastive,
// multinomial logistic and infogain. x, prob, margin, diff, dx (rows, cols); labels (rows),
// read as loss_kernels.cu reads them: a label that names no class (nor the ignore label) is
// never used as an index and makes the loss NaN, where the Native backend throws.
//
// Each loss is a sum of terms computed in double, as the Native backend computes them, and
// added in a fixed order: per block (block_sum's tree), or per row by a block each, into the
// context's workspace, then by one finishing block, so the result is the same every run and
// no atomics are used. Backward kernels read dloss[0] (and norm[0]) from device memory.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/loss_util.cuh"

namespace lamina::cuda_detail {
namespace {

constexpr float kLogFloor = 1e-20f;  // Caffe's kLOG_THRESHOLD: ln(max(p, floor))

__device__ double log_floored(float p) { return ::log(static_cast<double>(fmaxf(p, kLogFloor))); }

__device__ bool is_similar(float s) { return trunc(s) != 0; }  // Caffe reads it as an int

__device__ float rows_divisor(int64_t rows) { return static_cast<float>(rows > 1 ? rows : 1); }

// One block: loss[0] = sum(partial) / divisor, in a fixed order.
__global__ void finish_mean_kernel(int64_t count, const double* partial, double divisor,
                                   float* loss) {
  const double sum = block_sum_of(count, partial);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(sum / divisor);
}

// One block: the loss from the rows' losses, the ignored rows not counted (loss_util.cuh).
__global__ void finish_rows_kernel(int64_t rows, const double* row_loss, const float* labels,
                                   LossOptions options, float* loss, float* norm) {
  finish_loss(rows, row_loss, labels, options, loss, norm);
}

// ---- sigmoid cross-entropy: x, target, dx (n) ----

// partial[block], valid[block]: this block's sum of max(x, 0) - x t + ln(1 + exp(-|x|)) (the
// stable form of -[t ln s + (1 - t) ln(1 - s)], s = sigmoid(x)) and its targets not ignored.
__global__ void sigmoid_cross_entropy_partial_kernel(int64_t n, const float* x,
                                                     const float* target, LossOptions options,
                                                     double* partial, long long* valid) {
  double sum = 0;
  long long counted = 0;
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    if (is_ignored(options.has_ignore_label, options.ignore_label, target[i])) continue;
    const double xi = x[i];
    sum += fmax(xi, 0.0) - xi * target[i] + log1p(exp(-fabs(xi)));
    ++counted;
  }
  sum = block_sum(sum);
  counted = block_sum(counted);
  if (threadIdx.x == 0) {
    partial[blockIdx.x] = sum;
    valid[blockIdx.x] = counted;
  }
}

__global__ void sigmoid_cross_entropy_finish_kernel(int64_t blocks, const double* partial,
                                                    const long long* valid, int64_t n,
                                                    LossOptions options, float* loss,
                                                    float* norm) {
  const double sum = block_sum_of(blocks, partial);
  long long counted = 0;
  LAMINA_THREAD_STRIDE_LOOP(b, blocks) counted += valid[b];
  counted = block_sum(counted);
  if (threadIdx.x == 0) {
    const float normalizer = loss_normalizer(options.normalization, options.batch, n, counted);
    loss[0] = static_cast<float>(sum / normalizer);
    norm[0] = normalizer;
  }
}

// dx = (sigmoid(x) - t) * dloss / norm; 0 where the target is ignored.
__global__ void sigmoid_cross_entropy_backward_kernel(int64_t n, const float* x,
                                                      const float* target, LossOptions options,
                                                      const float* norm, const float* dloss,
                                                      float* dx) {
  const float scale = dloss[0] / norm[0];
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const float sigmoid = 1.0f / (1.0f + expf(-x[i]));
    const bool ignored = is_ignored(options.has_ignore_label, options.ignore_label, target[i]);
    dx[i] = ignored ? 0.0f : (sigmoid - target[i]) * scale;
  }
}

// ---- hinge: x, margin, dx (rows, cols) ----

// margin = max(0, 1 + d x), d = -1 at the label's class and +1 elsewhere; partial[block] =
// this block's sum of margin^p (NaN for a row whose label names no class).
__global__ void hinge_partial_kernel(int64_t rows, int64_t cols, int p, const float* x,
                                     const float* labels, float* margin, double* partial) {
  double sum = 0;
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, j = i - r * cols;
    const int64_t label = class_index(labels[r], cols);
    const float m = fmaxf(0.0f, 1.0f + (j == label ? -x[i] : x[i]));
    margin[i] = m;
    sum += p == 1 ? static_cast<double>(m) : static_cast<double>(m) * m;
    if (label < 0 && j == 0) sum += NAN;
  }
  sum = block_sum(sum);
  if (threadIdx.x == 0) partial[blockIdx.x] = sum;
}

// dx = d * (p == 1 ? sign(margin) : 2 margin) * dloss / rows
__global__ void hinge_backward_kernel(int64_t rows, int64_t cols, int p, const float* margin,
                                      const float* labels, const float* dloss, float* dx) {
  const float scale = dloss[0] / rows_divisor(rows);
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, j = i - r * cols;
    const float m = margin[i];
    const float slope = p == 1 ? (m > 0 ? 1.0f : 0.0f) : 2 * m;
    dx[i] = (j == class_index(labels[r], cols) ? -slope : slope) * scale;
  }
}

// ---- contrastive: a, b, diff, dx (rows, cols); similar, dist_sq (rows) ----

// A block per row: diff = a - b, dist_sq[r] = |diff|^2 and row_loss[r] = the pair's term,
// from dist_sq[r] as stored (the value the backward pass reads).
__global__ void contrastive_rows_kernel(int64_t rows, int64_t cols, float margin, bool legacy,
                                        const float* a, const float* b, const float* similar,
                                        float* diff, float* dist_sq, double* row_loss) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    double sq = 0;
    LAMINA_THREAD_STRIDE_LOOP(j, cols) {
      const float d = a[r * cols + j] - b[r * cols + j];
      diff[r * cols + j] = d;
      sq += static_cast<double>(d) * d;
    }
    sq = block_sum(sq);
    if (threadIdx.x == 0) {
      const float d2 = static_cast<float>(sq);
      dist_sq[r] = d2;
      double term = d2;
      if (!is_similar(similar[r])) {
        const double gap = legacy ? margin - double(d2) : margin - sqrt(double(d2));
        term = gap > 0 ? (legacy ? gap : gap * gap) : 0.0;
      }
      row_loss[r] = term;
    }
  }
}

// alpha = sign dloss / rows; similar: dx = alpha diff; dissimilar within the margin:
// -alpha diff (legacy) or -alpha (margin - d) / (d + 1e-4) diff, d = sqrt(dist_sq); else 0.
__global__ void contrastive_backward_kernel(int64_t rows, int64_t cols, float margin,
                                            bool legacy, float sign, const float* diff,
                                            const float* dist_sq, const float* similar,
                                            const float* dloss, float* dx) {
  const float alpha = sign * dloss[0] / rows_divisor(rows);
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols;
    float beta = alpha;
    if (!is_similar(similar[r])) {
      const float d = sqrtf(dist_sq[r]);
      const float gap = legacy ? margin - dist_sq[r] : margin - d;
      beta = gap <= 0 ? 0.0f : legacy ? -alpha : -alpha * gap / (d + 1e-4f);
    }
    dx[i] = beta * diff[i];
  }
}

// ---- multinomial logistic: prob, dx (rows, cols) ----

// One block: loss[0] = -sum ln(max(prob[r, label], 1e-20)) / rows.
__global__ void multinomial_logistic_forward_kernel(int64_t rows, int64_t cols,
                                                    const float* prob, const float* labels,
                                                    float* loss) {
  double total = 0;
  LAMINA_THREAD_STRIDE_LOOP(r, rows) {
    const int64_t label = class_index(labels[r], cols);
    total -= label >= 0 ? log_floored(prob[r * cols + label]) : NAN;
  }
  total = block_sum(total);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(total / rows_divisor(rows));
}

// dx[r, label] = -dloss / rows / max(prob[r, label], 1e-20), 0 elsewhere.
__global__ void multinomial_logistic_backward_kernel(int64_t rows, int64_t cols,
                                                     const float* prob, const float* labels,
                                                     const float* dloss, float* dx) {
  const float scale = -dloss[0] / rows_divisor(rows);
  LAMINA_GRID_STRIDE_LOOP(i, rows * cols) {
    const int64_t r = i / cols, j = i - r * cols;
    dx[i] = j == class_index(labels[r], cols) ? scale / fmaxf(prob[i], kLogFloor) : 0.0f;
  }
}

// ---- infogain: prob, dx (rows, cols); infogain H (cols, cols) ----

// A block per row: row_loss[r] = -sum_j H[label, j] ln(max(prob[r, j], 1e-20)); 0 for an
// ignored row, NaN for a label that names no class. (The branches are the block's.)
__global__ void infogain_rows_kernel(int64_t rows, int64_t cols, const float* prob,
                                     const float* labels, const float* infogain,
                                     LossOptions options, double* row_loss) {
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const bool ignored = is_ignored(options.has_ignore_label, options.ignore_label, labels[r]);
    const int64_t label = class_index(labels[r], cols);
    if (ignored || label < 0) {
      if (threadIdx.x == 0) row_loss[r] = ignored ? 0.0 : NAN;
      continue;
    }
    double sum = 0;
    LAMINA_THREAD_STRIDE_LOOP(j, cols) {
      sum -= static_cast<double>(infogain[label * cols + j]) * log_floored(prob[r * cols + j]);
    }
    sum = block_sum(sum);
    if (threadIdx.x == 0) row_loss[r] = sum;
  }
}

// A block per row: dx = (prob * sum_k H[label, k] - H[label, :]) * dloss / norm; 0 for an
// ignored row or a label that names no class.
__global__ void infogain_backward_kernel(int64_t rows, int64_t cols, const float* prob,
                                         const float* labels, const float* infogain,
                                         LossOptions options, const float* norm,
                                         const float* dloss, float* dx) {
  const float scale = dloss[0] / norm[0];
  LAMINA_BLOCK_STRIDE_LOOP(r, rows) {
    const int64_t label = class_index(labels[r], cols);
    float* dxr = dx + r * cols;
    if (label < 0 || is_ignored(options.has_ignore_label, options.ignore_label, labels[r])) {
      LAMINA_THREAD_STRIDE_LOOP(j, cols) dxr[j] = 0.0f;
      continue;
    }
    const float* h = infogain + label * cols;
    double h_sum = 0;
    LAMINA_THREAD_STRIDE_LOOP(j, cols) h_sum += h[j];
    const float row_sum = static_cast<float>(block_sum(h_sum));
    LAMINA_THREAD_STRIDE_LOOP(j, cols) dxr[j] = (prob[r * cols + j] * row_sum - h[j]) * scale;
  }
}

}  // namespace

void CudaBackend::sigmoid_cross_entropy_forward(int64_t n, const float* x, const float* target,
                                                const LossOptions& options, float* loss,
                                                float* norm) {
  const cudaStream_t s = on_device();
  // The grid depends only on n, so the partial sums and their order do too.
  const unsigned blocks = std::min(elementwise_grid(n), kMaxPartials);
  double* partial = static_cast<double*>(context_.workspace(2 * sizeof(double) * blocks));
  long long* valid = reinterpret_cast<long long*>(partial + blocks);
  sigmoid_cross_entropy_partial_kernel<<<blocks, kBlock, 0, s>>>(n, x, target, options,
                                                                 partial, valid);
  LAMINA_CUDA_LAUNCHED(sigmoid_cross_entropy_partial_kernel);
  sigmoid_cross_entropy_finish_kernel<<<1, kFinishBlock, 0, s>>>(blocks, partial, valid, n,
                                                                 options, loss, norm);
  LAMINA_CUDA_LAUNCHED(sigmoid_cross_entropy_finish_kernel);
}

void CudaBackend::sigmoid_cross_entropy_backward(int64_t n, const float* x, const float* target,
                                                 const LossOptions& options, const float* norm,
                                                 const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (n <= 0) return;
  sigmoid_cross_entropy_backward_kernel<<<elementwise_grid(n), kBlock, 0, s>>>(
      n, x, target, options, norm, dloss, dx);
  LAMINA_CUDA_LAUNCHED(sigmoid_cross_entropy_backward_kernel);
}

void CudaBackend::hinge_loss_forward(int64_t rows, int64_t cols, int p, const float* x,
                                     const float* labels, float* margin, float* loss) {
  const cudaStream_t s = on_device();
  const unsigned blocks = std::min(elementwise_grid(rows * cols), kMaxPartials);
  double* partial = static_cast<double*>(context_.workspace(sizeof(double) * blocks));
  hinge_partial_kernel<<<blocks, kBlock, 0, s>>>(rows, cols, p, x, labels, margin, partial);
  LAMINA_CUDA_LAUNCHED(hinge_partial_kernel);
  finish_mean_kernel<<<1, kFinishBlock, 0, s>>>(blocks, partial, rows > 1 ? rows : 1, loss);
  LAMINA_CUDA_LAUNCHED(finish_mean_kernel);
}

void CudaBackend::hinge_loss_backward(int64_t rows, int64_t cols, int p, const float* margin,
                                      const float* labels, const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  hinge_backward_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(rows, cols, p, margin,
                                                                         labels, dloss, dx);
  LAMINA_CUDA_LAUNCHED(hinge_backward_kernel);
}

void CudaBackend::contrastive_loss_forward(int64_t rows, int64_t cols, float margin,
                                           bool legacy, const float* a, const float* b,
                                           const float* similar, float* diff, float* dist_sq,
                                           float* loss) {
  const cudaStream_t s = on_device();
  double* row_loss =
      static_cast<double*>(context_.workspace(sizeof(double) * (rows > 0 ? rows : 1)));
  if (rows > 0) {
    contrastive_rows_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(
        rows, cols, margin, legacy, a, b, similar, diff, dist_sq, row_loss);
    LAMINA_CUDA_LAUNCHED(contrastive_rows_kernel);
  }
  finish_mean_kernel<<<1, kFinishBlock, 0, s>>>(rows, row_loss, 2.0 * (rows > 1 ? rows : 1),
                                                loss);
  LAMINA_CUDA_LAUNCHED(finish_mean_kernel);
}

void CudaBackend::contrastive_loss_backward(int64_t rows, int64_t cols, float margin,
                                            bool legacy, float sign, const float* diff,
                                            const float* dist_sq, const float* similar,
                                            const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  contrastive_backward_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, margin, legacy, sign, diff, dist_sq, similar, dloss, dx);
  LAMINA_CUDA_LAUNCHED(contrastive_backward_kernel);
}

void CudaBackend::multinomial_logistic_loss_forward(int64_t rows, int64_t cols,
                                                    const float* prob, const float* labels,
                                                    float* loss) {
  const cudaStream_t s = on_device();
  multinomial_logistic_forward_kernel<<<1, kFinishBlock, 0, s>>>(rows, cols, prob, labels,
                                                                 loss);
  LAMINA_CUDA_LAUNCHED(multinomial_logistic_forward_kernel);
}

void CudaBackend::multinomial_logistic_loss_backward(int64_t rows, int64_t cols,
                                                     const float* prob, const float* labels,
                                                     const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  multinomial_logistic_backward_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, prob, labels, dloss, dx);
  LAMINA_CUDA_LAUNCHED(multinomial_logistic_backward_kernel);
}

void CudaBackend::infogain_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                        const float* labels, const float* infogain,
                                        const LossOptions& options, float* loss, float* norm) {
  const cudaStream_t s = on_device();
  double* row_loss =
      static_cast<double*>(context_.workspace(sizeof(double) * (rows > 0 ? rows : 1)));
  if (rows > 0 && cols > 0) {
    infogain_rows_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(rows, cols, prob, labels,
                                                                     infogain, options,
                                                                     row_loss);
    LAMINA_CUDA_LAUNCHED(infogain_rows_kernel);
  } else if (rows > 0) {
    LAMINA_CUDA_CHECK(cudaMemsetAsync(row_loss, 0, sizeof(double) * rows, s));
  }
  finish_rows_kernel<<<1, kFinishBlock, 0, s>>>(rows, row_loss, labels, options, loss, norm);
  LAMINA_CUDA_LAUNCHED(finish_rows_kernel);
}

void CudaBackend::infogain_loss_backward(int64_t rows, int64_t cols, const float* prob,
                                         const float* labels, const float* infogain,
                                         const LossOptions& options, const float* norm,
                                         const float* dloss, float* dx) {
  const cudaStream_t s = on_device();
  if (rows <= 0 || cols <= 0) return;
  infogain_backward_kernel<<<row_grid(rows), row_block(cols), 0, s>>>(
      rows, cols, prob, labels, infogain, options, norm, dloss, dx);
  LAMINA_CUDA_LAUNCHED(infogain_backward_kernel);
}

}  // namespace lamina::cuda_detail
