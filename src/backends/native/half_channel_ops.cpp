// The Native backend's per-channel operations in 16 bits (backend.hpp, the optional groups in
// 16 bits): batch normalisation, the affine map and the per-channel sums. As half_ops.cpp
// does, each widens its 16-bit operands to floats in the staging arrays, runs the FP32
// operation (channel_ops.cpp) and rounds each 16-bit result once; statistics, inv_std and
// sums stay FP32, as on the CUDA backend.
#include <algorithm>

#include "lamina/native_backend.hpp"

namespace lamina {

void NativeBackend::channel_affine(Half format, int64_t outer, int64_t channels, int64_t inner,
                                   const uint16_t* x, const float* scale, const float* bias,
                                   uint16_t* y) {
  const int64_t n = outer * channels * inner;
  float* wide = const_cast<float*>(widen(format, n, x, 0));
  channel_affine(outer, channels, inner, wide, scale, bias, wide);
  to_half(format, n, wide, y);
}

void NativeBackend::channel_reduce(Half format, int64_t outer, int64_t channels, int64_t inner,
                                   const uint16_t* a, const uint16_t* b, float* out) {
  const int64_t n = outer * channels * inner;
  channel_reduce(outer, channels, inner, widen(format, n, a, 0), widen(format, n, b, 1), out);
}

void NativeBackend::channel_moments(Half format, int64_t outer, int64_t channels, int64_t inner,
                                    const uint16_t* x, float* mean, float* var) {
  channel_moments(outer, channels, inner, widen(format, outer * channels * inner, x, 0), mean,
                  var);
}

void NativeBackend::batch_norm_forward(Half format, int64_t outer, int64_t channels,
                                       int64_t inner, float eps, const uint16_t* x,
                                       const float* mean, const float* var, uint16_t* y,
                                       float* inv_std, uint16_t* kept) {
  const int64_t n = outer * channels * inner;
  float* wide = const_cast<float*>(widen(format, n, x, 0));
  batch_norm_forward(outer, channels, inner, eps, wide, mean, var, wide, inv_std, nullptr);
  to_half(format, n, wide, y);
  if (kept != nullptr) std::copy_n(y, n, kept);
}

void NativeBackend::batch_norm_inference(Half format, int64_t outer, int64_t channels,
                                         int64_t inner, float eps, const uint16_t* x,
                                         const float* mean_sum, const float* var_sum,
                                         const float* factor, uint16_t* y, float* mean,
                                         float* inv_std) {
  const int64_t n = outer * channels * inner;
  float* wide = const_cast<float*>(widen(format, n, x, 0));
  batch_norm_inference(outer, channels, inner, eps, wide, mean_sum, var_sum, factor, wide, mean,
                       inv_std);
  to_half(format, n, wide, y);
}

void NativeBackend::batch_norm_backward(Half format, int64_t outer, int64_t channels,
                                        int64_t inner, const uint16_t* y, const uint16_t* dy,
                                        const float* inv_std, uint16_t* dx) {
  const int64_t n = outer * channels * inner;
  float* wide = staging(2, n);
  batch_norm_backward(outer, channels, inner, widen(format, n, y, 0), widen(format, n, dy, 1),
                      inv_std, wide);
  to_half(format, n, wide, dx);
}

// As the FP32 operations, with kept, the Scale's output and g rounded to `format` before
// they are used: the 16-bit g, widened, goes to the FP32 operation with scale 1 (which
// leaves it unchanged) and no ReLU.
void NativeBackend::batch_norm_scale_forward(Half format, int64_t outer, int64_t channels,
                                             int64_t inner, float eps, const uint16_t* x,
                                             const float* mean, const float* var,
                                             const float* scale, const float* bias, bool relu,
                                             uint16_t* y, float* inv_std, uint16_t* kept) {
  batch_norm_forward(format, outer, channels, inner, eps, x, mean, var, kept, inv_std, nullptr);
  channel_affine(format, outer, channels, inner, kept, scale, bias, y);
  if (relu) activation_forward(format, Activation::kReLU, outer * channels * inner, 0.0f, y, y);
}

namespace {

// g (n values in `format`) = the Scale's input gradient, from the ReLU's input gradient d (dy
// without relu; with relu from the forward's output computed again from kept into y); where
// dscale is not null, the Scale's gradients from d.
void scaled_gradient(NativeBackend& be, Half format, int64_t outer, int64_t channels,
                     int64_t inner, const uint16_t* kept, const uint16_t* dy,
                     const float* scale, const float* bias, bool relu, float* dscale,
                     float* dbias, uint16_t* g, uint16_t* y) {
  const int64_t n = outer * channels * inner;
  const uint16_t* d = dy;
  if (relu) {
    be.channel_affine(format, outer, channels, inner, kept, scale, bias, y);
    be.activation_forward(format, Activation::kReLU, n, 0.0f, y, y);
    be.activation_backward(format, Activation::kReLU, n, 0.0f, y, dy, g);
    d = g;
  }
  if (dscale != nullptr)
    be.scale_gradients(format, outer, channels, inner, d, kept, dscale, dbias);
  be.channel_affine(format, outer, channels, inner, d, scale, nullptr, g);
}

}  // namespace

void NativeBackend::batch_norm_scale_sums(Half format, int64_t outer, int64_t channels,
                                          int64_t inner, const uint16_t* kept,
                                          const uint16_t* dy, const float* scale,
                                          const float* bias, bool relu, float* means,
                                          float* dscale, float* dbias) {
  const int64_t n = outer * channels * inner;
  uint16_t* g = half_staging(0, n);
  scaled_gradient(*this, format, outer, channels, inner, kept, dy, scale, bias, relu, dscale,
                  dbias, g, half_staging(1, n));
  batch_norm_scale_sums(outer, channels, inner, widen(format, n, kept, 0), widen(format, n, g, 1),
                        nullptr, nullptr, false, means, nullptr, nullptr);
}

void NativeBackend::batch_norm_scale_backward(Half format, int64_t outer, int64_t channels,
                                              int64_t inner, const uint16_t* kept,
                                              const uint16_t* dy, const float* inv_std,
                                              const float* scale, const float* bias, bool relu,
                                              const float* means, uint16_t* dx) {
  const int64_t n = outer * channels * inner;
  uint16_t* g = half_staging(0, n);
  scaled_gradient(*this, format, outer, channels, inner, kept, dy, scale, bias, relu, nullptr,
                  nullptr, g, half_staging(1, n));
  float* wide = staging(2, n);
  batch_norm_scale_backward(outer, channels, inner, widen(format, n, kept, 0),
                            widen(format, n, g, 1), inv_std, nullptr, nullptr, false, means,
                            wide);
  to_half(format, n, wide, dx);
}

}  // namespace lamina
