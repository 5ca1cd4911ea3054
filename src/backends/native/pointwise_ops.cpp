// NativeBackend's kPointwise group: the element-wise functions of Caffe's neuron layers
// (pointwise_math.hpp, shared with the CUDA kernels) and PReLU. The semantics are the
// comments in backend.hpp. Every loop works in place (each element is read before the same
// iteration writes it).
//
// PReLU views its arrays as (outer, channels, inner): row r = (o, c) holds inner values of
// channel c = r % channels. Its slope gradient sums each row on one thread in double, then
// the rows of a channel in order of o, as channel_ops.cpp's sums do, so results do not
// depend on the thread count.
#include <vector>

#include "lamina/native_backend.hpp"
#include "lamina/pointwise_math.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

using native::parallel_ranges;
using native::parallel_rows;

// The per-row sums of the slope gradient (outer * channels doubles), kept per thread so a
// step allocates nothing once the first has run.
double* row_sums(int64_t rows) {
  thread_local std::vector<double> sums;
  if (static_cast<int64_t>(sums.size()) < rows) sums.resize(rows);
  return sums.data();
}

}  // namespace

// x, y (n).
void NativeBackend::pointwise_forward(const Pointwise& f, int64_t n, const float* x, float* y) {
  pointwise::with_function(f.fn, [&](auto fn) {
    constexpr PointwiseFn F = decltype(fn)::value;
    parallel_ranges(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) y[i] = pointwise::pointwise_value<F>(f, x[i]);
    });
  });
}

// x, y, dy, dx (n); only kExp reads y.
void NativeBackend::pointwise_backward(const Pointwise& f, int64_t n, const float* x,
                                       const float* y, const float* dy, float* dx) {
  pointwise::with_function(f.fn, [&](auto fn) {
    constexpr PointwiseFn F = decltype(fn)::value;
    parallel_ranges(n, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float yi = F == PointwiseFn::kExp ? y[i] : 0.0f;
        dx[i] = pointwise::pointwise_gradient<F>(f, x[i], yi, dy[i]);
      }
    });
  });
}

// x, y (outer, channels, inner), slope (channels).
void NativeBackend::prelu_forward(int64_t outer, int64_t channels, int64_t inner,
                                  const float* x, const float* slope, float* y) {
  parallel_rows(outer * channels, inner, [&](int64_t r) {
    const float a = slope[r % channels];
    const float* xr = x + r * inner;
    float* yr = y + r * inner;
    for (int64_t i = 0; i < inner; ++i) yr[i] = xr[i] > 0 ? xr[i] : pointwise::mul_rn(a, xr[i]);
  });
}

// x, dy, dx (outer, channels, inner), slope, dslope (channels). dx and dslope may each be
// null (the layer's two backward calls); the sum reads dy before dx, which may be dy, is
// written. An x that is not > 0 counts in the sum (a NaN too, so that it shows).
void NativeBackend::prelu_backward(int64_t outer, int64_t channels, int64_t inner,
                                   const float* x, const float* dy, const float* slope,
                                   float* dx, float* dslope) {
  const int64_t rows = outer * channels;
  if (dslope != nullptr && rows > 0) {
    double* sums = row_sums(rows);
    parallel_rows(rows, inner, [&](int64_t r) {
      const float* xr = x + r * inner;
      const float* dyr = dy + r * inner;
      double sum = 0;
      for (int64_t i = 0; i < inner; ++i)
        if (!(xr[i] > 0)) sum += static_cast<double>(dyr[i]) * xr[i];
      sums[r] = sum;
    });
    for (int64_t c = 0; c < channels; ++c) {
      double total = 0;
      for (int64_t o = 0; o < outer; ++o) total += sums[o * channels + c];
      dslope[c] += static_cast<float>(total);
    }
  }
  if (dx == nullptr) return;
  parallel_rows(rows, inner, [&](int64_t r) {
    const float a = slope[r % channels];
    const float* xr = x + r * inner;
    const float* dyr = dy + r * inner;
    float* dxr = dx + r * inner;
    for (int64_t i = 0; i < inner; ++i) dxr[i] = xr[i] > 0 ? dyr[i] : pointwise::mul_rn(a, dyr[i]);
  });
}

}  // namespace lamina
