// Pooling windows (PoolGeometry, backend.hpp) and what stochastic pooling computes over one,
// written once for the Native backend's loops (native/conv_ops.cpp) and the CUDA kernels
// (cuda/pooling_kernels.cu), so that the two choose the same elements and give the same bits.
// x, dx planes (h, w); y, dy, mask planes (out_h, out_w); an element's index is ih * w + iw.
// std::min and std::max are constexpr, so device code calls them (--expt-relaxed-constexpr).
// Sums are in double, in row-major order; squares of floats are exact there, so a fused
// multiply-add (which nvcc makes) rounds them as a product and a sum do.
#pragma once

#include <algorithm>
#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/host_device.hpp"

namespace lamina::pool_windows {

// The window of output (oh, ow): rows [h0, h1) and columns [w0, w1) clipped to the input
// (empty when it starts past the input), and size, its area clipped to the padded input
// only (the average's divisor).
struct Window {
  int64_t h0, h1, w0, w1, size;
};

LAMINA_HOST_DEVICE inline Window pool_window(const PoolGeometry& g, int64_t oh, int64_t ow) {
  const int64_t top = oh * g.stride_h - g.pad_h, left = ow * g.stride_w - g.pad_w;
  const int64_t bottom = std::min<int64_t>(top + g.kh, g.h + g.pad_h);
  const int64_t right = std::min<int64_t>(left + g.kw, g.w + g.pad_w);
  return {std::max<int64_t>(top, 0), std::min<int64_t>(bottom, g.h),
          std::max<int64_t>(left, 0), std::min<int64_t>(right, g.w),
          (bottom - top) * (right - left)};
}

// The outputs [lo, hi) along one axis whose window covers input coordinate pos.
struct Covering {
  int64_t lo, hi;
};

LAMINA_HOST_DEVICE inline Covering covering(int64_t pos, int64_t pad, int64_t kernel,
                                            int64_t stride, int64_t out) {
  const int64_t p = pos + pad;
  return {p < kernel ? 0 : (p - kernel) / stride + 1, std::min<int64_t>(p / stride + 1, out)};
}

// Training: the element window `win` of plane xp takes for the uniform u, the first one in
// row-major order at which the running sum reaches u times the window's sum; -1 when none
// does (an empty window, a negative or NaN sum).
LAMINA_HOST_DEVICE inline int64_t stochastic_choice(const PoolGeometry& g, const Window& win,
                                                    const float* xp, float u) {
  double sum = 0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += xp[ih * g.w + iw];
  }
  const double threshold = double(u) * sum;
  double running = 0;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      running += xp[ih * g.w + iw];
      if (running >= threshold) return ih * g.w + iw;
    }
  }
  return -1;
}

// Testing: the window's sum of x and of x^2.
struct WindowSums {
  double values = 0, squares = 0;
};

LAMINA_HOST_DEVICE inline WindowSums window_sums(const PoolGeometry& g, const Window& win,
                                                 const float* xp) {
  WindowSums s;
  for (int64_t ih = win.h0; ih < win.h1; ++ih) {
    for (int64_t iw = win.w0; iw < win.w1; ++iw) {
      const double v = xp[ih * g.w + iw];
      s.values += v;
      s.squares += v * v;
    }
  }
  return s;
}

// Testing's output: sum x^2 / sum x, 0 where the sum is 0.
LAMINA_HOST_DEVICE inline double weighted_mean(const WindowSums& s) {
  return s.values != 0 ? s.squares / s.values : 0.0;
}

// Training's output o = oh * out_w + ow of plane xp for the uniform u: y = the chosen
// element (0 where none is), mask = its index (-1 where none is).
LAMINA_HOST_DEVICE inline void stochastic_output(const PoolGeometry& g, const float* xp,
                                                 int64_t o, float u, float* y, int32_t* mask) {
  const int64_t chosen = stochastic_choice(g, pool_window(g, o / g.out_w, o % g.out_w), xp, u);
  *y = chosen < 0 ? 0.0f : xp[chosen];
  *mask = static_cast<int32_t>(chosen);
}

// Testing's output o = oh * out_w + ow of plane xp.
LAMINA_HOST_DEVICE inline float weighted_output(const PoolGeometry& g, const float* xp,
                                                int64_t o) {
  return static_cast<float>(
      weighted_mean(window_sums(g, pool_window(g, o / g.out_w, o % g.out_w), xp)));
}

// Testing's gradient at x (ih, iw) of plane xp, dy plane dyp: over the windows holding it,
// in row-major order, the sum of dy (2 x - y) / sum x (nothing where the sum is 0).
LAMINA_HOST_DEVICE inline float stochastic_test_gradient(const PoolGeometry& g,
                                                         const float* xp, const float* dyp,
                                                         int64_t ih, int64_t iw) {
  const Covering rows = covering(ih, g.pad_h, g.kh, g.stride_h, g.out_h);
  const Covering cols = covering(iw, g.pad_w, g.kw, g.stride_w, g.out_w);
  const double x = xp[ih * g.w + iw];
  double sum = 0;
  for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
    for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
      const WindowSums s = window_sums(g, pool_window(g, oh, ow), xp);
      if (s.values == 0) continue;
      sum += double(dyp[oh * g.out_w + ow]) * (2 * x - weighted_mean(s)) / s.values;
    }
  }
  return static_cast<float>(sum);
}

}  // namespace lamina::pool_windows
