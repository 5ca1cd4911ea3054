// ReLU's arithmetic, written once for every place that computes it: the ReLU layer's
// operations and the fused Linear's, on the host and in CUDA kernels. slope is
// negative_slope (0: plain ReLU).
#pragma once

#include <algorithm>
#include <cmath>

#include "lamina/host_device.hpp"

namespace lamina {

// The gradient through a ReLU from its output y: dy where y > 0, else slope * dy (so a NaN
// gradient stays NaN, also where the unit is off).
LAMINA_HOST_DEVICE inline float relu_backward_value(float y, float dy, float slope) {
  return y > 0 ? dy : slope * dy;
}

// The fused Linear's ReLU (slope 0) of v in CUDA kernels, as relu_value gives it on the
// host: v where v > 0, +0 for other numbers, NaN for NaN and -inf.
LAMINA_HOST_DEVICE inline float fused_relu_value(float v) {
  if (v > 0) return v;
  return (v != v || v == -INFINITY) ? NAN : 0.0f;
}

#if !defined(__CUDACC__)
// The ReLU of v in branch-free form for host loops (max and min vectorise; a branch on the
// sign of real activations mispredicts half the time): v > 0 ? v : slope v, with NaN and
// -inf giving NaN.
inline float relu_value(float v, float slope) {
  return std::max(v, 0.0f) + slope * std::min(v, 0.0f);
}
#endif

}  // namespace lamina
