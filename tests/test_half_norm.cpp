// Batch normalisation, Scale, Eltwise SUM and Split in 16 bits on the CPU (backend.hpp, the
// optional groups in 16 bits; docs/precision.md): where the Native backend rounds, exactly;
// the BatchNorm layer in BF16 and FP16 against FP32 within a bound derived from the format;
// and a residual block whose every layer between the data and the loss stores in 16 bits and
// trains.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "half_compare.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "lamina/solver.hpp"
#include "residual_net.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

using ::testing::ElementsAre;

class HalfNorm : public ::testing::TestWithParam<Half> {
 protected:
  Half format() const { return GetParam(); }
  NativeBackend native_;
};

// Each 16-bit result is the FP32 operation's on the exact values, rounded once; statistics,
// inv_std and the backward pass's means stay FP32. (The Native backend computes them so:
// these check its wiring, staging arrays and rounding points, against which the CUDA
// backend is then compared.)
TEST_P(HalfNorm, BatchNormRoundsEachResultOnce) {
  const Half f = format();
  const int64_t outer = 3, c = 4, inner = 10, n = outer * c * inner;
  const Bits x = random_bits(f, n, 1, -2, 3), dy = random_bits(f, n, 2);
  const std::vector<float> xv = values(f, x), dyv = values(f, dy);
  std::vector<float> mean16(c), var16(c), mean(c), var(c), inv16(c), inv(c), y(n), dx(n);
  native_.channel_moments(f, outer, c, inner, x.data(), mean16.data(), var16.data());
  native_.channel_moments(outer, c, inner, xv.data(), mean.data(), var.data());
  EXPECT_EQ(mean16, mean);
  EXPECT_EQ(var16, var);

  Bits y16(n), dx16(n);
  native_.batch_norm_forward(f, outer, c, inner, 1e-5f, x.data(), mean.data(), var.data(),
                             y16.data(), inv16.data(), nullptr);
  native_.batch_norm_forward(outer, c, inner, 1e-5f, xv.data(), mean.data(), var.data(),
                             y.data(), inv.data(), nullptr);
  EXPECT_EQ(values(f, y16), rounded(f, y));
  EXPECT_EQ(inv16, inv);
  // The backward pass reads the stored (rounded) y.
  const std::vector<float> y_stored = values(f, y16);
  native_.batch_norm_backward(f, outer, c, inner, y16.data(), dy.data(), inv.data(), dx16.data());
  native_.batch_norm_backward(outer, c, inner, y_stored.data(), dyv.data(), inv.data(),
                              dx.data());
  EXPECT_EQ(values(f, dx16), rounded(f, dx));

  const std::vector<float> mean_sum = random_values(c, 3), var_sum = random_values(c, 4, 1, 2);
  const float factor = 2.5f;
  native_.batch_norm_inference(f, outer, c, inner, 1e-5f, x.data(), mean_sum.data(),
                               var_sum.data(), &factor, y16.data(), mean16.data(), inv16.data());
  native_.batch_norm_inference(outer, c, inner, 1e-5f, xv.data(), mean_sum.data(),
                               var_sum.data(), &factor, y.data(), mean.data(), inv.data());
  EXPECT_EQ(values(f, y16), rounded(f, y));
  EXPECT_EQ(mean16, mean);
  EXPECT_EQ(inv16, inv);
}

// axpby: round(alpha x + beta y), each product and the sum in FP32; beta 0 does not read y
// (NaN there is overwritten). Per-channel sums of a b (Scale's gradient): FP32 as of the
// exact values.
TEST_P(HalfNorm, AxpbyAndProductSumsRoundOnce) {
  const Half f = format();
  const int64_t n = 300;
  const Bits x = random_bits(f, n, 5, -3, 3), y0 = random_bits(f, n, 6);
  const std::vector<float> xv = values(f, x), yv = values(f, y0);
  for (const auto& [alpha, beta] : {std::pair{1.5f, -0.75f}, {1.0f, 1.0f}, {0.3f, 0.0f}}) {
    Bits y = beta == 0 ? Bits(n, bits_of(f, std::numeric_limits<float>::quiet_NaN())) : y0;
    native_.axpby(f, n, alpha, x.data(), beta, y.data());
    std::vector<float> expected(n);
    for (int64_t i = 0; i < n; ++i) {
      const float ax = alpha * xv[i], by = beta * yv[i];
      expected[i] = beta == 0 ? ax : ax + by;
    }
    EXPECT_EQ(values(f, y), rounded(f, expected)) << alpha << " x + " << beta << " y";
  }
  const int64_t outer = 3, c = 5, inner = 20;
  std::vector<float> sums16(c, 0.5f), sums(c, 0.5f);
  native_.channel_reduce(f, outer, c, inner, x.data(), y0.data(), sums16.data());
  native_.channel_reduce(outer, c, inner, xv.data(), yv.data(), sums.data());
  EXPECT_EQ(sums16, sums);
}

// A BatchNorm layer (batch statistics) on values already in the format, so that both nets
// see the same x and compute the same statistics: y is the FP32 y rounded once. (An FP32
// Scale by 1 before it makes the net propagate to x.) The input
// gradient dx = inv_std (dy - mean(dy) - y mean(dy y)) reads the stored y, which is y (1 + d)
// with |d| <= u (the unit roundoff), and mean(dy y) then moves by at most u mean|dy y|; so
// with the final rounding, |dx16 - dx32| <= inv_std (u |y| |mean(dy y)| + u |y| mean|dy y|)
// + u |dx32|, plus FP32's own rounding of the terms (2^-20 of them); (1 + 2u) for the
// products of two roundings.
TEST_P(HalfNorm, BatchNormLayerStaysWithinItsFormatOfFp32) {
  const Half f = format();
  const Precision p = f == Half::kBF16 ? BF16 : FP16;
  const double u = std::ldexp(1.0, f == Half::kBF16 ? -8 : -11);
  const NetParameter param = parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 dim: 5 dim: 5 } shape { dim: 4 } } }
layer { name: "pre" type: "Scale" precision: FP32 bottom: "data" top: "x"
        scale_param { filler { value: 1 } } }
layer { name: "bn" type: "BatchNorm" bottom: "x" top: "bn" }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)", "net");
  NetParameter half = param;
  set_default_precision(half, p);
  Net n32(param, TRAIN, native_, 1), n16(half, TRAIN, native_, 1);
  const std::string name = Precision_Name(p);
  ASSERT_THAT(layer_names(n16),
              ElementsAre("data", "pre", "x_" + name, "bn", "bn_FP32", "ip", "loss"));
  const int64_t outer = 4, c = 3, inner = 25, n = outer * c * inner;
  const std::vector<float> data = rounded(f, random_values(n, 7, -1, 2));
  const std::vector<float> dy = rounded(f, random_values(n, 8));
  forward_and_backward(n32, 2, data, dy);
  forward_and_backward(n16, 3, data, dy);
  const std::vector<float> y = n32.blob("bn").copy_data_to_host();
  EXPECT_EQ(n16.blob("bn").copy_data_to_host(), rounded(f, y));

  std::vector<double> mean_dyy(c), mean_abs(c), inv_std(c);
  std::vector<double> sum_sq(c), sum(c);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i / inner) % c;
    mean_dyy[k] += double(dy[i]) * y[i] / double(outer * inner);
    mean_abs[k] += std::abs(double(dy[i]) * y[i]) / double(outer * inner);
    sum[k] += data[i];
    sum_sq[k] += double(data[i]) * data[i];
  }
  for (int64_t k = 0; k < c; ++k) {
    const double m = double(outer * inner), mu = sum[k] / m;
    inv_std[k] = 1.0 / std::sqrt(sum_sq[k] / m - mu * mu + 1e-5);
  }
  const std::vector<float> dx32 = n32.blob("x").copy_diff_to_host();
  const std::vector<float> dx16 = n16.blob("x_" + name).copy_diff_to_host();
  ASSERT_EQ(dx16.size(), dx32.size());
  EXPECT_NE(dx16, dx32) << name << " must change the gradient";
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = (i / inner) % c;
    const double terms = std::abs(dy[i]) + std::abs(y[i] * mean_dyy[k]) + mean_abs[k];
    const double bound = (1 + 2 * u) * (inv_std[k] * std::abs(y[i]) * u *
                                            (std::abs(mean_dyy[k]) + mean_abs[k]) +
                                        u * std::abs(dx32[i])) +
                         std::ldexp(inv_std[k] * terms, -20);
    EXPECT_NEAR(dx16[i], dx32[i], bound) << "dx at " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfNorm, ::testing::Values(Half::kBF16, Half::kFP16),
                         [](const auto& info) { return format_name(info.param); });

// A residual block in BF16: past the data's Convert every layer (convolutions, BatchNorm,
// Scale, ReLU, the Split of the shortcut, Eltwise, pooling, Linear) stores in 16 bits, and
// only the loss reads FP32. It trains.
TEST(HalfResidualNet, EveryLayerStoresIn16BitsAndTheNetTrains) {
  NativeBackend native;
  SolverParameter sp = parse_solver_parameter("base_lr: 0.1 momentum: 0.9 random_seed: 3",
                                              "solver");
  sp.set_precision(BF16);
  Solver solver(sp, residual_net(), native);
  Net& net = solver.net();
  EXPECT_THAT(layer_names(net),
              ElementsAre("data", "data_BF16", "conv0", "bn0", "scale0", "relu0",
                          "b0_relu0_0_split", "conv1", "bn1", "scale1", "relu1", "conv2", "bn2",
                          "scale2", "sum", "relu2", "pool", "fc", "fc_FP32", "loss"));
  for (int i = 1; i < net.num_layers() - 2; ++i)
    EXPECT_EQ(net.layer_storage(i), DType::kBF16) << net.layer(i).name();
  set_residual_data(net);
  solver.step(1);
  const float first = net.loss();
  solver.step(40);
  std::printf("BF16 residual net: loss %.4f -> %.4f after 40 steps\n", first, net.loss());
  EXPECT_LT(net.loss(), 0.2f * first);
  EXPECT_EQ(half_copy_mismatch(native, net.arena(), Half::kBF16), "");
}

}  // namespace
}  // namespace lamina::testing
