// NativeBackend's convolutional-network operations (convolution, pooling, batch
// normalisation, per-channel affine and reductions, row copies, element-wise max) against
// straightforward reference loops evaluated in double inside the test; the semantics are the
// comments in backend.hpp. Inputs are random, of odd sizes; outputs that are written with =
// are pre-filled with garbage and accumulated outputs with random values, so both
// conventions are checked. NativeBackend memory is host memory: the tests pass std::vector
// storage directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::compare;
using testing::random_values;

::testing::AssertionResult matches(const std::vector<float>& actual,
                                   const std::vector<float>& expected, double tol) {
  const std::string mismatch = compare(actual, expected, tol);
  if (mismatch.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatch;
}
#define EXPECT_MATCH(actual, expected, tol) EXPECT_TRUE(matches((actual), (expected), (tol)))

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Small integers in [lo, hi] as floats: many exact ties.
std::vector<float> random_integers(int64_t n, uint64_t seed, int lo, int hi) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(dist(rng));
  return v;
}

const float kGarbage = std::numeric_limits<float>::quiet_NaN();

class NativeConvOpsTest : public ::testing::Test {
 protected:
  NativeBackend backend_;
};

// ---------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------

struct ConvCase {
  const char* name;
  int64_t n, c, h, w, k, kh, kw, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w,
      groups;
  bool bias;
};

void PrintTo(const ConvCase& p, std::ostream* os) { *os << p.name; }

ConvGeometry geometry_of(const ConvCase& p) {
  ConvGeometry g{};
  g.n = p.n, g.c = p.c, g.h = p.h, g.w = p.w, g.k = p.k, g.kh = p.kh, g.kw = p.kw;
  g.stride_h = p.stride_h, g.stride_w = p.stride_w, g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.dilation_h = p.dilation_h, g.dilation_w = p.dilation_w, g.groups = p.groups;
  g.out_h = (g.h + 2 * g.pad_h - (g.dilation_h * (g.kh - 1) + 1)) / g.stride_h + 1;
  g.out_w = (g.w + 2 * g.pad_w - (g.dilation_w * (g.kw - 1) + 1)) / g.stride_w + 1;
  return g;
}

// Calls f(x index, weight index, y index) for every tap of the convolution that reads an
// input pixel (taps in the padding read 0 and are skipped).
template <class F>
void for_each_tap(const ConvGeometry& g, F f) {
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  for (int64_t n = 0; n < g.n; ++n) {
    for (int64_t k = 0; k < g.k; ++k) {
      for (int64_t oh = 0; oh < g.out_h; ++oh) {
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          const int64_t yi = ((n * g.k + k) * g.out_h + oh) * g.out_w + ow;
          for (int64_t cc = 0; cc < cg; ++cc) {
            const int64_t ci = (k / kg) * cg + cc;
            for (int64_t ki = 0; ki < g.kh; ++ki) {
              const int64_t ih = oh * g.stride_h - g.pad_h + ki * g.dilation_h;
              if (ih < 0 || ih >= g.h) continue;
              for (int64_t kj = 0; kj < g.kw; ++kj) {
                const int64_t iw = ow * g.stride_w - g.pad_w + kj * g.dilation_w;
                if (iw < 0 || iw >= g.w) continue;
                const int64_t xi = ((n * g.c + ci) * g.h + ih) * g.w + iw;
                const int64_t wi = ((k * cg + cc) * g.kh + ki) * g.kw + kj;
                f(xi, wi, yi);
              }
            }
          }
        }
      }
    }
  }
}

class ConvTest : public NativeConvOpsTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(ConvTest, ForwardBackwardDataAndFilterMatchReference) {
  const ConvCase& p = GetParam();
  const ConvGeometry g = geometry_of(p);
  ASSERT_GT(g.out_h, 0);
  ASSERT_GT(g.out_w, 0);
  const int64_t x_size = g.n * g.c * g.h * g.w;
  const int64_t w_size = g.k * (g.c / g.groups) * g.kh * g.kw;
  const int64_t y_size = g.n * g.k * g.out_h * g.out_w;
  const int64_t plane = g.out_h * g.out_w;
  const auto x = random_values(x_size, 11);
  const auto weight = random_values(w_size, 12);
  const auto bias = random_values(g.k, 13);
  const auto dy = random_values(y_size, 14);
  const float* bias_ptr = p.bias ? bias.data() : nullptr;

  std::vector<double> y_ref(y_size, 0.0), dx_ref(x_size, 0.0), dw_ref(w_size, 0.0);
  for_each_tap(g, [&](int64_t xi, int64_t wi, int64_t yi) {
    y_ref[yi] += double(x[xi]) * weight[wi];
    dx_ref[xi] += double(dy[yi]) * weight[wi];
    dw_ref[wi] += double(dy[yi]) * x[xi];
  });
  std::vector<double> db_ref(g.k, 0.0);
  for (int64_t i = 0; i < y_size; ++i) {
    const int64_t k = (i / plane) % g.k;
    if (p.bias) y_ref[i] += bias[k];
    db_ref[k] += dy[i];
  }

  std::vector<float> y(y_size, kGarbage);
  backend_.conv_forward(g, x.data(), weight.data(), bias_ptr, y.data());
  EXPECT_MATCH(y, to_float(y_ref), 1e-5) << "forward";

  std::vector<float> dx(x_size, kGarbage);
  backend_.conv_backward_data(g, weight.data(), dy.data(), dx.data());
  EXPECT_MATCH(dx, to_float(dx_ref), 1e-5) << "backward data";

  // dweight and dbias accumulate onto what they held.
  auto dw = random_values(w_size, 15);
  auto db = random_values(g.k, 16);
  for (int64_t i = 0; i < w_size; ++i) dw_ref[i] += dw[i];
  for (int64_t k = 0; k < g.k; ++k) db_ref[k] += db[k];
  backend_.conv_backward_filter(g, x.data(), dy.data(), dw.data(), p.bias ? db.data() : nullptr);
  EXPECT_MATCH(dw, to_float(dw_ref), 1e-5) << "backward filter";
  if (p.bias) {
    EXPECT_MATCH(db, to_float(db_ref), 1e-5) << "backward bias";
  } else {
    EXPECT_MATCH(db, random_values(g.k, 16), 0) << "a null dbias leaves the rest alone";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, ConvTest,
    ::testing::Values(
        //        name           n  c   h   w   k kh kw sh sw ph pw dh dw  g  bias
        ConvCase{"Pad1",         3, 4,  9,  7,  6, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
        ConvCase{"Stride2Pad2",  2, 3, 11,  8,  5, 3, 2, 2, 2, 2, 1, 1, 1, 1, true},
        ConvCase{"Dilation2",    2, 2, 10,  9,  3, 3, 3, 1, 1, 2, 2, 2, 2, 1, false},
        ConvCase{"Groups2",      3, 4,  7,  7,  6, 3, 3, 2, 2, 1, 1, 1, 1, 2, false},
        ConvCase{"Groups3Mixed", 2, 6,  8,  5,  9, 2, 3, 1, 2, 0, 1, 2, 1, 3, true},
        ConvCase{"Depthwise",    2, 5,  9,  6,  5, 3, 3, 1, 1, 1, 1, 1, 1, 5, true},
        ConvCase{"Pointwise",    3, 5,  6,  7,  4, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},
        ConvCase{"PointwiseS2",  3, 5,  7,  9,  4, 1, 1, 2, 2, 0, 0, 1, 1, 1, false},
        ConvCase{"PointwisePad", 2, 3,  5,  4,  4, 1, 1, 1, 1, 1, 1, 1, 1, 1, true},
        // Planes of >= 512 positions: one sgemm per image, straight into y.
        ConvCase{"LargePlane",   2, 3, 33, 35,  4, 3, 3, 1, 1, 1, 1, 1, 1, 1, true},
        ConvCase{"LargePointwise",3, 5, 23, 24, 4, 1, 1, 1, 1, 0, 0, 1, 1, 1, true},
        // Smaller planes: images batched into one sgemm per group, up to 512 positions ...
        ConvCase{"TinyOutput",   7, 6,  5,  4,  4, 3, 3, 2, 2, 1, 1, 1, 1, 2, true},
        ConvCase{"TinyPointwise",5, 6,  3,  4,  4, 1, 1, 1, 1, 0, 0, 1, 1, 2, true},
        ConvCase{"KernelIsInput",3, 4,  5,  6,  7, 5, 6, 1, 1, 0, 0, 1, 1, 1, true},
        // ... in chunks, the last one partial: 512 / out_plane images, or fewer where the
        // columns would exceed 2^18 floats (113 images of 64 * 9 * 4 below).
        ConvCase{"Chunks1x1",  600, 3,  3,  2,  5, 3, 2, 1, 1, 0, 0, 1, 1, 1, true},
        ConvCase{"Chunks2x2",  140, 6,  4,  3,  6, 3, 2, 1, 1, 0, 0, 1, 1, 3, false},
        ConvCase{"BudgetChunks",120, 64, 4, 4,  4, 3, 3, 1, 1, 0, 0, 1, 1, 1, true}),
    [](const ::testing::TestParamInfo<ConvCase>& info) { return std::string(info.param.name); });

// The first output of a hand-computed case, so the reference loop above cannot share a
// mistake with the implementation: a 3x3 kernel of ones over a 3x3 image 1..9 with pad 1
// sums the 2x2 corner 1 + 2 + 4 + 5 = 12, and the centre sums everything, 45.
TEST_F(NativeConvOpsTest, ConvolutionOfOnesSumsTheWindow) {
  ConvGeometry g{1, 1, 3, 3, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 3};
  std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9}, weight(9, 1.0f), y(9, kGarbage);
  const float bias = 0.5f;
  backend_.conv_forward(g, x.data(), weight.data(), &bias, y.data());
  EXPECT_FLOAT_EQ(y[0], 12.5f);
  EXPECT_FLOAT_EQ(y[4], 45.5f);
  EXPECT_FLOAT_EQ(y[8], 5 + 6 + 8 + 9 + 0.5f);
}

// ---------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------

struct PoolCase {
  const char* name;
  int64_t n, c, h, w, kh, kw, stride_h, stride_w, pad_h, pad_w;
};

void PrintTo(const PoolCase& p, std::ostream* os) { *os << p.name; }

// Caffe's output size: rounded up, and the last window must start inside the image.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  int64_t out = (in + 2 * pad - kernel + stride - 1) / stride + 1;
  if (pad > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry geometry_of(const PoolCase& p) {
  PoolGeometry g{};
  g.n = p.n, g.c = p.c, g.h = p.h, g.w = p.w, g.kh = p.kh, g.kw = p.kw;
  g.stride_h = p.stride_h, g.stride_w = p.stride_w, g.pad_h = p.pad_h, g.pad_w = p.pad_w;
  g.out_h = pooled_size(p.h, p.kh, p.stride_h, p.pad_h);
  g.out_w = pooled_size(p.w, p.kw, p.stride_w, p.pad_w);
  return g;
}

class PoolTest : public NativeConvOpsTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(PoolTest, MaxMatchesReferenceWithTies) {
  const PoolGeometry g = geometry_of(GetParam());
  const int64_t planes = g.n * g.c, in = g.h * g.w, out = g.out_h * g.out_w;
  const auto x = random_integers(planes * in, 21, -2, 2);  // ties in most windows
  const auto dy = random_values(planes * out, 22);
  std::vector<float> y_ref(planes * out);
  std::vector<int32_t> mask_ref(planes * out);
  std::vector<double> dx_ref(planes * in, 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int32_t arg = -1;
        for (int64_t ih = oh * g.stride_h - g.pad_h; ih < oh * g.stride_h - g.pad_h + g.kh;
             ++ih) {
          for (int64_t iw = ow * g.stride_w - g.pad_w; iw < ow * g.stride_w - g.pad_w + g.kw;
               ++iw) {
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
            if (arg < 0 || x[p * in + ih * g.w + iw] > best) {  // the first maximum
              best = x[p * in + ih * g.w + iw];
              arg = static_cast<int32_t>(ih * g.w + iw);
            }
          }
        }
        const int64_t o = p * out + oh * g.out_w + ow;
        ASSERT_GE(arg, 0) << "empty window in the test geometry";
        y_ref[o] = best;
        mask_ref[o] = arg;
        dx_ref[p * in + arg] += dy[o];
      }
    }
  }
  std::vector<float> y(planes * out, kGarbage);
  std::vector<int32_t> mask(planes * out, -7);
  backend_.pool_forward(PoolMethod::kMax, g, x.data(), y.data(), mask.data());
  EXPECT_EQ(y, y_ref);
  EXPECT_EQ(mask, mask_ref);

  std::vector<float> dx(planes * in, kGarbage);
  backend_.pool_backward(PoolMethod::kMax, g, dy.data(), mask.data(), dx.data());
  EXPECT_MATCH(dx, to_float(dx_ref), 1e-6);
}

TEST_P(PoolTest, AverageMatchesReference) {
  const PoolGeometry g = geometry_of(GetParam());
  const int64_t planes = g.n * g.c, in = g.h * g.w, out = g.out_h * g.out_w;
  const auto x = random_values(planes * in, 23);
  const auto dy = random_values(planes * out, 24);
  std::vector<double> y_ref(planes * out), dx_ref(planes * in, 0.0);
  for (int64_t p = 0; p < planes; ++p) {
    for (int64_t oh = 0; oh < g.out_h; ++oh) {
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        // The divisor counts the window's positions inside the padded input; the sum only
        // those inside the input.
        double sum = 0;
        int64_t divisor = 0;
        std::vector<int64_t> inside;
        for (int64_t ih = oh * g.stride_h - g.pad_h; ih < oh * g.stride_h - g.pad_h + g.kh;
             ++ih) {
          for (int64_t iw = ow * g.stride_w - g.pad_w; iw < ow * g.stride_w - g.pad_w + g.kw;
               ++iw) {
            if (ih >= g.h + g.pad_h || iw >= g.w + g.pad_w) continue;
            ++divisor;
            if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
            sum += x[p * in + ih * g.w + iw];
            inside.push_back(p * in + ih * g.w + iw);
          }
        }
        const int64_t o = p * out + oh * g.out_w + ow;
        y_ref[o] = sum / divisor;
        for (int64_t i : inside) dx_ref[i] += double(dy[o]) / divisor;
      }
    }
  }
  std::vector<float> y(planes * out, kGarbage);
  backend_.pool_forward(PoolMethod::kAverage, g, x.data(), y.data(), nullptr);
  EXPECT_MATCH(y, to_float(y_ref), 1e-6);

  std::vector<float> dx(planes * in, kGarbage);
  backend_.pool_backward(PoolMethod::kAverage, g, dy.data(), nullptr, dx.data());
  EXPECT_MATCH(dx, to_float(dx_ref), 1e-6);
}

INSTANTIATE_TEST_SUITE_P(
    Geometries, PoolTest,
    ::testing::Values(
        //        name              n  c   h   w  kh kw sh sw ph pw
        PoolCase{"Overlapping3s2",  2, 3,  9, 11, 3, 3, 2, 2, 0, 0},
        PoolCase{"Overlapping3s2P1",2, 3, 10,  7, 3, 3, 2, 2, 1, 1},
        PoolCase{"NotDividing2s2",  3, 2,  7,  9, 2, 2, 2, 2, 0, 0},
        PoolCase{"NonSquarePadded", 2, 3,  8,  9, 2, 3, 1, 2, 1, 0},
        PoolCase{"Pad2Kernel5",     1, 4,  9,  8, 5, 5, 3, 3, 2, 2},
        PoolCase{"Global",          3, 5,  5,  6, 5, 6, 1, 1, 0, 0},
        PoolCase{"Many",           64, 20, 24, 24, 2, 2, 2, 2, 0, 0}),
    [](const ::testing::TestParamInfo<PoolCase>& info) { return std::string(info.param.name); });

// Hand-computed: average pooling of ones with a 3x3 window, stride 1, pad 1 divides by the
// padded window (9), so a corner is 4/9 and an edge 6/9 (Caffe's convention).
TEST_F(NativeConvOpsTest, AveragePoolingDividesByThePaddedWindow) {
  const PoolGeometry g{1, 1, 3, 3, 3, 3, 1, 1, 1, 1, 3, 3};
  const std::vector<float> x(9, 1.0f);
  std::vector<float> y(9, kGarbage);
  backend_.pool_forward(PoolMethod::kAverage, g, x.data(), y.data(), nullptr);
  EXPECT_FLOAT_EQ(y[0], 4.0f / 9);
  EXPECT_FLOAT_EQ(y[1], 6.0f / 9);
  EXPECT_FLOAT_EQ(y[4], 1.0f);
}

// Hand-computed: a tie picks the first maximum in row-major order, and overlapping windows
// route both gradients to a shared arg-max.
TEST_F(NativeConvOpsTest, MaxPoolingTiesPickTheFirstAndOverlapsAdd) {
  // x (1, 1, 3, 3); 2x2 windows, stride 1 -> (2, 2)
  const PoolGeometry g{1, 1, 3, 3, 2, 2, 1, 1, 0, 0, 2, 2};
  const std::vector<float> x = {1, 5, 5,
                                5, 0, 2,
                                3, 3, 3};
  std::vector<float> y(4, kGarbage);
  std::vector<int32_t> mask(4, -7);
  backend_.pool_forward(PoolMethod::kMax, g, x.data(), y.data(), mask.data());
  EXPECT_EQ(y, (std::vector<float>{5, 5, 5, 3}));
  EXPECT_EQ(mask, (std::vector<int32_t>{1, 1, 3, 7}));
  const std::vector<float> dy = {1, 10, 100, 1000};
  std::vector<float> dx(9, kGarbage);
  backend_.pool_backward(PoolMethod::kMax, g, dy.data(), mask.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 11, 0, 100, 0, 0, 0, 1000, 0}));
}

// ---------------------------------------------------------------------------------------
// Batch normalisation
// ---------------------------------------------------------------------------------------

// Per-channel mean and biased variance of x (outer, channels, inner) in double.
void reference_moments(int64_t outer, int64_t channels, int64_t inner,
                       const std::vector<float>& x, std::vector<double>& mean,
                       std::vector<double>& var) {
  mean.assign(channels, 0.0);
  var.assign(channels, 0.0);
  const double m = double(outer * inner);
  for (int64_t c = 0; c < channels; ++c) {
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) mean[c] += x[(o * channels + c) * inner + i];
    }
    mean[c] /= m;
    for (int64_t o = 0; o < outer; ++o) {
      for (int64_t i = 0; i < inner; ++i) {
        const double d = x[(o * channels + c) * inner + i] - mean[c];
        var[c] += d * d;
      }
    }
    var[c] /= m;
  }
}

TEST_F(NativeConvOpsTest, ChannelMomentsWithALargeMean) {
  const int64_t outer = 5, channels = 3, inner = 37;
  auto x = random_values(outer * channels * inner, 31);
  for (int64_t i = 0; i < int64_t(x.size()); ++i) x[i] += 100.0f * ((i / inner) % channels + 1);
  std::vector<double> mean_ref, var_ref;
  reference_moments(outer, channels, inner, x, mean_ref, var_ref);
  std::vector<float> mean(channels, kGarbage), var(channels, kGarbage);
  backend_.channel_moments(outer, channels, inner, x.data(), mean.data(), var.data());
  EXPECT_MATCH(mean, to_float(mean_ref), 1e-6);
  EXPECT_MATCH(var, to_float(var_ref), 1e-5);  // would be ~1e-2 off with float E[x^2]-E[x]^2
  for (double v : var_ref) EXPECT_GT(v, 0.2);    // (uniform [-1, 1]: 1/3)
}

TEST_F(NativeConvOpsTest, ChannelMomentsOfALargeArrayAreDeterministic) {
  const int64_t outer = 64, channels = 7, inner = 97;  // > kParallelMin elements
  const auto x = random_values(outer * channels * inner, 32);
  std::vector<double> mean_ref, var_ref;
  reference_moments(outer, channels, inner, x, mean_ref, var_ref);
  std::vector<float> mean(channels), var(channels), mean2(channels), var2(channels);
  backend_.channel_moments(outer, channels, inner, x.data(), mean.data(), var.data());
  backend_.channel_moments(outer, channels, inner, x.data(), mean2.data(), var2.data());
  EXPECT_MATCH(mean, to_float(mean_ref), 1e-5);
  EXPECT_MATCH(var, to_float(var_ref), 1e-6);
  EXPECT_EQ(mean, mean2);
  EXPECT_EQ(var, var2);
}

TEST_F(NativeConvOpsTest, BatchNormForwardAndBackwardMatchTheFormulas) {
  const int64_t outer = 4, channels = 3, inner = 11, n = outer * channels * inner;
  const float eps = 1e-3f;
  const auto x = random_values(n, 33, -2, 3);
  const auto dy = random_values(n, 34);
  std::vector<float> mean(channels), var(channels);
  backend_.channel_moments(outer, channels, inner, x.data(), mean.data(), var.data());

  std::vector<float> y(n, kGarbage), inv_std(channels, kGarbage), kept(n, kGarbage);
  backend_.batch_norm_forward(outer, channels, inner, eps, x.data(), mean.data(), var.data(),
                              y.data(), inv_std.data(), kept.data());
  EXPECT_EQ(kept, y);
  std::vector<double> inv_ref(channels), y_ref(n);
  for (int64_t c = 0; c < channels; ++c) inv_ref[c] = 1.0 / std::sqrt(double(var[c]) + eps);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = (i / inner) % channels;
    y_ref[i] = (double(x[i]) - mean[c]) * inv_ref[c];
  }
  EXPECT_MATCH(inv_std, to_float(inv_ref), 1e-6);
  EXPECT_MATCH(y, to_float(y_ref), 1e-6);

  // dx = inv_std (dy - mean_c(dy) - y mean_c(dy y)), from the float y the forward wrote.
  std::vector<double> mean_dy(channels, 0.0), mean_dyy(channels, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = (i / inner) % channels;
    mean_dy[c] += dy[i] / double(outer * inner);
    mean_dyy[c] += double(dy[i]) * y[i] / double(outer * inner);
  }
  std::vector<double> dx_ref(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = (i / inner) % channels;
    dx_ref[i] = inv_std[c] * (dy[i] - mean_dy[c] - double(y[i]) * mean_dyy[c]);
  }
  std::vector<float> dx(n, kGarbage);
  backend_.batch_norm_backward(outer, channels, inner, y.data(), dy.data(), inv_std.data(),
                               dx.data());
  EXPECT_MATCH(dx, to_float(dx_ref), 1e-5);

  // In place (dy == dx).
  std::vector<float> inplace = dy;
  backend_.batch_norm_backward(outer, channels, inner, y.data(), inplace.data(),
                               inv_std.data(), inplace.data());
  EXPECT_EQ(inplace, dx);
}

// Running statistics: the sums divided by the factor (in double, rounded once), then the
// same normalisation; a factor of 0 (no update yet) gives Caffe's zero estimates.
TEST_F(NativeConvOpsTest, BatchNormInferenceDividesTheRunningSumsByTheFactor) {
  const int64_t outer = 3, channels = 4, inner = 7, n = outer * channels * inner;
  const float eps = 1e-5f;
  const auto x = random_values(n, 35, -2, 3);
  const auto mean_sum = random_values(channels, 36, -5, 5);
  const auto var_sum = random_values(channels, 37, 0.5f, 9);
  for (float factor : {9.99f, 1.0f, 0.0f}) {
    SCOPED_TRACE(::testing::Message() << "factor " << factor);
    std::vector<float> y(n, kGarbage), mean(channels, kGarbage), inv_std(channels, kGarbage);
    backend_.batch_norm_inference(outer, channels, inner, eps, x.data(), mean_sum.data(),
                                  var_sum.data(), &factor, y.data(), mean.data(),
                                  inv_std.data());
    std::vector<double> mean_ref(channels), inv_ref(channels), y_ref(n);
    for (int64_t c = 0; c < channels; ++c) {
      mean_ref[c] = factor == 0 ? 0.0 : mean_sum[c] / double(factor);
      const double var = factor == 0 ? 0.0 : var_sum[c] / double(factor);
      inv_ref[c] = 1.0 / std::sqrt(var + eps);
    }
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = (i / inner) % channels;
      y_ref[i] = (double(x[i]) - mean_ref[c]) * inv_ref[c];
    }
    EXPECT_MATCH(mean, to_float(mean_ref), 1e-7);
    EXPECT_MATCH(inv_std, to_float(inv_ref), 1e-7);
    EXPECT_MATCH(y, to_float(y_ref), 1e-6);

    // The same as batch_norm_forward with the quotients as its statistics, and in place.
    std::vector<float> var(channels), y2(n), inv2(channels);
    for (int64_t c = 0; c < channels; ++c)
      var[c] = factor == 0 ? 0.0f : static_cast<float>(var_sum[c] / double(factor));
    backend_.batch_norm_forward(outer, channels, inner, eps, x.data(), mean.data(), var.data(),
                                y2.data(), inv2.data(), nullptr);
    EXPECT_EQ(y, y2);
    EXPECT_EQ(inv_std, inv2);
    std::vector<float> inplace = x;
    backend_.batch_norm_inference(outer, channels, inner, eps, inplace.data(), mean_sum.data(),
                                  var_sum.data(), &factor, inplace.data(), mean.data(),
                                  inv_std.data());
    EXPECT_EQ(inplace, y);
  }
}

// batch_norm_backward is the gradient of sum(dy * y(x)) through channel_moments and
// batch_norm_forward: central differences of that loss, in float, step 1e-2.
TEST_F(NativeConvOpsTest, BatchNormBackwardIsTheGradientThroughTheBatchStatistics) {
  const int64_t outer = 3, channels = 2, inner = 5, n = outer * channels * inner;
  const float eps = 1e-4f;
  const auto x0 = random_values(n, 35, -1, 2);
  const auto dy = random_values(n, 36);
  std::vector<float> mean(channels), var(channels), inv_std(channels), y(n);
  auto loss = [&](const std::vector<float>& x) {
    backend_.channel_moments(outer, channels, inner, x.data(), mean.data(), var.data());
    backend_.batch_norm_forward(outer, channels, inner, eps, x.data(), mean.data(), var.data(),
                                y.data(), inv_std.data(), nullptr);
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += double(dy[i]) * y[i];
    return l;
  };
  std::vector<double> numeric(n);
  const float step = 1e-2f;
  for (int64_t i = 0; i < n; ++i) {
    auto x = x0;
    x[i] = x0[i] + step;
    const double up = loss(x);
    x[i] = x0[i] - step;
    const double down = loss(x);
    numeric[i] = (up - down) / (double(x0[i] + step) - double(x0[i] - step));
  }
  loss(x0);  // y, inv_std at x0
  std::vector<float> dx(n, kGarbage);
  backend_.batch_norm_backward(outer, channels, inner, y.data(), dy.data(), inv_std.data(),
                               dx.data());
  EXPECT_MATCH(dx, to_float(numeric), 2e-3);
}

// ---------------------------------------------------------------------------------------
// Per-channel affine and reductions
// ---------------------------------------------------------------------------------------

TEST_F(NativeConvOpsTest, ChannelAffineWithAndWithoutScaleAndBiasInPlace) {
  const int64_t outer = 3, channels = 5, inner = 7, n = outer * channels * inner;
  const auto x = random_values(n, 41);
  const auto scale = random_values(channels, 42);
  const auto bias = random_values(channels, 43);
  for (int variant = 0; variant < 4; ++variant) {
    const bool with_scale = variant & 1, with_bias = variant & 2;
    std::vector<double> expected(n);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t c = (i / inner) % channels;
      expected[i] = double(x[i]) * (with_scale ? scale[c] : 1.0) + (with_bias ? bias[c] : 0.0);
    }
    std::vector<float> y(n, kGarbage);
    backend_.channel_affine(outer, channels, inner, x.data(),
                            with_scale ? scale.data() : nullptr,
                            with_bias ? bias.data() : nullptr, y.data());
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "scale " << with_scale << " bias " << with_bias;
    std::vector<float> inplace = x;
    backend_.channel_affine(outer, channels, inner, inplace.data(),
                            with_scale ? scale.data() : nullptr,
                            with_bias ? bias.data() : nullptr, inplace.data());
    EXPECT_EQ(inplace, y) << "in place, scale " << with_scale << " bias " << with_bias;
  }
}

TEST_F(NativeConvOpsTest, ChannelReduceAccumulatesWithAndWithoutB) {
  const int64_t outer = 6, channels = 4, inner = 13, n = outer * channels * inner;
  const auto a = random_values(n, 44);
  const auto b = random_values(n, 45);
  const auto start = random_values(channels, 46);
  for (bool with_b : {false, true}) {
    std::vector<double> expected(start.begin(), start.end());
    for (int64_t i = 0; i < n; ++i) {
      expected[(i / inner) % channels] += double(a[i]) * (with_b ? b[i] : 1.0);
    }
    std::vector<float> out = start;
    backend_.channel_reduce(outer, channels, inner, a.data(), with_b ? b.data() : nullptr,
                            out.data());
    EXPECT_MATCH(out, to_float(expected), 1e-6) << "with b: " << with_b;
  }
}

// ---------------------------------------------------------------------------------------
// Row copies, element-wise max
// ---------------------------------------------------------------------------------------

TEST_F(NativeConvOpsTest, CopyRowsWithStrides) {
  const int64_t rows = 5, cols = 7, src_stride = 11, dst_stride = 13, offset = 3;
  const auto src = random_values(rows * src_stride, 51);
  const auto start = random_values(rows * dst_stride + offset, 52);
  std::vector<float> expected = start;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      expected[offset + r * dst_stride + j] = src[r * src_stride + j];
    }
  }
  std::vector<float> dst = start;
  backend_.copy_rows(rows, cols, src.data(), src_stride, dst.data() + offset, dst_stride);
  EXPECT_EQ(dst, expected);
}

TEST_F(NativeConvOpsTest, CopyRowsOfALargeArray) {
  const int64_t rows = 300, cols = 257, src_stride = 300, dst_stride = 1000;
  const auto src = random_values(rows * src_stride, 53);
  std::vector<float> dst(rows * dst_stride, 1.0f);
  backend_.copy_rows(rows, cols, src.data(), src_stride, dst.data() + 500, dst_stride);
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(dst[500 + r * dst_stride], src[r * src_stride]);
    ASSERT_EQ(dst[500 + r * dst_stride + cols - 1], src[r * src_stride + cols - 1]);
    ASSERT_EQ(dst[500 + r * dst_stride + cols], 1.0f);
  }
}

TEST_F(NativeConvOpsTest, EltwiseMaxOfThreeInputsWithTies) {
  for (int64_t n : {int64_t{37}, int64_t{100003}}) {
    std::vector<std::vector<float>> inputs;
    for (int k = 0; k < 3; ++k) inputs.push_back(random_integers(n, 61 + k, -2, 2));
    const auto dy = random_values(n, 64);
    std::vector<float> y_ref(n);
    std::vector<int32_t> mask_ref(n);
    for (int64_t i = 0; i < n; ++i) {
      int32_t arg = 0;
      for (int k = 1; k < 3; ++k) {
        if (inputs[k][i] > inputs[arg][i]) arg = k;  // the first input wins a tie
      }
      y_ref[i] = inputs[arg][i];
      mask_ref[i] = arg;
    }
    std::vector<float> y(n, kGarbage);
    std::vector<int32_t> mask(n, -7);
    for (int k = 0; k < 3; ++k) {
      backend_.eltwise_max_forward(n, k, inputs[k].data(), y.data(), mask.data());
    }
    EXPECT_EQ(y, y_ref) << "n = " << n;
    EXPECT_EQ(mask, mask_ref) << "n = " << n;
    int64_t ties_to_first = 0;
    for (int64_t i = 0; i < n; ++i) {
      ties_to_first += mask_ref[i] == 0 && inputs[1][i] == inputs[0][i];
    }
    EXPECT_GT(ties_to_first, 0) << "the test data has no ties";

    for (int k = 0; k < 3; ++k) {
      std::vector<float> dx(n, kGarbage);
      backend_.eltwise_max_backward(n, k, dy.data(), mask.data(), dx.data());
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(dx[i], mask_ref[i] == k ? dy[i] : 0.0f) << "input " << k << ", element " << i;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Timing (printed, not asserted): LeNet's convolutions and pooling at batch 64.
// ---------------------------------------------------------------------------------------

TEST_F(NativeConvOpsTest, LeNetShapesTiming) {
  const ConvGeometry conv1{64, 1, 28, 28, 20, 5, 5, 1, 1, 0, 0, 1, 1, 1, 24, 24};
  const ConvGeometry conv2{64, 20, 12, 12, 50, 5, 5, 1, 1, 0, 0, 1, 1, 1, 8, 8};
  const PoolGeometry pool1{64, 20, 24, 24, 2, 2, 2, 2, 0, 0, 12, 12};
  const PoolGeometry pool2{64, 50, 8, 8, 2, 2, 2, 2, 0, 0, 4, 4};
  const auto x = random_values(64 * 28 * 28, 71);
  const auto w1 = random_values(20 * 25, 72), b1 = random_values(20, 73);
  const auto w2 = random_values(50 * 20 * 25, 74), b2 = random_values(50, 75);
  std::vector<float> y1(64 * 20 * 24 * 24), p1(64 * 20 * 12 * 12), y2(64 * 50 * 8 * 8),
      p2(64 * 50 * 4 * 4), dp1(p1.size()), dy1(y1.size()), dy2(y2.size()), dw1(w1.size()),
      db1(20), dw2(w2.size()), db2(50);
  std::vector<int32_t> m1(p1.size()), m2(p2.size());
  const auto dp2 = random_values(int64_t(p2.size()), 76);
  auto forward = [&] {
    backend_.conv_forward(conv1, x.data(), w1.data(), b1.data(), y1.data());
    backend_.pool_forward(PoolMethod::kMax, pool1, y1.data(), p1.data(), m1.data());
    backend_.conv_forward(conv2, p1.data(), w2.data(), b2.data(), y2.data());
    backend_.pool_forward(PoolMethod::kMax, pool2, y2.data(), p2.data(), m2.data());
  };
  auto backward = [&] {
    backend_.pool_backward(PoolMethod::kMax, pool2, dp2.data(), m2.data(), dy2.data());
    backend_.conv_backward_filter(conv2, p1.data(), dy2.data(), dw2.data(), db2.data());
    backend_.conv_backward_data(conv2, w2.data(), dy2.data(), dp1.data());
    backend_.pool_backward(PoolMethod::kMax, pool1, dp1.data(), m1.data(), dy1.data());
    backend_.conv_backward_filter(conv1, x.data(), dy1.data(), dw1.data(), db1.data());
  };
  // The fastest of several runs: the least disturbed by other processes.
  using Clock = std::chrono::steady_clock;
  auto fastest_ms = [](const std::function<void()>& f) {
    double best = std::numeric_limits<double>::infinity();
    for (int r = 0; r < 20; ++r) {
      const auto start = Clock::now();
      f();
      const std::chrono::duration<double, std::milli> elapsed = Clock::now() - start;
      best = std::min(best, elapsed.count());
    }
    return best;
  };
  forward();
  const double forward_ms = fastest_ms(forward);
  const double backward_ms = fastest_ms(backward);
  std::printf("[ timing   ] LeNet conv+pool at batch 64: forward %.2f ms, backward %.2f ms\n",
              forward_ms, backward_ms);
  for (float v : dw1) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace lamina
