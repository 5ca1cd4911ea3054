// Scale, Eltwise (SUM, PROD, MAX), Split, BatchNorm (running statistics), Dropout, Bias and
// Concat as layers in 16 bits on the CPU,
// and where the net converts around layers with and without a 16-bit path. Inputs are values
// already in the format, so that each result can be computed here from the exact operands:
// every 16-bit result is the FP32 operation's rounded once, at the points docs/precision.md
// names, and parameter gradients (FP32) equal the FP32 net's.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "half_compare.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

using ::testing::ElementsAre;

class HalfLayers : public ::testing::TestWithParam<Half> {
 protected:
  Half format() const { return GetParam(); }
  Precision precision() const { return format() == Half::kBF16 ? BF16 : FP16; }
  std::string name() const { return Precision_Name(precision()); }
  // The net in the format (every layer that names no precision), and in FP32.
  Net& build(const std::string& text, Phase phase = TRAIN) {
    NetParameter param = parse_net_parameter(text, "net");
    nets_.push_back(std::make_unique<Net>(param, phase, native_, 1));
    set_default_precision(param, precision());
    nets_.push_back(std::make_unique<Net>(param, phase, native_, 1));
    return *nets_.back();
  }
  Net& fp32() { return *nets_[nets_.size() - 2]; }
  NativeBackend native_;
  std::vector<std::unique_ptr<Net>> nets_;
};

// x = data (a Scale by 1 in the format, so that x needs a gradient), then Scale with a bias,
// in place on x or not: y = round(x s + b), dx = round(dy s); dscale and dbias are the FP32
// net's (double sums of the same exact values). In place, dscale reads the kept input.
TEST_P(HalfLayers, ScaleRoundsOnceAndItsParameterGradientsAreFp32s) {
  const Half f = format();
  for (const bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const std::string top = in_place ? "x" : "y";
    Net& net = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "sc" type: "Scale" bottom: "x" top: ")" + top + R"(" scale_param { bias_term: true
        filler { type: "gaussian" std: 1 } bias_filler { type: "gaussian" std: 1 } } }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)");
    ASSERT_THAT(layer_names(net), ElementsAre("data", "data_" + name(), "pre", "sc",
                                              top + "_FP32", "ip", "loss"));
    const std::vector<float> data = rounded(f, random_values(24, 1, -2, 2));
    const std::vector<float> dy = rounded(f, random_values(24, 2));
    forward_and_backward(fp32(), 2, data, dy);
    forward_and_backward(net, 3, data, dy);
    const std::vector<float> s = net.layer(3).params()[0].tensor->copy_data_to_host();
    const std::vector<float> b = net.layer(3).params()[1].tensor->copy_data_to_host();
    std::vector<float> y(24), dx(24);
    for (int i = 0; i < 24; ++i) {
      const int c = (i / 4) % 3;
      y[i] = round_to(f, data[i] * s[c] + b[c]);
      dx[i] = round_to(f, dy[i] * s[c]);
    }
    EXPECT_EQ(net.blob(top).copy_data_to_host(), y);
    EXPECT_EQ(net.blob("x").copy_diff_to_host(), dx);
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(net.layer(3).params()[p].tensor->copy_diff_to_host(),
                fp32().layer(2).params()[p].tensor->copy_diff_to_host())
          << "parameter " << p;
    }
  }
}

// SUM of x three times with coefficients 1.5, -0.5, 2: y = round(round(round(1.5 x) - 0.5 x)
// + 2 x); backward, dx_i = round(coeff_i dy), then the Split adds them: dx = round(round(dx_0 +
// dx_1) + dx_2).
TEST_P(HalfLayers, EltwiseSumRoundsEachTermAndSplitAddsTheGradientsInTurn) {
  const Half f = format();
  Net& net = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 6 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "sum" type: "Eltwise" bottom: "x" bottom: "x" bottom: "x" top: "s"
        eltwise_param { operation: SUM coeff: 1.5 coeff: -0.5 coeff: 2 } }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)");
  ASSERT_THAT(layer_names(net), ElementsAre("data", "data_" + name(), "pre", "x_pre_0_split",
                                            "sum", "s_FP32", "ip", "loss"));
  EXPECT_EQ(net.layer_storage(3), dtype_of(f));
  const std::vector<float> x = rounded(f, random_values(12, 3, -4, 4));
  const std::vector<float> dy = rounded(f, random_values(12, 4));
  forward_and_backward(net, 4, x, dy);
  net.backward_layer(3);
  std::vector<float> y(12), dx(12);
  for (int i = 0; i < 12; ++i) {
    y[i] = round_to(f, round_to(f, round_to(f, 1.5f * x[i]) + -0.5f * x[i]) + 2.0f * x[i]);
    const float d0 = round_to(f, 1.5f * dy[i]), d1 = round_to(f, -0.5f * dy[i]);
    dx[i] = round_to(f, round_to(f, d0 + d1) + round_to(f, 2.0f * dy[i]));
  }
  EXPECT_EQ(net.blob("s").copy_data_to_host(), y);
  EXPECT_EQ(net.blob("x").copy_diff_to_host(), dx);
}

// With running statistics (use_global_stats) y = round((x - mean) inv_std) with Caffe's
// estimates mean_sum / factor and var_sum / factor, and dx = round(dy inv_std).
TEST_P(HalfLayers, BatchNormWithRunningStatisticsRoundsOnce) {
  const Half f = format();
  Net& net = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 5 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y"
        batch_norm_param { use_global_stats: true } }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)");
  const int bn = layer_index(net, "bn");
  const std::vector<float> mean_sum = {0.5f, -1.0f, 2.0f}, var_sum = {2.0f, 0.5f, 4.0f};
  auto& params = net.layer(bn).params();
  params[0].tensor->copy_data_from_host(mean_sum);
  params[1].tensor->copy_data_from_host(var_sum);
  params[2].tensor->copy_data_from_host(std::vector<float>{2.0f});
  const std::vector<float> x = rounded(f, random_values(30, 5, -3, 3));
  const std::vector<float> dy = rounded(f, random_values(30, 6));
  forward_and_backward(net, bn, x, dy);
  std::vector<float> y(30), dx(30);
  for (int i = 0; i < 30; ++i) {
    const int c = (i / 5) % 3;
    const float mean = mean_sum[c] / 2.0f, var = var_sum[c] / 2.0f;
    const float inv_std = static_cast<float>(1.0 / std::sqrt(double(var) + 1e-5));
    y[i] = round_to(f, (x[i] - mean) * inv_std);
    dx[i] = round_to(f, dy[i] * inv_std);
  }
  EXPECT_EQ(net.blob("y").copy_data_to_host(), y);
  EXPECT_EQ(net.blob("x").copy_diff_to_host(), dx);
}

// x -> Dropout -> d, d -> Bias -> e, Concat(d, e) -> c: d = round(x m) with the FP32 net's
// mask m (the same seed), e = round(d + b), c their copies. Backward from dc: the Split of d
// adds its two gradients (Bias's dx = dc's e slice, Concat's d slice) and rounds once, then
// dx = round(dd m); dbias is the FP32 net's.
TEST_P(HalfLayers, DropoutBiasAndConcatRoundWhereTheyComputeAndCopyExactly) {
  const Half f = format();
  Net& net = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "drop" type: "Dropout" bottom: "x" top: "d" dropout_param { dropout_ratio: 0.3 } }
layer { name: "bias" type: "Bias" bottom: "d" top: "e"
        bias_param { filler { type: "gaussian" std: 1 } } }
layer { name: "concat" type: "Concat" bottom: "d" bottom: "e" top: "c" }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)");
  ASSERT_THAT(layer_names(net), ElementsAre("data", "data_" + name(), "pre", "drop",
                                            "d_drop_0_split", "bias", "concat", "c_FP32", "ip",
                                            "loss"));
  const std::vector<float> x = rounded(f, random_values(24, 7, -2, 2));
  const std::vector<float> dc = rounded(f, random_values(48, 8));
  for (Net* n : {&fp32(), &net}) {
    const int concat = layer_index(*n, "concat"), drop = layer_index(*n, "drop");
    forward_and_backward(*n, concat, x, dc);
    for (int i = concat - 1; i >= drop; --i) n->backward_layer(i);
  }
  const std::vector<float> d32 = fp32().blob("d").copy_data_to_host();
  const std::vector<float> b = net.layer(5).params()[0].tensor->copy_data_to_host();
  const float keep = 1.0f / (1.0f - 0.3f);
  std::vector<float> d(24), e(24), c(48), dx(24);
  for (int i = 0; i < 24; ++i) {
    const int row = i / 12, k = i % 12;  // (2, 12) rows of d and e, (2, 24) of c
    d[i] = round_to(f, d32[i]);
    e[i] = round_to(f, d[i] + b[k / 4]);
    c[row * 24 + k] = d[i];
    c[row * 24 + 12 + k] = e[i];
    const float dd = round_to(f, dc[row * 24 + 12 + k] + dc[row * 24 + k]);
    dx[i] = round_to(f, dd * (d32[i] == 0 ? 0.0f : keep));
  }
  EXPECT_NE(std::count(d32.begin(), d32.end(), 0.0f), 0) << "Dropout must drop some";
  EXPECT_EQ(net.blob("d").copy_data_to_host(), d);
  EXPECT_EQ(net.blob("e").copy_data_to_host(), e);
  EXPECT_EQ(net.blob("c").copy_data_to_host(), c);
  EXPECT_EQ(net.blob("x").copy_diff_to_host(), dx);
  EXPECT_EQ(net.layer(5).params()[0].tensor->copy_diff_to_host(),
            fp32().layer(layer_index(fp32(), "bias")).params()[0].tensor->copy_diff_to_host());
}

// PROD of a, b, c: y = round(round(a b) c), dx_a = round(round(dy b) c) and so on; MAX of a
// and b: y and dx select, exactly, the first on ties.
TEST_P(HalfLayers, EltwiseProdRoundsEachProductAndMaxSelectsExactly) {
  const Half f = format();
  const char* net_text = R"(
layer { name: "data" type: "Input" top: "a" top: "b" top: "c" top: "label"
        input_param { shape { dim: 2 dim: 6 } shape { dim: 2 dim: 6 } shape { dim: 2 dim: 6 }
                      shape { dim: 2 } } }
layer { name: "pa" type: "Scale" bottom: "a" top: "xa" }
layer { name: "pb" type: "Scale" bottom: "b" top: "xb" }
layer { name: "pc" type: "Scale" bottom: "c" top: "xc" }
layer { name: "op" type: "Eltwise" bottom: "xa" bottom: "xb" bottom: "xc" top: "y"
        eltwise_param { operation: OPERATION } }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)";
  std::vector<float> in[3];
  for (int k = 0; k < 3; ++k) in[k] = rounded(f, random_values(12, 10 + k, -2, 2));
  in[1][0] = in[0][0];  // a tie: the first bottom wins
  const std::vector<float> dy = rounded(f, random_values(12, 13));
  for (const char* op : {"PROD", "MAX"}) {
    SCOPED_TRACE(op);
    std::string text = net_text;
    text.replace(text.find("OPERATION"), 9, op);
    Net& net = build(text);
    for (int k = 0; k < 3; ++k) net.blob(std::string(1, char('a' + k))).copy_data_from_host(in[k]);
    net.forward();
    net.arena().zero_diff();
    const int at = layer_index(net, "op");
    net.layer_tops(at)[0]->copy_diff_from_host(dy);
    net.backward_layer(at);
    std::vector<float> y(12), dx[3];
    for (auto& d : dx) d.assign(12, 0.0f);
    for (int i = 0; i < 12; ++i) {
      const float a = in[0][i], b = in[1][i], c = in[2][i];
      if (std::string(op) == "PROD") {
        y[i] = round_to(f, round_to(f, a * b) * c);
        dx[0][i] = round_to(f, round_to(f, dy[i] * b) * c);
        dx[1][i] = round_to(f, round_to(f, dy[i] * a) * c);
        dx[2][i] = round_to(f, round_to(f, dy[i] * a) * b);
      } else {
        const int won = b > a ? (c > b ? 2 : 1) : (c > a ? 2 : 0);
        y[i] = in[won][i];
        dx[won][i] = dy[i];
      }
    }
    EXPECT_EQ(net.blob("y").copy_data_to_host(), y);
    for (int k = 0; k < 3; ++k) {
      EXPECT_EQ(net.blob(std::string("x") + char('a' + k)).copy_diff_to_host(), dx[k]) << k;
    }
  }
}

// Bias in place: y = round(x + b) over x, whose gradient (shared with y's) is left as it
// came; Dropout in TEST copies its 16-bit bottom.
TEST_P(HalfLayers, BiasInPlaceRoundsOnceAndDropoutInTestCopies) {
  const Half f = format();
  const char* text = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 2 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "bias" type: "Bias" bottom: "x" top: "x"
        bias_param { filler { type: "gaussian" std: 1 } } }
layer { name: "drop" type: "Dropout" bottom: "x" top: "d" }
layer { name: "ip" type: "Linear" precision: FP32 inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)";
  const std::vector<float> data = rounded(f, random_values(12, 14, -2, 2));
  const std::vector<float> dy = rounded(f, random_values(12, 15));
  Net& net = build(text);
  const int bias = layer_index(net, "bias");
  EXPECT_EQ(net.layer_storage(bias), dtype_of(f));
  forward_and_backward(net, bias, data, dy);
  const std::vector<float> b = net.layer(bias).params()[0].tensor->copy_data_to_host();
  std::vector<float> y(12);
  for (int i = 0; i < 12; ++i) y[i] = round_to(f, data[i] + b[(i / 2) % 3]);
  EXPECT_EQ(net.blob("x").copy_data_to_host(), y);
  EXPECT_EQ(net.blob("x").copy_diff_to_host(), dy);

  Net& test = build(text, TEST);
  test.blob("data").copy_data_from_host(data);
  test.forward();
  EXPECT_EQ(test.layer_storage(layer_index(test, "drop")), dtype_of(f));
  EXPECT_EQ(test.blob("d").copy_data_to_host(), test.blob("x").copy_data_to_host());
}

// Layers chained in a Sequential container (no bottom or top of their own) run in 16 bits as
// written-out ones do.
TEST_P(HalfLayers, ChainedLayersStoreIn16Bits) {
  Net& net = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } shape { dim: 2 } } }
layer { name: "seq" type: "Sequential" bottom: "data" top: "out"
        layer { name: "conv" type: "Convolution"
                convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }
        layer { name: "bn" type: "BatchNorm" }
        layer { name: "scale" type: "Scale" }
        layer { name: "bias" type: "Bias" }
        layer { name: "relu" type: "ReLU" }
        layer { name: "drop" type: "Dropout" } }
layer { name: "ip" type: "Linear" precision: FP32 bottom: "out"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)");
  int chained = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i).name().rfind("seq/", 0) != 0) continue;
    ++chained;
    EXPECT_EQ(net.layer_storage(i), dtype_of(format())) << net.layer(i).name();
  }
  EXPECT_EQ(chained, 6);
}

// Where the net converts: a layer without a 16-bit path (EuclideanLoss) gets FP32 copies of
// its 16-bit bottoms; a Split read only by FP32 layers (the loss and Accuracy) stores FP32
// after one Convert; a Split read by a 16-bit layer and an FP32 one stores 16 bits, and only
// the FP32 reader gets a Convert.
TEST_P(HalfLayers, ConvertsGoWhereTheStorageChanges) {
  const std::string n = name();
  Net& euclidean = build(R"(
layer { name: "data" type: "Input" top: "a" top: "b"
        input_param { shape { dim: 2 dim: 4 } shape { dim: 2 dim: 4 } } }
layer { name: "pa" type: "Scale" bottom: "a" top: "xa" }
layer { name: "pb" type: "Scale" bottom: "b" top: "xb" }
layer { name: "loss" type: "EuclideanLoss" bottom: "xa" bottom: "xb" }
)");
  EXPECT_THAT(layer_names(euclidean), ElementsAre("data", "a_" + n, "pa", "b_" + n, "pb",
                                                  "xa_FP32", "xb_FP32", "loss"));
  const char* scores = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 4 } shape { dim: 2 } } }
layer { name: "fc" type: "Linear" bottom: "data" top: "fc" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" }
layer { name: "acc" type: "Accuracy" bottom: "fc" bottom: "label" top: "acc" }
)";
  Net& both_fp32 = build(scores);
  EXPECT_THAT(layer_names(both_fp32),
              ElementsAre("data", "label_data_1_split", "data_" + n, "fc", "fc_FP32",
                          "fc_fc_0_split", "loss", "acc"));
  EXPECT_EQ(both_fp32.layer_storage(5), DType::kF32);
  Net& mixed = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 4 } shape { dim: 2 } } }
layer { name: "fc" type: "Linear" bottom: "data" top: "fc" inner_product_param { num_output: 3 } }
layer { name: "fc2" type: "Linear" bottom: "fc" top: "fc2" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" }
layer { name: "loss2" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" }
)");
  EXPECT_THAT(layer_names(mixed),
              ElementsAre("data", "label_data_1_split", "data_" + n, "fc", "fc_fc_0_split",
                          "fc2", "fc_fc_0_split_1_FP32", "loss", "fc2_FP32", "loss2"));
  EXPECT_EQ(mixed.layer_storage(4), dtype_of(format()));
  // A view of a Split's top follows the Split, which then stays 16-bit; a Linear asked for
  // FP32 reads FP32.
  Net& viewed = build(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 4 } shape { dim: 2 } } }
layer { name: "fc" type: "Linear" bottom: "data" top: "fc" inner_product_param { num_output: 3 } }
layer { name: "flat" type: "Flatten" bottom: "fc" top: "flat" }
layer { name: "fc2" type: "Linear" precision: FP32 bottom: "fc" top: "fc2"
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc2" bottom: "label" }
)");
  EXPECT_EQ(viewed.layer_storage(layer_index(viewed, "fc_fc_0_split")), dtype_of(format()));
  EXPECT_EQ(viewed.layer_storage(layer_index(viewed, "flat")), dtype_of(format()));
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfLayers, ::testing::Values(Half::kBF16, Half::kFP16),
                         [](const auto& info) { return format_name(info.param); });

}  // namespace
}  // namespace lamina::testing
