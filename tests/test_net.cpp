// Net construction on the Native backend: implicit chaining, Sequential containers, DAGs with
// fan-out (automatic Split layers), shared parameters, phases, loss weights, backward
// inference, the parameter table, and the errors a user sees for a bad net.
//
// Expected values are computed here in double from the inputs and the weights (closed forms
// of Linear, ReLU, softmax cross-entropy and the Euclidean loss), never taken from Lamina.
// Matrices are row-major std::vector<double>; shapes are written next to them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>

#include <unistd.h>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "forwarding_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Mat = std::vector<double>;

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

std::unique_ptr<Net> make_net(const std::string& text, Phase phase = TRAIN, uint64_t seed = 1,
                              const Net* share = nullptr) {
  return std::make_unique<Net>(parse_net_parameter(text, "test.prototxt"), phase, native(), seed,
                               share ? share->arena_handle() : nullptr);
}

int layer_index(Net& net, const std::string& name) {
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).name() == name) return i;
  ADD_FAILURE() << "no layer '" << name << "'";
  return 0;
}

std::vector<std::string> layer_names(Net& net) {
  std::vector<std::string> names;
  for (int i = 0; i < net.num_layers(); ++i) names.push_back(net.layer(i).name());
  return names;
}

Tensor& param(Net& net, const std::string& layer, int k) {
  return *net.layer(layer_index(net, layer)).params().at(k).tensor;
}

Mat to_double(const std::vector<float>& v) { return Mat(v.begin(), v.end()); }
std::vector<float> to_float(const Mat& v) { return std::vector<float>(v.begin(), v.end()); }
Mat data_of(Tensor& t) { return to_double(t.copy_data_to_host()); }
Mat diff_of(Tensor& t) { return to_double(t.copy_diff_to_host()); }

// a (m, k) b^T where b is (n, k): (m, n)
Mat mul_abt(const Mat& a, const Mat& b, int m, int k, int n) {
  Mat c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) c[i * n + j] += a[i * k + p] * b[j * k + p];
  return c;
}
// a^T b where a is (m, n) and b is (m, k): (n, k)
Mat mul_atb(const Mat& a, const Mat& b, int m, int n, int k) {
  Mat c(size_t(n) * k, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) c[j * k + p] += a[i * n + j] * b[i * k + p];
  return c;
}
// a (m, k) b where b is (k, n): (m, n)
Mat mul_ab(const Mat& a, const Mat& b, int m, int k, int n) {
  Mat c(size_t(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p)
      for (int j = 0; j < n; ++j) c[i * n + j] += a[i * k + p] * b[p * n + j];
  return c;
}
void add_rows(Mat& y, const Mat& bias, int m, int n) {
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) y[i * n + j] += bias[j];
}
Mat column_sums(const Mat& a, int m, int n) {
  Mat s(n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) s[j] += a[i * n + j];
  return s;
}
Mat axpy(double alpha, const Mat& x, Mat y) {
  for (size_t i = 0; i < y.size(); ++i) y[i] += alpha * x[i];
  return y;
}

// Euclidean loss sum((a - t)^2) / (2 N) of a (N, C); returns the loss, d_a = (a - t) / N.
double euclidean(const Mat& a, const Mat& t, int n, Mat* d_a) {
  double loss = 0;
  if (d_a) d_a->assign(a.size(), 0.0);
  for (size_t i = 0; i < a.size(); ++i) {
    loss += (a[i] - t[i]) * (a[i] - t[i]);
    if (d_a) (*d_a)[i] = (a[i] - t[i]) / n;
  }
  return loss / (2.0 * n);
}

// Softmax cross-entropy of scores (N, C), mean over rows; d_s = (softmax - onehot) / N.
double softmax_loss(const Mat& s, const Mat& labels, int n, int c, Mat* d_s) {
  double loss = 0;
  if (d_s) d_s->assign(s.size(), 0.0);
  for (int i = 0; i < n; ++i) {
    double mx = s[i * c];
    for (int j = 1; j < c; ++j) mx = std::max(mx, s[i * c + j]);
    double z = 0;
    for (int j = 0; j < c; ++j) z += std::exp(s[i * c + j] - mx);
    const int label = int(labels[i]);
    loss -= s[i * c + label] - mx - std::log(z);
    if (d_s)
      for (int j = 0; j < c; ++j)
        (*d_s)[i * c + j] = (std::exp(s[i * c + j] - mx) / z - (j == label ? 1 : 0)) / n;
  }
  return loss / n;
}

#define EXPECT_CLOSE(actual, expected, tol)                                              \
  do {                                                                                   \
    const std::string lamina_cmp = ::lamina::testing::compare(to_float(actual),          \
                                                              to_float(expected), tol);  \
    EXPECT_TRUE(lamina_cmp.empty()) << #actual << ": " << lamina_cmp;                    \
  } while (0)

const std::vector<float> kX = {0.5f, -1.0f, 2.0f, 1.5f, 0.25f, -0.5f,
                               -2.0f, 1.0f, 0.75f, 0.3f, -0.8f, 1.2f};  // (4, 3)

// ---------------------------------------------------------------------------------------
// Implicit chaining and Sequential containers

// data -> ip1 -> relu1 -> ip2 -> loss, with no bottom or top written after the data layer.
const char* kChainNet = R"(
name: "chain"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "ip1" type: "Linear"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.7 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "relu1" type: "ReLU" }
layer { name: "ip2" type: "Linear"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.7 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" }
)";

const std::vector<float> kLabels = {2, 0, 1, 2};

// Forward and backward of kChainNet's computation in double, from the net's own weights.
struct ChainExpected {
  double loss;
  Mat scores, d_w1, d_b1, d_w2, d_b2;
};
ChainExpected chain_expected(const Mat& w1, const Mat& b1, const Mat& w2, const Mat& b2) {
  ChainExpected e;
  const Mat x = to_double(kX);
  Mat h = mul_abt(x, w1, 4, 3, 5);  // (4, 5)
  add_rows(h, b1, 4, 5);
  for (double& v : h) v = std::max(v, 0.0);
  e.scores = mul_abt(h, w2, 4, 5, 3);  // (4, 3)
  add_rows(e.scores, b2, 4, 3);
  Mat d_s;
  e.loss = softmax_loss(e.scores, to_double(kLabels), 4, 3, &d_s);
  e.d_w2 = mul_atb(d_s, h, 4, 3, 5);  // (3, 5)
  e.d_b2 = column_sums(d_s, 4, 3);
  Mat d_h = mul_ab(d_s, w2, 4, 3, 5);  // (4, 5)
  for (size_t i = 0; i < d_h.size(); ++i)
    if (h[i] <= 0) d_h[i] = 0;
  e.d_w1 = mul_atb(d_h, x, 4, 5, 3);  // (5, 3)
  e.d_b1 = column_sums(d_h, 4, 5);
  return e;
}

TEST(NetChaining, LayersWithoutBottomsAndTopsChainInOrder) {
  auto net = make_net(kChainNet);
  EXPECT_THAT(layer_names(*net), ElementsAre("data", "ip1", "relu1", "ip2", "loss"));
  // A layer without tops gets a top named after itself; the loss took ip2 and "label".
  EXPECT_THAT(net->blob_names(), ElementsAre("data", "label", "ip1", "relu1", "ip2", "loss"));
  EXPECT_THAT(net->output_names(), ElementsAre("loss"));
  EXPECT_EQ(net->blob("relu1").shape(), (Shape{4, 5}));
  EXPECT_EQ(net->blob("ip2").shape(), (Shape{4, 3}));

  net->blob("data").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host(kLabels);
  net->forward();
  net->backward();
  const ChainExpected e =
      chain_expected(data_of(param(*net, "ip1", 0)), data_of(param(*net, "ip1", 1)),
                     data_of(param(*net, "ip2", 0)), data_of(param(*net, "ip2", 1)));
  EXPECT_NEAR(net->loss(), e.loss, 1e-5 * std::abs(e.loss));
  EXPECT_CLOSE(data_of(net->blob("ip2")), e.scores, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "ip2", 0)), e.d_w2, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "ip2", 1)), e.d_b2, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "ip1", 0)), e.d_w1, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "ip1", 1)), e.d_b1, 1e-5);
}

TEST(NetChaining, AccuracyWithoutBottomsTakesPreviousTopAndLabel) {
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "data" top: "label"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
    layer { name: "ip" type: "Linear" inner_product_param { num_output: 3 } }
    layer { name: "acc" type: "Accuracy" }
  )");
  EXPECT_THAT(net->output_names(), ElementsAre("acc"));
  // Identity weights, zero bias: the scores are the inputs. Row argmaxes are 2, 0, 1, 2.
  param(*net, "ip", 0).copy_data_from_host({1, 0, 0, 0, 1, 0, 0, 0, 1});
  param(*net, "ip", 1).copy_data_from_host({0, 0, 0});
  net->blob("data").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host({2, 0, 0, 2});  // 3 of 4 right
  net->forward();
  EXPECT_FLOAT_EQ(net->blob("acc").copy_data_to_host()[0], 0.75f);
}

// The chain's ip1 -> relu1 -> ip2 inside a Sequential, the last two in a nested one.
const char* kSequentialNet = R"(
name: "chain"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer {
  name: "mlp" type: "Sequential" bottom: "data" top: "scores"
  layer { name: "ip1" type: "Linear"
          inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.7 }
                                bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
  layer {
    name: "block" type: "Sequential"
    layer { name: "relu1" type: "ReLU" }
    layer { name: "ip2" type: "Linear"
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.7 }
                                  bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
  }
}
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" }
)";

TEST(NetSequential, ChildrenAreChainedAndNamedAfterTheirContainers) {
  auto net = make_net(kSequentialNet);
  EXPECT_THAT(layer_names(*net),
              ElementsAre("data", "mlp/ip1", "mlp/block/relu1", "mlp/block/ip2", "loss"));
  EXPECT_THAT(net->blob_names(),
              ElementsAre("data", "label", "mlp/ip1", "mlp/block/relu1", "scores", "loss"));
  ASSERT_EQ(net->arena().table().size(), 4u);
  EXPECT_EQ(net->arena().table()[0].name, "mlp/ip1/weight");
  EXPECT_EQ(net->arena().table()[3].name, "mlp/block/ip2/bias");

  net->blob("data").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host(kLabels);
  net->forward();
  net->backward();
  const ChainExpected e = chain_expected(
      data_of(param(*net, "mlp/ip1", 0)), data_of(param(*net, "mlp/ip1", 1)),
      data_of(param(*net, "mlp/block/ip2", 0)), data_of(param(*net, "mlp/block/ip2", 1)));
  EXPECT_NEAR(net->loss(), e.loss, 1e-5 * std::abs(e.loss));
  EXPECT_CLOSE(diff_of(param(*net, "mlp/ip1", 0)), e.d_w1, 1e-5);
}

// Four steps of two solvers on kX and kLabels: the same loss at each, the same weights after.
void expect_same_training(Solver& a, Solver& b) {
  for (Solver* s : {&a, &b}) {
    s->net().blob("data").copy_data_from_host(kX);
    s->net().blob("label").copy_data_from_host(kLabels);
  }
  for (int i = 0; i < 4; ++i) {
    a.step(1);
    b.step(1);
    ASSERT_EQ(a.net().loss(), b.net().loss()) << "iteration " << i;
  }
  ASSERT_EQ(a.net().arena().count(), b.net().arena().count());
  const int64_t n = a.net().arena().count();
  EXPECT_EQ(std::vector<float>(a.net().arena().data(), a.net().arena().data() + n),
            std::vector<float>(b.net().arena().data(), b.net().arena().data() + n));
}

TEST(NetSequential, TrainsExactlyLikeTheFlatNet) {
  // Same layer order, shapes and fillers, so the same seed gives the same weights.
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.5 momentum: 0.9 weight_decay: 0.01 random_seed: 5", "solver");
  Solver flat(sp, parse_net_parameter(kChainNet, "flat"), native());
  Solver nested(sp, parse_net_parameter(kSequentialNet, "nested"), native());
  const Mat w2_before = data_of(param(flat.net(), "ip2", 0));
  EXPECT_EQ(w2_before, data_of(param(nested.net(), "mlp/block/ip2", 0)));
  expect_same_training(flat, nested);
  // And training moved the weights away from where they started.
  EXPECT_NE(data_of(param(flat.net(), "ip2", 0)), w2_before);
  EXPECT_TRUE(std::isfinite(flat.net().loss()));
}

// ---------------------------------------------------------------------------------------
// Fusion

// kChainNet with `layer` (a prototxt line) in place of relu1.
std::string chain_with(const std::string& layer) {
  std::string text = kChainNet;
  const std::string relu = R"(layer { name: "relu1" type: "ReLU" })";
  text.replace(text.find(relu), relu.size(), layer);
  return text;
}

TEST(NetFusion, LinearAbsorbsTheReluAfterItAndTrainsTheSame) {
  // Chained (relu1 reads ip1's top, which nothing else reads) and in place: fused.
  auto chained = make_net(kChainNet);
  EXPECT_TRUE(chained->layer_fused(layer_index(*chained, "relu1")));
  EXPECT_FALSE(chained->layer_fused(layer_index(*chained, "ip1")));
  auto in_place = make_net(chain_with(
      R"(layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" })"));
  EXPECT_TRUE(in_place->layer_fused(layer_index(*in_place, "relu1")));
  // A leaky ReLU, or a ReLU not right after the Linear: not fused.
  auto leaky = make_net(chain_with(
      R"(layer { name: "relu1" type: "ReLU" relu_param { negative_slope: 0.1 } })"));
  EXPECT_FALSE(leaky->layer_fused(layer_index(*leaky, "relu1")));
  const std::string apart = chain_with(
      R"(layer { name: "same" type: "Dropout" dropout_param { dropout_ratio: 0 } })"
      "\n" R"(layer { name: "relu1" type: "ReLU" })");
  auto separate = make_net(apart);
  EXPECT_FALSE(separate->layer_fused(layer_index(*separate, "relu1")));

  // The fused pass computes what the two layers did, to the bit: losses and weights (a
  // Dropout of ratio 0 multiplies by exactly 1).
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.5 momentum: 0.9 weight_decay: 0.01 random_seed: 5", "solver");
  Solver a(sp, parse_net_parameter(apart, "separate"), native());
  Solver b(sp, parse_net_parameter(kChainNet, "fused"), native());
  expect_same_training(a, b);
  // Some of ip1's outputs are negative, so the ReLU did something.
  const Mat h = data_of(b.net().blob("relu1"));
  EXPECT_TRUE(std::count(h.begin(), h.end(), 0.0) > 0);
}

// The fused ReLU's own top feeding a Flatten view, and a Split (two readers): those layers
// hold the ReLU top's memory from their setup, and must see what the fused Linear writes.
TEST(NetFusion, TheAbsorbedLayersTopKeepsItsReaders) {
  const std::string head = R"(
name: "fan"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "ip1" type: "Linear" bottom: "data" top: "ip1"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.7 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
)";
  const std::string apart =
      R"(layer { name: "same" type: "Dropout" bottom: "ip1" top: "ip1"
                 dropout_param { dropout_ratio: 0 } })" "\n";
  const std::string relu = R"(layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "r" })" "\n";
  const std::vector<std::string> tails = {
      // a view
      R"(layer { name: "flat" type: "Flatten" bottom: "r" top: "f" }
         layer { name: "ip2" type: "Linear" bottom: "f" top: "s"
                 inner_product_param { num_output: 3 } }
         layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" })",
      // two readers: a Split
      R"(layer { name: "loss" type: "SoftmaxWithLoss" bottom: "r" bottom: "label" }
         layer { name: "loss2" type: "EuclideanLoss" bottom: "r" bottom: "data" })",
  };
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.5 momentum: 0.9 random_seed: 5", "solver");
  for (const std::string& tail : tails) {
    SCOPED_TRACE(tail);
    Solver fused(sp, parse_net_parameter(head + relu + tail, "fused"), native());
    Solver separate(sp, parse_net_parameter(head + apart + relu + tail, "apart"), native());
    EXPECT_TRUE(fused.net().layer_fused(layer_index(fused.net(), "relu1")));
    EXPECT_FALSE(separate.net().layer_fused(layer_index(separate.net(), "relu1")));
    expect_same_training(fused, separate);
  }
}

// BatchNorm absorbs the Scale after it (batch statistics, per channel), and a ReLU in place
// after that, and trains to the bit as the layers did (a Dropout of ratio 0 between BatchNorm
// and Scale keeps them apart): with a layer before it (its gradient and the Scale's), on the
// data (the Scale's gradient only, in BatchNorm's backward_params), with the Scale frozen
// (the input gradient only), neither in place, and with a ReLU; in FP32 and in BF16.
TEST(NetFusion, BatchNormAbsorbsTheScaleAfterItAndTrainsTheSame) {
  const std::string head = R"(
name: "bn"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
)";
  const std::string before = R"(
layer { name: "ip0" type: "Linear" bottom: "data" top: "h"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.7 } } }
)";
  // bn reads `bottom` and writes `normalised`, the Scale reads that and writes `top` (in
  // place where the names are the same), perhaps a ReLU in place on it, and a Linear and the
  // loss follow.
  struct Pair {
    std::string bottom = "h", normalised = "h", scale_extra, top = "h";
    bool bias = true, relu = false;
    std::string text(bool apart) const {
      std::string t = R"(layer { name: "bn" type: "BatchNorm" bottom: ")" + bottom +
                      R"(" top: ")" + normalised + R"(" })" "\n";
      if (apart)
        t += R"(layer { name: "same" type: "Dropout" bottom: ")" + normalised + R"(" top: ")" +
             normalised + R"(" dropout_param { dropout_ratio: 0 } })" "\n";
      t += R"(layer { name: "scale" type: "Scale" bottom: ")" + normalised + R"(" top: ")" + top +
           R"(" scale_param { filler { type: "uniform" min: 0.5 max: 1.5 }
               bias_filler { type: "uniform" min: -0.5 max: 0.5 } bias_term: )" +
           (bias ? "true" : "false") + " } " + scale_extra + " }\n";
      if (relu)
        t += R"(layer { name: "relu" type: "ReLU" bottom: ")" + top + R"(" top: ")" + top +
             R"(" })" "\n";
      return t + R"(layer { name: "ip2" type: "Linear" bottom: ")" + top + R"(" top: "s"
                   inner_product_param { num_output: 3
                                         weight_filler { type: "gaussian" std: 0.7 } } }
                 layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" })";
    }
  };
  struct Case {
    std::string name, layers_before;
    Pair pair;
  };
  Pair on_data, frozen, apart_top, relu, on_data_relu;
  on_data.bottom = "data";
  on_data.normalised = "n";
  on_data.top = "n";
  frozen.scale_extra = "param { lr_mult: 0 } param { lr_mult: 0 }";
  apart_top.normalised = "n";
  apart_top.top = "scaled";
  apart_top.bias = false;
  relu.relu = true;
  on_data_relu = on_data;
  on_data_relu.relu = true;
  const std::vector<Case> cases = {
      {"after a Linear", before, Pair()},
      {"on the data", "", on_data},
      {"frozen Scale", before, frozen},
      {"neither in place, no bias", before, apart_top},
      {"with a ReLU", before, relu},
      {"on the data, with a ReLU", "", on_data_relu},
  };
  for (const std::string precision : {"", " precision: BF16"}) {
    const SolverParameter sp = parse_solver_parameter(
        "base_lr: 0.5 momentum: 0.9 random_seed: 5" + precision, "solver");
    for (const Case& c : cases) {
      SCOPED_TRACE(c.name + precision);
      const std::string fused_text = head + c.layers_before + c.pair.text(false);
      Solver fused(sp, parse_net_parameter(fused_text, "fused"), native());
      Solver apart(sp, parse_net_parameter(head + c.layers_before + c.pair.text(true), "apart"),
                   native());
      EXPECT_TRUE(fused.net().layer_fused(layer_index(fused.net(), "scale")));
      EXPECT_FALSE(apart.net().layer_fused(layer_index(apart.net(), "scale")));
      if (c.pair.relu) {
        EXPECT_TRUE(fused.net().layer_fused(layer_index(fused.net(), "relu")));
        EXPECT_FALSE(apart.net().layer_fused(layer_index(apart.net(), "relu")));
      }
      const Mat scale_before = data_of(param(fused.net(), "scale", 0));
      expect_same_training(fused, apart);
      // The Scale learnt, unless frozen.
      EXPECT_EQ(data_of(param(fused.net(), "scale", 0)) == scale_before,
                c.name == "frozen Scale");
    }
  }
}

// The non-finite diagnosis names an absorbed Scale: its NaN weight spoils the output that
// BatchNorm computes for both.
TEST(NetFusion, NonFiniteValuesOfAnAbsorbedLayerAreNamed) {
  const std::string text = R"(
name: "bn"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "bn" type: "BatchNorm" bottom: "data" top: "n" }
layer { name: "scale" type: "Scale" bottom: "n" top: "n" scale_param { bias_term: true } }
layer { name: "ip" type: "Linear" bottom: "n" top: "s" inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" }
)";
  auto net = make_net(text);
  ASSERT_TRUE(net->layer_fused(layer_index(*net, "scale")));
  net->blob("data").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host(kLabels);
  EXPECT_EQ(net->find_nonfinite(), "");
  Tensor& scale = *net->layer(layer_index(*net, "scale")).params()[0].tensor;
  scale.copy_data_from_host({1.0f, std::nanf(""), 1.0f});
  EXPECT_THAT(net->find_nonfinite(),
              HasSubstr("the forward pass: layer 'bn' (BatchNorm) with the layer 'scale' (Scale) "
                        "it absorbed output 'n'"));
}

// A backend without the fused operations (Operation::kBatchNormScale) runs the two layers.
class NoBatchNormScaleBackend final : public testing::ForwardingBackend {
 public:
  std::string name() const override { return "no-fused-batch-norm"; }
  bool supports(Operation op) const override {
    return op != Operation::kBatchNormScale && testing::ForwardingBackend::supports(op);
  }
};

TEST(NetFusion, ABackendWithoutTheFusedBatchNormRunsBatchNormAndScale) {
  NoBatchNormScaleBackend backend;
  auto net = std::make_unique<Net>(parse_net_parameter(R"(
name: "bn"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data" }
layer { name: "scale" type: "Scale" bottom: "data" top: "data" scale_param { bias_term: true } }
)", "bn"), TRAIN, backend, 1);
  EXPECT_FALSE(net->layer_fused(layer_index(*net, "scale")));
  net->blob("data").copy_data_from_host(kX);
  net->forward();
  const std::vector<float> y = net->blob("data").copy_data_to_host();
  for (int c = 0; c < 3; ++c) {  // normalised per column over the 4 rows (scale 1, bias 0)
    double mean = 0;
    for (int r = 0; r < 4; ++r) mean += y[r * 3 + c] / 4.0;
    EXPECT_NEAR(mean, 0.0, 1e-6) << "column " << c;
  }
}

// A layer defined outside Lamina is not recorded into a CUDA graph unless it says it can be.
class OpaqueLayer final : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.copy(sizeof(float) * bottom[0]->count(), bottom[0]->data(), top[0]->mutable_data());
  }
  void backward_input(const Tensors&, const std::vector<bool>&, const Tensors&) override {}
};

TEST(NetCapture, LayersFromOutsideMustOptIn) {
  EXPECT_EQ(make_net(kChainNet)->capture_blocker(), "");
  static const bool registered = [] {
    register_layer<OpaqueLayer>("TestOpaque");
    return true;
  }();
  ASSERT_TRUE(registered);
  const std::string text = chain_with(
      R"(layer { name: "relu1" type: "ReLU" }
         layer { name: "opaque" type: "TestOpaque" })");
  EXPECT_THAT(make_net(text)->capture_blocker(),
              AllOf(HasSubstr("layer 'opaque' (TestOpaque) does not say"),
                    HasSubstr("Layer::capture_blocker()")));
}

// ---------------------------------------------------------------------------------------
// DAGs and fan-out

TEST(NetDag, FanOutSumsTheGradientsOfBothConsumers) {
  // x -> h -> {a, b}, each with a Euclidean loss against t: h and t both feed two layers.
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "h" type: "Linear" bottom: "x" top: "h"
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "a" type: "Linear" bottom: "h" top: "a"
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "b" type: "Linear" bottom: "h" top: "b"
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "loss_a" type: "EuclideanLoss" bottom: "a" bottom: "t" top: "loss_a" }
    layer { name: "loss_b" type: "EuclideanLoss" bottom: "b" bottom: "t" top: "loss_b" }
  )");
  int splits = 0;
  for (int i = 0; i < net->num_layers(); ++i) splits += net->layer(i).type() == "Split";
  EXPECT_EQ(splits, 2);  // after h and after t
  EXPECT_THAT(net->output_names(), ElementsAre("loss_a", "loss_b"));

  const Mat wh = {0.3, -0.6, 0.9, -0.4, 0.2, 0.7};  // (2, 3)
  const Mat wa = {1.0, -0.5, 0.25, 0.8};            // (2, 2)
  const Mat wb = {-0.7, 0.4, 0.6, 1.1};             // (2, 2)
  const Mat t = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  param(*net, "h", 0).copy_data_from_host(to_float(wh));
  param(*net, "a", 0).copy_data_from_host(to_float(wa));
  param(*net, "b", 0).copy_data_from_host(to_float(wb));
  net->blob("x").copy_data_from_host(kX);
  net->blob("t").copy_data_from_host(to_float(t));
  net->forward();
  net->backward();

  const Mat x = to_double(kX);
  const Mat h = mul_abt(x, wh, 4, 3, 2);
  Mat d_a, d_b;
  const double loss = euclidean(mul_abt(h, wa, 4, 2, 2), t, 4, &d_a) +
                      euclidean(mul_abt(h, wb, 4, 2, 2), t, 4, &d_b);
  const Mat d_h = axpy(1.0, mul_ab(d_a, wa, 4, 2, 2), mul_ab(d_b, wb, 4, 2, 2));  // (4, 2)
  EXPECT_NEAR(net->loss(), loss, 1e-5 * loss);
  EXPECT_CLOSE(diff_of(net->blob("h")), d_h, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "h", 0)), mul_atb(d_h, x, 4, 2, 3), 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "a", 0)), mul_atb(d_a, h, 4, 2, 2), 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "b", 0)), mul_atb(d_b, h, 4, 2, 2), 1e-5);

  // A second iteration gives the same gradients: nothing accumulates in the blobs, and the
  // parameter gradients accumulate until zeroed.
  net->arena().zero_diff();
  net->forward();
  net->backward();
  EXPECT_CLOSE(diff_of(net->blob("h")), d_h, 1e-5);
  EXPECT_CLOSE(diff_of(param(*net, "h", 0)), mul_atb(d_h, x, 4, 2, 3), 1e-5);
  net->forward();
  net->backward();
  EXPECT_CLOSE(diff_of(param(*net, "h", 0)), axpy(1.0, mul_atb(d_h, x, 4, 2, 3),
                                                  mul_atb(d_h, x, 4, 2, 3)), 1e-5);
}

// After zero_diff the first backward pass may write a Linear's weight gradient with =
// (Param::diff_zeroed); a later pass, or one after the gradients were written by hand
// (ParamArena::gradients_written), adds to it. A parameter two layers share always adds.
TEST(NetDag, AZeroedGradientIsWrittenOnceThenAddedTo) {
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "h" type: "Linear" bottom: "x" top: "h"
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "t" top: "loss" }
  )");
  net->blob("x").copy_data_from_host(kX);
  net->blob("t").copy_data_from_host({0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3});
  Tensor& w = param(*net, "h", 0);
  net->arena().zero_diff();
  net->forward();
  net->backward();
  const Mat once = diff_of(w);
  EXPECT_FALSE(net->arena().take_diff_zeroed()) << "the pass took the zeroed state";
  net->backward();
  EXPECT_CLOSE(diff_of(w), axpy(1.0, once, once), 1e-6);

  net->arena().zero_diff();
  w.copy_diff_from_host(std::vector<float>(6, 1.0f));
  net->arena().gradients_written();
  net->backward();
  EXPECT_CLOSE(diff_of(w), axpy(1.0, once, Mat(6, 1.0)), 1e-6);
}

// Two Linears sharing a weight both add to its gradient, the first after zero_diff too.
TEST(NetDag, ASharedZeroedGradientGetsBothUsersTerms) {
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "p" type: "Linear" bottom: "x" top: "p" param { name: "w" }
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "q" type: "Linear" bottom: "x" top: "q" param { name: "w" }
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "loss_p" type: "EuclideanLoss" bottom: "p" bottom: "t" top: "loss_p" }
    layer { name: "loss_q" type: "EuclideanLoss" bottom: "q" bottom: "t" top: "loss_q" }
  )");
  const Mat w = {0.3, -0.6, 0.9, -0.4, 0.2, 0.7};  // (2, 3)
  const Mat t = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  param(*net, "p", 0).copy_data_from_host(to_float(w));
  net->blob("x").copy_data_from_host(kX);
  net->blob("t").copy_data_from_host(to_float(t));
  net->arena().zero_diff();
  net->forward();
  net->backward();
  const Mat x = to_double(kX);
  Mat d_p;
  euclidean(mul_abt(x, w, 4, 3, 2), t, 4, &d_p);
  // Both layers compute the same product, so the shared gradient is twice one user's.
  EXPECT_CLOSE(diff_of(param(*net, "p", 0)), axpy(1.0, mul_atb(d_p, x, 4, 2, 3),
                                                  mul_atb(d_p, x, 4, 2, 3)), 1e-5);
}

TEST(NetDag, FanOutOfAnInPlaceLayersOutput) {
  // ip -> relu (in place, same blob) -> two losses: the split comes after the relu.
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "ip" type: "Linear" bottom: "x" top: "y"
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "relu" type: "ReLU" bottom: "y" top: "y" }
    layer { name: "l1" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "l1" }
    layer { name: "l2" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "l2"
            loss_weight: 3 }
  )");
  const Mat w = {0.3, -0.6, 0.9, -0.4, 0.2, 0.7};
  const Mat t = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  param(*net, "ip", 0).copy_data_from_host(to_float(w));
  EXPECT_FALSE(net->layer(layer_index(*net, "ip")).params()[0].shared);
  net->blob("x").copy_data_from_host(kX);
  net->blob("t").copy_data_from_host(to_float(t));
  net->forward();
  net->backward();
  const Mat x = to_double(kX);
  Mat y = mul_abt(x, w, 4, 3, 2);
  for (double& v : y) v = std::max(v, 0.0);
  Mat d_y;
  const double loss = euclidean(y, t, 4, &d_y);
  EXPECT_NEAR(net->loss(), 4 * loss, 1e-5 * loss);
  for (size_t i = 0; i < d_y.size(); ++i) d_y[i] = y[i] > 0 ? 4 * d_y[i] : 0;  // 1 + 3
  EXPECT_CLOSE(diff_of(param(*net, "ip", 0)), mul_atb(d_y, x, 4, 2, 3), 1e-5);
}

// ---------------------------------------------------------------------------------------
// Shared parameters

const char* kSharedNet = R"(
layer { name: "data" type: "Input" top: "x1" top: "x2" top: "t1" top: "t2"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: %d }
                      shape { dim: 4 dim: 2 } shape { dim: 4 dim: 2 } } }
layer { name: "l1" type: "Linear" bottom: "x1" top: "y1" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false
                              weight_filler { type: "constant" value: 0.5 } } }
layer { name: "l2" type: "Linear" bottom: "x2" top: "y2" param { name: "w" }
        inner_product_param { num_output: 2 bias_term: false
                              weight_filler { type: "constant" value: 0.5 } } }
layer { name: "loss1" type: "EuclideanLoss" bottom: "y1" bottom: "t1" top: "loss1" }
layer { name: "loss2" type: "EuclideanLoss" bottom: "y2" bottom: "t2" top: "loss2" }
)";

std::string shared_net(int x2_width) {
  char text[2048];
  std::snprintf(text, sizeof(text), kSharedNet, x2_width);
  return text;
}

TEST(NetSharedParams, OneArenaEntryWhoseGradientSumsBothUses) {
  auto net = make_net(shared_net(3));
  ASSERT_EQ(net->arena().table().size(), 1u);
  EXPECT_EQ(net->arena().table()[0].name, "w");
  EXPECT_EQ(net->arena().table()[0].shape, (Shape{2, 3}));
  EXPECT_EQ(net->arena().count(), 64);
  EXPECT_EQ(param(*net, "l1", 0).data(), param(*net, "l2", 0).data());
  EXPECT_EQ(param(*net, "l1", 0).data(), net->arena().data());
  // Both uses know: their gradients stay on the main lane (Backend::to_side_lane).
  EXPECT_TRUE(net->layer(layer_index(*net, "l1")).params()[0].shared);
  EXPECT_TRUE(net->layer(layer_index(*net, "l2")).params()[0].shared);

  const Mat x1 = to_double(kX);
  const Mat x2 = {1.0, 0.5, -0.5, -1.5, 2.0, 0.1, 0.4, -0.3, 0.9, -1.1, 0.6, 0.2};
  const Mat t1 = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  const Mat t2 = {-0.2, 0.4, 0.1, 0.9, 0.3, -0.6, 1.2, 0.0};
  net->blob("x1").copy_data_from_host(to_float(x1));
  net->blob("x2").copy_data_from_host(to_float(x2));
  net->blob("t1").copy_data_from_host(to_float(t1));
  net->blob("t2").copy_data_from_host(to_float(t2));
  net->forward();
  net->backward();

  const Mat w(6, 0.5);  // the constant filler
  Mat d1, d2;
  const double loss = euclidean(mul_abt(x1, w, 4, 3, 2), t1, 4, &d1) +
                      euclidean(mul_abt(x2, w, 4, 3, 2), t2, 4, &d2);
  EXPECT_NEAR(net->loss(), loss, 1e-5 * loss);
  const Mat g1 = mul_atb(d1, x1, 4, 2, 3), g2 = mul_atb(d2, x2, 4, 2, 3);
  EXPECT_CLOSE(diff_of(param(*net, "l1", 0)), axpy(1.0, g1, g2), 1e-5);
  // Not just one of the two uses.
  EXPECT_FALSE(::lamina::testing::compare(to_float(g1), to_float(axpy(1.0, g1, g2)), 1e-3).empty());
}

TEST(NetSharedParams, ShapeMismatchIsAnError) {
  const std::string message = error_of([] { make_net(shared_net(5)); });
  EXPECT_THAT(message, AllOf(HasSubstr("'w'"), HasSubstr("l2"), HasSubstr("(2, 3)"),
                             HasSubstr("(2, 5)")));
}

// ---------------------------------------------------------------------------------------
// Phases

const char* kPhaseNet = R"(
layer { name: "train_data" type: "Input" top: "x" top: "t" include { phase: TRAIN }
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "test_data" type: "Input" top: "x" top: "t" include { phase: TEST }
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
layer { name: "ip" type: "Linear" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
layer { name: "not_in_test" type: "ReLU" bottom: "y" top: "r" exclude { phase: TEST } }
layer { name: "both" type: "ReLU" bottom: "y" top: "r2" include { phase: TRAIN }
        include { phase: TEST } }
layer { name: "nowhere" type: "ReLU" bottom: "y" top: "r3" exclude { phase: TRAIN }
        exclude { phase: TEST } }
)";

TEST(NetPhases, IncludeAndExcludeSelectLayers) {
  auto train = make_net(kPhaseNet, TRAIN);
  auto test = make_net(kPhaseNet, TEST);
  auto without_splits = [](Net& net) {
    std::vector<std::string> names;
    for (int i = 0; i < net.num_layers(); ++i)
      if (net.layer(i).type() != "Split") names.push_back(net.layer(i).name());
    return names;
  };
  EXPECT_THAT(without_splits(*train), ElementsAre("train_data", "ip", "loss", "not_in_test", "both"));
  EXPECT_THAT(without_splits(*test), ElementsAre("test_data", "ip", "loss", "both"));
  EXPECT_EQ(train->blob("x").shape(), (Shape{4, 3}));
  EXPECT_EQ(test->blob("x").shape(), (Shape{2, 3}));
  EXPECT_EQ(train->phase(), TRAIN);
  EXPECT_EQ(test->phase(), TEST);
  EXPECT_FALSE(test->has_blob("r"));
  EXPECT_FALSE(train->has_blob("r3"));
}

TEST(NetPhases, TestNetSharesTheTrainNetsWeights) {
  auto train = make_net(kPhaseNet, TRAIN, 1);
  auto test = make_net(kPhaseNet, TEST, 2, train.get());
  EXPECT_EQ(&test->arena(), &train->arena());  // one arena, two nets
  EXPECT_EQ(param(*test, "ip", 0).data(), param(*train, "ip", 0).data());

  // New weights written through the training net are what the test net computes with.
  const Mat w = {0.1, 0.2, -0.3, 0.4, -0.5, 0.6}, b = {0.25, -0.75};
  param(*train, "ip", 0).copy_data_from_host(to_float(w));
  param(*train, "ip", 1).copy_data_from_host(to_float(b));
  const Mat x = {1, 2, 3, -1, 0.5, 2};
  test->blob("x").copy_data_from_host(to_float(x));
  test->blob("t").copy_data_from_host({0, 0, 0, 0});
  test->forward();
  Mat y = mul_abt(x, w, 2, 3, 2);
  add_rows(y, b, 2, 2);
  EXPECT_CLOSE(data_of(test->blob("y")), y, 1e-6);
  EXPECT_NEAR(test->loss(), euclidean(y, Mat(4, 0.0), 2, nullptr), 1e-5);
}

TEST(NetPhases, SharingWithANetThatLacksAParameterIsAnError) {
  auto train = make_net(R"(
    layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
    layer { name: "ip" type: "Linear" inner_product_param { num_output: 2 } }
  )");
  const std::string message = error_of([&] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "other" type: "Linear" inner_product_param { num_output: 2 } }
    )", TEST, 2, train.get());
  });
  EXPECT_THAT(message, HasSubstr("other/weight"));
}

// ---------------------------------------------------------------------------------------
// Loss weights and backward inference

std::string euclid_net(const std::string& loss_extra) {
  return R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "ip" type: "Linear" bottom: "x" top: "y"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" }
                                  bias_filler { type: "gaussian" } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" )" +
         loss_extra + " }";
}

TEST(NetLossWeight, ScalingTheLossScalesTheGradients) {
  const Mat t = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  auto run = [&](const std::string& extra, double* loss, Mat* d_w, Mat* d_b, Mat* expected) {
    auto net = make_net(euclid_net(extra), TRAIN, 3);
    net->blob("x").copy_data_from_host(kX);
    net->blob("t").copy_data_from_host(to_float(t));
    net->forward();
    net->backward();
    *loss = net->loss();
    *d_w = diff_of(param(*net, "ip", 0));
    *d_b = diff_of(param(*net, "ip", 1));
    // Closed form for weight 1.
    Mat y = mul_abt(to_double(kX), data_of(param(*net, "ip", 0)), 4, 3, 2);
    add_rows(y, data_of(param(*net, "ip", 1)), 4, 2);
    Mat d_y;
    expected->push_back(euclidean(y, t, 4, &d_y));
    Mat g = mul_atb(d_y, to_double(kX), 4, 2, 3);
    expected->insert(expected->end(), g.begin(), g.end());
  };
  double loss1, loss2;
  Mat w1, b1, w2, b2, e1, e2;
  run("", &loss1, &w1, &b1, &e1);
  run("loss_weight: 2", &loss2, &w2, &b2, &e2);
  EXPECT_NEAR(loss1, e1[0], 1e-5 * e1[0]);
  EXPECT_CLOSE(w1, Mat(e1.begin() + 1, e1.end()), 1e-5);
  EXPECT_NEAR(loss2, 2 * e1[0], 1e-5 * e1[0]);
  EXPECT_CLOSE(w2, axpy(1.0, w1, w1), 1e-6);
  EXPECT_CLOSE(b2, axpy(1.0, b1, b1), 1e-6);
}

TEST(NetLossWeight, LossWeightOnANonScalarTopIsAnError) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "ip" type: "Linear" loss_weight: 1 inner_product_param { num_output: 2 } }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'ip'"), HasSubstr("loss_weight"), HasSubstr("(4, 2)"),
                             HasSubstr("scalar")));
}

TEST(NetBackward, OnlyLayersLeadingToALossRunBackward) {
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
    layer { name: "frozen" type: "Linear" bottom: "x" top: "h"
            param { lr_mult: 0 } param { lr_mult: 0 }
            inner_product_param { num_output: 4 weight_filler { type: "gaussian" } } }
    layer { name: "ip" type: "Linear" bottom: "h" top: "s"
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" }
    layer { name: "acc" type: "Accuracy" bottom: "s" bottom: "label" top: "acc" }
    layer { name: "probe" type: "Linear" bottom: "s" top: "probe"
            inner_product_param { num_output: 2 } }
  )");
  std::map<std::string, bool> needs;
  for (int i = 0; i < net->num_layers(); ++i)
    needs[net->layer(i).name()] = net->layer_needs_backward(i);
  EXPECT_FALSE(needs.at("data"));
  EXPECT_FALSE(needs.at("frozen"));  // lr_mult 0 and its bottom takes no gradient
  EXPECT_TRUE(needs.at("ip"));
  EXPECT_TRUE(needs.at("loss"));
  EXPECT_FALSE(needs.at("acc"));
  EXPECT_FALSE(needs.at("probe"));  // learnable, but its output is no loss
  EXPECT_THAT(net->output_names(), ElementsAre("loss", "acc", "probe"));

  net->blob("x").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host(kLabels);
  net->forward();
  net->backward();
  EXPECT_EQ(diff_of(param(*net, "frozen", 0)), Mat(12, 0.0));
  EXPECT_EQ(diff_of(param(*net, "probe", 0)), Mat(6, 0.0));
  // The accuracy branch adds nothing to the scores' gradient.
  Mat d_s;
  softmax_loss(data_of(net->blob("s")), to_double(kLabels), 4, 3, &d_s);
  EXPECT_CLOSE(diff_of(param(*net, "ip", 0)), mul_atb(d_s, data_of(net->blob("h")), 4, 3, 4),
               1e-5);
}

TEST(NetBackward, FrozenLayerBetweenLearnableOnesStillPropagates) {
  const char* text = R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "first" type: "Linear" bottom: "x" top: "h"
            inner_product_param { num_output: 3 bias_term: false } }
    layer { name: "frozen" type: "Linear" bottom: "h" top: "y" param { lr_mult: 0 }
            inner_product_param { num_output: 2 bias_term: false } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
  )";
  Solver solver(parse_solver_parameter("base_lr: 0.1 random_seed: 3", "s"),
                parse_net_parameter(text, "n"), native());
  Net& net = solver.net();
  EXPECT_TRUE(net.layer_needs_backward(layer_index(net, "frozen")));
  EXPECT_EQ(net.arena().table()[1].lr_mult, 0.0f);
  const Mat w1 = {0.3, -0.6, 0.9, -0.4, 0.2, 0.7, 0.5, 0.5, -0.5};  // (3, 3)
  const Mat w2 = {1.0, -0.5, 0.25, 0.8, 0.1, -0.3};                 // (2, 3)
  const Mat t = {0.5, -0.5, 1.0, 0.0, -1.0, 0.5, 0.2, 0.3};
  param(net, "first", 0).copy_data_from_host(to_float(w1));
  param(net, "frozen", 0).copy_data_from_host(to_float(w2));
  net.blob("x").copy_data_from_host(kX);
  net.blob("t").copy_data_from_host(to_float(t));
  solver.step(1);
  const Mat x = to_double(kX);
  const Mat h = mul_abt(x, w1, 4, 3, 3);
  Mat d_y;
  euclidean(mul_abt(h, w2, 4, 3, 2), t, 4, &d_y);
  const Mat d_h = mul_ab(d_y, w2, 4, 2, 3);
  EXPECT_CLOSE(data_of(param(net, "first", 0)), axpy(-0.1, mul_atb(d_h, x, 4, 3, 3), w1), 1e-6);
  EXPECT_EQ(data_of(param(net, "frozen", 0)), to_double(to_float(w2)));
  // The frozen layer propagated but computed no gradient of its own (it would otherwise
  // count in the gradient-clipping norm).
  EXPECT_EQ(diff_of(param(net, "frozen", 0)), Mat(6, 0.0));
}

// ---------------------------------------------------------------------------------------
// The parameter table

TEST(NetParamTable, NamesShapesMultipliersAndAlignedOffsets) {
  auto net = make_net(R"(
    layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 10 } } }
    layer { name: "fc1" type: "Linear" param { lr_mult: 1 decay_mult: 1 }
            param { lr_mult: 2 decay_mult: 0 } inner_product_param { num_output: 7 } }
    layer { name: "fc2" type: "Linear" param { lr_mult: 0.5 decay_mult: 3 }
            inner_product_param { num_output: 65 bias_term: false } }
    layer { name: "fc3" type: "Linear" inner_product_param { num_output: 1 } }
  )");
  const auto& table = net->arena().table();
  ASSERT_EQ(table.size(), 5u);
  struct Row {
    const char* name;
    Shape shape;
    float lr_mult, decay_mult;
    int64_t offset;
  };
  const Row expected[] = {
      {"fc1/weight", {7, 10}, 1, 1, 0},    // 70 floats -> 128
      {"fc1/bias", {7}, 2, 0, 128},        // 7 -> 64
      {"fc2/weight", {65, 7}, 0.5, 3, 192},  // 455 -> 512
      {"fc3/weight", {1, 65}, 1, 1, 704},  // 65 -> 128
      {"fc3/bias", {1}, 1, 1, 832},        // 1 -> 64
  };
  for (size_t i = 0; i < table.size(); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(table[i].name, expected[i].name);
    EXPECT_EQ(table[i].shape, expected[i].shape);
    EXPECT_EQ(table[i].count, shape_count(expected[i].shape));
    EXPECT_EQ(table[i].lr_mult, expected[i].lr_mult);
    EXPECT_EQ(table[i].decay_mult, expected[i].decay_mult);
    EXPECT_EQ(table[i].offset, expected[i].offset);
    EXPECT_EQ(table[i].offset % 64, 0);
  }
  EXPECT_EQ(net->arena().count(), 896);
  // Each parameter is a view into the arena at its offset, for data and gradient.
  EXPECT_EQ(param(*net, "fc2", 0).data(), net->arena().data() + 192);
  EXPECT_EQ(param(*net, "fc2", 0).diff(), net->arena().diff() + 192);
  EXPECT_EQ(param(*net, "fc3", 1).data(), net->arena().data() + 832);
}

// ---------------------------------------------------------------------------------------
// Errors a user can act on

TEST(NetErrors, MalformedPrototxtGivesLineAndColumn) {
  const std::string message = error_of([] {
    parse_net_parameter("name: \"x\"\nlayer {\n  name \"a\"\n}\n", "bad.prototxt");
  });
  EXPECT_TRUE(std::regex_search(message, std::regex("bad\\.prototxt:3:[0-9]+:")))
      << message;
}

TEST(NetErrors, UnknownFieldIsNamed) {
  const std::string message = error_of([] {
    parse_net_parameter("layer { name: \"a\" type: \"Input\" frobnicate: 3 }", "f.prototxt");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("frobnicate"), HasSubstr("f.prototxt:1:")));
}

TEST(NetErrors, UnknownLayerTypeListsTheKnownTypes) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "conv" type: "Convolutionn" }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'conv'"), HasSubstr("Convolutionn"), HasSubstr("Linear"),
                             HasSubstr("EuclideanLoss"), HasSubstr("SoftmaxWithLoss")));
}

TEST(NetErrors, MissingBottomIsNamed) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "ip" type: "Linear" bottom: "nope" inner_product_param { num_output: 2 } }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'ip'"), HasSubstr("'nope'")));
}

TEST(NetErrors, ShapeMismatchNamesTheLayerAndBothShapes) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "a" top: "b"
              input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
      layer { name: "mse" type: "EuclideanLoss" bottom: "a" bottom: "b" top: "mse" }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'mse'"), HasSubstr("(4, 3)"), HasSubstr("(4, 2)")));
}

TEST(NetErrors, DuplicateTopNamesAreAnError) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "ip1" type: "Linear" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
      layer { name: "ip2" type: "Linear" bottom: "x" top: "y" inner_product_param { num_output: 2 } }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'ip2'"), HasSubstr("'y'")));
}

// Layers may share a name, as in Caffe: tests/test_net_state.cpp (DuplicateNames).

TEST(NetErrors, ErrorsInAFileGiveFileAndLineOfTheLayer) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("lamina_test_net_" + std::to_string(::getpid()) +
                                                 ".prototxt")).string();
  {
    std::ofstream out(path);
    out << "name: \"from_file\"\n"                                        // 1
        << "layer {\n"                                                     // 2
        << "  name: \"data\" type: \"Input\" top: \"x\"\n"                 // 3
        << "  input_param { shape { dim: 4 dim: 3 } }\n"                   // 4
        << "}\n"                                                           // 5
        << "layer {\n"                                                     // 6
        << "  name: \"seq\" type: \"Sequential\"\n"                        // 7
        << "  layer { name: \"ok\" type: \"ReLU\" }\n"                     // 8
        << "  layer {\n"                                                   // 9
        << "    name: \"bad\" type: \"Linear\" bottom: \"missing\"\n"      // 10
        << "    inner_product_param { num_output: 2 }\n"                   // 11
        << "  }\n"                                                         // 12
        << "}\n"                                                           // 13
        << "layer { name: \"mse\" type: \"EuclideanLoss\" bottom: \"x\" bottom: \"seq/ok\" }\n";
  }
  const NetParameter param = read_net_parameter(path);
  std::string message =
      error_of([&] { Net net(param, TRAIN, native(), 1, nullptr, path); });
  EXPECT_THAT(message, AllOf(HasSubstr(path + ":9:"), HasSubstr("seq/bad"), HasSubstr("'missing'")));

  // A top-level layer, found by its own line.
  NetParameter fixed = param;
  fixed.mutable_layer(1)->mutable_layer(1)->clear_bottom();
  fixed.mutable_layer(2)->set_type("NoSuchLoss");
  // (The file is unchanged: the line is found from the layer's index in the net.)
  message = error_of([&] { Net net(fixed, TRAIN, native(), 1, nullptr, path); });
  EXPECT_THAT(message, AllOf(HasSubstr(path + ":14:"), HasSubstr("NoSuchLoss")));
  std::filesystem::remove(path);

  // Parse errors in a file name it with line and column.
  {
    std::ofstream out(path);
    out << "layer {\n  name: \"a\"\n  type: \"Input\"\n  bogus_field: 1\n}\n";
  }
  message = error_of([&] { read_net_parameter(path); });
  EXPECT_THAT(message, AllOf(HasSubstr(path + ":4:"), HasSubstr("bogus_field")));
  std::filesystem::remove(path);
}

TEST(NetErrors, BadFillerNamesTheParameter) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "fc" type: "Linear"
              inner_product_param { num_output: 2 weight_filler { type: "bogus" } } }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("fc/weight"), HasSubstr("bogus")));
}

TEST(NetErrors, MoreParamBlocksThanParametersIsAnError) {
  const std::string message = error_of([] {
    make_net(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "fc" type: "Linear" param { lr_mult: 1 } param { lr_mult: 2 }
              inner_product_param { num_output: 2 bias_term: false } }
    )");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("'fc'"), HasSubstr("param")));
}

TEST(NetErrors, ANetThatFailedToBuildLeavesTheProcessUsable) {
  for (int i = 0; i < 3; ++i) {
    error_of([] {
      make_net(R"(
        layer { name: "data" type: "Input" top: "a" top: "b"
                input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
        layer { name: "mse" type: "EuclideanLoss" bottom: "a" bottom: "b" top: "mse" }
      )");
    });
  }
  auto net = make_net(kChainNet);
  net->blob("data").copy_data_from_host(kX);
  net->blob("label").copy_data_from_host(kLabels);
  net->forward();
  EXPECT_TRUE(std::isfinite(net->loss()));
}

// A backend without an optional operation is reported when the net is built, naming the
// layer, never in the middle of training.
class NoConvolutionBackend final : public testing::ForwardingBackend {
 public:
  std::string name() const override { return "no-convolution"; }
  bool supports(Operation op) const override { return op != Operation::kConvolution; }
};

TEST(NetBackendOperations, AMissingOperationIsReportedWhenTheNetIsBuilt) {
  NoConvolutionBackend backend;
  const NetParameter param = parse_net_parameter(R"(
    layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 5 dim: 5 } } }
    layer { name: "conv1" type: "Convolution" bottom: "x"
            convolution_param { num_output: 2 kernel_size: 3 } })", "test.prototxt");
  const std::string message = error_of([&] { Net net(param, TRAIN, backend, 1); });
  EXPECT_THAT(message, ::testing::HasSubstr("layer 'conv1' (Convolution) needs convolution"));
  EXPECT_THAT(message, ::testing::HasSubstr("no-convolution backend does not implement"));
}


}  // namespace
}  // namespace lamina
