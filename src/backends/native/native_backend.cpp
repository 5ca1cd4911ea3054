// NativeBackend: host memory, OpenBLAS (cblas, row-major) for BLAS, a sleeping thread pool
// (thread_pool.hpp) for the loops around it.
//
// Conventions (the semantics of every operation are the comments in backend.hpp):
//   - Memory is ordinary host memory, 64-byte aligned. copy_to_host/copy_from_host are plain
//     memcpy (there is no device to transfer to).
//   - Elementwise loops go through parallel_for, which only wakes the pool's threads for arrays
//     larger than kParallelMin; row-wise operations parallelise over rows.
//   - Every elementwise operation works in place (x == y, dy == dx): each element is read
//     before the same element is written, and nothing else is read after it.
//   - Scalar results (losses, accuracy) are deterministic: per-row partial results in double,
//     summed serially in row order.
//   - Labels are class indices stored as floats, converted with static_cast<int>.
#include "lamina/native_backend.hpp"
#include "lamina/relu.hpp"

#include <cblas.h>
#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

#include <unistd.h>

#include "lamina/common.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/rounding.hpp"
#include "half_rounding.hpp"
#include "loss_labels.hpp"
#include "parallel.hpp"
#include "products.hpp"

namespace lamina {
namespace {

constexpr size_t kAlignment = 64;

// Loop helpers shared with the other files of this backend (parallel.hpp).
using native::blas_size;
using native::in_blas_chunks;
using native::parallel_for;
using native::parallel_ranges;
using native::parallel_rows;
using native::scale_output;
// Labels and normalisers, shared with caffe_loss_ops.cpp (loss_labels.hpp).
using native::bad_label;
using native::class_index;
using native::is_ignored;
using native::loss_normalizer;
using native::serial_sum;

CBLAS_TRANSPOSE cblas_transpose(Transpose t) {
  return t == Transpose::kNo ? CblasNoTrans : CblasTrans;
}

// One row of softmax: y (cols) = exp(x - max) / sum. x may equal y. Returns max and sum, so
// that log softmax(x)[j] = x[j] - max - log(sum) for any x[j] read before the call.
struct SoftmaxRow {
  float max;
  double sum;  // sum_j exp(x_j - max), >= 1
};

SoftmaxRow softmax_row(int64_t cols, const float* x, float* y) {
  float max = x[0];
  for (int64_t j = 1; j < cols; ++j) max = std::max(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < cols; ++j) {
    y[j] = std::exp(x[j] - max);
    sum += y[j];
  }
  const float inv_sum = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < cols; ++j) y[j] *= inv_sum;
  return {max, sum};
}

// max and log(sum exp(x - max)) of one row, without writing anything.
SoftmaxRow softmax_row_stats(int64_t cols, const float* x) {
  float max = x[0];
  for (int64_t j = 1; j < cols; ++j) max = std::max(max, x[j]);
  double sum = 0;
  for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[j] - max);
  return {max, sum};
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

void* NativeBackend::allocate(size_t bytes) {
  if (bytes == 0) return nullptr;  // nothing to own; deallocate(nullptr) is a no-op
  // One array larger than the machine's memory can never be used; refuse it before the
  // kernel's overcommit hands it out and the zero-fill that follows brings in the OOM killer.
  static const uint64_t physical =
      uint64_t(sysconf(_SC_PHYS_PAGES)) * uint64_t(sysconf(_SC_PAGE_SIZE));
  if (physical > 0 && bytes > physical) {
    fail("NativeBackend: could not allocate ", bytes, " bytes (", bytes >> 30, " GiB): more "
         "than the machine's ", physical >> 30, " GiB of memory; a shape in the net is too "
         "large (reduce the batch size or the model size)");
  }
  void* p = nullptr;
  if (posix_memalign(&p, kAlignment, bytes) != 0) {
    fail("NativeBackend: could not allocate ", bytes, " bytes (", bytes >> 20,
         " MiB) of host memory; reduce the batch size or the model size");
  }
  return p;
}

void NativeBackend::deallocate(void* p) noexcept { std::free(p); }

void NativeBackend::copy(size_t bytes, const void* src, void* dst) {
  if (bytes > 0 && src != dst) std::memcpy(dst, src, bytes);
}

void NativeBackend::copy_to_host(size_t bytes, const void* src, void* host_dst) {
  copy(bytes, src, host_dst);  // host memory already
}

void NativeBackend::copy_from_host(size_t bytes, const void* host_src, void* dst) {
  copy(bytes, host_src, dst);
}

void NativeBackend::zero(size_t bytes, void* p) {
  if (bytes > 0) std::memset(p, 0, bytes);
}

void NativeBackend::fill(int64_t n, float value, float* x) {
  parallel_for(n, [=](int64_t i) { x[i] = value; });
}

// ---------------------------------------------------------------------------------------
// BLAS
// ---------------------------------------------------------------------------------------

// C (m, n) = alpha op(A) (m, k) op(B) (k, n) + beta C
void NativeBackend::gemm(Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const float* a, const float* b, float beta,
                         float* c) {
  const bool ta = trans_a == Transpose::kYes, tb = trans_b == Transpose::kYes;
  native::sgemm(math(), ta, tb, m, n, k, alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
}

// y = alpha op(A) x + beta y, A (m, n): y (m), x (n) untransposed; y (n), x (m) transposed.
void NativeBackend::gemv(Transpose trans_a, int64_t m, int64_t n, float alpha, const float* a,
                         const float* x, float beta, float* y) {
  const int64_t out = trans_a == Transpose::kNo ? m : n;
  const int64_t in = trans_a == Transpose::kNo ? n : m;
  if (out == 0) return;
  if (in == 0) {
    scale_output(out, beta, y);
    return;
  }
  cblas_sgemv(CblasRowMajor, cblas_transpose(trans_a), blas_size(m, "gemv m"),
              blas_size(n, "gemv n"), alpha, a, blas_size(n, "gemv lda"), x, 1, beta, y, 1);
}

void NativeBackend::axpy(int64_t n, float alpha, const float* x, float* y) {
  in_blas_chunks(n, [&](int64_t s, blasint len) { cblas_saxpy(len, alpha, x + s, 1, y + s, 1); });
}

void NativeBackend::axpby(int64_t n, float alpha, const float* x, float beta, float* y) {
  in_blas_chunks(n, [&](int64_t s, blasint len) {
    cblas_saxpby(len, alpha, x + s, 1, beta, y + s, 1);
  });
}

void NativeBackend::scal(int64_t n, float alpha, float* x) {
  in_blas_chunks(n, [&](int64_t s, blasint len) { cblas_sscal(len, alpha, x + s, 1); });
}

void NativeBackend::mul(int64_t n, const float* a, const float* b, float* y) {
  parallel_for(n, [=](int64_t i) { y[i] = a[i] * b[i]; });
}

// x . y in double: blocks of kDotBlock elements summed in parallel (eight accumulators each,
// so the loop pipelines), then added in block order: the result does not depend on the
// thread count.
void NativeBackend::dot(int64_t n, const float* x, const float* y, float* result) {
  constexpr int64_t kDotBlock = int64_t{1} << 14;
  std::vector<double> partial((n + kDotBlock - 1) / kDotBlock);
  parallel_rows(int64_t(partial.size()), kDotBlock, [&](int64_t b) {
    const int64_t begin = b * kDotBlock, end = std::min(n, begin + kDotBlock);
    double acc[8] = {};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      for (int k = 0; k < 8; ++k) acc[k] += double(x[i + k]) * y[i + k];
    }
    double sum = 0;
    for (; i < end; ++i) sum += double(x[i]) * y[i];
    for (double a : acc) sum += a;
    partial[b] = sum;
  });
  result[0] = static_cast<float>(serial_sum(partial));
}

// rounding.hpp's conversions, the CUDA backend's too.
void NativeBackend::to_half(Half format, int64_t n, const float* x, uint16_t* y) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    native::round_to_half(format, x + begin, end - begin, y + begin);
  });
}

void NativeBackend::from_half(Half format, int64_t n, const uint16_t* x, float* y) {
  if (format == Half::kBF16) {
    parallel_for(n, [=](int64_t i) { y[i] = bf16_to_float(x[i]); });
  } else {
    parallel_for(n, [=](int64_t i) { y[i] = fp16_to_float(x[i]); });
  }
}

// ---------------------------------------------------------------------------------------
// Neural-network operations
// ---------------------------------------------------------------------------------------

void NativeBackend::activation_forward(Activation f, int64_t n, float negative_slope,
                                       const float* x, float* y) {
  switch (f) {
    case Activation::kReLU:
      parallel_for(n, [=](int64_t i) { y[i] = relu_value(x[i], negative_slope); });
      break;
    case Activation::kSigmoid:
      parallel_for(n, [=](int64_t i) { y[i] = 1.0f / (1.0f + std::exp(-x[i])); });
      break;
    case Activation::kTanH:
      parallel_for(n, [=](int64_t i) { y[i] = std::tanh(x[i]); });
      break;
  }
}

// dx = dy * f'(x), with f' written in terms of the output y.
void NativeBackend::activation_backward(Activation f, int64_t n, float negative_slope,
                                        const float* y, const float* dy, float* dx) {
  switch (f) {
    case Activation::kReLU:
      // Vectorised, the select is a blend; a scalar branch on the sign of real
      // activations mispredicts half the time.
      parallel_ranges(n, [=](int64_t begin, int64_t end) {
#pragma GCC ivdep
        for (int64_t i = begin; i < end; ++i)
          dx[i] = relu_backward_value(y[i], dy[i], negative_slope);
      });
      break;
    case Activation::kSigmoid:
      parallel_for(n, [=](int64_t i) { dx[i] = dy[i] * y[i] * (1.0f - y[i]); });
      break;
    case Activation::kTanH:
      parallel_for(n, [=](int64_t i) { dx[i] = dy[i] * (1.0f - y[i] * y[i]); });
      break;
  }
}

// x, y (rows, cols); softmax subtracts the row max, so large scores do not overflow.
void NativeBackend::softmax_forward(int64_t rows, int64_t cols, bool log, const float* x,
                                    float* y) {
  if (cols == 0) return;
  parallel_rows(rows, cols, [=](int64_t r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    if (!log) {
      softmax_row(cols, xr, yr);
      return;
    }
    // (x - max) - log(sum): subtracting the max first keeps the small result exact.
    const SoftmaxRow s = softmax_row_stats(cols, xr);
    const float log_sum = static_cast<float>(std::log(s.sum));
    for (int64_t j = 0; j < cols; ++j) yr[j] = (xr[j] - s.max) - log_sum;
  });
}

// softmax:     dx = y * (dy - sum(dy * y))
// log-softmax: dx = dy - exp(y) * sum(dy)
void NativeBackend::softmax_backward(int64_t rows, int64_t cols, bool log, const float* y,
                                     const float* dy, float* dx) {
  parallel_rows(rows, cols, [=](int64_t r) {
    const float* yr = y + r * cols;
    const float* dyr = dy + r * cols;
    float* dxr = dx + r * cols;
    double sum = 0;
    if (!log) {
      for (int64_t j = 0; j < cols; ++j) sum += double(dyr[j]) * yr[j];
      const float s = static_cast<float>(sum);
      for (int64_t j = 0; j < cols; ++j) dxr[j] = yr[j] * (dyr[j] - s);
    } else {
      for (int64_t j = 0; j < cols; ++j) sum += dyr[j];
      const float s = static_cast<float>(sum);
      for (int64_t j = 0; j < cols; ++j) dxr[j] = dyr[j] - std::exp(yr[j]) * s;
    }
  });
}

// x, prob (rows, cols); labels (rows). -log prob[label] is computed as
// -(x[label] - max - log(sum)), which stays finite even where prob underflows to 0.
void NativeBackend::softmax_cross_entropy_forward(int64_t rows, int64_t cols, const float* x,
                                                  const float* labels,
                                                  const LossOptions& options, float* prob,
                                                  float* loss, float* norm) {
  std::vector<double> row_loss(rows, 0.0);
  std::vector<char> row_valid(rows, 0);
  if (cols > 0) {
    parallel_rows(rows, cols, [&](int64_t r) {
      const float* xr = x + r * cols;
      const int64_t label = class_index(labels[r], cols);
      const float x_label = label >= 0 ? xr[label] : 0.0f;  // read before prob may overwrite x
      const SoftmaxRow s = softmax_row(cols, xr, prob + r * cols);
      if (is_ignored(options, labels[r])) return;
      row_valid[r] = label >= 0 ? 1 : 2;  // 2: no class, reported below
      row_loss[r] = -(double(x_label) - s.max - std::log(s.sum));
    });
  }
  const auto bad = std::find(row_valid.begin(), row_valid.end(), 2);
  if (bad != row_valid.end()) {
    const int64_t row = bad - row_valid.begin();
    bad_label("SoftmaxWithLoss", row, labels[row], cols);
  }
  const int64_t valid = std::count(row_valid.begin(), row_valid.end(), 1);
  const float normalizer = loss_normalizer(options, rows, valid);
  loss[0] = static_cast<float>(serial_sum(row_loss) / normalizer);
  norm[0] = normalizer;
}

// dx (rows, cols) = (prob - onehot(label)) * dloss[0] / norm[0]; ignored rows get 0.
void NativeBackend::softmax_cross_entropy_backward(int64_t rows, int64_t cols,
                                                   const float* prob, const float* labels,
                                                   const LossOptions& options,
                                                   const float* norm, const float* dloss,
                                                   float* dx) {
  const float scale = dloss[0] / norm[0];
  parallel_rows(rows, cols, [=](int64_t r) {
    const float* pr = prob + r * cols;
    float* dxr = dx + r * cols;
    const int64_t label = class_index(labels[r], cols);
    if (is_ignored(options, labels[r])) {
      std::fill_n(dxr, cols, 0.0f);
      return;
    }
    for (int64_t j = 0; j < cols; ++j) {
      dxr[j] = (pr[j] - (j == label ? 1.0f : 0.0f)) * scale;
    }
  });
}

// logp (rows, cols); loss[0] = -sum logp[label] / norm.
void NativeBackend::nll_loss_forward(int64_t rows, int64_t cols, const float* logp,
                                     const float* labels, const LossOptions& options,
                                     float* loss, float* norm) {
  double total = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {  // one value per row: serial is cheapest
    if (is_ignored(options, labels[r])) continue;
    const int64_t label = class_index(labels[r], cols);
    if (label < 0) bad_label("NegativeLogLikelihood", r, labels[r], cols);
    total -= logp[r * cols + label];
    ++valid;
  }
  const float normalizer = loss_normalizer(options, rows, valid);
  loss[0] = static_cast<float>(total / normalizer);
  norm[0] = normalizer;
}

// dx (rows, cols) = -onehot(label) * dloss[0] / norm[0]; ignored rows get 0.
void NativeBackend::nll_loss_backward(int64_t rows, int64_t cols, const float* labels,
                                      const LossOptions& options, const float* norm,
                                      const float* dloss, float* dx) {
  const float scale = dloss[0] / norm[0];
  parallel_rows(rows, cols, [=](int64_t r) {
    float* dxr = dx + r * cols;
    std::fill_n(dxr, cols, 0.0f);
    const int64_t label = class_index(labels[r], cols);
    if (label >= 0 && !is_ignored(options, labels[r])) dxr[label] = -scale;
  });
}

// a, b, diff (rows, cols): diff = a - b; loss[0] = sum(diff^2) / (2 rows).
void NativeBackend::euclidean_loss_forward(int64_t rows, int64_t cols, const float* a,
                                           const float* b, float* diff, float* loss) {
  std::vector<double> row_sum(rows, 0.0);
  parallel_rows(rows, cols, [&](int64_t r) {
    double sum = 0;
    for (int64_t j = r * cols; j < (r + 1) * cols; ++j) {
      diff[j] = a[j] - b[j];
      sum += double(diff[j]) * diff[j];
    }
    row_sum[r] = sum;
  });
  loss[0] = static_cast<float>(serial_sum(row_sum) / (2.0 * std::max<int64_t>(rows, 1)));
}

// dx (rows, cols) = sign * dloss[0] / rows * diff
void NativeBackend::euclidean_loss_backward(int64_t rows, int64_t cols, float sign,
                                            const float* diff, const float* dloss, float* dx) {
  const float scale = sign * dloss[0] / static_cast<float>(std::max<int64_t>(rows, 1));
  parallel_for(rows * cols, [=](int64_t i) { dx[i] = scale * diff[i]; });
}

// x (rows, cols); a row is correct when fewer than top_k other classes score at least the
// label's score (Caffe 1.0's rule: ties count against the label).
void NativeBackend::accuracy(int64_t rows, int64_t cols, int top_k, const float* x,
                             const float* labels, const LossOptions& options, float* out) {
  int64_t correct = 0;
  int64_t valid = 0;
  for (int64_t r = 0; r < rows; ++r) {  // rows are few: one batch
    if (is_ignored(options, labels[r])) continue;
    const int64_t label = class_index(labels[r], cols);
    if (label < 0) bad_label("Accuracy", r, labels[r], cols);
    const float* xr = x + r * cols;
    const float score = xr[label];
    int64_t at_least = 0;  // other classes scoring >= the label's score
    for (int64_t j = 0; j < cols; ++j) at_least += j != label && xr[j] >= score;
    correct += at_least < top_k;
    ++valid;
  }
  out[0] = valid > 0 ? static_cast<float>(double(correct) / double(valid)) : 0.0f;
}

// x, mask, y (n); element i is kept when counter_uniform(seed, offset + passes n + i) >= ratio.
void NativeBackend::dropout_forward(int64_t n, float ratio, uint64_t seed, uint64_t offset,
                                    PassCounter* counter, const float* x, float* mask,
                                    float* y) {
  const float keep_scale = 1.0f / (1.0f - ratio);
  const uint64_t first = offset + static_cast<uint64_t>(counter->passes) * uint64_t(n);
  parallel_for(n, [=](int64_t i) {
    const bool keep = counter_uniform(seed, first + static_cast<uint64_t>(i)) >= ratio;
    mask[i] = keep ? keep_scale : 0.0f;
    y[i] = x[i] * mask[i];
  });
  counter->passes += 1;
}

void NativeBackend::gather_batch(const BatchOrder& order, const GatherTop& data,
                                 const GatherTop& label) {
  const int64_t passes = order.counter->passes;
  for (const GatherTop* top : {&data, &label}) {
    if (top->src == nullptr) continue;
    const GatherTop t = *top;
    parallel_rows(order.batch, t.cols, [=](int64_t r) {
      const uint8_t* s = t.src + order.sample(passes, r) * t.cols;
      float* d = t.dst + r * t.cols;
      for (int64_t j = 0; j < t.cols; ++j) d[j] = t.scale * static_cast<float>(s[j]);
    });
  }
  order.counter->passes += 1;
}

}  // namespace lamina
