// Local response normalisation across channels on CUDA (backend.hpp, kLrn).
//
// One thread per position (image, i) of x (n, c, inner) walks the channels with the window
// sum in double, as the Native backend's blocks do (lrn_ops.cpp): channel 0's window
// [0, post] summed, then per channel its head added and its tail subtracted, squares and
// ratios formed in double, every float result rounded once. Neighbouring threads read
// neighbouring positions of a channel (coalesced). No sums across threads: deterministic,
// and equal to the Native results but for the rounding of pow.
//
// Lamina's own kernels rather than cuDNN's cross-channel LRN: the operation's contract
// writes `scale` for the backward pass, which cuDNN keeps to itself, and its descriptors
// would have to be made per geometry outside the captured step, where no operation has a
// setup call.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {
namespace {

struct LrnShape {
  int64_t n, c, inner, pre, post;
};

LrnShape lrn_shape(int64_t n, int64_t c, int64_t inner, const LrnArgs& args) {
  return {n, c, inner, (args.size - 1) / 2, args.size / 2};
}

// The sliding window sum over channels of term(ch) at one position: calls out(ch, sum) for
// every channel.
template <class Term, class Out>
__device__ void slide(const LrnShape& s, const Term& term, const Out& out) {
  double sum = 0;
  for (int64_t ch = 0; ch <= s.post && ch < s.c; ++ch) sum += term(ch);
  for (int64_t ch = 0; ch < s.c; ++ch) {
    if (ch > 0) {
      const int64_t head = ch + s.post, tail = ch - s.pre - 1;
      if (head < s.c) sum += term(head);
      if (tail >= 0) sum -= term(tail);
    }
    out(ch, sum);
  }
}

// scale = k + ratio * (window sum of x^2), y = x scale^-beta; ratio = alpha / size.
__global__ void lrn_forward_kernel(LrnShape s, double ratio, double k, double neg_beta,
                                   const float* x, float* scale, float* y) {
  LAMINA_GRID_STRIDE_LOOP(p, s.n * s.inner) {
    const int64_t image = p / s.inner, i = p - image * s.inner;
    const int64_t base = image * s.c * s.inner + i;
    const auto square = [&](int64_t ch) {
      const double v = x[base + ch * s.inner];
      return v * v;
    };
    slide(s, square, [&](int64_t ch, double sum) {
      const int64_t at = base + ch * s.inner;
      const float sc = static_cast<float>(k + ratio * sum);
      scale[at] = sc;
      y[at] = static_cast<float>(double(x[at]) * pow(double(sc), neg_beta));
    });
  }
}

// dx = dy scale^-beta - coeff x (window sum of dy y / scale); coeff = 2 alpha beta / size.
__global__ void lrn_backward_kernel(LrnShape s, double coeff, double neg_beta, const float* x,
                                    const float* y, const float* scale, const float* dy,
                                    float* dx) {
  LAMINA_GRID_STRIDE_LOOP(p, s.n * s.inner) {
    const int64_t image = p / s.inner, i = p - image * s.inner;
    const int64_t base = image * s.c * s.inner + i;
    const auto ratio = [&](int64_t ch) {
      const int64_t at = base + ch * s.inner;
      return double(dy[at]) * double(y[at]) / double(scale[at]);
    };
    slide(s, ratio, [&](int64_t ch, double sum) {
      const int64_t at = base + ch * s.inner;
      dx[at] = static_cast<float>(double(dy[at]) * pow(double(scale[at]), neg_beta) -
                                  coeff * double(x[at]) * sum);
    });
  }
}

}  // namespace

void CudaBackend::lrn_forward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                              const float* x, float* scale, float* y) {
  const cudaStream_t s = on_device();
  if (n * c * inner <= 0) return;
  lrn_forward_kernel<<<elementwise_grid(n * inner), kBlock, 0, s>>>(
      lrn_shape(n, c, inner, args), double(args.alpha) / double(args.size), double(args.k),
      -double(args.beta), x, scale, y);
  LAMINA_CUDA_LAUNCHED(lrn_forward_kernel);
}

void CudaBackend::lrn_backward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                               const float* x, const float* y, const float* scale,
                               const float* dy, float* dx) {
  const cudaStream_t s = on_device();
  if (n * c * inner <= 0) return;
  lrn_backward_kernel<<<elementwise_grid(n * inner), kBlock, 0, s>>>(
      lrn_shape(n, c, inner, args),
      2.0 * double(args.alpha) * double(args.beta) / double(args.size), -double(args.beta), x,
      y, scale, dy, dx);
  LAMINA_CUDA_LAUNCHED(lrn_backward_kernel);
}

}  // namespace lamina::cuda_detail
