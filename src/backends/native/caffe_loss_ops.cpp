// NativeBackend's Caffe losses (backend.hpp, kCaffeLosses): sigmoid cross-entropy, hinge,
// contrastive, multinomial logistic and infogain. The semantics are the comments in
// backend.hpp; Caffe 1.0's layers of those names compute the same.
//
// A loss is a sum of terms (one per row, or per element for the sigmoid cross-entropy),
// each computed in double and added in a fixed order whatever the thread count: blocks of
// consecutive indices (their size depends only on the shape) are summed on one thread each,
// then the blocks in order. Labels are read as loss_labels.hpp says; a label that names no
// class (nor the ignore label) throws an Error naming it, after the pass.
#include <algorithm>
#include <cmath>
#include <vector>

#include "lamina/native_backend.hpp"
#include "loss_labels.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

using native::bad_label;
using native::class_index;
using native::is_ignored;
using native::loss_normalizer;

constexpr float kLogFloor = 1e-20f;       // Caffe's kLOG_THRESHOLD: ln(max(p, floor))
constexpr int64_t kBlockWork = 1 << 14;   // values per block of a sum

// One block's share of a loss: its terms' sum, the indices that counted (not ignored), and
// the first index whose label names no class (-1: none).
struct Partial {
  double sum = 0;
  int64_t valid = 0;
  int64_t bad = -1;
};

// The partial results of every block of indices [0, n), each index costing `cost` values:
// add(i, partial) for each i of a block in order, then the blocks combined in order. The
// blocks' array is the calling thread's, kept between calls (no allocation once grown).
template <class F>
Partial ordered_sum(int64_t n, int64_t cost, F add) {
  const int64_t per_block = std::max<int64_t>(1, kBlockWork / std::max<int64_t>(cost, 1));
  const int64_t blocks = (n + per_block - 1) / per_block;
  thread_local std::vector<Partial> partials;
  if (partials.size() < size_t(blocks)) partials.resize(size_t(blocks));
  Partial* out = partials.data();
  native::parallel_rows(blocks, per_block * cost, [&](int64_t b) {
    Partial p;
    for (int64_t i = b * per_block; i < std::min(n, (b + 1) * per_block); ++i) add(i, p);
    out[b] = p;
  });
  Partial total;
  for (int64_t b = 0; b < blocks; ++b) {
    total.sum += out[b].sum;
    total.valid += out[b].valid;
    if (total.bad < 0) total.bad = out[b].bad;
  }
  return total;
}

// The Error naming the first label that named no class, after the pass (never thrown on a
// pool's worker).
void check_labels(const char* what, const Partial& total, const float* labels, int64_t cols) {
  if (total.bad >= 0) bad_label(what, total.bad, labels[total.bad], cols);
}

// Row r's class, or -1 (recorded in p) where its label names none.
int64_t row_class(int64_t r, const float* labels, int64_t cols, Partial& p) {
  const int64_t label = class_index(labels[r], cols);
  if (label < 0 && p.bad < 0) p.bad = r;
  return label;
}

double log_floored(float p) { return std::log(double(std::max(p, kLogFloor))); }

bool is_similar(float s) { return std::trunc(s) != 0; }  // Caffe reads it as an int

}  // namespace

// ---- sigmoid cross-entropy: x, target, dx (n) ----

// Per target: max(x, 0) - x t + ln(1 + exp(-|x|)), which is -[t ln s + (1 - t) ln(1 - s)] for
// s = sigmoid(x) without the overflow of exp(x) or the cancellation of 1 - s.
void NativeBackend::sigmoid_cross_entropy_forward(int64_t n, const float* x, const float* target,
                                                  const LossOptions& options, float* loss,
                                                  float* norm) {
  const Partial total = ordered_sum(n, 1, [&](int64_t i, Partial& p) {
    if (is_ignored(options, target[i])) return;
    const double xi = x[i];
    p.sum += std::max(xi, 0.0) - xi * target[i] + std::log1p(std::exp(-std::abs(xi)));
    ++p.valid;
  });
  const float normalizer = loss_normalizer(options, n, total.valid);
  loss[0] = static_cast<float>(total.sum / normalizer);
  norm[0] = normalizer;
}

void NativeBackend::sigmoid_cross_entropy_backward(int64_t n, const float* x,
                                                   const float* target,
                                                   const LossOptions& options,
                                                   const float* norm, const float* dloss,
                                                   float* dx) {
  const float scale = dloss[0] / norm[0];
  native::parallel_for(n, [=](int64_t i) {
    const float sigmoid = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = is_ignored(options, target[i]) ? 0.0f : (sigmoid - target[i]) * scale;
  });
}

// ---- hinge: x, margin, dx (rows, cols) ----

void NativeBackend::hinge_loss_forward(int64_t rows, int64_t cols, int p, const float* x,
                                       const float* labels, float* margin, float* loss) {
  const Partial total = ordered_sum(rows, cols, [&](int64_t r, Partial& part) {
    const int64_t label = row_class(r, labels, cols, part);
    for (int64_t j = r * cols; j < (r + 1) * cols; ++j) {
      const float d = j - r * cols == label ? -1.0f : 1.0f;
      margin[j] = std::max(0.0f, 1.0f + d * x[j]);
      part.sum += p == 1 ? double(margin[j]) : double(margin[j]) * margin[j];
    }
  });
  check_labels("HingeLoss", total, labels, cols);
  loss[0] = static_cast<float>(total.sum / double(std::max<int64_t>(rows, 1)));
}

void NativeBackend::hinge_loss_backward(int64_t rows, int64_t cols, int p, const float* margin,
                                        const float* labels, const float* dloss, float* dx) {
  const float scale = dloss[0] / static_cast<float>(std::max<int64_t>(rows, 1));
  native::parallel_rows(rows, cols, [=](int64_t r) {
    const int64_t label = class_index(labels[r], cols);
    for (int64_t j = 0; j < cols; ++j) {
      const float m = margin[r * cols + j];
      const float slope = p == 1 ? (m > 0 ? 1.0f : 0.0f) : 2 * m;
      dx[r * cols + j] = (j == label ? -slope : slope) * scale;
    }
  });
}

// ---- contrastive: a, b, diff, dx (rows, cols); similar, dist_sq (rows) ----

void NativeBackend::contrastive_loss_forward(int64_t rows, int64_t cols, float margin,
                                             bool legacy, const float* a, const float* b,
                                             const float* similar, float* diff, float* dist_sq,
                                             float* loss) {
  const Partial total = ordered_sum(rows, cols, [&](int64_t r, Partial& p) {
    double sq = 0;
    for (int64_t j = r * cols; j < (r + 1) * cols; ++j) {
      diff[j] = a[j] - b[j];
      sq += double(diff[j]) * diff[j];
    }
    dist_sq[r] = static_cast<float>(sq);
    const double d2 = dist_sq[r];  // the value the backward pass reads
    if (is_similar(similar[r])) {
      p.sum += d2;
    } else if (legacy) {
      p.sum += std::max(margin - d2, 0.0);
    } else {
      const double gap = std::max(margin - std::sqrt(d2), 0.0);
      p.sum += gap * gap;
    }
  });
  loss[0] = static_cast<float>(total.sum / (2.0 * double(std::max<int64_t>(rows, 1))));
}

// alpha = sign dloss / rows; similar: dx = alpha diff; dissimilar within the margin: dx =
// -alpha diff (legacy) or -alpha (margin - d) / (d + 1e-4) diff, d = sqrt(dist_sq); else 0.
void NativeBackend::contrastive_loss_backward(int64_t rows, int64_t cols, float margin,
                                              bool legacy, float sign, const float* diff,
                                              const float* dist_sq, const float* similar,
                                              const float* dloss, float* dx) {
  const float alpha = sign * dloss[0] / static_cast<float>(std::max<int64_t>(rows, 1));
  native::parallel_rows(rows, cols, [=](int64_t r) {
    float beta = alpha;
    if (!is_similar(similar[r])) {
      const float d = std::sqrt(dist_sq[r]);
      const float gap = legacy ? margin - dist_sq[r] : margin - d;
      beta = gap <= 0 ? 0.0f : legacy ? -alpha : -alpha * gap / (d + 1e-4f);
    }
    for (int64_t j = r * cols; j < (r + 1) * cols; ++j) dx[j] = beta * diff[j];
  });
}

// ---- multinomial logistic: prob, dx (rows, cols) ----

void NativeBackend::multinomial_logistic_loss_forward(int64_t rows, int64_t cols,
                                                      const float* prob, const float* labels,
                                                      float* loss) {
  const Partial total = ordered_sum(rows, 1, [&](int64_t r, Partial& p) {
    const int64_t label = row_class(r, labels, cols, p);
    if (label >= 0) p.sum -= log_floored(prob[r * cols + label]);
  });
  check_labels("MultinomialLogisticLoss", total, labels, cols);
  loss[0] = static_cast<float>(total.sum / double(std::max<int64_t>(rows, 1)));
}

void NativeBackend::multinomial_logistic_loss_backward(int64_t rows, int64_t cols,
                                                       const float* prob, const float* labels,
                                                       const float* dloss, float* dx) {
  const float scale = -dloss[0] / static_cast<float>(std::max<int64_t>(rows, 1));
  native::parallel_rows(rows, cols, [=](int64_t r) {
    float* dxr = dx + r * cols;
    std::fill_n(dxr, cols, 0.0f);
    const int64_t label = class_index(labels[r], cols);
    if (label >= 0) dxr[label] = scale / std::max(prob[r * cols + label], kLogFloor);
  });
}

// ---- infogain: prob, dx (rows, cols); infogain H (cols, cols) ----

void NativeBackend::infogain_loss_forward(int64_t rows, int64_t cols, const float* prob,
                                          const float* labels, const float* infogain,
                                          const LossOptions& options, float* loss,
                                          float* norm) {
  const Partial total = ordered_sum(rows, cols, [&](int64_t r, Partial& p) {
    if (is_ignored(options, labels[r])) return;
    const int64_t label = row_class(r, labels, cols, p);
    if (label < 0) return;
    const float* h = infogain + label * cols;
    for (int64_t j = 0; j < cols; ++j) p.sum -= double(h[j]) * log_floored(prob[r * cols + j]);
    ++p.valid;
  });
  check_labels("InfogainLoss", total, labels, cols);
  const float normalizer = loss_normalizer(options, rows, total.valid);
  loss[0] = static_cast<float>(total.sum / normalizer);
  norm[0] = normalizer;
}

void NativeBackend::infogain_loss_backward(int64_t rows, int64_t cols, const float* prob,
                                           const float* labels, const float* infogain,
                                           const LossOptions& options, const float* norm,
                                           const float* dloss, float* dx) {
  const float scale = dloss[0] / norm[0];
  native::parallel_rows(rows, cols, [=](int64_t r) {
    float* dxr = dx + r * cols;
    const int64_t label = class_index(labels[r], cols);
    if (label < 0 || is_ignored(options, labels[r])) {
      std::fill_n(dxr, cols, 0.0f);
      return;
    }
    const float* h = infogain + label * cols;
    double h_sum = 0;  // the label's row of H, summed in order
    for (int64_t j = 0; j < cols; ++j) h_sum += h[j];
    const float row_sum = static_cast<float>(h_sum);
    for (int64_t j = 0; j < cols; ++j) dxr[j] = (prob[r * cols + j] * row_sum - h[j]) * scale;
  });
}

}  // namespace lamina
