// NativeBackend's per-channel operations (batch normalisation, scale/bias, their reductions),
// row copies for Concat, and element-wise max. The semantics are the comments in backend.hpp.
//
// Arrays are viewed as (outer, channels, inner): row r = (o, c) is inner contiguous floats
// of channel c = r % channels. Per-channel sums are in double: each row is summed on one
// thread, then the rows of a channel are added in order of o, so results do not depend on
// the thread count.
#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "lamina/native_backend.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

using native::parallel_ranges;
using native::parallel_rows;

// sums[c] = sum over o and i of term(o, c, i) in double, term(r, i) taking the row
// r = o channels + c and the position i within it.
template <class F>
std::vector<double> channel_sums(int64_t outer, int64_t channels, int64_t inner, F term) {
  std::vector<double> rows(outer * channels);
  parallel_rows(outer * channels, inner, [&](int64_t r) {
    double sum = 0;
    for (int64_t i = 0; i < inner; ++i) sum += term(r, i);
    rows[r] = sum;
  });
  std::vector<double> sums(channels, 0.0);
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t c = 0; c < channels; ++c) sums[c] += rows[o * channels + c];
  }
  return sums;
}

// 1 / sqrt(var + eps), in double and rounded once.
float inverse_std(float var, float eps) {
  return static_cast<float>(1.0 / std::sqrt(double(var) + double(eps)));
}

// y = (x - mean[c]) * inv_std[c], x and y (outer, channels, inner); works in place.
void normalize(int64_t outer, int64_t channels, int64_t inner, const float* x,
               const float* mean, const float* inv_std, float* y) {
  parallel_rows(outer * channels, inner, [&](int64_t r) {
    const float mu = mean[r % channels], s = inv_std[r % channels];
    const float* xr = x + r * inner;
    float* yr = y + r * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = (xr[i] - mu) * s;
  });
}

}  // namespace

// x (outer, channels, inner) -> mean, var (channels); two passes in double (the second
// around the double mean), so a large mean does not cancel the variance away.
void NativeBackend::channel_moments(int64_t outer, int64_t channels, int64_t inner,
                                    const float* x, float* mean, float* var) {
  const double m = static_cast<double>(outer * inner);
  if (outer * inner == 0) {  // no samples: report zeros rather than 0/0
    std::fill_n(mean, channels, 0.0f);
    std::fill_n(var, channels, 0.0f);
    return;
  }
  std::vector<double> mu =
      channel_sums(outer, channels, inner, [&](int64_t r, int64_t i) -> double {
        return x[r * inner + i];
      });
  for (double& v : mu) v /= m;
  const std::vector<double> sq =
      channel_sums(outer, channels, inner, [&](int64_t r, int64_t i) -> double {
        const double dev = x[r * inner + i] - mu[r % channels];
        return dev * dev;
      });
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = static_cast<float>(mu[c]);
    var[c] = static_cast<float>(sq[c] / m);
  }
}

// x, y (outer, channels, inner); mean, var, inv_std (channels).
void NativeBackend::batch_norm_forward(int64_t outer, int64_t channels, int64_t inner,
                                       float eps, const float* x, const float* mean,
                                       const float* var, float* y, float* inv_std,
                                       float* kept) {
  for (int64_t c = 0; c < channels; ++c) inv_std[c] = inverse_std(var[c], eps);
  normalize(outer, channels, inner, x, mean, inv_std, y);
  if (kept != nullptr) std::copy_n(y, outer * channels * inner, kept);
}

// x, y (outer, channels, inner); mean_sum, var_sum, mean, inv_std (channels); factor (1).
void NativeBackend::batch_norm_inference(int64_t outer, int64_t channels, int64_t inner,
                                         float eps, const float* x, const float* mean_sum,
                                         const float* var_sum, const float* factor, float* y,
                                         float* mean, float* inv_std) {
  const double f = factor[0];
  for (int64_t c = 0; c < channels; ++c) {
    mean[c] = f == 0 ? 0.0f : static_cast<float>(double(mean_sum[c]) / f);
    inv_std[c] = inverse_std(f == 0 ? 0.0f : static_cast<float>(double(var_sum[c]) / f), eps);
  }
  normalize(outer, channels, inner, x, mean, inv_std, y);
}

namespace {

// means[c] = mean_c(dy) and means[channels + c] = mean_c(dy y), y and dy (outer, channels,
// inner): batch normalisation's backward means, each from a sum in double rounded once.
void backward_means(int64_t outer, int64_t channels, int64_t inner, const float* y,
                    const float* dy, float* means) {
  const double m = static_cast<double>(outer * inner);
  const std::vector<double> sum_dy = channel_sums(
      outer, channels, inner, [&](int64_t r, int64_t i) -> double { return dy[r * inner + i]; });
  const std::vector<double> sum_dyy =
      channel_sums(outer, channels, inner, [&](int64_t r, int64_t i) -> double {
        return double(dy[r * inner + i]) * y[r * inner + i];
      });
  for (int64_t c = 0; c < channels; ++c) {
    means[c] = static_cast<float>(sum_dy[c] / m);
    means[channels + c] = static_cast<float>(sum_dyy[c] / m);
  }
}

// dx = inv_std (dy - means[c] - y means[channels + c]); works in place (dy == dx).
void backward_from_means(int64_t outer, int64_t channels, int64_t inner, const float* y,
                         const float* dy, const float* inv_std, const float* means,
                         float* dx) {
  parallel_rows(outer * channels, inner, [&](int64_t r) {
    const int64_t c = r % channels;
    const float s = inv_std[c], a = means[c], b = means[channels + c];
    const float* yr = y + r * inner;
    const float* dyr = dy + r * inner;
    float* dxr = dx + r * inner;
    for (int64_t i = 0; i < inner; ++i) dxr[i] = s * (dyr[i] - a - yr[i] * b);
  });
}

}  // namespace

// y, dy, dx (outer, channels, inner), inv_std (channels):
// dx = inv_std (dy - mean_c(dy) - y mean_c(dy y)); works in place (dy == dx).
void NativeBackend::batch_norm_backward(int64_t outer, int64_t channels, int64_t inner,
                                        const float* y, const float* dy, const float* inv_std,
                                        float* dx) {
  if (outer * inner == 0) return;
  std::vector<float> means(2 * channels);
  backward_means(outer, channels, inner, y, dy, means.data());
  backward_from_means(outer, channels, inner, y, dy, inv_std, means.data(), dx);
}

// Batch normalisation, Scale and (with relu) ReLU as the layers' operations, one after the
// other; the ReLU's and Scale's input gradients in staging arrays 3 and 4 (slots the 16-bit
// operations, which widen into 0-2, leave alone), so a step allocates nothing.
void NativeBackend::batch_norm_scale_forward(int64_t outer, int64_t channels, int64_t inner,
                                             float eps, const float* x, const float* mean,
                                             const float* var, const float* scale,
                                             const float* bias, bool relu, float* y,
                                             float* inv_std, float* kept) {
  batch_norm_forward(outer, channels, inner, eps, x, mean, var, kept, inv_std, nullptr);
  channel_affine(outer, channels, inner, kept, scale, bias, y);
  if (relu) activation_forward(Activation::kReLU, outer * channels * inner, 0.0f, y, y);
}

namespace {

// The ReLU's input gradient into d (dy itself without relu, d untouched), from the
// forward's output computed again from kept into y; returns the gradient.
const float* relu_gradient(NativeBackend& be, int64_t outer, int64_t channels, int64_t inner,
                           const float* kept, const float* dy, const float* scale,
                           const float* bias, bool relu, float* d, float* y) {
  if (!relu) return dy;
  const int64_t n = outer * channels * inner;
  be.channel_affine(outer, channels, inner, kept, scale, bias, y);
  be.activation_forward(Activation::kReLU, n, 0.0f, y, y);
  be.activation_backward(Activation::kReLU, n, 0.0f, y, dy, d);
  return d;
}

}  // namespace

void NativeBackend::batch_norm_scale_sums(int64_t outer, int64_t channels, int64_t inner,
                                          const float* kept, const float* dy,
                                          const float* scale, const float* bias, bool relu,
                                          float* means, float* dscale, float* dbias) {
  if (outer * inner == 0) return;
  const int64_t n = outer * channels * inner;
  float* g = staging(3, n);
  const float* d =
      relu_gradient(*this, outer, channels, inner, kept, dy, scale, bias, relu, g, staging(4, n));
  if (dscale != nullptr) scale_gradients(outer, channels, inner, d, kept, dscale, dbias);
  channel_affine(outer, channels, inner, d, scale, nullptr, g);
  backward_means(outer, channels, inner, kept, g, means);
}

void NativeBackend::batch_norm_scale_backward(int64_t outer, int64_t channels, int64_t inner,
                                              const float* kept, const float* dy,
                                              const float* inv_std, const float* scale,
                                              const float* bias, bool relu, const float* means,
                                              float* dx) {
  const int64_t n = outer * channels * inner;
  float* g = staging(3, n);
  const float* d =
      relu_gradient(*this, outer, channels, inner, kept, dy, scale, bias, relu, g, staging(4, n));
  channel_affine(outer, channels, inner, d, scale, nullptr, g);
  backward_from_means(outer, channels, inner, kept, g, inv_std, means, dx);
}

// x, y (outer, channels, inner); scale, bias (channels) or null. Works in place.
void NativeBackend::channel_affine(int64_t outer, int64_t channels, int64_t inner,
                                   const float* x, const float* scale, const float* bias,
                                   float* y) {
  parallel_rows(outer * channels, inner, [&](int64_t r) {
    const int64_t c = r % channels;
    const float s = scale ? scale[c] : 1.0f, b = bias ? bias[c] : 0.0f;
    const float* xr = x + r * inner;
    float* yr = y + r * inner;
#pragma GCC ivdep
    for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] * s + b;
  });
}

// a, b (outer, channels, inner), b may be null; out (channels) += per-channel sums.
void NativeBackend::channel_reduce(int64_t outer, int64_t channels, int64_t inner,
                                   const float* a, const float* b, float* out) {
  const std::vector<double> sums =
      b == nullptr
          ? channel_sums(outer, channels, inner,
                         [&](int64_t r, int64_t i) -> double { return a[r * inner + i]; })
          : channel_sums(outer, channels, inner, [&](int64_t r, int64_t i) -> double {
              return double(a[r * inner + i]) * b[r * inner + i];
            });
  for (int64_t c = 0; c < channels; ++c) out[c] += static_cast<float>(sums[c]);
}

// ---------------------------------------------------------------------------------------
// Row copies, element-wise max
// ---------------------------------------------------------------------------------------

namespace {

// src rows at src + r src_stride, dst rows at dst + r dst_stride, each cols values.
template <class T>
void copy_rows_of(int64_t rows, int64_t cols, const T* src, int64_t src_stride, T* dst,
                  int64_t dst_stride) {
  if (cols == 0) return;
  parallel_rows(rows, cols, [&](int64_t r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, sizeof(T) * cols);
  });
}

}  // namespace

void NativeBackend::copy_rows(int64_t rows, int64_t cols, const float* src,
                              int64_t src_stride, float* dst, int64_t dst_stride) {
  copy_rows_of(rows, cols, src, src_stride, dst, dst_stride);
}

void NativeBackend::copy_rows(int64_t rows, int64_t cols, const uint16_t* src,
                              int64_t src_stride, uint16_t* dst, int64_t dst_stride) {
  copy_rows_of(rows, cols, src, src_stride, dst, dst_stride);
}

// x, y, mask (n). Only a strictly greater x replaces y, so ties keep the earlier input.
void NativeBackend::eltwise_max_forward(int64_t n, int index, const float* x, float* y,
                                        int32_t* mask) {
  if (index == 0) {
    if (x != y) std::memcpy(y, x, sizeof(float) * n);
    if (mask != nullptr) std::fill_n(mask, n, 0);
    return;
  }
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    if (mask == nullptr) {
      for (int64_t i = begin; i < end; ++i) y[i] = x[i] > y[i] ? x[i] : y[i];
      return;
    }
    for (int64_t i = begin; i < end; ++i) {
      const bool greater = x[i] > y[i];
      y[i] = greater ? x[i] : y[i];
      mask[i] = greater ? index : mask[i];
    }
  });
}

// dy, mask, dx (n): dx = mask == index ? dy : 0.
void NativeBackend::eltwise_max_backward(int64_t n, int index, const float* dy,
                                         const int32_t* mask, float* dx) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
#pragma GCC ivdep
    for (int64_t i = begin; i < end; ++i) dx[i] = mask[i] == index ? dy[i] : 0.0f;
  });
}

// As the FP32 ones, comparing the widened values and copying the 16-bit bits (as CUDA does:
// a NaN keeps its payload).
void NativeBackend::eltwise_max_forward(Half format, int64_t n, int index, const uint16_t* x,
                                        uint16_t* y, int32_t* mask) {
  if (index == 0) {
    if (x != y) std::memcpy(y, x, sizeof(uint16_t) * n);
    if (mask != nullptr) std::fill_n(mask, n, 0);
    return;
  }
  const float* wide_x = widen(format, n, x, 0);
  const float* wide_y = widen(format, n, y, 1);
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      if (!(wide_x[i] > wide_y[i])) continue;
      y[i] = x[i];
      if (mask != nullptr) mask[i] = index;
    }
  });
}

void NativeBackend::eltwise_max_backward(Half, int64_t n, int index, const uint16_t* dy,
                                         const int32_t* mask, uint16_t* dx) {
  parallel_ranges(n, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dx[i] = mask[i] == index ? dy[i] : uint16_t{0};
  });
}

}  // namespace lamina
