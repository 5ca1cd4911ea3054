// Convolution and pooling in 16 bits on the CPU (backend.hpp, the optional groups in 16 bits;
// docs/precision.md): a Convolution layer in BF16 and FP16 against FP32 within bounds derived
// from the format, pooling's exact maxima and once-rounded averages and gradients, and a
// convolutional net that stores its convolutions and pooling in 16 bits and trains.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "lamina/rounding.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::ElementsAre;
using testing::layer_names;
using testing::random_values;

// The unit roundoff of a 16-bit format: 2^-8 in BF16, 2^-11 in FP16.
double unit_of(Half f) { return std::ldexp(1.0, f == Half::kBF16 ? -8 : -11); }

float rounded(float x, Half f) {
  return f == Half::kBF16 ? bf16_to_float(float_to_bf16(x)) : fp16_to_float(float_to_fp16(x));
}
std::vector<float> rounded(std::vector<float> v, Half f) {
  for (float& x : v) x = rounded(x, f);
  return v;
}

// conv1 (4 -> 5 channels, 3x3, pad 1, stride 2, with bias) between two FP32 layers.
const char* kConv = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 7 dim: 7 } shape { dim: 2 } } }
layer { name: "conv0" type: "Convolution" precision: FP32 convolution_param { num_output: 4
        kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "conv1" type: "Convolution" convolution_param { num_output: 5 kernel_size: 3
        pad: 1 stride: 2 weight_filler { type: "gaussian" std: 0.3 }
        bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip2" type: "Linear" precision: FP32 inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" }
)";

// conv1's geometry in kConv: x (2, 4, 7, 7), w (5, 4, 3, 3) -> y (2, 5, 4, 4).
constexpr int64_t kN = 2, kC = 4, kH = 7, kK = 5, kTaps = 3, kOut = 4;

// Calls f(y index, x index, w index) for every product of conv1's sums.
template <class F>
void for_each_product(F f) {
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t k = 0; k < kK; ++k)
      for (int64_t oh = 0; oh < kOut; ++oh)
        for (int64_t ow = 0; ow < kOut; ++ow)
          for (int64_t c = 0; c < kC; ++c)
            for (int64_t i = 0; i < kTaps; ++i)
              for (int64_t j = 0; j < kTaps; ++j) {
                const int64_t ih = oh * 2 - 1 + i, iw = ow * 2 - 1 + j;
                if (ih < 0 || ih >= kH || iw < 0 || iw >= kH) continue;
                f(((n * kK + k) * kOut + oh) * kOut + ow, ((n * kC + c) * kH + ih) * kH + iw,
                  ((k * kC + c) * kTaps + i) * kTaps + j);
              }
}

class HalfConvolution : public ::testing::TestWithParam<Precision> {};

// The same weights, input and top gradient in FP32 and in the format. The format rounds x, W
// and dy (a relative u each) and the results: y's product once, then y again after the FP32
// bias (u |y|); dx once; this call's dW once. Sums run in FP32 either way. So with S the sum
// of |products| behind a result: y within 3 u S + u |y|, dx and dW within 2 u S + u |value|
// (plus 1% of the first term for FP32's own rounding), db (FP32 sums of the rounded dy)
// within u sum |dy|.
TEST_P(HalfConvolution, StaysWithinItsFormatOfFp32ForwardAndBackward) {
  NativeBackend native;
  const Precision p = GetParam();
  const Half format = half_format(storage_of(p));
  const double u = unit_of(format);
  const NetParameter param = parse_net_parameter(kConv, "net");
  NetParameter half = param;
  set_default_precision(half, p);
  Net n32(param, TRAIN, native, 1), n16(half, TRAIN, native, 1);
  const std::string name = Precision_Name(p);
  ASSERT_THAT(layer_names(n16), ElementsAre("data", "conv0", "conv0_" + name, "conv1",
                                            "conv1_FP32", "ip2", "loss"));
  const int conv32 = 2, conv16 = 3;
  const std::vector<float> data = random_values(kN * 3 * kH * kH, 5);
  const std::vector<float> dy = random_values(kN * kK * kOut * kOut, 6);
  testing::forward_and_backward(n32, conv32, data, dy);
  testing::forward_and_backward(n16, conv16, data, dy);
  const std::vector<float> x = n32.blob("conv0").copy_data_to_host();
  const std::vector<float> w = n32.layer(conv32).params()[0].tensor->copy_data_to_host();
  std::vector<double> s_y(dy.size()), s_x(x.size()), s_w(w.size());
  for_each_product([&](int64_t yi, int64_t xi, int64_t wi) {
    s_y[yi] += std::abs(x[xi] * w[wi]);
    s_x[xi] += std::abs(dy[yi] * w[wi]);
    s_w[wi] += std::abs(dy[yi] * x[xi]);
  });
  const auto expect_within = [&](const std::vector<float>& v16, const std::vector<float>& v32,
                                 const std::vector<double>& s, double sums, const char* what) {
    ASSERT_EQ(v16.size(), v32.size());
    for (size_t i = 0; i < v32.size(); ++i) {
      EXPECT_NEAR(v16[i], v32[i], 1.01 * sums * u * s[i] + u * std::abs(v32[i]))
          << what << " at " << i;
    }
  };
  const std::vector<float> y16 = n16.blob("conv1").copy_data_to_host();
  EXPECT_EQ(y16, rounded(y16, format)) << "the top holds " << name << " values";
  EXPECT_NE(y16, n32.blob("conv1").copy_data_to_host()) << name << " must change the results";
  expect_within(y16, n32.blob("conv1").copy_data_to_host(), s_y, 3, "y");
  expect_within(n16.blob("conv0_" + name).copy_diff_to_host(),
                n32.blob("conv0").copy_diff_to_host(), s_x, 2, "dx");
  const std::vector<float> dw16 = n16.layer(conv16).params()[0].tensor->copy_diff_to_host();
  expect_within(dw16, n32.layer(conv32).params()[0].tensor->copy_diff_to_host(), s_w, 2, "dw");
  EXPECT_EQ(dw16, rounded(dw16, format)) << "one call's weight gradient is rounded once";
  const std::vector<float> db16 = n16.layer(conv16).params()[1].tensor->copy_diff_to_host();
  const std::vector<float> db32 = n32.layer(conv32).params()[1].tensor->copy_diff_to_host();
  for (int64_t k = 0; k < kK; ++k) {
    double s = 0;
    for (int64_t n = 0; n < kN; ++n)
      for (int64_t o = 0; o < kOut * kOut; ++o) s += std::abs(dy[(n * kK + k) * kOut * kOut + o]);
    EXPECT_NEAR(db16[k], db32[k], 1.01 * u * s) << k;
  }
}

// Pooling of values already in the format: a maximum is one of them (exact, the same
// arg-max), an average and the backward sums are the FP32 results rounded once.
TEST_P(HalfConvolution, PoolingIsExactForMaximaAndRoundsSumsOnce) {
  NativeBackend native;
  const Half format = half_format(storage_of(GetParam()));
  PoolGeometry g{2, 3, 7, 7, 3, 3, 2, 2, 1, 1, 4, 4};
  const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.out_h * g.out_w;
  std::vector<float> x = random_values(in, 7, -2, 2), dy = random_values(out, 8);
  for (float& v : x) v = std::round(v * 4) / 4;  // ties, broken by the first in row order
  dy = rounded(dy, format);
  std::vector<uint16_t> x16(in), dy16(out), y16(out), dx16(in);
  native.to_half(format, in, x.data(), x16.data());
  native.to_half(format, out, dy.data(), dy16.data());
  for (PoolMethod method : {PoolMethod::kMax, PoolMethod::kAverage}) {
    SCOPED_TRACE(method == PoolMethod::kMax ? "max" : "average");
    std::vector<float> y(out), dx(in), y_back(out), dx_back(in);
    std::vector<int32_t> mask(out, -5), mask16(out, -7);
    native.pool_forward(method, g, x.data(), y.data(), mask.data());
    native.pool_backward(method, g, dy.data(), mask.data(), dx.data());
    native.pool_forward(format, method, g, x16.data(), y16.data(), mask16.data());
    native.pool_backward(format, method, g, dy16.data(), mask16.data(), dx16.data());
    native.from_half(format, out, y16.data(), y_back.data());
    native.from_half(format, in, dx16.data(), dx_back.data());
    if (method == PoolMethod::kMax) {
      EXPECT_EQ(y_back, y);
      EXPECT_EQ(mask16, mask);
    } else {
      EXPECT_EQ(y_back, rounded(y, format));
    }
    EXPECT_EQ(dx_back, rounded(dx, format));
  }
}

// Where the Native backend rounds, exactly: y = round(round(x * w) + bias), and each call's
// weight gradient rounded once before it joins a non-zero FP32 gradient.
TEST_P(HalfConvolution, RoundsTheProductBeforeTheBiasAndEachCallsWeightGradient) {
  NativeBackend native;
  const Half format = half_format(storage_of(GetParam()));
  const ConvGeometry g = testing::conv_geometry(2, 3, 6, 6, 4, 3, 3, 1, 1);
  const std::vector<float> x = rounded(random_values(g.input_count(), 1), format);
  const std::vector<float> w = rounded(random_values(g.weight_count(), 2), format);
  const std::vector<float> dy = rounded(random_values(g.output_count(), 3), format);
  const std::vector<float> bias = random_values(g.k, 4), dw0 = random_values(g.weight_count(), 5);
  std::vector<uint16_t> x16(x.size()), w16(w.size()), dy16(dy.size()), y16(dy.size());
  native.to_half(format, x.size(), x.data(), x16.data());
  native.to_half(format, w.size(), w.data(), w16.data());
  native.to_half(format, dy.size(), dy.data(), dy16.data());
  native.conv_forward(format, g, x16.data(), w16.data(), bias.data(), y16.data());
  std::vector<float> y(dy.size()), y_back(dy.size());
  native.conv_forward(g, x.data(), w.data(), nullptr, y.data());
  y = rounded(y, format);
  const int64_t plane = g.out_h * g.out_w;
  for (size_t i = 0; i < y.size(); ++i) y[i] = rounded(y[i] + bias[(i / plane) % g.k], format);
  native.from_half(format, y16.size(), y16.data(), y_back.data());
  EXPECT_EQ(y_back, y);

  std::vector<float> dw = dw0, one(g.weight_count(), 0.0f);
  native.conv_backward_filter(format, g, x16.data(), dy16.data(), dw.data(), nullptr);
  native.conv_backward_filter(format, g, x16.data(), dy16.data(), dw.data(), nullptr);
  native.conv_backward_filter(g, x.data(), dy.data(), one.data(), nullptr);
  one = rounded(one, format);
  std::vector<float> expected = dw0;
  for (size_t i = 0; i < expected.size(); ++i) expected[i] = (expected[i] + one[i]) + one[i];
  EXPECT_EQ(dw, expected);
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfConvolution, ::testing::Values(BF16, FP16),
                         [](const auto& info) { return Precision_Name(info.param); });

// A LeNet-like net in BF16: the data is rounded once on the way in, convolutions, pooling,
// the ReLU and the Linear layers store in 16 bits, and only the loss reads FP32. It trains.
TEST(HalfConvNet, ConvolutionsAndPoolingStoreIn16BitsAndTheNetTrains) {
  const char* net_text = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 16 dim: 1 dim: 12 dim: 12 } shape { dim: 16 } } }
layer { name: "conv1" type: "Convolution" convolution_param { num_output: 6 kernel_size: 5
        weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "pool1" top: "pool1" }
layer { name: "ip1" type: "Linear" inner_product_param { num_output: 3
        weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" }
)";
  NativeBackend native;
  SolverParameter sp = parse_solver_parameter("base_lr: 0.2 random_seed: 3", "solver");
  sp.set_precision(BF16);
  Solver solver(sp, parse_net_parameter(net_text, "net"), native);
  Net& net = solver.net();
  EXPECT_THAT(layer_names(net), ElementsAre("data", "data_BF16", "conv1", "pool1", "relu1",
                                            "ip1", "ip1_FP32", "loss"));
  for (const char* blob : {"conv1", "pool1", "ip1"})
    EXPECT_EQ(net.blob(blob).dtype(), DType::kBF16) << blob;

  // Three classes told apart by where a bright square sits; SGD must learn them.
  std::vector<float> data(16 * 144, 0.0f), labels(16);
  for (int i = 0; i < 16; ++i) {
    labels[i] = float(i % 3);
    const int at = 1 + 3 * (i % 3);
    for (int r = at; r < at + 3; ++r)
      for (int c = at; c < at + 3; ++c) data[i * 144 + r * 12 + c] = 1.0f;
  }
  net.blob("data").copy_data_from_host(data);
  net.blob("label").copy_data_from_host(labels);
  solver.step(1);
  const float first = net.loss();
  solver.step(60);
  std::printf("BF16 conv net: loss %.4f -> %.4f after 60 steps\n", first, net.loss());
  EXPECT_LT(net.loss(), 0.2f * first);
  EXPECT_EQ(testing::half_copy_mismatch(native, net.arena(), Half::kBF16), "");
}

}  // namespace
}  // namespace lamina
