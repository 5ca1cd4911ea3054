// NativeBackend's im2col and col2im (backend.hpp, kIm2col), and the per-plane loops that the
// convolutions (conv_ops.cpp) build their column matrices with (im2col.hpp).
//
// im2col: col (n, c kh kw, out_h out_w) = each image's column matrix, one channel plane per
// task. col2im: dx (n, c, h, w) written with =: each plane zeroed, then every tap that read
// it added in (ki, kj, oh, ow) order, so the result does not depend on the thread count.
#include <glog/logging.h>

#include <algorithm>

#include "lamina/native_backend.hpp"
#include "im2col.hpp"
#include "parallel.hpp"

namespace lamina {
namespace native {
namespace {

// The output positions [lo, hi) of one axis whose input coordinate o stride + offset lies
// in [0, size); the others read padding.
struct Span {
  int64_t lo, hi;
};
Span valid_span(int64_t offset, int64_t stride, int64_t size, int64_t out) {
  int64_t lo = offset >= 0 ? 0 : (-offset + stride - 1) / stride;
  int64_t hi = size - offset <= 0 ? 0 : (size - offset - 1) / stride + 1;
  lo = std::min(lo, out);
  hi = std::clamp(hi, lo, out);
  return {lo, hi};
}

}  // namespace

void im2col_channel(const ConvGeometry& g, const float* x_plane, float* col, int64_t ld) {
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    const int64_t offset_h = ki * g.dilation_h - g.pad_h;
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t offset_w = kj * g.dilation_w - g.pad_w;
      const Span cols = valid_span(offset_w, g.stride_w, g.w, g.out_w);
      float* row = col + (ki * g.kw + kj) * ld;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        float* r = row + oh * g.out_w;
        const int64_t ih = oh * g.stride_h + offset_h;
        if (ih < 0 || ih >= g.h) {
          std::fill_n(r, g.out_w, 0.0f);
          continue;
        }
        // Rows are short (out_w): plain loops beat memcpy/memset calls. src: the input
        // pixel of output column cols.lo.
        const float* src = x_plane + ih * g.w + cols.lo * g.stride_w + offset_w;
        const int64_t count = cols.hi - cols.lo;
        for (int64_t ow = 0; ow < cols.lo; ++ow) r[ow] = 0.0f;
        float* dst = r + cols.lo;
        if (g.stride_w == 1) {
#pragma GCC ivdep
          for (int64_t j = 0; j < count; ++j) dst[j] = src[j];
        } else {
          for (int64_t j = 0; j < count; ++j) dst[j] = src[j * g.stride_w];
        }
        for (int64_t ow = cols.hi; ow < g.out_w; ++ow) r[ow] = 0.0f;
      }
    }
  }
}

void col2im_channel(const ConvGeometry& g, const float* col, int64_t ld, float* dx_plane) {
  for (int64_t ki = 0; ki < g.kh; ++ki) {
    const int64_t offset_h = ki * g.dilation_h - g.pad_h;
    for (int64_t kj = 0; kj < g.kw; ++kj) {
      const int64_t offset_w = kj * g.dilation_w - g.pad_w;
      const Span cols = valid_span(offset_w, g.stride_w, g.w, g.out_w);
      const float* row = col + (ki * g.kw + kj) * ld;
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        const int64_t ih = oh * g.stride_h + offset_h;
        if (ih < 0 || ih >= g.h) continue;
        const float* src = row + oh * g.out_w + cols.lo;
        float* dst = dx_plane + ih * g.w + cols.lo * g.stride_w + offset_w;
        const int64_t count = cols.hi - cols.lo;
        if (g.stride_w == 1) {
#pragma GCC ivdep
          for (int64_t j = 0; j < count; ++j) dst[j] += src[j];
        } else {
          for (int64_t j = 0; j < count; ++j) dst[j * g.stride_w] += src[j];
        }
      }
    }
  }
}

}  // namespace native

namespace {

void check_im2col(const ConvGeometry& g) {
  CHECK(g.n >= 0 && g.c >= 0 && g.h > 0 && g.w > 0 && g.kh > 0 && g.kw > 0 &&
        g.stride_h > 0 && g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 &&
        g.dilation_h > 0 && g.dilation_w > 0 && g.out_h > 0 && g.out_w > 0)
      << "bad im2col geometry";
}

}  // namespace

// x (n, c, h, w) -> col (n, c kh kw, out_h, out_w)
void NativeBackend::im2col(const ConvGeometry& g, const float* x, float* col) {
  check_im2col(g);
  const int64_t in_plane = g.h * g.w, rows = g.kh * g.kw * g.out_h * g.out_w;
  native::parallel_rows(g.n * g.c, rows, [&](int64_t p) {
    native::im2col_channel(g, x + p * in_plane, col + p * rows, g.out_h * g.out_w);
  });
}

// col (n, c kh kw, out_h, out_w) -> dx (n, c, h, w), written with =
void NativeBackend::col2im(const ConvGeometry& g, const float* col, float* dx) {
  check_im2col(g);
  const int64_t in_plane = g.h * g.w, rows = g.kh * g.kw * g.out_h * g.out_w;
  native::parallel_rows(g.n * g.c, rows, [&](int64_t p) {
    float* plane = dx + p * in_plane;
    std::fill_n(plane, in_plane, 0.0f);
    native::col2im_channel(g, col + p * rows, g.out_h * g.out_w, plane);
  });
}

}  // namespace lamina
