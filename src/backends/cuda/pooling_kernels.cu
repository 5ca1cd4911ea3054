// Max and average pooling, NCHW, as Caffe computes them (see PoolGeometry in backend.hpp).
// x, dx (n, c, h, w); y, dy, mask (n, c, out_h, out_w).
//
// Forward: one thread per output element scans its window in row-major order. Max starts
// from -FLT_MAX with mask -1 and takes a value only when strictly greater (ties keep the
// first; a window of NaN or -inf gives -FLT_MAX, mask -1), as the Native backend does.
// Average sums in double and divides by the window's size clipped to the padded input.
// Backward: one thread per input element gathers dy over the windows that cover it (Caffe's
// GPU kernels), in row-major window order, so the sums are the Native backend's and no
// atomics are needed; results are bit-identical run to run.
#include <glog/logging.h>

#include <cfloat>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

// The window of output (oh, ow): rows [h0, h1) and columns [w0, w1) clipped to the input,
// and size, its area clipped to the padded input only (the average's divisor).
struct Window {
  int64_t h0, h1, w0, w1, size;
};

__device__ __forceinline__ Window pool_window(const PoolGeometry& g, int64_t oh, int64_t ow) {
  Window win;
  win.h0 = oh * g.stride_h - g.pad_h;
  win.w0 = ow * g.stride_w - g.pad_w;
  win.h1 = min(win.h0 + g.kh, g.h + g.pad_h);
  win.w1 = min(win.w0 + g.kw, g.w + g.pad_w);
  win.size = (win.h1 - win.h0) * (win.w1 - win.w0);
  win.h0 = max(win.h0, int64_t{0});
  win.w0 = max(win.w0, int64_t{0});
  win.h1 = min(win.h1, g.h);
  win.w1 = min(win.w1, g.w);
  return win;
}

__global__ void max_pool_forward_kernel(PoolGeometry g, const float* x, float* y,
                                        int32_t* mask) {
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    const int64_t oh = o / g.out_w, ow = o - oh * g.out_w;
    const Window win = pool_window(g, oh, ow);
    const float* xp = x + plane * g.h * g.w;
    float best = -FLT_MAX;
    int64_t arg = -1;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const float v = xp[ih * g.w + iw];
        if (v > best) {
          best = v;
          arg = ih * g.w + iw;
        }
      }
    }
    y[i] = best;
    mask[i] = static_cast<int32_t>(arg);
  }
}

__global__ void average_pool_forward_kernel(PoolGeometry g, const float* x, float* y) {
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    const int64_t oh = o / g.out_w, ow = o - oh * g.out_w;
    const Window win = pool_window(g, oh, ow);
    const float* xp = x + plane * g.h * g.w;
    double sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += xp[ih * g.w + iw];
    }
    y[i] = static_cast<float>(sum / static_cast<double>(win.size));
  }
}

// The outputs [lo, hi) along one axis whose window covers input coordinate pos.
struct Covering {
  int64_t lo, hi;
};

__device__ __forceinline__ Covering covering(int64_t pos, int64_t pad, int64_t kernel,
                                             int64_t stride, int64_t out) {
  const int64_t p = pos + pad;
  return {p < kernel ? 0 : (p - kernel) / stride + 1, min(p / stride + 1, out)};
}

__global__ void max_pool_backward_kernel(PoolGeometry g, const float* dy, const int32_t* mask,
                                         float* dx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * in_plane) {
    const int64_t plane = i / in_plane, pixel = i - plane * in_plane;
    const int64_t ih = pixel / g.w, iw = pixel - ih * g.w;
    const Covering rows = covering(ih, g.pad_h, g.kh, g.stride_h, g.out_h);
    const Covering cols = covering(iw, g.pad_w, g.kw, g.stride_w, g.out_w);
    const float* dyp = dy + plane * out_plane;
    const int32_t* mp = mask + plane * out_plane;
    float sum = 0.0f;
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
        if (mp[oh * g.out_w + ow] == pixel) sum += dyp[oh * g.out_w + ow];
      }
    }
    dx[i] = sum;
  }
}

__global__ void average_pool_backward_kernel(PoolGeometry g, const float* dy, float* dx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * in_plane) {
    const int64_t plane = i / in_plane, pixel = i - plane * in_plane;
    const int64_t ih = pixel / g.w, iw = pixel - ih * g.w;
    const Covering rows = covering(ih, g.pad_h, g.kh, g.stride_h, g.out_h);
    const Covering cols = covering(iw, g.pad_w, g.kw, g.stride_w, g.out_w);
    const float* dyp = dy + plane * out_plane;
    float sum = 0.0f;
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
        const Window win = pool_window(g, oh, ow);
        sum += dyp[oh * g.out_w + ow] / static_cast<float>(win.size);
      }
    }
    dx[i] = sum;
  }
}

void check_pool(const PoolGeometry& g) {
  CHECK(g.n >= 0 && g.c >= 0 && g.h > 0 && g.w > 0 && g.kh > 0 && g.kw > 0 && g.stride_h > 0 &&
        g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 && g.out_h >= 0 && g.out_w >= 0)
      << "bad pooling geometry";
}

}  // namespace

void CudaBackend::pool_forward(PoolMethod method, const PoolGeometry& g, const float* x,
                               float* y, int32_t* mask) {
  const cudaStream_t s = on_device();
  check_pool(g);
  const int64_t count = g.n * g.c * g.out_h * g.out_w;
  if (count == 0) return;
  if (method == PoolMethod::kMax) {
    CHECK(mask != nullptr) << "max pooling needs a mask";
    max_pool_forward_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(g, x, y, mask);
    LAMINA_CUDA_LAUNCHED(max_pool_forward_kernel);
  } else {
    average_pool_forward_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(g, x, y);
    LAMINA_CUDA_LAUNCHED(average_pool_forward_kernel);
  }
}

void CudaBackend::pool_backward(PoolMethod method, const PoolGeometry& g, const float* dy,
                                const int32_t* mask, float* dx) {
  const cudaStream_t s = on_device();
  check_pool(g);
  const int64_t count = g.n * g.c * g.h * g.w;
  if (count == 0) return;
  if (g.out_h * g.out_w == 0) {  // no windows: nothing flows back
    zero(sizeof(float) * count, dx);
    return;
  }
  if (method == PoolMethod::kMax) {
    CHECK(mask != nullptr) << "max pooling needs a mask";
    max_pool_backward_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(g, dy, mask, dx);
    LAMINA_CUDA_LAUNCHED(max_pool_backward_kernel);
  } else {
    average_pool_backward_kernel<<<elementwise_grid(count), kBlock, 0, s>>>(g, dy, dx);
    LAMINA_CUDA_LAUNCHED(average_pool_backward_kernel);
  }
}

}  // namespace lamina::cuda_detail
