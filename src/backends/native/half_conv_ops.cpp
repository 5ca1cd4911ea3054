// The Native backend's 16-bit convolutional operations (backend.hpp, the optional groups in
// 16 bits): as half_ops.cpp does for products, each widens its 16-bit operands to floats in
// the staging arrays, runs the FP32 operation, and rounds each 16-bit result once, to
// nearest even, at the points the CUDA backend rounds: a convolution's product before its
// bias is added, and the weight gradient of one call before it joins the FP32 dweight.
#include <algorithm>

#include "lamina/native_backend.hpp"
#include "lamina/rounding.hpp"

namespace lamina {
namespace {

// x[i] = x[i] rounded to format (as its exact value), i < n.
void round_in_place(Half format, int64_t n, float* x) {
  if (format == Half::kBF16) {
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_float(float_to_bf16(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) x[i] = fp16_to_float(float_to_fp16(x[i]));
  }
}

}  // namespace

void NativeBackend::conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                                 const uint16_t* weight, const float* bias, uint16_t* y) {
  float* wide = staging(2, g.output_count());
  conv_forward(g, widen(format, g.input_count(), x, 0), widen(format, g.weight_count(), weight, 1),
               nullptr, wide);
  if (bias != nullptr) {  // the product rounded, then the bias added (rounded by to_half)
    round_in_place(format, g.output_count(), wide);
    channel_affine(g.n, g.k, g.out_h * g.out_w, wide, nullptr, bias, wide);
  }
  to_half(format, g.output_count(), wide, y);
}

void NativeBackend::conv_backward_data(Half format, const ConvGeometry& g,
                                       const uint16_t* weight, const uint16_t* dy,
                                       uint16_t* dx) {
  float* wide = staging(2, g.input_count());
  conv_backward_data(g, widen(format, g.weight_count(), weight, 0),
                     widen(format, g.output_count(), dy, 1), wide);
  to_half(format, g.input_count(), wide, dx);
}

void NativeBackend::conv_backward_filter(Half format, const ConvGeometry& g, const uint16_t* x,
                                         const uint16_t* dy, float* dweight, float* dbias) {
  const int64_t weights = g.weight_count();
  float* wide = staging(2, weights);
  std::fill(wide, wide + weights, 0.0f);
  const float* wide_dy = widen(format, g.output_count(), dy, 1);
  conv_backward_filter(g, widen(format, g.input_count(), x, 0), wide_dy, wide, nullptr);
  round_in_place(format, weights, wide);
  axpy(weights, 1.0f, wide, dweight);
  if (dbias != nullptr) channel_reduce(g.n, g.k, g.out_h * g.out_w, wide_dy, nullptr, dbias);
}

void NativeBackend::pool_forward(Half format, PoolMethod method, const PoolGeometry& g,
                                 const uint16_t* x, uint16_t* y, int32_t* mask) {
  const int64_t outputs = g.n * g.c * g.out_h * g.out_w;
  float* wide = staging(2, outputs);
  pool_forward(method, g, widen(format, g.n * g.c * g.h * g.w, x, 0), wide, mask);
  to_half(format, outputs, wide, y);
}

void NativeBackend::pool_backward(Half format, PoolMethod method, const PoolGeometry& g,
                                  const uint16_t* dy, const int32_t* mask, uint16_t* dx) {
  const int64_t inputs = g.n * g.c * g.h * g.w;
  float* wide = staging(2, inputs);
  pool_backward(method, g, widen(format, g.n * g.c * g.out_h * g.out_w, dy, 1), mask, wide);
  to_half(format, inputs, wide, dx);
}

}  // namespace lamina
