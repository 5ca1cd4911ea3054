// NativeBackend's spatial operations: convolution (im2col + sgemm in math(), as Caffe does)
// and pooling (Caffe's loops; stochastic pooling's in pool_windows.hpp). The semantics are
// the comments in backend.hpp.
//
// Convolution, NCHW. With kernel = kh kw and the groups' sizes cg = c / groups,
// kg = k / groups, the column matrix of an image is col (c kernel, out_h out_w): row
// (ci, ki, kj) holds the input pixel each output position sees through kernel tap (ki, kj),
// 0 where it falls into the padding. Then per group
//   y_g (kg, out)              = W_g (kg, cg kernel) col_g (cg kernel, out)
//   dcol_g (cg kernel, out)    = W_g^T dy_g,  dx = col2im(dcol)  (overlapping taps add)
//   dW_g (kg, cg kernel)      += dy_g col_g^T
// Images are batched up to about kBatchColumns output positions per sgemm: the columns of
// several images sit side by side in one matrix (c kernel, images out), each group is one
// sgemm, and y and dy are gathered/scattered through a (k, images out) scratch matrix.
// Measured on LeNet's shapes (2 cores): one sgemm over the whole batch streams its columns
// through memory and was 1.5-3x slower than sgemms whose columns stay in cache (the batch
// is also capped at kColumnBudget floats); one sgemm per 8x8 image was as fast on one
// OpenBLAS thread but, with OpenBLAS threads on a busy machine, waking them 64 times per
// call cost up to 2x. Planes of kBatchColumns positions or more run one image at a time,
// straight into y. A 1x1 kernel with stride 1 and no padding then uses x itself as the
// image's columns.
//
// Scratch matrices are thread_local and only grow (a backend is used from one thread at a
// time): one image's columns, or at most kColumnBudget floats for a batch of images.
//
// Gradients: dx is written with =, dweight and dbias accumulate with +=. dbias sums in
// double per channel, in a fixed order (deterministic for any thread count).
#include <glog/logging.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <vector>

#include "backends/pool_windows.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/native_backend.hpp"
#include "im2col.hpp"
#include "parallel.hpp"
#include "products.hpp"

namespace lamina {
namespace {

using native::col2im_channel;
using native::im2col_channel;
using native::parallel_rows;
using native::Scratch;
using native::scratch;
using native::sgemm;

// Images per sgemm: about kBatchColumns output positions, at most kColumnBudget floats
// (1 MiB, cache-sized) of columns.
constexpr int64_t kBatchColumns = 512;
constexpr int64_t kColumnBudget = int64_t{1} << 18;

// The sizes derived from a geometry.
struct ConvDims {
  int64_t cg, kg;           // input and output channels per group
  int64_t kernel;           // kh kw
  int64_t group_rows;       // cg kernel: rows of one group's column matrix
  int64_t in_plane;         // h w
  int64_t out_plane;        // out_h out_w
  int64_t images_per_chunk; // images whose columns one sgemm processes
  bool pointwise;           // 1x1, stride 1, no padding: col of an image is x itself
};

ConvDims conv_dims(const ConvGeometry& g) {
  CHECK(g.n >= 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.k > 0 && g.kh > 0 && g.kw > 0 &&
        g.stride_h > 0 && g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 &&
        g.dilation_h > 0 && g.dilation_w > 0 && g.out_h > 0 && g.out_w > 0)
      << "bad convolution geometry";
  CHECK(g.groups > 0 && g.c % g.groups == 0 && g.k % g.groups == 0)
      << "groups " << g.groups << " must divide c " << g.c << " and k " << g.k;
  ConvDims d;
  d.cg = g.c / g.groups;
  d.kg = g.k / g.groups;
  d.kernel = g.kh * g.kw;
  d.group_rows = d.cg * d.kernel;
  d.in_plane = g.h * g.w;
  d.out_plane = g.out_h * g.out_w;
  d.pointwise = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 &&
                g.pad_w == 0 && g.out_h == g.h && g.out_w == g.w;
  const int64_t per_image = std::max(g.c * d.kernel, g.k) * d.out_plane;
  d.images_per_chunk =
      std::clamp<int64_t>(std::min(kBatchColumns / d.out_plane, kColumnBudget / per_image), 1,
                          std::max<int64_t>(g.n, 1));
  return d;
}

// col (c kernel, images out_plane) with the columns of images x0[0..images) side by side.
void im2col_images(const ConvGeometry& g, const ConvDims& d, int64_t images, const float* x0,
                   float* col) {
  const int64_t ld = images * d.out_plane;
  parallel_rows(images * g.c, d.kernel * d.out_plane, [&](int64_t r) {
    const int64_t i = r / g.c, ch = r % g.c;
    im2col_channel(g, x0 + r * d.in_plane, col + ch * d.kernel * ld + i * d.out_plane, ld);
  });
}

// dx0 (images, c, h, w) = col2im of dcol (c kernel, images out_plane).
void col2im_images(const ConvGeometry& g, const ConvDims& d, int64_t images, const float* dcol,
                   float* dx0) {
  const int64_t ld = images * d.out_plane;
  parallel_rows(images * g.c, d.kernel * d.out_plane, [&](int64_t r) {
    const int64_t i = r / g.c, ch = r % g.c;
    float* plane = dx0 + r * d.in_plane;
    std::fill_n(plane, d.in_plane, 0.0f);
    col2im_channel(g, dcol + ch * d.kernel * ld + i * d.out_plane, ld, plane);
  });
}

// t (k, images out_plane) = y0 (images, k, out_plane) rearranged, for dy.
void gather_planes(const ConvGeometry& g, const ConvDims& d, int64_t images, const float* y0,
                   float* t) {
  const int64_t ld = images * d.out_plane;
  parallel_rows(images * g.k, d.out_plane, [&](int64_t r) {
    const int64_t i = r / g.k, k = r % g.k;
    std::memcpy(t + k * ld + i * d.out_plane, y0 + r * d.out_plane, sizeof(float) * d.out_plane);
  });
}

// The sum of p[0, n) in double, over kLanes interleaved partial sums (independent adds
// pipeline; one running sum waits on each add) combined in a fixed order.
double plane_sum(int64_t n, const float* p) {
  constexpr int kLanes = 8;
  double lane[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (int l = 0; l < kLanes; ++l) lane[l] += p[j + l];
  }
  for (; j < n; ++j) lane[0] += p[j];
  double sum = 0;
  for (double v : lane) sum += v;
  return sum;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------

// x (n, c, h, w), weight (k, c / groups, kh, kw), bias (k) or null -> y (n, k, out_h, out_w)
void NativeBackend::conv_forward(const ConvGeometry& g, const float* x, const float* weight,
                                 const float* bias, float* y) {
  const ConvDims d = conv_dims(g);
  for (int64_t n0 = 0; n0 < g.n; n0 += d.images_per_chunk) {
    const int64_t images = std::min(d.images_per_chunk, g.n - n0);
    const float* x0 = x + n0 * g.c * d.in_plane;
    float* y0 = y + n0 * g.k * d.out_plane;
    const int64_t ld = images * d.out_plane;
    const float* col = x0;
    if (!(d.pointwise && images == 1)) {
      float* c = scratch(Scratch::kColumns, g.c * d.kernel * ld);
      im2col_images(g, d, images, x0, c);
      col = c;
    }
    // One image: sgemm straight into y. Several: into t (k, images out), then scattered.
    float* t = images == 1 ? y0 : scratch(Scratch::kGathered, g.k * ld);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      sgemm(math(), false, false, d.kg, ld, d.group_rows, 1.0f,
            weight + grp * d.kg * d.group_rows, d.group_rows, col + grp * d.group_rows * ld, ld,
            0.0f, t + grp * d.kg * ld, ld);
    }
    if (images == 1 && bias == nullptr) continue;
    parallel_rows(images * g.k, d.out_plane, [&](int64_t r) {
      const int64_t i = r / g.k, k = r % g.k;
      const float b = bias ? bias[k] : 0.0f;
      const float* src = t + k * ld + i * d.out_plane;
      float* dst = y0 + r * d.out_plane;
      for (int64_t j = 0; j < d.out_plane; ++j) dst[j] = src[j] + b;
    });
  }
}

// weight (k, c / groups, kh, kw), dy (n, k, out_h, out_w) -> dx (n, c, h, w), written with =
void NativeBackend::conv_backward_data(const ConvGeometry& g, const float* weight,
                                       const float* dy, float* dx) {
  const ConvDims d = conv_dims(g);
  for (int64_t n0 = 0; n0 < g.n; n0 += d.images_per_chunk) {
    const int64_t images = std::min(d.images_per_chunk, g.n - n0);
    const float* dy0 = dy + n0 * g.k * d.out_plane;
    float* dx0 = dx + n0 * g.c * d.in_plane;
    const int64_t ld = images * d.out_plane;
    const float* t = dy0;  // dy as (k, images out)
    if (images > 1) {
      float* gathered = scratch(Scratch::kGathered, g.k * ld);
      gather_planes(g, d, images, dy0, gathered);
      t = gathered;
    }
    // A pointwise image's column gradient is dx itself.
    const bool direct = d.pointwise && images == 1;
    float* dcol = direct ? dx0 : scratch(Scratch::kColumns, g.c * d.kernel * ld);
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      sgemm(math(), true, false, d.group_rows, ld, d.kg, 1.0f,
            weight + grp * d.kg * d.group_rows, d.group_rows, t + grp * d.kg * ld, ld, 0.0f,
            dcol + grp * d.group_rows * ld, ld);
    }
    if (!direct) col2im_images(g, d, images, dcol, dx0);
  }
}

// x (n, c, h, w), dy (n, k, out_h, out_w): dweight (k, c / groups, kh, kw) += dy * x,
// dbias (k) += sum of dy per channel.
void NativeBackend::conv_backward_filter(const ConvGeometry& g, const float* x,
                                         const float* dy, float* dweight, float* dbias) {
  const ConvDims d = conv_dims(g);
  if (dbias != nullptr) {
    parallel_rows(g.k, g.n * d.out_plane, [&](int64_t k) {
      double sum = 0;
      for (int64_t i = 0; i < g.n; ++i) {
        sum += plane_sum(d.out_plane, dy + (i * g.k + k) * d.out_plane);
      }
      dbias[k] += static_cast<float>(sum);
    });
  }
  for (int64_t n0 = 0; n0 < g.n; n0 += d.images_per_chunk) {
    const int64_t images = std::min(d.images_per_chunk, g.n - n0);
    const float* x0 = x + n0 * g.c * d.in_plane;
    const float* dy0 = dy + n0 * g.k * d.out_plane;
    const int64_t ld = images * d.out_plane;
    const float* col = x0;
    if (!(d.pointwise && images == 1)) {
      float* c = scratch(Scratch::kColumns, g.c * d.kernel * ld);
      im2col_images(g, d, images, x0, c);
      col = c;
    }
    const float* t = dy0;
    if (images > 1) {
      float* gathered = scratch(Scratch::kGathered, g.k * ld);
      gather_planes(g, d, images, dy0, gathered);
      t = gathered;
    }
    for (int64_t grp = 0; grp < g.groups; ++grp) {
      sgemm(math(), false, true, d.kg, d.group_rows, ld, 1.0f, t + grp * d.kg * ld, ld,
            col + grp * d.group_rows * ld, ld, 1.0f, dweight + grp * d.kg * d.group_rows,
            d.group_rows);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------

namespace {

// The windows of one axis: output o covers input [lo[o], hi[o]) (clipped to the input) and
// span[o] positions of the padded input [-pad, in + pad) (the average's divisor factor).
struct AxisWindows {
  std::vector<int64_t> lo, hi, span;
};

AxisWindows axis_windows(int64_t in, int64_t kernel, int64_t stride, int64_t pad, int64_t out) {
  AxisWindows a{std::vector<int64_t>(out), std::vector<int64_t>(out), std::vector<int64_t>(out)};
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * stride - pad;
    const int64_t end = std::min(start + kernel, in + pad);
    a.span[o] = end - start;
    a.lo[o] = std::max<int64_t>(start, 0);
    a.hi[o] = std::min(end, in);
  }
  return a;
}

void check_pool(const PoolGeometry& g) {
  CHECK(g.n >= 0 && g.c >= 0 && g.h > 0 && g.w > 0 && g.kh > 0 && g.kw > 0 && g.stride_h > 0 &&
        g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 && g.out_h >= 0 && g.out_w >= 0)
      << "bad pooling geometry";
}

}  // namespace

// x (n, c, h, w) -> y, mask (n, c, out_h, out_w). As in Caffe, max starts from -FLT_MAX with
// mask -1 and takes a value only when strictly greater: ties keep the first in row-major
// order, and a window holding only NaN or -inf (or nothing) gives -FLT_MAX with mask -1.
void NativeBackend::pool_forward(PoolMethod method, const PoolGeometry& g, const float* x,
                                 float* y, int32_t* mask) {
  check_pool(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  CHECK(method != PoolMethod::kMax || mask != nullptr || out_plane * g.n * g.c == 0)
      << "max pooling needs a mask";
  const AxisWindows rows = axis_windows(g.h, g.kh, g.stride_h, g.pad_h, g.out_h);
  const AxisWindows cols = axis_windows(g.w, g.kw, g.stride_w, g.pad_w, g.out_w);
  parallel_rows(g.n * g.c, out_plane * g.kh * g.kw, [&](int64_t p) {
    const float* xp = x + p * in_plane;
    float* yp = y + p * out_plane;
    int32_t* mp = method == PoolMethod::kMax ? mask + p * out_plane : nullptr;
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      const int64_t h0 = rows.lo[oh], h1 = rows.hi[oh];
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const int64_t w0 = cols.lo[ow], w1 = cols.hi[ow];
        if (method == PoolMethod::kMax) {
          float best = -FLT_MAX;
          int64_t arg = -1;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) {
              // Selects rather than a branch: on real activations it mispredicts often.
              const float v = xp[ih * g.w + iw];
              const bool greater = v > best;
              best = greater ? v : best;
              arg = greater ? ih * g.w + iw : arg;
            }
          }
          yp[oh * g.out_w + ow] = best;
          mp[oh * g.out_w + ow] = static_cast<int32_t>(arg);
        } else {
          double sum = 0;
          for (int64_t ih = h0; ih < h1; ++ih) {
            for (int64_t iw = w0; iw < w1; ++iw) sum += xp[ih * g.w + iw];
          }
          yp[oh * g.out_w + ow] =
              static_cast<float>(sum / static_cast<double>(rows.span[oh] * cols.span[ow]));
        }
      }
    }
  });
}

// dy, mask (n, c, out_h, out_w) -> dx (n, c, h, w), written with =. Overlapping windows add
// their contributions; a mask of -1 (an empty max window) routes nothing.
void NativeBackend::pool_backward(PoolMethod method, const PoolGeometry& g, const float* dy,
                                  const int32_t* mask, float* dx) {
  check_pool(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  CHECK(method != PoolMethod::kMax || mask != nullptr || out_plane * g.n * g.c == 0)
      << "max pooling needs a mask";
  const AxisWindows rows = axis_windows(g.h, g.kh, g.stride_h, g.pad_h, g.out_h);
  const AxisWindows cols = axis_windows(g.w, g.kw, g.stride_w, g.pad_w, g.out_w);
  parallel_rows(g.n * g.c, in_plane + out_plane * g.kh * g.kw, [&](int64_t p) {
    const float* dyp = dy + p * out_plane;
    float* dxp = dx + p * in_plane;
    std::fill_n(dxp, in_plane, 0.0f);
    if (method == PoolMethod::kMax) {
      const int32_t* mp = mask + p * out_plane;
      for (int64_t o = 0; o < out_plane; ++o) {
        if (mp[o] >= 0) dxp[mp[o]] += dyp[o];
      }
      return;
    }
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        const float share =
            dyp[oh * g.out_w + ow] / static_cast<float>(rows.span[oh] * cols.span[ow]);
        for (int64_t ih = rows.lo[oh]; ih < rows.hi[oh]; ++ih) {
          for (int64_t iw = cols.lo[ow]; iw < cols.hi[ow]; ++iw) dxp[ih * g.w + iw] += share;
        }
      }
    }
  });
}

// Stochastic pooling, FP32: each output (and each test-phase gradient element) as
// pool_windows.hpp computes it, the CUDA kernels' functions. x (n, c, h, w); y, mask
// (n, c, out_h, out_w); output i draws counter_uniform(seed, offset + passes per_pass + i).
void NativeBackend::stochastic_pool_forward(const PoolGeometry& g, uint64_t seed,
                                            uint64_t offset, uint64_t per_pass,
                                            PassCounter* counter, const float* x, float* y,
                                            int32_t* mask) {
  check_pool(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  const uint64_t first = offset + static_cast<uint64_t>(counter->passes) * per_pass;
  parallel_rows(g.n * g.c, 2 * out_plane * g.kh * g.kw, [&](int64_t p) {
    const float* xp = x + p * in_plane;
    for (int64_t o = 0; o < out_plane; ++o) {
      const int64_t i = p * out_plane + o;
      const float u = counter_uniform(seed, first + static_cast<uint64_t>(i));
      pool_windows::stochastic_output(g, xp, o, u, y + i, mask + i);
    }
  });
  counter->passes += 1;
}

void NativeBackend::stochastic_pool_test(const PoolGeometry& g, const float* x, float* y) {
  check_pool(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  parallel_rows(g.n * g.c, out_plane * g.kh * g.kw, [&](int64_t p) {
    for (int64_t o = 0; o < out_plane; ++o)
      y[p * out_plane + o] = pool_windows::weighted_output(g, x + p * in_plane, o);
  });
}

// dx (n, c, h, w) gathered element by element over the windows that hold it.
void NativeBackend::stochastic_pool_test_backward(const PoolGeometry& g, const float* x,
                                                  const float* dy, float* dx) {
  check_pool(g);
  const int64_t in_plane = g.h * g.w, out_plane = g.out_h * g.out_w;
  parallel_rows(g.n * g.c, in_plane * g.kh * g.kw * g.kh * g.kw, [&](int64_t p) {
    for (int64_t j = 0; j < in_plane; ++j) {
      dx[p * in_plane + j] = pool_windows::stochastic_test_gradient(
          g, x + p * in_plane, dy + p * out_plane, j / g.w, j % g.w);
    }
  });
}

}  // namespace lamina
