// Layer tests on the NativeBackend: for every built-in layer, a forward check against values
// computed here in closed form, a numerical gradient check of inputs and parameters, and the
// errors a user gets for bad parameters or shapes.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "lamina/counter_rng.hpp"
#include "lamina/gradient_checker.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::random_values;

LayerParameter parse_layer(const std::string& text) {
  LayerParameter param;
  if (!google::protobuf::TextFormat::ParseFromString(text, &param)) {
    ADD_FAILURE() << "cannot parse layer prototxt: " << text;
  }
  return param;
}

// The message of the lamina::Error thrown by f, or a note that none was thrown.
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no lamina::Error thrown>";
}

// Tighter than the checker's default threshold; kink_range >= 0 skips inputs near 0 (ReLU).
GradientCheckOptions check_options(float kink_range = -1) {
  GradientCheckOptions options;
  options.threshold = 1e-3f;
  options.kink_range = kink_range;
  return options;
}

class LayerTest : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& prototxt, Phase phase = TRAIN,
                              uint64_t seed = 7) {
    return LayerRegistry::create(parse_layer(prototxt), LayerContext{backend_, phase, seed});
  }

  // A tensor owned by the fixture; filled with values when given.
  Tensor* tensor(const Shape& shape, const std::string& name,
                 const std::vector<float>& values = {}) {
    tensors_.push_back(std::make_unique<Tensor>(backend_, shape, name));
    if (!values.empty()) tensors_.back()->copy_data_from_host(values);
    return tensors_.back().get();
  }
  Tensor* random_tensor(const Shape& shape, const std::string& name, uint64_t seed,
                        float lo = -1, float hi = 1) {
    return tensor(shape, name, random_values(shape_count(shape), seed, lo, hi));
  }
  Tensor* output(const std::string& name = "y") { return tensor({1}, name); }

  // Runs the checker and expects success on exactly `expected_checked` elements, so a check
  // that silently compares nothing fails too.
  void expect_gradients(Layer& layer, const Tensors& bottom, const Tensors& top,
                        int64_t expected_checked,
                        const GradientCheckOptions& options = check_options()) {
    const GradientCheckResult r = check_gradients(layer, bottom, top, options);
    EXPECT_TRUE(r.ok) << r.summary();
    EXPECT_EQ(r.checked + r.skipped, expected_checked) << r.summary();
    EXPECT_GT(r.checked, 0) << r.summary();
  }

  NativeBackend backend_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

std::vector<float> data(const Tensor* t) { return t->copy_data_to_host(); }
std::vector<float> diff(const Tensor* t) { return t->copy_diff_to_host(); }

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected,
                 double tol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol) << "at index " << i;
  }
}

// ---------------------------------------------------------------- the gradient checker

// y = x^2 with a backward that returns 3x instead of 2x: the checker must catch it.
class WrongSquareLayer : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    std::vector<float> x = bottom[0]->copy_data_to_host();
    for (float& v : x) v = v * v;
    top[0]->copy_data_from_host(x);
  }
  void backward_input(const Tensors& top, const std::vector<bool>&,
                      const Tensors& bottom) override {
    std::vector<float> x = bottom[0]->copy_data_to_host();
    std::vector<float> dy = top[0]->copy_diff_to_host();
    for (size_t i = 0; i < x.size(); ++i) x[i] = 3 * x[i] * dy[i];
    bottom[0]->copy_diff_from_host(x);
  }
};

TEST_F(LayerTest, GradientCheckerReportsAWrongGradient) {
  WrongSquareLayer layer(parse_layer("name: 'sq' type: 'WrongSquare'"),
                         LayerContext{backend_, TRAIN, 1});
  Tensor* x = tensor({2, 3}, "x", {0.5f, -1, 2, 1.5f, -0.75f, 1});
  Tensor* y = output();
  setup_standalone(layer, {x}, {y}, 1);
  const GradientCheckResult r = check_gradients(layer, {x}, {y});
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.checked, 6);
  EXPECT_EQ(r.failures, 6);
  EXPECT_THAT(r.first_failure, HasSubstr("bottom 0 'x'"));
  EXPECT_THAT(r.first_failure, HasSubstr("[0]"));
  EXPECT_THAT(r.summary(), HasSubstr("analytic"));
  EXPECT_GT(r.max_error, 0.1);
  // The inputs are left as they were given.
  expect_near(data(x), {0.5, -1, 2, 1.5, -0.75, 1});
}

TEST_F(LayerTest, GradientCheckerSkipsKinks) {
  auto relu = make("name: 'relu' type: 'ReLU'");
  Tensor* x = tensor({4}, "x", {0.005f, -0.5f, 0.7f, -0.001f});
  Tensor* y = output();
  setup_standalone(*relu, {x}, {y}, 1);
  GradientCheckOptions options;
  options.kink_range = 0.01f;
  const GradientCheckResult r = check_gradients(*relu, {x}, {y}, options);
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_EQ(r.checked, 2);
  EXPECT_EQ(r.skipped, 2);
  // Without the kink range the element at 0.005 straddles 0 and fails.
  EXPECT_FALSE(check_gradients(*relu, {x}, {y}).ok);
}

// ---------------------------------------------------------------- Linear

// y (M, N) = x (M, K) W^T + b, in double.
std::vector<double> linear_reference(const std::vector<float>& x, const std::vector<float>& w,
                                     const std::vector<float>& b, int64_t m, int64_t k,
                                     int64_t n) {
  std::vector<double> y(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b.empty() ? 0.0 : b[j];
      for (int64_t l = 0; l < k; ++l) s += double(x[i * k + l]) * w[j * k + l];
      y[i * n + j] = s;
    }
  }
  return y;
}

TEST_F(LayerTest, LinearForwardMatchesClosedForm) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 2 }");
  Tensor* x = tensor({2, 3}, "x", {1, 2, 3, -1, 0.5f, 2});
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 1);
  ASSERT_EQ(ip->params().size(), 2u);
  EXPECT_EQ(ip->params()[0].tensor->shape(), (Shape{2, 3}));
  EXPECT_EQ(ip->params()[1].tensor->shape(), (Shape{2}));
  const std::vector<float> w = {0.1f, -0.2f, 0.3f, 0.4f, 0.5f, -0.6f};
  const std::vector<float> b = {0.25f, -1};
  ip->params()[0].tensor->copy_data_from_host(w);
  ip->params()[1].tensor->copy_data_from_host(b);
  ip->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{2, 2}));
  // Row 0: 0.1 - 0.4 + 0.9 + 0.25 = 0.85; 0.4 + 1 - 1.8 - 1 = -1.4.
  // Row 1: -0.1 - 0.1 + 0.6 + 0.25 = 0.65; -0.4 + 0.25 - 1.2 - 1 = -2.35.
  expect_near(data(y), {0.85, -1.4, 0.65, -2.35});
  expect_near(data(y), linear_reference(data(x), w, b, 2, 3, 2));
}

TEST_F(LayerTest, LinearWithoutBiasHasOneParameter) {
  auto ip = make(
      "name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 3 bias_term: false }");
  Tensor* x = random_tensor({4, 2, 2}, "x", 3);
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 1);
  ASSERT_EQ(ip->params().size(), 1u);
  EXPECT_EQ(ip->params()[0].tensor->shape(), (Shape{3, 4}));
  ip->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{4, 3}));
  expect_near(data(y), linear_reference(data(x), data(ip->params()[0].tensor.get()), {}, 4, 4, 3));
}

TEST_F(LayerTest, LinearAxis2KeepsLeadingDims) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 5 axis: 2 "
                 "bias_filler { type: 'uniform' min: -1 max: 1 } }");
  Tensor* x = random_tensor({2, 3, 4}, "x", 4);
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 1);
  EXPECT_EQ(ip->params()[0].tensor->shape(), (Shape{5, 4}));
  ip->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{2, 3, 5}));
  expect_near(data(y), linear_reference(data(x), data(ip->params()[0].tensor.get()),
                                        data(ip->params()[1].tensor.get()), 6, 4, 5));
}

TEST_F(LayerTest, LinearDefaultFillersAreXavierAndZero) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 4 }");
  Tensor* x = random_tensor({2, 10}, "x", 5);
  setup_standalone(*ip, {x}, {output()}, 1);
  EXPECT_EQ(ip->params()[0].filler.type(), "xavier");
  EXPECT_EQ(ip->params()[1].filler.type(), "constant");
  EXPECT_EQ(ip->params()[1].filler.value(), 0.0f);
  // Xavier: uniform in +-sqrt(3 / fan_in), fan_in = 10; not all zero.
  const std::vector<float> w = data(ip->params()[0].tensor.get());
  const float limit = std::sqrt(3.0f / 10);
  EXPECT_GT(*std::max_element(w.begin(), w.end()), 0.0f);
  for (float v : w) EXPECT_LE(std::abs(v), limit + 1e-6f);
  expect_near(data(ip->params()[1].tensor.get()), {0, 0, 0, 0});
}

TEST_F(LayerTest, LinearGradient) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 3 "
                 "bias_filler { type: 'gaussian' } }");
  Tensor* x = random_tensor({2, 4}, "x", 6);
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 2);
  expect_gradients(*ip, {x}, {y}, 8 + 12 + 3);
}

TEST_F(LayerTest, LinearGradientWithoutBias) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 3 "
                 "bias_term: false }");
  Tensor* x = random_tensor({3, 2, 2}, "x", 7);
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 2);
  expect_gradients(*ip, {x}, {y}, 12 + 12);
}

TEST_F(LayerTest, LinearGradientAxis2) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 2 axis: 2 "
                 "bias_filler { type: 'gaussian' } }");
  Tensor* x = random_tensor({2, 3, 4}, "x", 8);
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 2);
  expect_gradients(*ip, {x}, {y}, 24 + 8 + 2);
}

TEST_F(LayerTest, LinearBackwardParamsAccumulates) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 2 }");
  Tensor* x = tensor({1, 2}, "x", {1, 2});
  Tensor* y = output();
  setup_standalone(*ip, {x}, {y}, 1);
  ip->forward({x}, {y});
  y->copy_diff_from_host({1, -1});
  ip->backward_params({y}, {x});
  ip->backward_params({y}, {x});
  // dW = 2 dy^T x, db = 2 dy.
  expect_near(diff(ip->params()[0].tensor.get()), {2, 4, -2, -4});
  expect_near(diff(ip->params()[1].tensor.get()), {2, -2});
}

TEST_F(LayerTest, LinearWithoutNumOutputIsAnError) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { bias_term: false }");
  const std::string message = error_of([&] { ip->setup({random_tensor({2, 3}, "x", 1)}, {output()}); });
  EXPECT_THAT(message, HasSubstr("layer 'ip' (Linear)"));
  EXPECT_THAT(message, HasSubstr("num_output"));
  auto zero = make("name: 'ip0' type: 'InnerProduct' inner_product_param { num_output: 0 }");
  EXPECT_THAT(error_of([&] { zero->setup({random_tensor({2, 3}, "x", 1)}, {output()}); }),
              HasSubstr("layer 'ip0' (InnerProduct)"));
}

TEST_F(LayerTest, LinearAxisOutOfRangeIsAnError) {
  auto ip = make("name: 'ip' type: 'Linear' inner_product_param { num_output: 2 axis: 3 }");
  const std::string message =
      error_of([&] { ip->setup({random_tensor({2, 3}, "x", 1)}, {output()}); });
  EXPECT_THAT(message, HasSubstr("layer 'ip' (Linear)"));
  EXPECT_THAT(message, HasSubstr("(2, 3)"));
}

// ---------------------------------------------------------------- activations

const std::vector<float> kActivationInput = {-2, -0.5f, 0.3f, 1.5f, -1, 2.5f};

TEST_F(LayerTest, ReLUForward) {
  auto relu = make("name: 'relu' type: 'ReLU'");
  Tensor* x = tensor({2, 3}, "x", kActivationInput);
  Tensor* y = output();
  setup_standalone(*relu, {x}, {y}, 1);
  relu->forward({x}, {y});
  EXPECT_EQ(y->shape(), x->shape());
  expect_near(data(y), {0, 0, 0.3, 1.5, 0, 2.5});
}

TEST_F(LayerTest, LeakyReLUForward) {
  auto relu = make("name: 'relu' type: 'ReLU' relu_param { negative_slope: 0.1 }");
  Tensor* x = tensor({2, 3}, "x", kActivationInput);
  Tensor* y = output();
  setup_standalone(*relu, {x}, {y}, 1);
  relu->forward({x}, {y});
  expect_near(data(y), {-0.2, -0.05, 0.3, 1.5, -0.1, 2.5});
}

TEST_F(LayerTest, SigmoidAndTanHForward) {
  for (const char* type : {"Sigmoid", "TanH"}) {
    SCOPED_TRACE(type);
    auto layer = make(std::string("name: 'f' type: '") + type + "'");
    Tensor* x = tensor({2, 3}, "x", kActivationInput);
    Tensor* y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    layer->forward({x}, {y});
    std::vector<double> expected;
    for (float v : kActivationInput) {
      expected.push_back(std::string(type) == "Sigmoid" ? 1 / (1 + std::exp(-double(v)))
                                                        : std::tanh(double(v)));
    }
    expect_near(data(y), expected);
  }
}

TEST_F(LayerTest, ActivationGradients) {
  // The step is 0.01: skip inputs whose perturbation crosses 0.
  const GradientCheckOptions kinked = check_options(0.011f);
  for (const char* text :
       {"name: 'relu' type: 'ReLU'", "name: 'leaky' type: 'ReLU' relu_param { negative_slope: 0.2 }",
        "name: 'sigmoid' type: 'Sigmoid'", "name: 'tanh' type: 'TanH'"}) {
    SCOPED_TRACE(text);
    auto layer = make(text);
    Tensor* x = random_tensor({3, 4}, "x", 11);
    Tensor* y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    expect_gradients(*layer, {x}, {y}, 12, kinked);
  }
}

TEST_F(LayerTest, InPlaceReLU) {
  auto relu = make("name: 'relu' type: 'ReLU' relu_param { negative_slope: 0.1 }");
  Tensor* x = tensor({2, 3}, "x", kActivationInput);
  setup_standalone(*relu, {x}, {x}, 1);
  relu->forward({x}, {x});
  expect_near(data(x), {-0.2, -0.05, 0.3, 1.5, -0.1, 2.5});
  x->copy_diff_from_host({1, 2, 3, 4, 5, 6});
  relu->backward_input({x}, {true}, {x});
  expect_near(diff(x), {0.1, 0.2, 3, 4, 0.5, 6});

  x->copy_data_from_host(random_values(6, 12));
  expect_gradients(*relu, {x}, {x}, 6, check_options(0.011f));
}

TEST_F(LayerTest, NegativeReLUSlopeIsAnError) {
  auto relu = make("name: 'relu' type: 'ReLU' relu_param { negative_slope: -0.5 }");
  EXPECT_THAT(error_of([&] { relu->setup({random_tensor({2}, "x", 1)}, {output()}); }),
              HasSubstr("layer 'relu' (ReLU)"));
}

// ---------------------------------------------------------------- Softmax, LogSoftmax

// Softmax of each row of x (rows, cols), in double; log-softmax when log.
std::vector<double> softmax_reference(const std::vector<float>& x, int64_t rows, int64_t cols,
                                      bool log) {
  std::vector<double> y(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double max = x[r * cols];
    for (int64_t c = 0; c < cols; ++c) max = std::max(max, double(x[r * cols + c]));
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(x[r * cols + c] - max);
    for (int64_t c = 0; c < cols; ++c) {
      const double logp = x[r * cols + c] - max - std::log(sum);
      y[r * cols + c] = log ? logp : std::exp(logp);
    }
  }
  return y;
}

TEST_F(LayerTest, SoftmaxForward) {
  auto softmax = make("name: 'sm' type: 'Softmax'");
  // Caffe's meaning: the class axis is 1 (C = 3), and each (n, w) of (N, C, W) = (2, 3, 2) is
  // a softmax of its own over the 3 channels. The classes of (n, w) are at n 6 + c 2 + w.
  Tensor* x = tensor({2, 3, 2}, "x", {1, 2, 3, 0, -1, 0.5f, 10, 10, 10, 10, 10, 10});
  Tensor* y = output();
  setup_standalone(*softmax, {x}, {y}, 1);
  softmax->forward({x}, {y});
  EXPECT_EQ(y->shape(), x->shape());
  const std::vector<float> v = data(x);
  std::vector<float> rows;  // (n, w) rows of 3 classes
  for (int n = 0; n < 2; ++n)
    for (int w = 0; w < 2; ++w)
      for (int c = 0; c < 3; ++c) rows.push_back(v[n * 6 + c * 2 + w]);
  const std::vector<double> p = softmax_reference(rows, 4, 3, false);
  std::vector<double> expected(12);
  for (int n = 0; n < 2; ++n)
    for (int w = 0; w < 2; ++w)
      for (int c = 0; c < 3; ++c) expected[n * 6 + c * 2 + w] = p[(n * 2 + w) * 3 + c];
  expect_near(data(y), expected);
  for (int c = 6; c < 12; ++c) EXPECT_NEAR(data(y)[c], 1.0 / 3, 1e-6);
}

TEST_F(LayerTest, LogSoftmaxForward) {
  auto softmax = make("name: 'lsm' type: 'LogSoftmax'");
  Tensor* x = tensor({2, 3}, "x", {1, 2, 3, 100, 100, 100});
  Tensor* y = output();
  setup_standalone(*softmax, {x}, {y}, 1);
  softmax->forward({x}, {y});
  const double lse = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0));
  expect_near(data(y), {1 - lse, 2 - lse, 3 - lse, -std::log(3.0), -std::log(3.0),
                        -std::log(3.0)});
}

TEST_F(LayerTest, SoftmaxGradients) {
  for (const char* type : {"Softmax", "LogSoftmax"}) {
    SCOPED_TRACE(type);
    auto layer = make(std::string("name: 'sm' type: '") + type + "'");
    Tensor* x = random_tensor({3, 2, 2}, "x", 13);
    Tensor* y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    expect_gradients(*layer, {x}, {y}, 12);
  }
}

// ---------------------------------------------------------------- SoftmaxWithLoss

TEST_F(LayerTest, SoftmaxWithLossForward) {
  auto loss = make("name: 'loss' type: 'SoftmaxWithLoss'");
  EXPECT_TRUE(loss->is_loss());
  EXPECT_TRUE(loss->accepts_gradient(0));
  EXPECT_FALSE(loss->accepts_gradient(1));
  // Scores (N, C, 1, 1): the classes are all the dims after N.
  Tensor* x = tensor({3, 4, 1, 1}, "scores", random_values(12, 14, -2, 2));
  Tensor* labels = tensor({3}, "labels", {2, 0, 3});
  Tensor* y = output("loss");
  Tensor* prob = output("prob");
  setup_standalone(*loss, {x, labels}, {y, prob}, 1);
  EXPECT_EQ(y->shape(), Shape{});
  EXPECT_EQ(prob->shape(), x->shape());
  loss->forward({x, labels}, {y, prob});
  const std::vector<double> p = softmax_reference(data(x), 3, 4, false);
  expect_near(data(prob), p);
  const double expected = -(std::log(p[2]) + std::log(p[4]) + std::log(p[11])) / 3;
  expect_near(data(y), {expected});
}

TEST_F(LayerTest, SoftmaxWithLossBackwardScalesByTheTopDiff) {
  auto loss = make("name: 'loss' type: 'SoftmaxWithLoss'");
  Tensor* x = tensor({2, 2}, "scores", {0, 0, 1, -1});
  Tensor* labels = tensor({2}, "labels", {1, 0});
  Tensor* y = output("loss");
  setup_standalone(*loss, {x, labels}, {y}, 1);
  loss->forward({x, labels}, {y});
  y->copy_diff_from_host({2.5f});  // the loss weight
  loss->backward_input({y}, {true, false}, {x, labels});
  const std::vector<double> p = softmax_reference(data(x), 2, 2, false);
  // dx = weight * (p - onehot) / N
  expect_near(diff(x), {2.5 * p[0] / 2, 2.5 * (p[1] - 1) / 2, 2.5 * (p[2] - 1) / 2,
                        2.5 * p[3] / 2});
}

TEST_F(LayerTest, SoftmaxWithLossGradient) {
  auto loss = make("name: 'loss' type: 'SoftmaxWithLoss'");
  Tensor* x = random_tensor({4, 5}, "scores", 15);
  Tensor* labels = tensor({4, 1}, "labels", {4, 0, 2, 2});
  Tensor* y = output("loss");
  setup_standalone(*loss, {x, labels}, {y}, 1);
  expect_gradients(*loss, {x, labels}, {y}, 20);
}

struct NormalizationCase {
  const char* name;
  double divisor;  // for 4 labels, one of them ignored
};

void PrintTo(const NormalizationCase& c, std::ostream* out) { *out << c.name; }

class SoftmaxWithLossNormalization : public LayerTest,
                                     public ::testing::WithParamInterface<NormalizationCase> {};

TEST_P(SoftmaxWithLossNormalization, IgnoredLabelAndDivisor) {
  const NormalizationCase& c = GetParam();
  auto loss = make(std::string("name: 'loss' type: 'SoftmaxWithLoss' loss_param { "
                               "ignore_label: -1 normalization: ") + c.name + " }");
  Tensor* x = random_tensor({4, 3}, "scores", 16);
  Tensor* labels = tensor({4}, "labels", {1, -1, 0, 2});
  Tensor* y = output("loss");
  setup_standalone(*loss, {x, labels}, {y}, 1);
  loss->forward({x, labels}, {y});
  const std::vector<double> p = softmax_reference(data(x), 4, 3, false);
  expect_near(data(y), {-(std::log(p[1]) + std::log(p[6]) + std::log(p[11])) / c.divisor});

  y->copy_diff_from_host({1});
  loss->backward_input({y}, {true, false}, {x, labels});
  const std::vector<float> dx = diff(x);
  for (int j = 3; j < 6; ++j) EXPECT_EQ(dx[j], 0.0f) << "the ignored row gets no gradient";
  EXPECT_NEAR(dx[0], p[0] / c.divisor, 1e-6);
  EXPECT_NEAR(dx[1], (p[1] - 1) / c.divisor, 1e-6);

  expect_gradients(*loss, {x, labels}, {y}, 12);
}

INSTANTIATE_TEST_SUITE_P(Modes, SoftmaxWithLossNormalization,
                         ::testing::Values(NormalizationCase{"FULL", 4},
                                           NormalizationCase{"VALID", 3},
                                           NormalizationCase{"BATCH_SIZE", 4},
                                           NormalizationCase{"NONE", 1}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(LayerTest, SoftmaxWithLossLabelCountMismatchIsAnError) {
  auto loss = make("name: 'loss' type: 'SoftmaxWithLoss'");
  const std::string message = error_of([&] {
    loss->setup({random_tensor({4, 3}, "scores", 1), tensor({3}, "labels")}, {output()});
  });
  EXPECT_THAT(message, HasSubstr("layer 'loss' (SoftmaxWithLoss)"));
  EXPECT_THAT(message, HasSubstr("(4, 3)"));
  EXPECT_THAT(message, HasSubstr("(3)"));
}

// ---------------------------------------------------------------- NegativeLogLikelihood

TEST_F(LayerTest, NllForwardAndBackwardOnEveryRow) {
  auto nll = make("name: 'nll' type: 'NegativeLogLikelihood'");
  EXPECT_TRUE(nll->is_loss());
  EXPECT_FALSE(nll->accepts_gradient(1));
  const std::vector<float> logp = {-0.1f, -2, -3, -1, -0.5f, -2.5f,
                                   -4, -0.2f, -1.5f, -0.7f, -0.9f, -3};
  Tensor* x = tensor({4, 3}, "logp", logp);
  Tensor* labels = tensor({4}, "labels", {0, 1, 2, 1});
  Tensor* y = output("loss");
  setup_standalone(*nll, {x, labels}, {y}, 1);
  nll->forward({x, labels}, {y});
  EXPECT_EQ(y->shape(), Shape{});
  expect_near(data(y), {(0.1 + 0.5 + 1.5 + 0.9) / 4});

  x->copy_diff_from_host(std::vector<float>(12, 7.0f));  // stale values must be overwritten
  y->copy_diff_from_host({2});
  nll->backward_input({y}, {true, false}, {x, labels});
  expect_near(diff(x), {-0.5, 0, 0, 0, -0.5, 0, 0, 0, -0.5, 0, -0.5, 0});
}

TEST_F(LayerTest, NllIgnoreLabel) {
  auto nll = make("name: 'nll' type: 'NegativeLogLikelihood' loss_param { ignore_label: 1 }");
  Tensor* x = tensor({3, 2}, "logp", {-0.2f, -1.7f, -0.9f, -0.5f, -3, -0.05f});
  Tensor* labels = tensor({3}, "labels", {0, 1, 1});
  Tensor* y = output("loss");
  setup_standalone(*nll, {x, labels}, {y}, 1);
  nll->forward({x, labels}, {y});
  expect_near(data(y), {0.2});  // VALID: one row counts
}

TEST_F(LayerTest, NllGradient) {
  auto nll = make("name: 'nll' type: 'NegativeLogLikelihood'");
  Tensor* x = random_tensor({5, 3}, "logp", 17, -3, 0);
  Tensor* labels = tensor({5}, "labels", {2, 0, 1, 1, 0});
  Tensor* y = output("loss");
  setup_standalone(*nll, {x, labels}, {y}, 1);
  expect_gradients(*nll, {x, labels}, {y}, 15);
}

TEST_F(LayerTest, NllLabelCountMismatchIsAnError) {
  auto nll = make("name: 'nll' type: 'NegativeLogLikelihood'");
  const std::string message = error_of([&] {
    nll->setup({random_tensor({2, 3}, "logp", 1), tensor({5}, "labels")}, {output()});
  });
  EXPECT_THAT(message, HasSubstr("layer 'nll' (NegativeLogLikelihood)"));
  EXPECT_THAT(message, HasSubstr("(2, 3)"));
  EXPECT_THAT(message, HasSubstr("(5)"));
}

// (N, C, H, W) is ambiguous (N rows of C H W classes, or C classes at each of H W positions):
// an error naming the layer and the fixes; axes of 1 after C are not.
TEST_F(LayerTest, NllRefusesAxesAfterTheClasses) {
  auto nll = make("name: 'nll' type: 'NegativeLogLikelihood'");
  const std::string message = error_of([&] {
    nll->setup({random_tensor({2, 3, 2, 2}, "logp", 1), tensor({2}, "labels")}, {output()});
  });
  EXPECT_THAT(message, AllOf(HasSubstr("layer 'nll' (NegativeLogLikelihood)"),
                             HasSubstr("'logp' (2, 3, 2, 2) have 4 axes"),
                             HasSubstr("Flatten them first"),
                             HasSubstr("SoftmaxWithLoss with softmax_param.axis")));
  auto column = make("name: 'nll' type: 'NegativeLogLikelihood'");
  Tensor* x = tensor({2, 3, 1, 1}, "logp", {-0.1f, -2, -3, -1, -0.5f, -2.5f});
  Tensor* labels = tensor({2}, "labels", {0, 2});
  Tensor* y = output("loss");
  setup_standalone(*column, {x, labels}, {y}, 1);
  column->forward({x, labels}, {y});
  expect_near(data(y), {(0.1 + 2.5) / 2});
}

// ---------------------------------------------------------------- EuclideanLoss

TEST_F(LayerTest, EuclideanLossForward) {
  auto loss = make("name: 'l2' type: 'EuclideanLoss'");
  Tensor* a = tensor({2, 2}, "a", {1, 2, 3, 4});
  Tensor* b = tensor({2, 2}, "b", {0, 2, 5, 3});
  Tensor* y = output("loss");
  setup_standalone(*loss, {a, b}, {y}, 1);
  loss->forward({a, b}, {y});
  EXPECT_EQ(y->shape(), Shape{});
  expect_near(data(y), {(1 + 0 + 4 + 1) / 4.0});  // sum d^2 / (2 N), N = 2
}

TEST_F(LayerTest, EuclideanLossGradientReachesBothBottoms) {
  auto loss = make("name: 'l2' type: 'EuclideanLoss'");
  EXPECT_TRUE(loss->is_loss());
  Tensor* a = random_tensor({3, 2}, "a", 18);
  Tensor* b = random_tensor({3, 2, 1}, "b", 19);
  Tensor* y = output("loss");
  setup_standalone(*loss, {a, b}, {y}, 1);
  expect_gradients(*loss, {a, b}, {y}, 12);
}

TEST_F(LayerTest, EuclideanLossCountMismatchIsAnError) {
  auto loss = make("name: 'l2' type: 'EuclideanLoss'");
  const std::string message = error_of([&] {
    loss->setup({random_tensor({2, 3}, "a", 1), random_tensor({2, 2}, "b", 1)}, {output()});
  });
  EXPECT_THAT(message, HasSubstr("layer 'l2' (EuclideanLoss)"));
  EXPECT_THAT(message, HasSubstr("(2, 3)"));
  EXPECT_THAT(message, HasSubstr("(2, 2)"));
}

// ---------------------------------------------------------------- Accuracy

TEST_F(LayerTest, AccuracyTopOneAndTopTwo) {
  const std::vector<float> scores = {0.1f, 0.7f, 0.2f,   // label 1: top 1
                                     0.5f, 0.3f, 0.2f,   // label 1: second
                                     0.1f, 0.2f, 0.7f,   // label 0: third
                                     0.3f, 0.3f, 0.4f};  // label 2: top 1
  for (int k : {1, 2, 3}) {
    SCOPED_TRACE(k);
    auto acc = make("name: 'acc' type: 'Accuracy' accuracy_param { top_k: " +
                    std::to_string(k) + " }");
    Tensor* x = tensor({4, 3}, "scores", scores);
    Tensor* labels = tensor({4}, "labels", {1, 1, 0, 2});
    Tensor* y = output("accuracy");
    setup_standalone(*acc, {x, labels}, {y}, 1);
    acc->forward({x, labels}, {y});
    EXPECT_EQ(y->shape(), Shape{});
    expect_near(data(y), {k == 1 ? 0.5 : k == 2 ? 0.75 : 1.0});
  }
}

// Caffe 1.0's rule: a row is right when fewer than top_k other classes score at least the
// label's score, so a tie counts against the label.
TEST_F(LayerTest, AccuracyCountsTiesAgainstTheLabelAsCaffe) {
  const std::vector<float> scores = {0.5f, 0.5f, 0.1f,   // label 1, tied for first
                                     0.2f, 0.6f, 0.6f,   // label 0: two above
                                     0.4f, 0.4f, 0.4f,   // label 2, all tied
                                     0.1f, 0.3f, 0.2f,   // label 1 alone on top
                                     0.9f, 0.9f, 0.9f};  // ignored (label 7)
  const std::vector<float> labels = {1, 0, 2, 1, 7};
  // Right for top_k 1: the last row only; top_k 2: also the first; 3: every counted row.
  const std::vector<double> expected = {1.0 / 4, 2.0 / 4, 4.0 / 4};
  for (int k : {1, 2, 3}) {
    SCOPED_TRACE(k);
    auto acc = make("name: 'acc' type: 'Accuracy' accuracy_param { ignore_label: 7 top_k: " +
                    std::to_string(k) + " }");
    Tensor* x = tensor({5, 3}, "scores", scores);
    Tensor* l = tensor({5}, "labels", labels);
    Tensor* y = output("accuracy");
    setup_standalone(*acc, {x, l}, {y}, 1);
    acc->forward({x, l}, {y});
    expect_near(data(y), {expected[k - 1]});
  }
}

TEST_F(LayerTest, AccuracyIgnoreLabelAndNoGradient) {
  auto acc = make("name: 'acc' type: 'Accuracy' accuracy_param { ignore_label: 2 }");
  EXPECT_FALSE(acc->accepts_gradient(0));
  EXPECT_FALSE(acc->accepts_gradient(1));
  Tensor* x = tensor({3, 3}, "scores", {1, 0, 0, 0, 0, 1, 1, 0, 0});
  Tensor* labels = tensor({3}, "labels", {0, 2, 1});
  Tensor* y = output("accuracy");
  setup_standalone(*acc, {x, labels}, {y}, 1);
  acc->forward({x, labels}, {y});
  expect_near(data(y), {0.5});  // the second row is ignored
  x->copy_diff_from_host(std::vector<float>(9, 3.0f));
  acc->backward_input({y}, {false, false}, {x, labels});
  expect_near(diff(x), std::vector<double>(9, 3.0));  // untouched
}

TEST_F(LayerTest, AccuracyTopKAboveClassesIsAnError) {
  auto acc = make("name: 'acc' type: 'Accuracy' accuracy_param { top_k: 4 }");
  const std::string message = error_of([&] {
    acc->setup({random_tensor({2, 3}, "scores", 1), tensor({2}, "labels")}, {output()});
  });
  EXPECT_THAT(message, HasSubstr("layer 'acc' (Accuracy)"));
  EXPECT_THAT(message, HasSubstr("top_k"));
}

// Found by tests/fuzz (fuzz_prototxt): the MNIST net with num_output 5 fed labels up to 9,
// and the losses and Accuracy read scores[label] past the row. A label that names no class
// (too large, negative, NaN) is now an error naming it, never an index.
TEST_F(LayerTest, LabelsThatNameNoClassAreAnErrorNotAnIndex) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const char* type : {"SoftmaxWithLoss", "NegativeLogLikelihood", "Accuracy"}) {
    for (float bad : {3.0f, 9.0f, -1.0f, nan, 1e30f}) {
      SCOPED_TRACE(::testing::Message() << type << " label " << bad);
      auto layer = make(std::string("name: 'l' type: '") + type + "'");
      Tensor* x = random_tensor({2, 3}, "scores", 5, -1, 0);
      Tensor* labels = tensor({2}, "labels", {1, bad});
      Tensor* y = output("y");
      setup_standalone(*layer, {x, labels}, {y}, 1);
      const std::string message = error_of([&] { layer->forward({x, labels}, {y}); });
      EXPECT_THAT(message, HasSubstr(type));
      EXPECT_THAT(message, HasSubstr("of row 1 is not a class index"));
      EXPECT_THAT(message, HasSubstr("3 classes"));
    }
  }
  // The ignore label may lie outside the classes.
  auto loss = make("name: 'l' type: 'SoftmaxWithLoss' loss_param { ignore_label: -1 }");
  Tensor* x = random_tensor({2, 3}, "scores", 5);
  Tensor* labels = tensor({2}, "labels", {-1, 2});
  Tensor* y = output("y");
  setup_standalone(*loss, {x, labels}, {y}, 1);
  loss->forward({x, labels}, {y});
  EXPECT_TRUE(std::isfinite(data(y)[0]));
}

// ---------------------------------------------------------------- Flatten, Reshape

TEST_F(LayerTest, FlattenSharesTheBottom) {
  auto flatten = make("name: 'flat' type: 'Flatten'");
  Tensor* x = random_tensor({2, 3, 4, 5}, "x", 20);
  Tensor* y = output();
  setup_standalone(*flatten, {x}, {y}, 1);
  EXPECT_EQ(y->shape(), (Shape{2, 60}));
  EXPECT_EQ(y->data(), x->data());
  EXPECT_EQ(y->diff(), x->diff());
  flatten->forward({x}, {y});
  EXPECT_EQ(data(y), data(x));
  expect_gradients(*flatten, {x}, {y}, 120);
}

TEST_F(LayerTest, FlattenAxisRange) {
  auto flatten = make("name: 'flat' type: 'Flatten' flatten_param { axis: 1 end_axis: 2 }");
  Tensor* x = random_tensor({2, 3, 4, 5}, "x", 21);
  Tensor* y = output();
  setup_standalone(*flatten, {x}, {y}, 1);
  EXPECT_EQ(y->shape(), (Shape{2, 12, 5}));
  auto bad = make("name: 'flat' type: 'Flatten' flatten_param { axis: 4 }");
  const std::string message = error_of([&] { bad->setup({x}, {output()}); });
  EXPECT_THAT(message, HasSubstr("layer 'flat' (Flatten)"));
  EXPECT_THAT(message, HasSubstr("(2, 3, 4, 5)"));
}

TEST_F(LayerTest, ReshapeCopiesAndInfersDims) {
  auto reshape = make("name: 'r' type: 'Reshape' reshape_param { shape { dim: 0 dim: 2 "
                      "dim: -1 dim: 5 } }");
  Tensor* x = random_tensor({2, 3, 4, 5}, "x", 22);
  Tensor* y = output();
  setup_standalone(*reshape, {x}, {y}, 1);
  EXPECT_EQ(y->shape(), (Shape{2, 2, 6, 5}));
  EXPECT_EQ(y->data(), x->data());
  EXPECT_EQ(y->diff(), x->diff());
  reshape->forward({x}, {y});
  EXPECT_EQ(data(y), data(x));
  expect_gradients(*reshape, {x}, {y}, 120);
}

TEST_F(LayerTest, ReshapeErrors) {
  Tensor* x = random_tensor({2, 3, 4}, "x", 23);
  auto mismatch = make("name: 'r' type: 'Reshape' reshape_param { shape { dim: 5 dim: 5 } }");
  std::string message = error_of([&] { mismatch->setup({x}, {output()}); });
  EXPECT_THAT(message, HasSubstr("layer 'r' (Reshape)"));
  EXPECT_THAT(message, HasSubstr("(5, 5)"));
  EXPECT_THAT(message, HasSubstr("(2, 3, 4)"));

  auto two = make("name: 'r2' type: 'Reshape' reshape_param { shape { dim: -1 dim: -1 } }");
  message = error_of([&] { two->setup({x}, {output()}); });
  EXPECT_THAT(message, HasSubstr("layer 'r2' (Reshape)"));
  EXPECT_THAT(message, HasSubstr("more than one -1"));

  auto indivisible = make("name: 'r3' type: 'Reshape' reshape_param { shape { dim: 5 dim: -1 } }");
  EXPECT_THAT(error_of([&] { indivisible->setup({x}, {output()}); }),
              HasSubstr("layer 'r3' (Reshape)"));
}

// ---------------------------------------------------------------- Dropout

// Expected mask of the Dropout layer with this seed and counter offset.
std::vector<double> dropout_mask(int64_t n, float ratio, uint64_t seed, uint64_t offset) {
  std::vector<double> mask(n);
  for (int64_t i = 0; i < n; ++i) {
    mask[i] = counter_uniform(seed, offset + i) >= ratio ? 1.0 / (1.0 - ratio) : 0.0;
  }
  return mask;
}

TEST_F(LayerTest, DropoutTrainDrawsNewMasksEachForward) {
  auto dropout = make("name: 'drop' type: 'Dropout' dropout_param { dropout_ratio: 0.4 }",
                      TRAIN, /*seed=*/99);
  Tensor* x = random_tensor({4, 8}, "x", 24);
  Tensor* y = output();
  setup_standalone(*dropout, {x}, {y}, 1);
  const std::vector<float> input = data(x);
  for (uint64_t pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE(pass);
    dropout->forward({x}, {y});
    const std::vector<double> mask = dropout_mask(32, 0.4f, 99, pass * 32);
    const int64_t dropped = std::count(mask.begin(), mask.end(), 0.0);
    EXPECT_GT(dropped, 0);
    EXPECT_LT(dropped, 32);
    std::vector<double> expected(32);
    for (int i = 0; i < 32; ++i) expected[i] = input[i] * mask[i];
    expect_near(data(y), expected);

    y->copy_diff_from_host(std::vector<float>(32, 1.0f));
    dropout->backward_input({y}, {true}, {x});
    expect_near(diff(x), mask);
  }
  EXPECT_NE(dropout_mask(32, 0.4f, 99, 0), dropout_mask(32, 0.4f, 99, 32));
}

TEST_F(LayerTest, DropoutTestIsIdentity) {
  auto dropout = make("name: 'drop' type: 'Dropout'", TEST);
  Tensor* x = random_tensor({3, 5}, "x", 25);
  Tensor* y = output();
  setup_standalone(*dropout, {x}, {y}, 1);
  dropout->forward({x}, {y});
  EXPECT_EQ(data(y), data(x));
  y->copy_diff_from_host(random_values(15, 26));
  dropout->backward_input({y}, {true}, {x});
  EXPECT_EQ(diff(x), diff(y));
  // In place: nothing changes.
  const std::vector<float> before = data(x);
  setup_standalone(*dropout, {x}, {x}, 1);
  dropout->forward({x}, {x});
  EXPECT_EQ(data(x), before);
}

// Re-creates its inner layer before every forward pass, so every evaluation of a layer that
// draws random numbers (Dropout) starts from the same seed and counter and sees the same mask.
class ReplayLayer : public Layer {
 public:
  ReplayLayer(const LayerParameter& param, const LayerContext& context)
      : Layer(param, context) {}
  void setup(const Tensors& bottom, const Tensors& top) override { renew(bottom, top); }
  void forward(const Tensors& bottom, const Tensors& top) override {
    renew(bottom, top);
    inner_->forward(bottom, top);
  }
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    inner_->backward_input(top, propagate, bottom);
  }

 private:
  void renew(const Tensors& bottom, const Tensors& top) {
    inner_ = LayerRegistry::create(param_, LayerContext{backend_, phase_, seed_});
    inner_->setup(bottom, top);
  }
  std::unique_ptr<Layer> inner_;
};

TEST_F(LayerTest, DropoutTrainGradientWithAFixedMask) {
  ReplayLayer dropout(parse_layer("name: 'drop' type: 'Dropout' dropout_param { "
                                  "dropout_ratio: 0.3 }"),
                      LayerContext{backend_, TRAIN, 5});
  Tensor* x = random_tensor({4, 6}, "x", 27);
  Tensor* y = output();
  setup_standalone(dropout, {x}, {y}, 1);
  expect_gradients(dropout, {x}, {y}, 24);
  const std::vector<double> mask = dropout_mask(24, 0.3f, 5, 0);
  EXPECT_GT(std::count(mask.begin(), mask.end(), 0.0), 0) << "the check must see dropped units";
}

TEST_F(LayerTest, DropoutRatioOutOfRangeIsAnError) {
  for (const char* ratio : {"1", "-0.1", "1.5"}) {
    SCOPED_TRACE(ratio);
    auto dropout = make(std::string("name: 'drop' type: 'Dropout' dropout_param { "
                                    "dropout_ratio: ") + ratio + " }");
    const std::string message =
        error_of([&] { dropout->setup({random_tensor({2}, "x", 1)}, {output()}); });
    EXPECT_THAT(message, HasSubstr("layer 'drop' (Dropout)"));
    EXPECT_THAT(message, HasSubstr("dropout_ratio"));
  }
}

// ---------------------------------------------------------------- Split

TEST_F(LayerTest, SplitSharesDataAndSumsDiffs) {
  auto split = make("name: 'split' type: 'Split'");
  EXPECT_EQ(split->max_tops(), -1);
  Tensor* x = tensor({2, 2}, "x", {1, 2, 3, 4});
  Tensor* a = output("a");
  Tensor* b = output("b");
  Tensor* c = output("c");
  setup_standalone(*split, {x}, {a, b, c}, 1);
  split->forward({x}, {a, b, c});
  for (Tensor* t : {a, b, c}) {
    EXPECT_EQ(t->shape(), x->shape());
    EXPECT_EQ(t->data(), x->data());
    EXPECT_NE(t->diff(), x->diff());
    EXPECT_EQ(data(t), data(x));
  }
  a->copy_diff_from_host({1, 0, 0, 0});
  b->copy_diff_from_host({0, 2, 0, 1});
  c->copy_diff_from_host({0, 0, 3, 1});
  x->copy_diff_from_host({9, 9, 9, 9});
  split->backward_input({a, b, c}, {true}, {x});
  expect_near(diff(x), {1, 2, 3, 2});
}

TEST_F(LayerTest, SplitGradient) {
  auto split = make("name: 'split' type: 'Split'");
  Tensor* x = random_tensor({3, 2}, "x", 28);
  Tensor *a = output("a"), *b = output("b"), *c = output("c");
  setup_standalone(*split, {x}, {a, b, c}, 1);
  expect_gradients(*split, {x}, {a, b, c}, 6);
}

// ---------------------------------------------------------------- registration

TEST_F(LayerTest, EveryLayerTypeIsRegistered) {
  for (const char* type : {"Linear", "InnerProduct", "ReLU", "Sigmoid", "TanH", "Softmax",
                           "LogSoftmax", "SoftmaxWithLoss", "NegativeLogLikelihood",
                           "EuclideanLoss", "Accuracy", "Flatten", "Reshape", "Dropout",
                           "Split"}) {
    EXPECT_TRUE(LayerRegistry::has(type)) << type;
  }
}

}  // namespace
}  // namespace lamina
