// Max, average and stochastic pooling, NCHW, as Caffe computes them (see PoolGeometry in
// backend.hpp; the windows in pool_windows.hpp, shared with the Native backend).
// x, dx (n, c, h, w); y, dy, mask (n, c, out_h, out_w), stored in FP32 or 16 bits
// (half_storage.cuh: the sums below are FP32 and double, each 16-bit result rounded once).
//
// Forward: one thread per output element scans its window in row-major order. Max starts
// from -FLT_MAX with mask -1 and takes a value only when strictly greater (ties keep the
// first; a window of NaN or -inf gives -FLT_MAX, mask -1), as the Native backend does.
// Average sums in double and divides by the window's size clipped to the padded input.
// Backward: one thread per input element gathers dy over the windows that cover it (Caffe's
// GPU kernels), in row-major window order, so the sums are the Native backend's and no
// atomics are needed; results are bit-identical run to run.
// Global average pooling (one window covering each whole plane) takes a block per plane
// instead: the forward's double sum by the block's fixed tree (a thread per output scanned a
// 32 x 32 plane alone, its loads a plane apart: 0.15 ms for 256 x 64 planes in BF16), the
// backward's dy / size written by the block, the same float operation as the gather's.
// Stochastic pooling (FP32) computes each output and each test-phase gradient element with
// pool_windows.hpp's functions, the Native backend's; training's choices are max's mask, so
// max's backward is its gradient.
#include <glog/logging.h>

#include <cfloat>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "backends/cuda/pass_counter.cuh"
#include "backends/pool_windows.hpp"
#include "lamina/counter_rng.hpp"

namespace lamina::cuda_detail {
namespace {

using pool_windows::covering;
using pool_windows::Covering;
using pool_windows::pool_window;
using pool_windows::Window;

template <class S>
__global__ void max_pool_forward_kernel(PoolGeometry g, const typename S::Stored* x,
                                        typename S::Stored* y, int32_t* mask) {
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    const int64_t oh = o / g.out_w, ow = o - oh * g.out_w;
    const Window win = pool_window(g, oh, ow);
    const typename S::Stored* xp = x + plane * g.h * g.w;
    float best = -FLT_MAX;
    int64_t arg = -1;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const float v = S::load(xp[ih * g.w + iw]);
        if (v > best) {
          best = v;
          arg = ih * g.w + iw;
        }
      }
    }
    y[i] = S::store(best);
    mask[i] = static_cast<int32_t>(arg);
  }
}

template <class S>
__global__ void average_pool_forward_kernel(PoolGeometry g, const typename S::Stored* x,
                                            typename S::Stored* y) {
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    const int64_t oh = o / g.out_w, ow = o - oh * g.out_w;
    const Window win = pool_window(g, oh, ow);
    const typename S::Stored* xp = x + plane * g.h * g.w;
    double sum = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih) {
      for (int64_t iw = win.w0; iw < win.w1; ++iw) sum += S::load(xp[ih * g.w + iw]);
    }
    y[i] = S::store(static_cast<float>(sum / static_cast<double>(win.size)));
  }
}

template <class S>
__global__ void max_pool_backward_kernel(PoolGeometry g, const typename S::Stored* dy,
                                         const int32_t* mask, typename S::Stored* dx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * in_plane) {
    const int64_t plane = i / in_plane, pixel = i - plane * in_plane;
    const int64_t ih = pixel / g.w, iw = pixel - ih * g.w;
    const Covering rows = covering(ih, g.pad_h, g.kh, g.stride_h, g.out_h);
    const Covering cols = covering(iw, g.pad_w, g.kw, g.stride_w, g.out_w);
    const typename S::Stored* dyp = dy + plane * out_plane;
    const int32_t* mp = mask + plane * out_plane;
    float sum = 0.0f;
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
        if (mp[oh * g.out_w + ow] == pixel) sum += S::load(dyp[oh * g.out_w + ow]);
      }
    }
    dx[i] = S::store(sum);
  }
}

template <class S>
__global__ void average_pool_backward_kernel(PoolGeometry g, const typename S::Stored* dy,
                                             typename S::Stored* dx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * in_plane) {
    const int64_t plane = i / in_plane, pixel = i - plane * in_plane;
    const int64_t ih = pixel / g.w, iw = pixel - ih * g.w;
    const Covering rows = covering(ih, g.pad_h, g.kh, g.stride_h, g.out_h);
    const Covering cols = covering(iw, g.pad_w, g.kw, g.stride_w, g.out_w);
    const typename S::Stored* dyp = dy + plane * out_plane;
    float sum = 0.0f;
    for (int64_t oh = rows.lo; oh < rows.hi; ++oh) {
      for (int64_t ow = cols.lo; ow < cols.hi; ++ow) {
        const Window win = pool_window(g, oh, ow);
        sum += S::load(dyp[oh * g.out_w + ow]) / static_cast<float>(win.size);
      }
    }
    dx[i] = S::store(sum);
  }
}

// One window covering each whole plane, unpadded: global pooling.
bool global(const PoolGeometry& g) {
  return g.out_h == 1 && g.out_w == 1 && g.pad_h == 0 && g.pad_w == 0 && g.kh == g.h &&
         g.kw == g.w;
}

template <class S>
__global__ void global_average_forward_kernel(int64_t planes, int64_t plane_size,
                                              const typename S::Stored* x,
                                              typename S::Stored* y) {
  LAMINA_BLOCK_STRIDE_LOOP(p, planes) {
    const typename S::Stored* xp = x + p * plane_size;
    double sum = 0;
    LAMINA_THREAD_STRIDE_LOOP(j, plane_size) sum += S::load(xp[j]);
    sum = block_sum(sum);
    if (threadIdx.x == 0) y[p] = S::store(static_cast<float>(sum / plane_size));
  }
}

template <class S>
__global__ void global_average_backward_kernel(int64_t planes, int64_t plane_size,
                                               const typename S::Stored* dy,
                                               typename S::Stored* dx) {
  LAMINA_BLOCK_STRIDE_LOOP(p, planes) {
    float sum = 0.0f;  // the gather's sum of one term, +0 for a -0 term as there
    sum += S::load(dy[p]) / static_cast<float>(plane_size);
    const typename S::Stored v = S::store(sum);
    typename S::Stored* dxp = dx + p * plane_size;
    LAMINA_THREAD_STRIDE_LOOP(j, plane_size) dxp[j] = v;
  }
}

// Stochastic pooling (pool_windows.hpp computes each output, as the Native backend does):
// one thread per output; training reads the pass counter in every block and advances it
// once the last block is done (pass_counter.cuh).
__global__ void stochastic_pool_forward_kernel(PoolGeometry g, uint64_t seed, uint64_t offset,
                                               uint64_t per_pass, PassCounter* counter,
                                               const float* x, float* y, int32_t* mask) {
  const uint64_t first = offset + static_cast<uint64_t>(counter->passes) * per_pass;
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    const float u = counter_uniform(seed, first + static_cast<uint64_t>(i));
    pool_windows::stochastic_output(g, x + plane * g.h * g.w, o, u, y + i, mask + i);
  }
  finish_pass(counter);
}

__global__ void stochastic_pool_test_kernel(PoolGeometry g, const float* x, float* y) {
  const int64_t out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * out_plane) {
    const int64_t plane = i / out_plane, o = i - plane * out_plane;
    y[i] = pool_windows::weighted_output(g, x + plane * g.h * g.w, o);
  }
}

// One thread per input element gathers over the windows that hold it.
__global__ void stochastic_pool_test_backward_kernel(PoolGeometry g, const float* x,
                                                     const float* dy, float* dx) {
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  LAMINA_GRID_STRIDE_LOOP(i, g.n * g.c * in_plane) {
    const int64_t plane = i / in_plane, pixel = i - plane * in_plane;
    const int64_t ih = pixel / g.w, iw = pixel - ih * g.w;
    dx[i] = pool_windows::stochastic_test_gradient(g, x + plane * in_plane,
                                                   dy + plane * out_plane, ih, iw);
  }
}

void check_pool(const PoolGeometry& g) {
  CHECK(g.n >= 0 && g.c >= 0 && g.h > 0 && g.w > 0 && g.kh > 0 && g.kw > 0 && g.stride_h > 0 &&
        g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 && g.out_h >= 0 && g.out_w >= 0)
      << "bad pooling geometry";
}

template <class S>
void launch_pool_forward(cudaStream_t s, PoolMethod method, const PoolGeometry& g,
                         const typename S::Stored* x, typename S::Stored* y, int32_t* mask) {
  check_pool(g);
  const int64_t count = g.n * g.c * g.out_h * g.out_w;
  if (count == 0) return;
  if (method == PoolMethod::kMax) {
    CHECK(mask != nullptr) << "max pooling needs a mask";
    max_pool_forward_kernel<S><<<elementwise_grid(count), kBlock, 0, s>>>(g, x, y, mask);
    LAMINA_CUDA_LAUNCHED(max_pool_forward_kernel);
  } else if (global(g)) {
    const int64_t size = g.h * g.w;
    global_average_forward_kernel<S><<<row_grid(count), row_block(size), 0, s>>>(count, size,
                                                                                x, y);
    LAMINA_CUDA_LAUNCHED(global_average_forward_kernel);
  } else {
    average_pool_forward_kernel<S><<<elementwise_grid(count), kBlock, 0, s>>>(g, x, y);
    LAMINA_CUDA_LAUNCHED(average_pool_forward_kernel);
  }
}

// dx written: gathered from dy over the windows, or zeros where there are no windows.
template <class S>
void launch_pool_backward(cudaStream_t s, PoolMethod method, const PoolGeometry& g,
                          const typename S::Stored* dy, const int32_t* mask,
                          typename S::Stored* dx) {
  check_pool(g);
  const int64_t count = g.n * g.c * g.h * g.w;
  if (count == 0) return;
  if (g.out_h * g.out_w == 0) {  // no windows: nothing flows back (+0 in every format)
    LAMINA_CUDA_CHECK(cudaMemsetAsync(dx, 0, sizeof(*dx) * count, s));
    return;
  }
  if (method == PoolMethod::kMax) {
    CHECK(mask != nullptr) << "max pooling needs a mask";
    max_pool_backward_kernel<S><<<elementwise_grid(count), kBlock, 0, s>>>(g, dy, mask, dx);
    LAMINA_CUDA_LAUNCHED(max_pool_backward_kernel);
  } else if (global(g)) {
    const int64_t planes = g.n * g.c, size = g.h * g.w;
    global_average_backward_kernel<S><<<row_grid(planes), row_block(size), 0, s>>>(planes, size,
                                                                                   dy, dx);
    LAMINA_CUDA_LAUNCHED(global_average_backward_kernel);
  } else {
    average_pool_backward_kernel<S><<<elementwise_grid(count), kBlock, 0, s>>>(g, dy, dx);
    LAMINA_CUDA_LAUNCHED(average_pool_backward_kernel);
  }
}

}  // namespace

void CudaBackend::pool_forward(PoolMethod method, const PoolGeometry& g, const float* x,
                               float* y, int32_t* mask) {
  launch_pool_forward<Fp32Storage>(on_device(), method, g, x, y, mask);
}

void CudaBackend::pool_backward(PoolMethod method, const PoolGeometry& g, const float* dy,
                                const int32_t* mask, float* dx) {
  launch_pool_backward<Fp32Storage>(on_device(), method, g, dy, mask, dx);
}

void CudaBackend::pool_forward(Half format, PoolMethod method, const PoolGeometry& g,
                               const uint16_t* x, uint16_t* y, int32_t* mask) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    launch_pool_forward<decltype(storage)>(s, method, g, x, y, mask);
  });
}

void CudaBackend::pool_backward(Half format, PoolMethod method, const PoolGeometry& g,
                                const uint16_t* dy, const int32_t* mask, uint16_t* dx) {
  const cudaStream_t s = on_device();
  with_half_storage(format, [&](auto storage) {
    launch_pool_backward<decltype(storage)>(s, method, g, dy, mask, dx);
  });
}

// A launch even for no outputs (one block): the pass counter still advances.
void CudaBackend::stochastic_pool_forward(const PoolGeometry& g, uint64_t seed, uint64_t offset,
                                          uint64_t per_pass, PassCounter* counter,
                                          const float* x, float* y, int32_t* mask) {
  check_pool(g);
  const int64_t count = g.n * g.c * g.out_h * g.out_w;
  stochastic_pool_forward_kernel<<<elementwise_grid(count), kBlock, 0, on_device()>>>(
      g, seed, offset, per_pass, counter, x, y, mask);
  LAMINA_CUDA_LAUNCHED(stochastic_pool_forward_kernel);
}

void CudaBackend::stochastic_pool_test(const PoolGeometry& g, const float* x, float* y) {
  check_pool(g);
  const int64_t count = g.n * g.c * g.out_h * g.out_w;
  if (count == 0) return;
  stochastic_pool_test_kernel<<<elementwise_grid(count), kBlock, 0, on_device()>>>(g, x, y);
  LAMINA_CUDA_LAUNCHED(stochastic_pool_test_kernel);
}

void CudaBackend::stochastic_pool_test_backward(const PoolGeometry& g, const float* x,
                                                const float* dy, float* dx) {
  check_pool(g);
  const int64_t count = g.n * g.c * g.h * g.w;
  if (count == 0) return;
  stochastic_pool_test_backward_kernel<<<elementwise_grid(count), kBlock, 0, on_device()>>>(
      g, x, dy, dx);
  LAMINA_CUDA_LAUNCHED(stochastic_pool_test_backward_kernel);
}

}  // namespace lamina::cuda_detail
