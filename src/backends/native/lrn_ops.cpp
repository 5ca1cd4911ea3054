// NativeBackend's local response normalisation across channels (backend.hpp, kLrn).
//
// Arrays are (n, c, inner). The window of channel ch is [ch - pre, ch + post] clipped to
// [0, c), pre = (size - 1) / 2, post = size / 2. Each block of kBlock positions of one image
// keeps its window sums in double and slides them along the channels: channel 0's window is
// summed, then each next channel adds its head and subtracts its tail, in that order. The
// CUDA kernels (lrn_kernels.cu) do the same per position, so the two agree but for the
// rounding of pow. Squares and ratios are formed in double; every float result is rounded
// once.
#include <glog/logging.h>

#include <algorithm>
#include <cmath>

#include "lamina/native_backend.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

constexpr int64_t kBlock = 64;  // positions whose running sums live on the stack

void check_lrn(int64_t n, int64_t c, int64_t inner, const LrnArgs& args) {
  CHECK(n >= 0 && c >= 0 && inner >= 0 && args.size >= 1) << "bad LRN arguments";
}

// Runs f(image, first position, positions) over the blocks of every image, in parallel.
template <class F>
void for_blocks(int64_t n, int64_t c, int64_t inner, F f) {
  const int64_t blocks = (inner + kBlock - 1) / kBlock;
  native::parallel_rows(n * blocks, c * kBlock * 4, [&](int64_t b) {
    const int64_t image = b / blocks, first = (b % blocks) * kBlock;
    f(image, first, std::min(kBlock, inner - first));
  });
}

// The sliding window sum over channels of term(ch, j), for positions j < count of one block:
// calls out(ch, sums) for every channel, sums[j] the window's sum at position j.
template <class Term, class Out>
void slide(int64_t c, int64_t size, int64_t count, Term term, Out out) {
  const int64_t pre = (size - 1) / 2, post = size / 2;
  double sums[kBlock] = {};
  for (int64_t ch = 0; ch <= std::min(post, c - 1); ++ch) {
    for (int64_t j = 0; j < count; ++j) sums[j] += term(ch, j);
  }
  for (int64_t ch = 0; ch < c; ++ch) {
    if (ch > 0) {
      const int64_t head = ch + post, tail = ch - pre - 1;
      if (head < c) {
        for (int64_t j = 0; j < count; ++j) sums[j] += term(head, j);
      }
      if (tail >= 0) {
        for (int64_t j = 0; j < count; ++j) sums[j] -= term(tail, j);
      }
    }
    out(ch, sums);
  }
}

}  // namespace

// scale = k + alpha / size * (window sum of x^2), y = x scale^-beta
void NativeBackend::lrn_forward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                                const float* x, float* scale, float* y) {
  check_lrn(n, c, inner, args);
  const double ratio = double(args.alpha) / double(args.size);
  const double k = args.k, neg_beta = -double(args.beta);
  for_blocks(n, c, inner, [&](int64_t image, int64_t first, int64_t count) {
    const int64_t base = image * c * inner + first;
    const auto square = [&](int64_t ch, int64_t j) {
      const double v = x[base + ch * inner + j];
      return v * v;
    };
    slide(c, args.size, count, square, [&](int64_t ch, const double* sums) {
      const int64_t at = base + ch * inner;
      for (int64_t j = 0; j < count; ++j) {
        const float s = static_cast<float>(k + ratio * sums[j]);
        scale[at + j] = s;
        y[at + j] = static_cast<float>(double(x[at + j]) * std::pow(double(s), neg_beta));
      }
    });
  });
}

// dx = dy scale^-beta - 2 alpha beta / size * x * (window sum of dy y / scale)
void NativeBackend::lrn_backward(int64_t n, int64_t c, int64_t inner, const LrnArgs& args,
                                 const float* x, const float* y, const float* scale,
                                 const float* dy, float* dx) {
  check_lrn(n, c, inner, args);
  const double coeff = 2.0 * double(args.alpha) * double(args.beta) / double(args.size);
  const double neg_beta = -double(args.beta);
  for_blocks(n, c, inner, [&](int64_t image, int64_t first, int64_t count) {
    const int64_t base = image * c * inner + first;
    const auto ratio = [&](int64_t ch, int64_t j) {
      const int64_t at = base + ch * inner + j;
      return double(dy[at]) * double(y[at]) / double(scale[at]);
    };
    slide(c, args.size, count, ratio, [&](int64_t ch, const double* sums) {
      const int64_t at = base + ch * inner;
      for (int64_t j = 0; j < count; ++j) {
        const double s = scale[at + j];
        dx[at + j] = static_cast<float>(double(dy[at + j]) * std::pow(s, neg_beta) -
                                        coeff * double(x[at + j]) * sums[j]);
      }
    });
  });
}

}  // namespace lamina
