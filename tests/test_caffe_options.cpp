// The Caffe 1.0 options of Lamina's existing layers, so that Caffe's model files run unchanged:
// InnerProduct's transposed weight, Eltwise's stable_prod_grad and coeff rules, Concat on any
// axis (and concat_dim), Reshape's axis and num_axes, Scale and Bias with a second bottom (and
// learned scalars), Flatten's negative axes. Each option is a LayerCase (gradient checks on
// Native, HostAsDevice and CUDA, and CUDA against Native); forward values are checked against
// references computed here where the meaning is subtle; every bad setting is an error naming
// the layer.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---------------------------------------------------------------- the layer cases

std::vector<LayerCase> option_cases() {
  const char* kRelu = "name: 'relu' type: 'ReLU'";
  return {
      // InnerProduct with the weight stored (K, N): (4, 6) -> (4, 3); (3, 2, 2) -> (3, 3);
      // axis 2: (2, 3, 4) -> (2, 3, 2).
      LayerCase("LinearTransposed", "type: 'InnerProduct' inner_product_param { num_output: 3 "
                "transpose: true bias_filler { type: 'gaussian' } }", {{4, 6}}),
      LayerCase("LinearTransposedNoBias", "type: 'InnerProduct' inner_product_param { "
                "num_output: 3 transpose: true bias_term: false }", {{3, 2, 2}}),
      LayerCase("LinearTransposedAxis2", "type: 'InnerProduct' inner_product_param { "
                "num_output: 2 axis: 2 transpose: true bias_filler { type: 'gaussian' } }",
                {{2, 3, 4}}),
      LayerCase("LinearTransposedReLUFused", "type: 'InnerProduct' inner_product_param { "
                "num_output: 5 transpose: true bias_filler { type: 'gaussian' } }", {{4, 6}})
          .absorbing(kRelu),
      LayerCase("LinearTransposedNoBiasReLUFused", "type: 'InnerProduct' inner_product_param { "
                "num_output: 5 transpose: true bias_term: false }", {{3, 7}})
          .absorbing(kRelu),
      // Eltwise PROD, both gradients, over 2 and 3 inputs; MAX accepts coeff (ignored).
      LayerCase("EltwiseProdStable2", "type: 'Eltwise' eltwise_param { operation: PROD }",
                {{3, 4}, {3, 4}}),
      LayerCase("EltwiseProdDivided2", "type: 'Eltwise' eltwise_param { operation: PROD "
                "stable_prod_grad: false }", {{3, 4}, {3, 4}}),
      LayerCase("EltwiseProdStable3", "type: 'Eltwise' eltwise_param { operation: PROD "
                "stable_prod_grad: true }", {{2, 3, 2}, {2, 3, 2}, {2, 3, 2}}),
      LayerCase("EltwiseProdDivided3", "type: 'Eltwise' eltwise_param { operation: PROD "
                "stable_prod_grad: false }", {{2, 3, 2}, {2, 3, 2}, {2, 3, 2}}),
      LayerCase("EltwiseMaxCoeffIgnored", "type: 'Eltwise' eltwise_param { operation: MAX "
                "coeff: 2 coeff: -1 }", {{3, 4}, {3, 4}}).distinct(),
      // Concat along every kind of axis.
      LayerCase("ConcatAxis0", "type: 'Concat' concat_param { axis: 0 }",
                {{2, 3, 2}, {1, 3, 2}, {3, 3, 2}}),
      LayerCase("ConcatAxis2", "type: 'Concat' concat_param { axis: 2 }", {{2, 3, 2}, {2, 3, 4}}),
      LayerCase("ConcatAxisLast", "type: 'Concat' concat_param { axis: -1 }",
                {{2, 3, 2}, {2, 3, 1}, {2, 3, 3}}),
      LayerCase("ConcatDim", "type: 'Concat' concat_param { concat_dim: 2 }",
                {{2, 1, 3}, {2, 1, 2}}),
      // Reshape replacing the middle axis: (2, 6, 2) -> (2, 3, 2, 2).
      LayerCase("ReshapeAxisNumAxes", "type: 'Reshape' reshape_param { axis: 1 num_axes: 1 "
                "shape { dim: 3 dim: -1 } }", {{2, 6, 2}}),
      // Scale with the scale as bottom 1: channels, axis 0, axis 2, a scalar, with a learned
      // bias, in place.
      LayerCase("ScaleBottom", "type: 'Scale'", {{2, 3, 4}, {3}}),
      LayerCase("ScaleBottomAxis0", "type: 'Scale' scale_param { axis: 0 }", {{2, 3, 4}, {2, 3}}),
      LayerCase("ScaleBottomAxis2", "type: 'Scale' scale_param { axis: 2 }", {{2, 3, 4}, {4}}),
      LayerCase("ScaleBottomAxisLast", "type: 'Scale' scale_param { axis: -1 }",
                {{2, 3, 4}, {4}}),
      LayerCase("ScaleBottomScalar", "type: 'Scale'", {{2, 3, 4}, {}}),
      LayerCase("ScaleBottomWholeShape", "type: 'Scale' scale_param { axis: 0 }",
                {{2, 3, 4}, {2, 3, 4}}),
      LayerCase("ScaleBottomWithBias", "type: 'Scale' scale_param { bias_term: true "
                "bias_filler { type: 'gaussian' } }", {{2, 3, 4}, {3}}),
      LayerCase("ScaleBottomScalarWithBias", "type: 'Scale' scale_param { bias_term: true "
                "bias_filler { type: 'gaussian' } }", {{2, 3}, {}}),
      LayerCase("ScaleBottomInPlace", "type: 'Scale'", {{2, 3, 4}, {3}}).inplace(),
      // Learned scales of every extent.
      LayerCase("ScaleLearnedScalar", "type: 'Scale' scale_param { num_axes: 0 bias_term: true "
                "filler { type: 'gaussian' } bias_filler { type: 'gaussian' } }", {{2, 3, 4}}),
      LayerCase("ScaleLearnedToTheEnd", "type: 'Scale' scale_param { num_axes: -1 "
                "filler { type: 'gaussian' } }", {{2, 3, 4}}),
      // Bias with the bias as bottom 1.
      LayerCase("BiasBottom", "type: 'Bias'", {{2, 3, 4}, {3}}),
      LayerCase("BiasBottomAxis0", "type: 'Bias' bias_param { axis: 0 }", {{2, 3, 4}, {2}}),
      LayerCase("BiasBottomAxis2", "type: 'Bias' bias_param { axis: 2 }", {{2, 3, 4}, {4}}),
      LayerCase("BiasBottomScalar", "type: 'Bias'", {{2, 3, 4}, {}}),
      LayerCase("BiasBottomInPlace", "type: 'Bias'", {{2, 3, 4}, {3, 4}}).inplace(),
      LayerCase("BiasLearnedScalar", "type: 'Bias' bias_param { num_axes: 0 "
                "filler { type: 'gaussian' } }", {{2, 3, 4}}),
      // Flatten with negative axes, and Caffe's empty range (an inserted axis of 1).
      LayerCase("FlattenNegativeAxes", "type: 'Flatten' flatten_param { axis: -3 end_axis: -2 }",
                {{2, 3, 4, 2}}),
      LayerCase("FlattenEmptyRange", "type: 'Flatten' flatten_param { axis: 1 end_axis: 0 }",
                {{2, 3}}),
  };
}

LAMINA_LAYER_CASES(CaffeOptions, option_cases);

// ---------------------------------------------------------------- single layers on Native

class CaffeOptionsTest : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& prototxt) {
    LayerParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(prototxt, &p)) << prototxt;
    return LayerRegistry::create(p, LayerContext{backend_, TRAIN, 7});
  }
  Tensor* tensor(const Shape& shape, const std::string& name, const std::vector<float>& v = {}) {
    tensors_.push_back(std::make_unique<Tensor>(backend_, shape, name));
    if (!v.empty()) tensors_.back()->copy_data_from_host(v);
    return tensors_.back().get();
  }
  Tensor* random_tensor(const Shape& shape, const std::string& name, uint64_t seed) {
    return tensor(shape, name, random_values(shape_count(shape), seed));
  }
  Tensor* output(const std::string& name = "y") { return tensor({1}, name); }
  // The layer set up on the bottoms (parameters filled with seed 1), and its top.
  Tensor* set_up(Layer& layer, const Tensors& bottom) {
    Tensor* y = output();
    setup_standalone(layer, bottom, {y}, 1);
    return y;
  }
  std::string setup_error(const std::string& prototxt, const Tensors& bottom) {
    auto layer = make(prototxt);
    return error_of([&] { layer->setup(bottom, {output()}); });
  }
  // The shape a view layer gives the bottom.
  Shape view_shape(const std::string& prototxt, const Shape& shape) {
    auto layer = make(prototxt);
    return set_up(*layer, {random_tensor(shape, "x", 1)})->shape();
  }

  NativeBackend backend_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected,
                 double tol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i)
    EXPECT_NEAR(actual[i], expected[i], tol * std::max(1.0, std::abs(expected[i]))) << i;
}

// ---------------------------------------------------------------- InnerProduct transpose

// x (M, K) = (3, 4), W stored (K, N) = (4, 2): y = x W + b; dx = dy W^T; dW = x^T dy;
// db = column sums of dy.
TEST_F(CaffeOptionsTest, TransposedInnerProductReadsTheWeightAsKByN) {
  const int64_t m = 3, k = 4, n = 2;
  auto ip = make("name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 2 "
                 "transpose: true }");
  Tensor* x = random_tensor({m, k}, "x", 1);
  Tensor* y = set_up(*ip, {x});
  ASSERT_EQ(ip->params()[0].tensor->shape(), (Shape{k, n}));
  EXPECT_EQ(y->shape(), (Shape{m, n}));
  const std::vector<float> w = random_values(k * n, 2), b = random_values(n, 3);
  ip->params()[0].tensor->copy_data_from_host(w);
  ip->params()[1].tensor->copy_data_from_host(b);
  ip->forward({x}, {y});
  const std::vector<float> xv = x->copy_data_to_host(), dy = random_values(m * n, 4);
  std::vector<double> ref(m * n), dx(m * k, 0), dw(k * n, 0), db(n, 0);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = b[j];
      for (int64_t c = 0; c < k; ++c) s += double(xv[r * k + c]) * w[c * n + j];
      ref[r * n + j] = s;
      db[j] += dy[r * n + j];
      for (int64_t c = 0; c < k; ++c) {
        dx[r * k + c] += double(dy[r * n + j]) * w[c * n + j];
        dw[c * n + j] += double(xv[r * k + c]) * dy[r * n + j];
      }
    }
  }
  expect_near(y->copy_data_to_host(), ref);
  y->copy_diff_from_host(dy);
  for (Param& p : ip->params())
    p.tensor->copy_diff_from_host(std::vector<float>(p.tensor->count(), 0.0f));
  ip->backward_params({y}, {x});
  ip->backward_input({y}, {true}, {x});
  expect_near(x->copy_diff_to_host(), dx);
  expect_near(ip->params()[0].tensor->copy_diff_to_host(), dw);
  expect_near(ip->params()[1].tensor->copy_diff_to_host(), db);
}

// Caffe's fillers read the stored shape: for (K, N) = (100, 3) Xavier's fan-in is N = 3, so
// the values reach sqrt(3 / 3) = 1, far past the sqrt(3 / 100) an (N, K) weight would get.
TEST_F(CaffeOptionsTest, TransposedWeightFillerUsesTheStoredShape) {
  auto ip = make("name: 'ip' type: 'InnerProduct' inner_product_param { num_output: 3 "
                 "transpose: true bias_term: false }");
  set_up(*ip, {random_tensor({2, 100}, "x", 1)});
  const std::vector<float> w = ip->params()[0].tensor->copy_data_to_host();
  ASSERT_EQ(w.size(), 300u);
  float largest = 0;
  for (float v : w) largest = std::max(largest, std::abs(v));
  EXPECT_LE(largest, 1.0f);
  EXPECT_GT(largest, 0.5f) << "the fan-in must be N (the stored shape's count / its dim 0)";
}

// A transposed InnerProduct with the in-place ReLU the net fuses into it, in FP32 and each
// 16-bit precision, against the same layer with the weight stored (N, K): the same values.
const char* kTransposedNet = R"(
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 6 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 5 transpose: true
                              bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
)";

std::vector<float> transposed(const std::vector<float>& a, int64_t rows, int64_t cols) {
  std::vector<float> t(a.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = a[r * cols + c];
  return t;
}

TEST_F(CaffeOptionsTest, TransposedInnerProductFusesTheReLUInEveryPrecision) {
  const int64_t m = 4, k = 6, n = 5;
  std::vector<Precision> precisions = {FP32};
  for (Precision p : half_precisions(backend_)) precisions.push_back(p);
  for (Precision p : precisions) {
    SCOPED_TRACE(Precision_Name(p));
    NetParameter param = parse_net_parameter(kTransposedNet, "net");
    set_default_precision(param, p);
    NetParameter plain_param = param;
    for (LayerParameter& l : *plain_param.mutable_layer())
      if (l.name() == "ip") l.mutable_inner_product_param()->set_transpose(false);
    Net net(param, TRAIN, backend_, 1), plain(plain_param, TRAIN, backend_, 1);
    const int ip = layer_index(net, "ip"), relu = layer_index(net, "relu");
    ASSERT_TRUE(net.layer_fused(relu)) << "the ReLU is part of the transposed product";
    ASSERT_TRUE(plain.layer_fused(layer_index(plain, "relu")));
    const int plain_ip = layer_index(plain, "ip");
    std::vector<Param>& ps = net.layer(ip).params();
    std::vector<Param>& qs = plain.layer(plain_ip).params();
    ASSERT_EQ(ps[0].tensor->shape(), (Shape{k, n}));
    qs[0].tensor->copy_data_from_host(transposed(ps[0].tensor->copy_data_to_host(), k, n));
    qs[1].tensor->copy_data_from_host(ps[1].tensor->copy_data_to_host());
    plain.refresh_half_weights();
    const std::vector<float> data = random_values(m * k, 5), dy = random_values(m * n, 6);
    forward_and_backward(net, ip, data, dy);
    forward_and_backward(plain, plain_ip, data, dy);
    // FP32: the same sums in another order; 16 bits: at most one step of the format apart.
    const double tol = p == FP32 ? 1e-6 : p == BF16 ? 1e-2 : 2e-3;
    const std::vector<float> y = net.blob("ip").copy_data_to_host();
    EXPECT_EQ(compare(y, plain.blob("ip").copy_data_to_host(), tol), "");
    EXPECT_NE(std::count(y.begin(), y.end(), 0.0f), 0) << "some outputs rectified";
    EXPECT_EQ(compare(net.layer_bottoms(ip)[0]->copy_diff_to_host(),
                      plain.layer_bottoms(plain_ip)[0]->copy_diff_to_host(), tol), "");
    EXPECT_EQ(compare(transposed(ps[0].tensor->copy_diff_to_host(), k, n),
                      qs[0].tensor->copy_diff_to_host(), 1e-5), "");
    EXPECT_EQ(compare(ps[1].tensor->copy_diff_to_host(), qs[1].tensor->copy_diff_to_host(), 1e-5),
              "");
  }
}

// ---------------------------------------------------------------- Eltwise

// stable_prod_grad false is Caffe's dy y / x_i; true the product of the others: the same
// values away from zero.
TEST_F(CaffeOptionsTest, ProdGradientIsTheOutputOverTheInput) {
  for (const char* stable : {"true", "false"}) {
    SCOPED_TRACE(stable);
    auto prod = make(std::string("name: 'p' type: 'Eltwise' eltwise_param { operation: PROD "
                                 "stable_prod_grad: ") + stable + " }");
    std::vector<Tensor*> x;
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v = random_values(6, 10 + i, 0.5f, 2.0f);
      if (i == 1) v[2] = -v[2];
      x.push_back(tensor({2, 3}, "x" + std::to_string(i), v));
    }
    Tensor* y = set_up(*prod, {x[0], x[1], x[2]});
    prod->forward({x[0], x[1], x[2]}, {y});
    const std::vector<float> yv = y->copy_data_to_host(), dy = random_values(6, 20);
    y->copy_diff_from_host(dy);
    prod->backward_input({y}, {true, true, true}, {x[0], x[1], x[2]});
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> xi = x[i]->copy_data_to_host();
      std::vector<double> expected;
      for (int j = 0; j < 6; ++j) expected.push_back(double(dy[j]) * yv[j] / xi[j]);
      expect_near(x[i]->copy_diff_to_host(), expected);
    }
  }
}

// Where an input is 0, Caffe's divided gradient is 0 / 0 (NaN) for that input, and the
// others' are finite; the stable form gives every input the product of the others.
TEST_F(CaffeOptionsTest, DividedProdGradientIsNotFiniteAtZeroAsCaffes) {
  for (const bool stable : {true, false}) {
    SCOPED_TRACE(stable ? "stable" : "divided");
    auto prod = make(std::string("name: 'p' type: 'Eltwise' eltwise_param { operation: PROD "
                                 "stable_prod_grad: ") + (stable ? "true" : "false") + " }");
    Tensor* a = tensor({2}, "a", {0.0f, 2.0f});
    Tensor* b = tensor({2}, "b", {3.0f, 0.5f});
    Tensor* y = set_up(*prod, {a, b});
    prod->forward({a, b}, {y});
    y->copy_diff_from_host({1.0f, 1.0f});
    prod->backward_input({y}, {true, true}, {a, b});
    const std::vector<float> da = a->copy_diff_to_host();
    EXPECT_EQ(std::isfinite(da[0]), stable) << da[0];
    if (stable) EXPECT_EQ(da[0], 3.0f);
    EXPECT_FLOAT_EQ(da[1], 0.5f);
    expect_near(b->copy_diff_to_host(), {0.0, 2.0});  // b = 3, 0.5: no zero
  }
}

// The divided gradient reads the top's values: an in-place layer after it is refused (the
// stable form allows one); in a 16-bit net it runs in FP32, converted around.
TEST_F(CaffeOptionsTest, DividedProdReadsItsTopAndRunsInFP32) {
  const auto text = [](const char* stable, const char* relu_top) {
    return std::string(R"(force_backward: true
layer { name: "data" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "prod" type: "Eltwise" bottom: "a" bottom: "b" top: "p"
        eltwise_param { operation: PROD stable_prod_grad: )") + stable + R"( } }
layer { name: "relu" type: "ReLU" bottom: "p" top: ")" + relu_top + R"(" }
layer { name: "loss" type: "Reduction" bottom: ")" + relu_top + R"(" top: "loss"
        loss_weight: 1 }
)";
  };
  EXPECT_NO_THROW(Net(parse_net_parameter(text("true", "p"), "net"), TRAIN, backend_, 1));
  EXPECT_THAT(error_of([&] {
                Net(parse_net_parameter(text("false", "p"), "net"), TRAIN, backend_, 1);
              }),
              AllOf(HasSubstr("layer 'relu' (ReLU): cannot work in place on 'p'"),
                    HasSubstr("layer 'prod' (Eltwise)")));
  std::vector<Precision> precisions = {FP32};
  for (Precision p : half_precisions(backend_)) precisions.push_back(p);
  for (Precision p : precisions) {
    SCOPED_TRACE(Precision_Name(p));
    NetParameter param = parse_net_parameter(text("false", "r"), "net");
    set_default_precision(param, p);
    Net net(param, TRAIN, backend_, 1);
    EXPECT_EQ(net.blob("p").dtype(), DType::kF32);
    const std::vector<float> a = random_values(6, 1, 0.5f, 2.0f), b = random_values(6, 2);
    net.blob("a").copy_data_from_host(a);
    net.blob("b").copy_data_from_host(b);
    net.forward();
    net.backward();
    // Reduction SUM of ReLU(a b): da = b where a b > 0, else 0 (a > 0 here).
    std::vector<double> da(6);
    for (int i = 0; i < 6; ++i) da[i] = double(a[i]) * b[i] > 0 ? b[i] : 0.0;
    expect_near(net.blob("a").copy_diff_to_host(), da, p == FP32 ? 1e-5 : 1e-2);
  }
}

// Caffe refuses coeff for PROD only; MAX ignores them (so its y is the plain maximum).
TEST_F(CaffeOptionsTest, EltwiseCoeffRulesFollowCaffe) {
  Tensor* a = tensor({3}, "a", {1, -2, 3});
  Tensor* b = tensor({3}, "b", {0, 5, -1});
  auto max = make("name: 'm' type: 'Eltwise' eltwise_param { operation: MAX coeff: [2, -1] }");
  Tensor* y = set_up(*max, {a, b});
  max->forward({a, b}, {y});
  expect_near(y->copy_data_to_host(), {1, 5, 3});
  std::string m = setup_error("name: 'p' type: 'Eltwise' eltwise_param { operation: PROD "
                              "coeff: [2, -1] }", {a, b});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'p' (Eltwise)"),
                       HasSubstr("eltwise_param.coeff applies to operation SUM only, not PROD")));
  m = setup_error("name: 'm2' type: 'Eltwise' eltwise_param { operation: MAX coeff: 2 }",
                  {a, b});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'm2' (Eltwise)"),
                       HasSubstr("one value per bottom: 2 bottoms, 1 coeff values")));
}

// ---------------------------------------------------------------- Concat

TEST_F(CaffeOptionsTest, ConcatJoinsAlongAnyAxis) {
  Tensor* a = tensor({2, 1, 2}, "a", {1, 2, 3, 4});
  Tensor* b = tensor({2, 1, 2}, "b", {5, 6, 7, 8});
  const std::vector<std::pair<std::string, std::vector<double>>> expected = {
      {"axis: 0", {1, 2, 3, 4, 5, 6, 7, 8}},         // (4, 1, 2)
      {"axis: 1", {1, 2, 5, 6, 3, 4, 7, 8}},         // (2, 2, 2)
      {"axis: -1", {1, 2, 5, 6, 3, 4, 7, 8}},        // (2, 1, 4)
      {"concat_dim: 2", {1, 2, 5, 6, 3, 4, 7, 8}},   // (2, 1, 4)
      {"concat_dim: 0", {1, 2, 3, 4, 5, 6, 7, 8}}};  // (4, 1, 2)
  const std::vector<Shape> shapes = {{4, 1, 2}, {2, 2, 2}, {2, 1, 4}, {2, 1, 4}, {4, 1, 2}};
  for (size_t i = 0; i < expected.size(); ++i) {
    SCOPED_TRACE(expected[i].first);
    auto cat = make("name: 'cat' type: 'Concat' concat_param { " + expected[i].first + " }");
    Tensor* y = set_up(*cat, {a, b});
    EXPECT_EQ(y->shape(), shapes[i]);
    cat->forward({a, b}, {y});
    expect_near(y->copy_data_to_host(), expected[i].second);
  }
}

TEST_F(CaffeOptionsTest, ConcatErrors) {
  Tensor* a = random_tensor({2, 3, 4}, "a", 1);
  Tensor* b = random_tensor({2, 5, 4}, "b", 2);
  std::string m = setup_error("name: 'cat' type: 'Concat' concat_param { axis: 2 }", {a, b});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'cat' (Concat)"), HasSubstr("except along axis 2"),
                       HasSubstr("'a' is (2, 3, 4)"), HasSubstr("'b' is (2, 5, 4)")));
  m = setup_error("name: 'cat' type: 'Concat' concat_param { axis: 1 }",
                  {a, random_tensor({2, 3}, "flat", 3)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'cat' (Concat)"), HasSubstr("'flat' is (2, 3)")));
  m = setup_error("name: 'cat' type: 'Concat' concat_param { axis: 1 concat_dim: 1 }", {a, a});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'cat' (Concat)"),
                       HasSubstr("both axis and concat_dim")));
  m = setup_error("name: 'cat' type: 'Concat' concat_param { concat_dim: 3 }", {a, a});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'cat' (Concat)"), HasSubstr("concat_param.concat_dim 3"),
                       HasSubstr("(2, 3, 4)")));
  m = setup_error("name: 'cat' type: 'Concat' concat_param { axis: -4 }", {a, a});
  EXPECT_THAT(m, HasSubstr("concat_param.axis -4 is out of range"));
}

// ---------------------------------------------------------------- Reshape

// Caffe's semantics, shapes computed by hand: the bottom's axes [axis, axis + num_axes)
// replaced by the shape; a negative axis counts from the end with -1 past the last axis; 0
// copies the bottom's dim at axis + i.
TEST_F(CaffeOptionsTest, ReshapeReplacesTheChosenAxes) {
  const std::vector<std::pair<std::string, Shape>> cases = {
      {"axis: 2 num_axes: 1 shape { dim: 2 dim: -1 }", {2, 3, 2, 4}},
      {"axis: 1 num_axes: 0 shape { dim: 1 }", {2, 1, 3, 8}},
      {"axis: -1 num_axes: 0 shape { dim: 1 }", {2, 3, 8, 1}},
      {"axis: 0 num_axes: 0 shape { dim: 1 dim: 1 }", {1, 1, 2, 3, 8}},
      {"axis: -2 shape { dim: 4 dim: -1 }", {2, 3, 4, 2}},
      {"axis: 1 num_axes: 2 shape { dim: -1 }", {2, 24}},
      {"axis: 1 shape { dim: 0 dim: 2 dim: -1 }", {2, 3, 2, 4}},
      {"axis: 1 num_axes: 1 shape { dim: 0 }", {2, 3, 8}},
      {"shape { dim: 0 dim: -1 }", {2, 24}}};
  for (const auto& [param, shape] : cases) {
    EXPECT_EQ(view_shape("name: 'r' type: 'Reshape' reshape_param { " + param + " }",
                         {2, 3, 8}), shape) << param;
  }
  // The top is the bottom's values in the same order.
  auto r = make("name: 'r' type: 'Reshape' reshape_param { axis: 1 num_axes: 1 "
                "shape { dim: 3 dim: 1 } }");
  Tensor* x = random_tensor({2, 3, 2}, "x", 4);
  Tensor* y = set_up(*r, {x});
  EXPECT_EQ(y->shape(), (Shape{2, 3, 1, 2}));
  r->forward({x}, {y});
  EXPECT_EQ(y->copy_data_to_host(), x->copy_data_to_host());
}

TEST_F(CaffeOptionsTest, ReshapeErrors) {
  Tensor* x = random_tensor({2, 3, 8}, "x", 1);
  const auto error = [&](const std::string& param) {
    return setup_error("name: 'r' type: 'Reshape' reshape_param { " + param + " }", {x});
  };
  std::string m = error("axis: 1 num_axes: 1 shape { dim: 5 }");
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'r' (Reshape)"), HasSubstr("gives (2, 5, 8) with 80"),
                       HasSubstr("(2, 3, 8) has 48")));
  m = error("axis: 4 shape { dim: 1 }");
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'r' (Reshape)"), HasSubstr("reshape_param.axis 4"),
                       HasSubstr("(2, 3, 8)")));
  EXPECT_THAT(error("axis: -5 shape { dim: 1 }"), HasSubstr("reshape_param.axis -5"));
  EXPECT_THAT(error("num_axes: -2 shape { dim: 48 }"),
              AllOf(HasSubstr("layer 'r' (Reshape)"), HasSubstr("num_axes must be >= 0")));
  EXPECT_THAT(error("axis: 2 num_axes: 2 shape { dim: 8 }"),
              AllOf(HasSubstr("axis 2 and num_axes 2 reach past the 3 axes")));
  EXPECT_THAT(error("axis: 2 shape { dim: 8 dim: 0 }"),
              AllOf(HasSubstr("layer 'r' (Reshape)"), HasSubstr("copies dim 3 (a 0)")));
  EXPECT_THAT(error("axis: 1 num_axes: 1 shape { dim: 5 dim: -1 }"),
              AllOf(HasSubstr("cannot infer the -1"), HasSubstr("not a multiple of 80")));
}

// ---------------------------------------------------------------- Scale and Bias

// x (2, 3, 2) scaled by s (3) from axis 1, and by a scalar s (): y = x s[c] (+ bias[c]);
// dx = dy s[c]; ds[c] = sum dy x (written: bottom 1's gradient); dbias[c] += sum dy.
TEST_F(CaffeOptionsTest, ScaleWithASecondBottomBroadcastsIt) {
  const std::vector<float> xv = random_values(12, 1), dy = random_values(12, 2);
  for (const Shape& s_shape : {Shape{3}, Shape{}}) {
    SCOPED_TRACE(shape_string(s_shape));
    const int64_t channels = shape_count(s_shape), inner = channels == 3 ? 2 : 1;
    auto scale = make("name: 's' type: 'Scale' scale_param { bias_term: true "
                      "bias_filler { type: 'gaussian' } }");
    Tensor* x = tensor({2, 3, 2}, "x", xv);
    Tensor* s = random_tensor(s_shape, "s", 3);
    Tensor* y = set_up(*scale, {x, s});
    ASSERT_EQ(scale->params().size(), 1u) << "the bias only";
    EXPECT_EQ(scale->params()[0].tensor->shape(), s_shape);
    const std::vector<float> sv = s->copy_data_to_host();
    const std::vector<float> bias = scale->params()[0].tensor->copy_data_to_host();
    scale->forward({x, s}, {y});
    std::vector<double> ref(12), dx(12), ds(channels, 0), db(channels, 0);
    for (int64_t i = 0; i < 12; ++i) {
      const int64_t c = (i / inner) % channels;
      ref[i] = double(xv[i]) * sv[c] + bias[c];
      dx[i] = double(dy[i]) * sv[c];
      ds[c] += double(dy[i]) * xv[i];
      db[c] += dy[i];
    }
    expect_near(y->copy_data_to_host(), ref);
    y->copy_diff_from_host(dy);
    s->copy_diff_from_host(std::vector<float>(channels, 7.0f));  // stale: written with =
    scale->params()[0].tensor->copy_diff_from_host(std::vector<float>(channels, 1.0f));
    scale->backward_params({y}, {x, s});
    scale->backward_input({y}, {true, true}, {x, s});
    expect_near(x->copy_diff_to_host(), dx);
    expect_near(s->copy_diff_to_host(), ds);
    for (double& v : db) v += 1.0;  // added to the parameter's gradient
    expect_near(scale->params()[0].tensor->copy_diff_to_host(), db);
  }
}

// x (2, 3, 2) plus b (2, 3) from axis 0: y = x + b[o, c]; dx = dy; db = sum over the inner axis.
TEST_F(CaffeOptionsTest, BiasWithASecondBottomBroadcastsIt) {
  auto bias = make("name: 'b' type: 'Bias' bias_param { axis: 0 }");
  const std::vector<float> xv = random_values(12, 1), bv = random_values(6, 2);
  const std::vector<float> dy = random_values(12, 3);
  Tensor* x = tensor({2, 3, 2}, "x", xv);
  Tensor* b = tensor({2, 3}, "b", bv);
  Tensor* y = set_up(*bias, {x, b});
  EXPECT_TRUE(bias->params().empty());
  bias->forward({x, b}, {y});
  std::vector<double> ref(12), db(6, 0);
  for (int64_t i = 0; i < 12; ++i) {
    ref[i] = double(xv[i]) + bv[i / 2];
    db[i / 2] += dy[i];
  }
  expect_near(y->copy_data_to_host(), ref);
  y->copy_diff_from_host(dy);
  b->copy_diff_from_host(std::vector<float>(6, 7.0f));
  bias->backward_input({y}, {true, true}, {x, b});
  expect_near(b->copy_diff_to_host(), db);
  EXPECT_EQ(x->copy_diff_to_host(), dy);
}

TEST_F(CaffeOptionsTest, ScaleAndBiasSecondBottomErrors) {
  Tensor* x = random_tensor({2, 3, 4}, "x", 1);
  std::string m = setup_error("name: 's' type: 'Scale'", {x, random_tensor({4}, "gamma", 2)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 's' (Scale)"), HasSubstr("bottom 1 'gamma' (4)"),
                       HasSubstr("'x' (2, 3, 4)"), HasSubstr("scale_param.axis 1")));
  m = setup_error("name: 's' type: 'Scale' scale_param { axis: 2 }",
                  {x, random_tensor({4, 2}, "gamma", 2)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 's' (Scale)"), HasSubstr("bottom 1 'gamma' (4, 2)")));
  m = setup_error("name: 's' type: 'Scale' scale_param { axis: -4 }",
                  {x, random_tensor({3}, "gamma", 2)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 's' (Scale)"), HasSubstr("scale_param.axis -4")));
  m = setup_error("name: 'b' type: 'Bias' bias_param { axis: 0 }",
                  {x, random_tensor({3}, "beta", 2)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'b' (Bias)"), HasSubstr("bottom 1 'beta' (3)"),
                       HasSubstr("bias_param.axis 0")));
  // The top cannot be the parameter it reads.
  Tensor* s = random_tensor({2, 3, 4}, "s", 3);
  auto scale = make("name: 's' type: 'Scale' scale_param { axis: 0 }");
  m = error_of([&] { scale->setup({x, s}, {s}); });
  EXPECT_THAT(m, AllOf(HasSubstr("layer 's' (Scale)"), HasSubstr("top 's' is bottom 1")));
  auto b = make("name: 'b' type: 'Bias' bias_param { axis: 0 }");
  m = error_of([&] { b->setup({x, s}, {s}); });
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'b' (Bias)"), HasSubstr("top 's' is bottom 1")));
}

// A BatchNorm absorbs a Scale of one bottom, never one whose scale is a bottom: the net runs
// that Scale itself, and the top is the normalised values times the given scale.
TEST_F(CaffeOptionsTest, BatchNormDoesNotAbsorbATwoBottomScale) {
  const char* text = R"(
layer { name: "data" type: "Input" top: "data" top: "gamma"
        input_param { shape { dim: 4 dim: 3 dim: 2 } shape { dim: 3 } } }
layer { name: "bn" type: "BatchNorm" bottom: "data" top: "data" }
layer { name: "scale" type: "Scale" bottom: "data" bottom: "gamma" top: "data" }
)";
  Net net(parse_net_parameter(text, "net"), TRAIN, backend_, 1);
  EXPECT_FALSE(net.layer_fused(layer_index(net, "scale")));
  const std::vector<float> xv = random_values(24, 1), g = {0.5f, -2.0f, 3.0f};
  net.blob("data").copy_data_from_host(xv);
  net.blob("gamma").copy_data_from_host(g);
  net.forward();
  std::vector<double> expected(24);
  for (int c = 0; c < 3; ++c) {
    double mean = 0, var = 0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 2; ++i) mean += xv[(n * 3 + c) * 2 + i] / 8.0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 2; ++i) var += std::pow(xv[(n * 3 + c) * 2 + i] - mean, 2) / 8.0;
    for (int n = 0; n < 4; ++n)
      for (int i = 0; i < 2; ++i) {
        const int j = (n * 3 + c) * 2 + i;
        expected[j] = (xv[j] - mean) / std::sqrt(var + 1e-5) * g[c];
      }
  }
  expect_near(net.blob("data").copy_data_to_host(), expected, 1e-4);
}

// ---------------------------------------------------------------- Flatten

TEST_F(CaffeOptionsTest, FlattenFollowsCaffesAxes) {
  const Shape x = {2, 3, 4, 5};
  const auto flat = [&](const std::string& param) {
    return view_shape("name: 'f' type: 'Flatten' flatten_param { " + param + " }", x);
  };
  EXPECT_EQ(flat("axis: -3 end_axis: -2"), (Shape{2, 12, 5}));
  EXPECT_EQ(flat("axis: 0 end_axis: -1"), (Shape{120}));
  EXPECT_EQ(flat("axis: -1"), (Shape{2, 3, 4, 5}));
  EXPECT_EQ(flat("axis: 2 end_axis: 1"), (Shape{2, 3, 1, 4, 5})) << "Caffe inserts an axis";
  const std::string m = setup_error("name: 'f' type: 'Flatten' flatten_param { axis: 3 "
                                    "end_axis: 1 }", {random_tensor(x, "x", 1)});
  EXPECT_THAT(m, AllOf(HasSubstr("layer 'f' (Flatten)"), HasSubstr("more than one axis after"),
                       HasSubstr("(2, 3, 4, 5)")));
  EXPECT_THAT(setup_error("name: 'f' type: 'Flatten' flatten_param { end_axis: -5 }",
                          {random_tensor(x, "x", 1)}),
              AllOf(HasSubstr("layer 'f' (Flatten)"), HasSubstr("end_axis -5")));
}

// ---------------------------------------------------------------- Caffe's model files

// The options in a Caffe prototxt build, and gradients reach every learned weight: a
// transposed InnerProduct, a PROD Eltwise with stable_prod_grad false, a Concat by
// concat_dim, a Reshape of the middle axis and a Scale whose scale is a bottom (4, 3) from
// axis 0 over (4, 3, 4).
TEST_F(CaffeOptionsTest, CaffeNetWithTheOptionsRunsBackward) {
  const char* text = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 6 } shape { dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 6 transpose: true } }
layer { name: "prod" type: "Eltwise" bottom: "data" bottom: "ip" top: "prod"
        eltwise_param { operation: PROD stable_prod_grad: false } }
layer { name: "cat" type: "Concat" bottom: "prod" bottom: "ip" top: "cat"
        concat_param { concat_dim: 1 } }
layer { name: "r" type: "Reshape" bottom: "cat" top: "r"
        reshape_param { axis: 1 num_axes: 1 shape { dim: 3 dim: 4 } } }
layer { name: "g" type: "InnerProduct" bottom: "data" top: "g"
        inner_product_param { num_output: 3 transpose: true } }
layer { name: "gate" type: "Scale" bottom: "r" bottom: "g" top: "gated"
        scale_param { axis: 0 bias_term: true } }
layer { name: "out" type: "InnerProduct" bottom: "gated" top: "out"
        inner_product_param { num_output: 3 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "out" bottom: "label" top: "loss" }
)";
  Net net(parse_net_parameter(text, "caffe.prototxt"), TRAIN, backend_, 1);
  EXPECT_EQ(net.blob("r").shape(), (Shape{4, 3, 4}));
  EXPECT_EQ(net.blob("gated").shape(), (Shape{4, 3, 4}));
  net.blob("data").copy_data_from_host(random_values(24, 1));
  net.blob("label").copy_data_from_host({0, 2, 1, 2});
  net.forward();
  EXPECT_TRUE(std::isfinite(net.loss()));
  net.arena().zero_diff();
  net.backward();
  for (const char* name : {"ip", "g", "gate", "out"}) {
    const std::vector<float> d = net.layer(layer_index(net, name)).params()[0].tensor
                                     ->copy_diff_to_host();
    double norm = 0;
    for (float v : d) norm += double(v) * v;
    EXPECT_GT(norm, 0) << name << "'s first parameter gets a gradient";
    EXPECT_TRUE(std::isfinite(norm)) << name;
  }
}

}  // namespace
}  // namespace lamina::testing
