// im2col and col2im on CUDA: the kernels (im2col.hpp) and the im2col operations of
// backend.hpp (kIm2col), which run them over a whole batch at once (its n c planes).
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/im2col.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

// The geometry's sizes as a kernel needs them.
struct ConvShape {
  int64_t c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
  int64_t out_h, out_w;
};

// c: the planes of the call (an image's channels, or a batch's).
ConvShape conv_shape(const ConvGeometry& g, int64_t planes) {
  return {planes,  g.h,     g.w,          g.kh,         g.kw,    g.stride_h, g.stride_w,
          g.pad_h, g.pad_w, g.dilation_h, g.dilation_w, g.out_h, g.out_w};
}

// x (c, h, w) -> col (c kh kw, out_h out_w).
__global__ void im2col_kernel(ConvShape s, const float* x, float* col) {
  const int64_t out_plane = s.out_h * s.out_w;
  const int64_t kernel = s.kh * s.kw;
  LAMINA_GRID_STRIDE_LOOP(i, s.c * kernel * out_plane) {
    const int64_t row = i / out_plane, p = i - row * out_plane;
    const int64_t ch = row / kernel, tap = row - ch * kernel;
    const int64_t ki = tap / s.kw, kj = tap - ki * s.kw;
    const int64_t oh = p / s.out_w, ow = p - oh * s.out_w;
    const int64_t ih = oh * s.stride_h - s.pad_h + ki * s.dilation_h;
    const int64_t iw = ow * s.stride_w - s.pad_w + kj * s.dilation_w;
    col[i] = ih >= 0 && ih < s.h && iw >= 0 && iw < s.w ? x[(ch * s.h + ih) * s.w + iw] : 0.0f;
  }
}

// dcol (c kh kw, out_h out_w) -> dx (c, h, w) = the sum of the taps that read each input
// element, taken in (ki, kj) order as the Native backend adds them.
__global__ void col2im_kernel(ConvShape s, const float* dcol, float* dx) {
  const int64_t out_plane = s.out_h * s.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, s.c * s.h * s.w) {
    const int64_t ch = i / (s.h * s.w), pixel = i - ch * s.h * s.w;
    const int64_t ih = pixel / s.w, iw = pixel - ih * s.w;
    float sum = 0.0f;
    for (int64_t ki = 0; ki < s.kh; ++ki) {
      const int64_t h_off = ih + s.pad_h - ki * s.dilation_h;  // oh stride_h, if a tap reads it
      if (h_off < 0) break;  // decreases with ki
      if (h_off % s.stride_h != 0) continue;
      const int64_t oh = h_off / s.stride_h;
      if (oh >= s.out_h) continue;
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const int64_t w_off = iw + s.pad_w - kj * s.dilation_w;
        if (w_off < 0) break;
        if (w_off % s.stride_w != 0) continue;
        const int64_t ow = w_off / s.stride_w;
        if (ow >= s.out_w) continue;
        sum += dcol[((ch * s.kh + ki) * s.kw + kj) * out_plane + oh * s.out_w + ow];
      }
    }
    dx[i] = sum;
  }
}

}  // namespace

void launch_im2col(cudaStream_t s, const ConvGeometry& g, int64_t planes, const float* x,
                   float* col) {
  const int64_t count = planes * g.kh * g.kw * g.out_h * g.out_w;
  if (count <= 0) return;
  im2col_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(conv_shape(g, planes), x, col);
  LAMINA_CUDA_LAUNCHED(im2col_kernel);
}

void launch_col2im(cudaStream_t s, const ConvGeometry& g, int64_t planes, const float* col,
                   float* dx) {
  const int64_t count = planes * g.h * g.w;
  if (count <= 0) return;
  col2im_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(conv_shape(g, planes), col, dx);
  LAMINA_CUDA_LAUNCHED(col2im_kernel);
}

// x (n, c, h, w) -> col (n, c kh kw, out_h, out_w)
void CudaBackend::im2col(const ConvGeometry& g, const float* x, float* col) {
  launch_im2col(on_device(), g, g.n * g.c, x, col);
}

// col (n, c kh kw, out_h, out_w) -> dx (n, c, h, w), written with =
void CudaBackend::col2im(const ConvGeometry& g, const float* col, float* dx) {
  launch_col2im(on_device(), g, g.n * g.c, col, dx);
}

}  // namespace lamina::cuda_detail
