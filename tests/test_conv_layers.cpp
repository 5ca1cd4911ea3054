// Tests of the convolutional-network layers on the NativeBackend: Convolution, Pooling,
// BatchNorm, Scale, Bias, Concat and Eltwise. For each: forward values against small cases
// computed here in closed form (or by a direct double-precision reference), numerical
// gradient checks of inputs and parameters, and the errors a user gets for bad parameters.
// BatchNorm's running statistics are checked through a TRAIN net and a TEST net that shares
// its parameters, as the solver runs them.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "lamina/gradient_checker.hpp"
#include "lamina/io.hpp"
#include "lamina/layer.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::random_values;

LayerParameter parse_layer(const std::string& text) {
  LayerParameter param;
  if (!google::protobuf::TextFormat::ParseFromString(text, &param)) {
    ADD_FAILURE() << "cannot parse layer prototxt: " << text;
  }
  return param;
}

GradientCheckOptions check_options(float threshold = 1e-3f) {
  GradientCheckOptions options;
  options.threshold = threshold;
  return options;
}

// n distinct values spaced by 0.05 in random order: a checker step of 0.01 never changes which
// element of a window is the largest.
std::vector<float> separated_values(int64_t n, uint64_t seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = 0.05f * float(i) - 0.025f * float(n);
  std::shuffle(v.begin(), v.end(), std::mt19937_64(seed));
  return v;
}

class ConvLayersTest : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& prototxt, Phase phase = TRAIN) {
    return LayerRegistry::create(parse_layer(prototxt), LayerContext{backend_, phase, 7});
  }
  Tensor* tensor(const Shape& shape, const std::string& name,
                 const std::vector<float>& values = {}) {
    tensors_.push_back(std::make_unique<Tensor>(backend_, shape, name));
    if (!values.empty()) tensors_.back()->copy_data_from_host(values);
    return tensors_.back().get();
  }
  Tensor* random_tensor(const Shape& shape, const std::string& name, uint64_t seed) {
    return tensor(shape, name, random_values(shape_count(shape), seed));
  }
  Tensor* output(const std::string& name = "y") { return tensor({1}, name); }

  // Expects success on exactly expected_checked elements, so a check that compares nothing
  // (or skips a parameter) fails too.
  void expect_gradients(Layer& layer, const Tensors& bottom, const Tensors& top,
                        int64_t expected_checked,
                        const GradientCheckOptions& options = check_options()) {
    const GradientCheckResult r = check_gradients(layer, bottom, top, options);
    EXPECT_TRUE(r.ok) << r.summary();
    EXPECT_EQ(r.checked + r.skipped, expected_checked) << r.summary();
    EXPECT_GT(r.checked, 0) << r.summary();
  }

  // The message of the Error that setting the layer up throws.
  std::string setup_error(const std::string& prototxt, const Tensors& bottom,
                          Phase phase = TRAIN) {
    auto layer = make(prototxt, phase);
    return error_of([&] { layer->setup(bottom, {output()}); });
  }

  NativeBackend backend_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

std::vector<float> data(const Tensor* t) { return t->copy_data_to_host(); }
std::vector<float> diff(const Tensor* t) { return t->copy_diff_to_host(); }
std::vector<float> data(const Param& p) { return p.tensor->copy_data_to_host(); }

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected,
                 double tol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], tol * std::max(1.0, std::abs(expected[i])))
        << "at index " << i;
  }
}

// ---------------------------------------------------------------- Convolution

// y (N, K, OH, OW) of a grouped, strided, padded, dilated convolution, in double.
std::vector<double> conv_reference(const ConvGeometry& g, const std::vector<float>& x,
                                   const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<double> y(g.n * g.k * g.out_h * g.out_w);
  const int64_t cg = g.c / g.groups, kg = g.k / g.groups;
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t k = 0; k < g.k; ++k)
      for (int64_t oh = 0; oh < g.out_h; ++oh)
        for (int64_t ow = 0; ow < g.out_w; ++ow) {
          double s = b.empty() ? 0.0 : b[k];
          for (int64_t cc = 0; cc < cg; ++cc) {
            const int64_t c = (k / kg) * cg + cc;
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t h = oh * g.stride_h - g.pad_h + i * g.dilation_h;
                const int64_t v = ow * g.stride_w - g.pad_w + j * g.dilation_w;
                if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
                s += double(x[((n * g.c + c) * g.h + h) * g.w + v]) *
                     w[((k * cg + cc) * g.kh + i) * g.kw + j];
              }
          }
          y[((n * g.k + k) * g.out_h + oh) * g.out_w + ow] = s;
        }
  return y;
}

std::vector<float> iota(int64_t n, float start = 1) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST_F(ConvLayersTest, ConvolutionSobelOnARamp) {
  auto conv = make("name: 'conv' type: 'Convolution' convolution_param { num_output: 1 "
                   "kernel_size: 3 }");
  // x[i][j] = 4 i + j + 1: every row rises by 2 across a 3-wide window, so the Sobel-x kernel
  // gives (1 + 2 + 1) (-2) = -8 at every position, plus the bias.
  Tensor* x = tensor({1, 1, 4, 4}, "x", iota(16));
  Tensor* y = output();
  setup_standalone(*conv, {x}, {y}, 1);
  ASSERT_EQ(conv->params().size(), 2u);
  EXPECT_EQ(conv->params()[0].tensor->shape(), (Shape{1, 1, 3, 3}));
  EXPECT_EQ(conv->params()[1].tensor->shape(), (Shape{1}));
  conv->params()[0].tensor->copy_data_from_host({1, 0, -1, 2, 0, -2, 1, 0, -1});
  conv->params()[1].tensor->copy_data_from_host({0.5f});
  conv->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{1, 1, 2, 2}));
  expect_near(data(y), {-7.5, -7.5, -7.5, -7.5});
}

TEST_F(ConvLayersTest, ConvolutionBlockSumsWithStrideAndPadding) {
  Tensor* x = tensor({1, 1, 4, 4}, "x", iota(16));
  // A 2x2 kernel of ones with stride 2 sums the 2x2 blocks.
  auto blocks = make("name: 'c' type: 'Convolution' convolution_param { num_output: 1 "
                     "kernel_size: 2 stride: 2 bias_term: false }");
  Tensor* y = output();
  setup_standalone(*blocks, {x}, {y}, 1);
  ASSERT_EQ(blocks->params().size(), 1u);
  blocks->params()[0].tensor->copy_data_from_host({1, 1, 1, 1});
  blocks->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{1, 1, 2, 2}));
  expect_near(data(y), {1 + 2 + 5 + 6, 3 + 4 + 7 + 8, 9 + 10 + 13 + 14, 11 + 12 + 15 + 16});
  // 3x3 of ones, pad 1, stride 3: output (4 + 2 - 3) / 3 + 1 = 2; the windows centred on
  // (0, 0), (0, 3), (3, 0) and (3, 3) see the corner 2x2 blocks.
  auto padded = make("name: 'c' type: 'Convolution' convolution_param { num_output: 1 "
                     "kernel_size: 3 pad: 1 stride: 3 bias_term: false "
                     "weight_filler { type: 'constant' value: 1 } }");
  Tensor* z = output();
  setup_standalone(*padded, {x}, {z}, 1);
  padded->forward({x}, {z});
  EXPECT_EQ(z->shape(), (Shape{1, 1, 2, 2}));
  expect_near(data(z), {1 + 2 + 5 + 6, 3 + 4 + 7 + 8, 9 + 10 + 13 + 14, 11 + 12 + 15 + 16});
}

TEST_F(ConvLayersTest, ConvolutionDefaultFillersAndBackwardAccumulates) {
  auto conv = make("name: 'conv' type: 'Convolution' convolution_param { num_output: 2 "
                   "kernel_size: 1 }");
  Tensor* x = tensor({1, 1, 1, 2}, "x", {1, 2});
  Tensor* y = output();
  setup_standalone(*conv, {x}, {y}, 1);
  EXPECT_EQ(conv->params()[0].filler.type(), "xavier");
  EXPECT_EQ(conv->params()[1].filler.type(), "constant");
  EXPECT_EQ(conv->params()[1].filler.value(), 0.0f);
  conv->forward({x}, {y});
  y->copy_diff_from_host({1, -1, 2, 0});  // (1, 2, 1, 2)
  conv->backward_params({y}, {x});
  conv->backward_params({y}, {x});
  // dw[k] = 2 sum_j dy[k, j] x[j], db[k] = 2 sum_j dy[k, j].
  expect_near(diff(conv->params()[0].tensor.get()), {2 * (1 - 2), 2 * 2});
  expect_near(diff(conv->params()[1].tensor.get()), {0, 4});
}

struct ConvCase {
  const char* name;
  const char* param;  // convolution_param body
  Shape x;
  ConvGeometry g;     // the expected geometry (n, c, h, w from x)
  bool bias;
};

void PrintTo(const ConvCase& c, std::ostream* out) { *out << c.name; }

class ConvolutionCases : public ConvLayersTest, public ::testing::WithParamInterface<ConvCase> {};

TEST_P(ConvolutionCases, ForwardMatchesReferenceAndGradientsCheck) {
  const ConvCase& c = GetParam();
  auto conv = make(std::string("name: 'conv' type: 'Convolution' convolution_param { ") +
                   c.param + " bias_filler { type: 'uniform' min: -1 max: 1 } }");
  Tensor* x = random_tensor(c.x, "x", 31);
  Tensor* y = output();
  setup_standalone(*conv, {x}, {y}, 3);
  const ConvGeometry& g = c.g;
  ASSERT_EQ(conv->params().size(), c.bias ? 2u : 1u);
  EXPECT_EQ(conv->params()[0].tensor->shape(), (Shape{g.k, g.c / g.groups, g.kh, g.kw}));
  conv->forward({x}, {y});
  ASSERT_EQ(y->shape(), (Shape{g.n, g.k, g.out_h, g.out_w}));
  expect_near(data(y), conv_reference(g, data(x), data(conv->params()[0]),
                                      c.bias ? data(conv->params()[1]) : std::vector<float>{}));
  const int64_t weights = g.k * (g.c / g.groups) * g.kh * g.kw;
  expect_gradients(*conv, {x}, {y}, x->count() + weights + (c.bias ? g.k : 0));
}

// ConvGeometry: n, c, h, w, k, kh, kw, stride h/w, pad h/w, dilation h/w, groups, out h/w.
INSTANTIATE_TEST_SUITE_P(
    Geometries, ConvolutionCases,
    ::testing::Values(
        ConvCase{"StridePad", "num_output: 3 kernel_size: 3 stride: 2 pad: 1", {2, 2, 5, 5},
                 {2, 2, 5, 5, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 3}, true},
        ConvCase{"Dilation", "num_output: 2 kernel_size: 2 dilation: 2", {1, 2, 5, 4},
                 {1, 2, 5, 4, 2, 2, 2, 1, 1, 0, 0, 2, 2, 1, 3, 2}, true},
        ConvCase{"Groups", "num_output: 4 kernel_size: 2 group: 2", {2, 4, 3, 3},
                 {2, 4, 3, 3, 4, 2, 2, 1, 1, 0, 0, 1, 1, 2, 2, 2}, true},
        ConvCase{"NoBias", "num_output: 2 kernel_size: 3 pad: 1 bias_term: false", {2, 3, 3, 3},
                 {2, 3, 3, 3, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 3, 3}, false},
        ConvCase{"NonSquareHW", "num_output: 2 kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 "
                 "pad_h: 1 pad_w: 0", {1, 2, 4, 5},
                 {1, 2, 4, 5, 2, 3, 2, 1, 2, 1, 0, 1, 1, 1, 4, 2}, true},
        ConvCase{"TwoValueLists", "num_output: 3 kernel_size: [2, 3] stride: [2, 1] "
                 "pad: [0, 1] dilation: [1, 2] group: 3", {1, 3, 5, 6},
                 {1, 3, 5, 6, 3, 2, 3, 2, 1, 0, 1, 1, 2, 3, 2, 4}, true}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(ConvLayersTest, ConvolutionErrors) {
  Tensor* x = random_tensor({2, 3, 5, 5}, "x", 1);
  std::string m = setup_error("name: 'c1' type: 'Convolution' convolution_param { num_output: 2 "
                              "kernel_size: 3 kernel_h: 3 kernel_w: 3 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'c1' (Convolution)"));
  EXPECT_THAT(m, HasSubstr("convolution_param.kernel_size or convolution_param.kernel_h/kernel_w, "
                           "not both"));

  m = setup_error("name: 'c2' type: 'Convolution' convolution_param { num_output: 4 "
                  "kernel_size: 1 group: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'c2' (Convolution)"));
  EXPECT_THAT(m, HasSubstr("group 2 must divide"));
  EXPECT_THAT(m, HasSubstr("(2, 3, 5, 5)"));

  auto fine = make("name: 'c3' type: 'Convolution' convolution_param { num_output: 3 "
                   "kernel_size: 1 group: 3 }");
  EXPECT_NO_THROW(fine->setup({x}, {output()})) << "group 3 divides 3 channels and 3 outputs";

  m = setup_error("name: 'c4' type: 'Convolution' convolution_param { num_output: 2 "
                  "kernel_size: 1 }", {random_tensor({2, 3, 5}, "flat", 2)});
  EXPECT_THAT(m, HasSubstr("layer 'c4' (Convolution)"));
  EXPECT_THAT(m, HasSubstr("4-D"));
  EXPECT_THAT(m, HasSubstr("(2, 3, 5)"));

  m = setup_error("name: 'c5' type: 'Convolution' convolution_param { kernel_size: 3 }", {x});
  EXPECT_THAT(m, HasSubstr("num_output"));

  m = setup_error("name: 'c6' type: 'Convolution' convolution_param { num_output: 1 "
                  "kernel_size: 4 dilation: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'c6' (Convolution)"));
  EXPECT_THAT(m, HasSubstr("7x7 dilated kernel does not fit"));

  m = setup_error("name: 'c7' type: 'Convolution' convolution_param { num_output: 1 "
                  "kernel_size: [1, 2, 3] }", {x});
  EXPECT_THAT(m, HasSubstr("convolution_param.kernel_size takes one value"));

  m = setup_error("name: 'c8' type: 'Convolution' convolution_param { num_output: 1 "
                  "kernel_h: 3 }", {x});
  EXPECT_THAT(m, HasSubstr("kernel_w"));

  m = setup_error("name: 'c9' type: 'Convolution' convolution_param { num_output: 1 }", {x});
  EXPECT_THAT(m, HasSubstr("kernel_size"));

  m = setup_error("name: 'c10' type: 'Convolution' convolution_param { num_output: 1 "
                  "kernel_size: 1 stride: 0 }", {x});
  EXPECT_THAT(m, HasSubstr("stride must be positive"));
}

// ---------------------------------------------------------------- Pooling

// Caffe's pooling in double: windows clipped to the input; average divides by the window
// clipped to the padded input.
std::vector<double> pool_reference(const PoolGeometry& g, bool max, const std::vector<float>& x) {
  std::vector<double> y(g.n * g.c * g.out_h * g.out_w);
  for (int64_t p = 0; p < g.n * g.c; ++p)
    for (int64_t oh = 0; oh < g.out_h; ++oh)
      for (int64_t ow = 0; ow < g.out_w; ++ow) {
        int64_t h0 = oh * g.stride_h - g.pad_h, w0 = ow * g.stride_w - g.pad_w;
        int64_t h1 = std::min(h0 + g.kh, g.h + g.pad_h), w1 = std::min(w0 + g.kw, g.w + g.pad_w);
        const double size = double((h1 - h0) * (w1 - w0));
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, g.h);
        w1 = std::min(w1, g.w);
        double acc = max ? -1e30 : 0.0;
        for (int64_t h = h0; h < h1; ++h)
          for (int64_t w = w0; w < w1; ++w) {
            const double v = x[(p * g.h + h) * g.w + w];
            acc = max ? std::max(acc, v) : acc + v;
          }
        y[(p * g.out_h + oh) * g.out_w + ow] = max ? acc : acc / size;
      }
  return y;
}

const std::vector<float> kPlane = {1, 5, 2, 0,  //
                                   3, 4, 8, 6,  //
                                   7, 2, 1, 9,  //
                                   0, 6, 3, 4};

TEST_F(ConvLayersTest, MaxPoolingForwardAndBackwardToTheArgMax) {
  auto pool = make("name: 'pool' type: 'Pooling' pooling_param { pool: MAX kernel_size: 2 "
                   "stride: 2 }");
  Tensor* x = tensor({1, 1, 4, 4}, "x", kPlane);
  Tensor* y = output();
  setup_standalone(*pool, {x}, {y}, 1);
  pool->forward({x}, {y});
  EXPECT_EQ(y->shape(), (Shape{1, 1, 2, 2}));
  expect_near(data(y), {5, 8, 7, 9});
  x->copy_diff_from_host(std::vector<float>(16, 7.0f));  // stale values must be overwritten
  y->copy_diff_from_host({1, 2, 3, 4});
  pool->backward_input({y}, {true}, {x});
  // The maxima sit at (0, 1), (1, 2), (2, 0) and (2, 3).
  expect_near(diff(x), {0, 1, 0, 0, 0, 0, 2, 0, 3, 0, 0, 4, 0, 0, 0, 0});
}

TEST_F(ConvLayersTest, AveragePoolingForward) {
  auto pool = make("name: 'pool' type: 'Pooling' pooling_param { pool: AVE kernel_size: 2 "
                   "stride: 2 }");
  Tensor* x = tensor({1, 1, 4, 4}, "x", kPlane);
  Tensor* y = output();
  setup_standalone(*pool, {x}, {y}, 1);
  pool->forward({x}, {y});
  expect_near(data(y), {(1 + 5 + 3 + 4) / 4.0, (2 + 0 + 8 + 6) / 4.0, (7 + 2 + 0 + 6) / 4.0,
                        (1 + 9 + 3 + 4) / 4.0});
  y->copy_diff_from_host({4, 8, 0, -4});
  pool->backward_input({y}, {true}, {x});
  expect_near(diff(x), {1, 1, 2, 2, 1, 1, 2, 2, 0, 0, -1, -1, 0, 0, -1, -1});
}

TEST_F(ConvLayersTest, GlobalPooling) {
  for (const char* method : {"MAX", "AVE"}) {
    SCOPED_TRACE(method);
    auto pool = make(std::string("name: 'gp' type: 'Pooling' pooling_param { pool: ") + method +
                     " global_pooling: true }");
    std::vector<float> values = kPlane;
    for (float v : kPlane) values.push_back(-v);  // a second channel
    Tensor* x = tensor({1, 2, 4, 4}, "x", values);
    Tensor* y = output();
    setup_standalone(*pool, {x}, {y}, 1);
    pool->forward({x}, {y});
    EXPECT_EQ(y->shape(), (Shape{1, 2, 1, 1}));
    if (std::string(method) == "MAX") {
      expect_near(data(y), {9, 0});
    } else {
      expect_near(data(y), {61.0 / 16, -61.0 / 16});
    }
  }
}

TEST_F(ConvLayersTest, PoolingOutputSizes) {
  struct Case {
    const char* param;
    Shape x;
    int64_t out_h, out_w;
  };
  for (const Case& c : std::vector<Case>{
           {"kernel_size: 3 stride: 2", {1, 1, 5, 5}, 2, 2},                   // overlapping
           {"kernel_size: 3 stride: 2", {1, 1, 6, 7}, 3, 3},                   // CEIL: 2.5, 3
           {"kernel_size: 3 stride: 2 round_mode: FLOOR", {1, 1, 6, 7}, 2, 3},
           {"kernel_size: 2 stride: 2 pad: 1", {1, 1, 5, 4}, 3, 3},  // a window in the pad
           {"kernel_h: 3 kernel_w: 1 stride_h: 2 stride_w: 1", {1, 1, 7, 2}, 3, 2},
           {"kernel_size: 4 stride: 3 pad_h: 1 pad_w: 2", {1, 1, 8, 8}, 3, 4}}) {
    SCOPED_TRACE(c.param);
    auto pool = make(std::string("name: 'p' type: 'Pooling' pooling_param { ") + c.param + " }");
    Tensor* y = output();
    setup_standalone(*pool, {random_tensor(c.x, "x", 1)}, {y}, 1);
    EXPECT_EQ(y->shape(), (Shape{1, 1, c.out_h, c.out_w}));
  }
}

struct PoolCase {
  const char* name;
  const char* param;  // pooling_param body
  Shape x;
  PoolGeometry g;
};

void PrintTo(const PoolCase& c, std::ostream* out) { *out << c.name; }

class PoolingCases : public ConvLayersTest, public ::testing::WithParamInterface<PoolCase> {};

TEST_P(PoolingCases, ForwardMatchesReferenceAndGradientsCheck) {
  const PoolCase& c = GetParam();
  auto pool = make(std::string("name: 'pool' type: 'Pooling' pooling_param { ") + c.param + " }");
  Tensor* x = tensor(c.x, "x", separated_values(shape_count(c.x), 41));
  Tensor* y = output();
  setup_standalone(*pool, {x}, {y}, 1);
  pool->forward({x}, {y});
  const PoolGeometry& g = c.g;
  ASSERT_EQ(y->shape(), (Shape{g.n, g.c, g.out_h, g.out_w}));
  const bool max = std::string(c.param).find("AVE") == std::string::npos;
  expect_near(data(y), pool_reference(g, max, data(x)));
  expect_gradients(*pool, {x}, {y}, x->count());
}

// PoolGeometry: n, c, h, w, kh, kw, stride h/w, pad h/w, out h/w.
INSTANTIATE_TEST_SUITE_P(
    Windows, PoolingCases,
    ::testing::Values(
        PoolCase{"MaxOverlapping", "pool: MAX kernel_size: 3 stride: 2", {2, 2, 5, 5},
                 {2, 2, 5, 5, 3, 3, 2, 2, 0, 0, 2, 2}},
        PoolCase{"MaxNotDividing", "pool: MAX kernel_size: 3 stride: 2", {1, 2, 6, 7},
                 {1, 2, 6, 7, 3, 3, 2, 2, 0, 0, 3, 3}},
        PoolCase{"MaxPadded", "pool: MAX kernel_size: 3 stride: 2 pad: 1", {1, 2, 5, 6},
                 {1, 2, 5, 6, 3, 3, 2, 2, 1, 1, 3, 4}},
        PoolCase{"MaxGlobal", "pool: MAX global_pooling: true", {2, 3, 3, 4},
                 {2, 3, 3, 4, 3, 4, 1, 1, 0, 0, 1, 1}},
        PoolCase{"AveOverlapping", "pool: AVE kernel_size: 3 stride: 2", {2, 2, 5, 5},
                 {2, 2, 5, 5, 3, 3, 2, 2, 0, 0, 2, 2}},
        PoolCase{"AveNotDividing", "pool: AVE kernel_size: 3 stride: 2", {1, 2, 6, 7},
                 {1, 2, 6, 7, 3, 3, 2, 2, 0, 0, 3, 3}},
        PoolCase{"AvePadded", "pool: AVE kernel_size: 3 stride: 2 pad: 1", {1, 2, 5, 6},
                 {1, 2, 5, 6, 3, 3, 2, 2, 1, 1, 3, 4}},
        PoolCase{"AveGlobal", "pool: AVE global_pooling: true", {2, 3, 3, 4},
                 {2, 3, 3, 4, 3, 4, 1, 1, 0, 0, 1, 1}},
        PoolCase{"AveFloorNonSquare", "pool: AVE kernel_h: 2 kernel_w: 3 stride_h: 2 "
                 "stride_w: 1 round_mode: FLOOR", {1, 1, 5, 4},
                 {1, 1, 5, 4, 2, 3, 2, 1, 0, 0, 2, 2}}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(ConvLayersTest, PoolingErrors) {
  Tensor* x = random_tensor({1, 2, 6, 6}, "x", 1);
  std::string m = setup_error("name: 'p1' type: 'Pooling' pooling_param { kernel_size: 2 "
                              "pad: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'p1' (Pooling)"));
  EXPECT_THAT(m, HasSubstr("pooling_param.pad 2x2 must be smaller than the kernel 2x2"));

  m = setup_error("name: 'p2' type: 'Pooling' pooling_param { kernel_size: 2 kernel_h: 2 "
                  "kernel_w: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'p2' (Pooling)"));
  EXPECT_THAT(m, HasSubstr("not both"));

  m = setup_error("name: 'p3' type: 'Pooling' pooling_param { global_pooling: true "
                  "kernel_size: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'p3' (Pooling)"));
  EXPECT_THAT(m, HasSubstr("global_pooling"));

  m = setup_error("name: 'p4' type: 'Pooling' pooling_param { global_pooling: true stride: 2 }",
                  {x});
  EXPECT_THAT(m, HasSubstr("stride 1 and pad 0"));

  m = setup_error("name: 'p5' type: 'Pooling' pooling_param { pool: AVE }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'p5' (Pooling)"));
  EXPECT_THAT(m, HasSubstr("kernel_size"));

  m = setup_error("name: 'p6' type: 'Pooling' pooling_param { kernel_size: 7 }", {x});
  EXPECT_THAT(m, HasSubstr("(1, 2, 6, 6)"));

  m = setup_error("name: 'p7' type: 'Pooling' pooling_param { kernel_size: 2 }",
                  {random_tensor({4, 6}, "flat", 2)});
  EXPECT_THAT(m, HasSubstr("4-D"));
  EXPECT_THAT(m, HasSubstr("(4, 6)"));
}

// ---------------------------------------------------------------- BatchNorm

// Per-channel mean and biased variance of x (N, C, S), in double.
void moments(const std::vector<float>& x, int64_t n, int64_t c, int64_t s,
             std::vector<double>& mean, std::vector<double>& var) {
  mean.assign(c, 0);
  var.assign(c, 0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) mean[j] += x[(i * c + j) * s + k] / double(n * s);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) {
        const double d = x[(i * c + j) * s + k] - mean[j];
        var[j] += d * d / double(n * s);
      }
}

std::vector<double> normalise(const std::vector<float>& x, int64_t n, int64_t c, int64_t s,
                              const std::vector<double>& mean, const std::vector<double>& var,
                              double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j)
      for (int64_t k = 0; k < s; ++k) {
        const int64_t e = (i * c + j) * s + k;
        y[e] = (x[e] - mean[j]) / std::sqrt(var[j] + eps);
      }
  return y;
}

// Caffe's running sums after one batch with moving_average_fraction maf.
struct Running {
  std::vector<double> mean_sum, var_sum;
  double factor = 0;
  void update(const std::vector<float>& x, int64_t n, int64_t c, int64_t s, double maf) {
    std::vector<double> mean, var;
    moments(x, n, c, s, mean, var);
    mean_sum.resize(c, 0);
    var_sum.resize(c, 0);
    const double m = double(n * s);
    factor = maf * factor + 1;
    for (int64_t j = 0; j < c; ++j) {
      mean_sum[j] = maf * mean_sum[j] + mean[j];
      var_sum[j] = maf * var_sum[j] + var[j] * m / (m - 1);
    }
  }
  std::vector<double> mean() const { return scaled(mean_sum); }
  std::vector<double> var() const { return scaled(var_sum); }
  std::vector<double> scaled(const std::vector<double>& v) const {
    std::vector<double> out(v);
    for (double& e : out) e = factor == 0 ? 0 : e / factor;
    return out;
  }
};

TEST_F(ConvLayersTest, BatchNormTrainNormalisesWithBatchStatisticsAndUpdatesCaffesSums) {
  auto bn = make("name: 'bn' type: 'BatchNorm' batch_norm_param { moving_average_fraction: 0.5 "
                 "eps: 0.01 }");
  // (N, C, S) = (2, 2, 2): channel 0 holds 1, 3, 5, 7 (mean 4, var 5); channel 1 holds
  // 2, 2, 4, 0 (mean 2, var 2).
  Tensor* x = tensor({2, 2, 1, 2}, "x", {1, 3, 2, 2, 5, 7, 4, 0});
  Tensor* y = output();
  setup_standalone(*bn, {x}, {y}, 1);
  ASSERT_EQ(bn->params().size(), 3u);
  EXPECT_EQ(bn->params()[0].tensor->shape(), (Shape{2}));
  EXPECT_EQ(bn->params()[1].tensor->shape(), (Shape{2}));
  EXPECT_EQ(bn->params()[2].tensor->shape(), (Shape{1}));
  // lr_mult is forced to 0, as Caffe does.
  ASSERT_EQ(bn->param().param_size(), 3);
  for (const ParamSpec& spec : bn->param().param()) EXPECT_EQ(spec.lr_mult(), 0.0f);
  bn->forward({x}, {y});
  const double a = 1 / std::sqrt(5.01), b = 1 / std::sqrt(2.01);
  expect_near(data(y), {-3 * a, -1 * a, 0, 0, 1 * a, 3 * a, 2 * b, -2 * b});
  // factor = 1, sums = the batch mean and the unbiased variance (m = 4).
  expect_near(data(bn->params()[0]), {4, 2});
  expect_near(data(bn->params()[1]), {5 * 4 / 3.0, 2 * 4 / 3.0});
  expect_near(data(bn->params()[2]), {1});
  // A second batch: factor = 0.5 + 1, sums = 0.5 sums + batch.
  x->copy_data_from_host({0, 0, 1, 1, 2, 2, 3, 3});  // channel 0: mean 1 var 1; 1: mean 2 var 1
  bn->forward({x}, {y});
  expect_near(data(bn->params()[0]), {0.5 * 4 + 1, 0.5 * 2 + 2});
  expect_near(data(bn->params()[1]), {0.5 * 20 / 3.0 + 4 / 3.0, 0.5 * 8 / 3.0 + 4 / 3.0});
  expect_near(data(bn->params()[2]), {1.5});
}

TEST_F(ConvLayersTest, BatchNormGradientThroughBatchStatistics) {
  for (const Shape& shape : {Shape{4, 3, 2, 2}, Shape{5, 2}, Shape{3, 2, 3}}) {
    SCOPED_TRACE(shape_string(shape));
    auto bn = make("name: 'bn' type: 'BatchNorm'");
    Tensor* x = tensor(shape, "x", random_values(shape_count(shape), 51, -2, 2));
    Tensor* y = output();
    setup_standalone(*bn, {x}, {y}, 1);
    GradientCheckOptions options = check_options(2e-3f);
    options.step = 2e-3f;
    options.check_params = false;  // statistics, not learned: no gradient by design
    expect_gradients(*bn, {x}, {y}, x->count(), options);
  }
}

TEST_F(ConvLayersTest, BatchNormGradientIsNotTheFrozenOne) {
  // The gradient through batch statistics differs from dy inv_std: a layer that used the
  // frozen formula in TRAIN would fail the check above. Checks that difference is visible.
  auto bn = make("name: 'bn' type: 'BatchNorm'");
  Tensor* x = tensor({2, 1, 1, 2}, "x", {1, 2, 3, 6});  // mean 3, var 3.5
  Tensor* y = output();
  setup_standalone(*bn, {x}, {y}, 1);
  bn->forward({x}, {y});
  y->copy_diff_from_host({1, 0, 0, 0});
  bn->backward_input({y}, {true}, {x});
  // dx = inv_std (dy - mean(dy) - y mean(dy y)), y0 = -2 inv_std.
  const double s = 1 / std::sqrt(3.5 + 1e-5);
  const std::vector<double> yv = {-2 * s, -1 * s, 0, 3 * s};
  std::vector<double> expected(4);
  for (int i = 0; i < 4; ++i)
    expected[i] = s * ((i == 0 ? 1 : 0) - 0.25 - yv[i] * (yv[0] / 4));
  expect_near(diff(x), expected, 1e-4);
}

TEST_F(ConvLayersTest, BatchNormUseGlobalStatsForwardAndGradient) {
  for (Phase phase : {TRAIN, TEST}) {
    SCOPED_TRACE(Phase_Name(phase));
    // TRAIN needs use_global_stats: true; TEST uses the running statistics by default.
    auto bn = make(std::string("name: 'bn' type: 'BatchNorm' batch_norm_param { eps: 0.001 ") +
                       (phase == TRAIN ? "use_global_stats: true" : "") + " }",
                   phase);
    Tensor* x = random_tensor({3, 2, 2, 2}, "x", 52);
    Tensor* y = output();
    setup_standalone(*bn, {x}, {y}, 1);
    // Caffe's sums with factor 4: running mean (0.5, -1), running variance (2, 0.25).
    bn->params()[0].tensor->copy_data_from_host({2, -4});
    bn->params()[1].tensor->copy_data_from_host({8, 1});
    bn->params()[2].tensor->copy_data_from_host({4});
    bn->forward({x}, {y});
    expect_near(data(y), normalise(data(x), 3, 2, 4, {0.5, -1}, {2, 0.25}, 0.001));
    // The statistics do not move.
    expect_near(data(bn->params()[0]), {2, -4});
    expect_near(data(bn->params()[2]), {4});
    GradientCheckOptions options = check_options();
    options.check_params = false;  // the output depends on the statistics, but lr_mult is 0
    expect_gradients(*bn, {x}, {y}, x->count(), options);
  }
}

TEST_F(ConvLayersTest, BatchNormBeforeAnyTrainingUsesZeroStatistics) {
  // Caffe: a factor of 0 means no statistics yet: mean 0, variance 0.
  auto bn = make("name: 'bn' type: 'BatchNorm' batch_norm_param { eps: 0.25 }", TEST);
  Tensor* x = tensor({1, 2, 1, 1}, "x", {1, -3});
  Tensor* y = output();
  setup_standalone(*bn, {x}, {y}, 1);
  bn->forward({x}, {y});
  expect_near(data(y), {2, -6});
}

TEST_F(ConvLayersTest, BatchNormInPlaceKeepsItsNormalisedOutput) {
  // In place, then the top overwritten (as an in-place Scale or ReLU would): the backward
  // pass must still see the normalised values.
  Tensor* ref_x = random_tensor({3, 2, 2}, "x", 53);
  Tensor* ref_y = output();
  auto ref = make("name: 'bn' type: 'BatchNorm'");
  setup_standalone(*ref, {ref_x}, {ref_y}, 1);
  ref->forward({ref_x}, {ref_y});
  const std::vector<float> dy = random_values(12, 54);
  ref_y->copy_diff_from_host(dy);
  ref->backward_input({ref_y}, {true}, {ref_x});

  Tensor* x = tensor({3, 2, 2}, "x", data(ref_x));
  auto bn = make("name: 'bn' type: 'BatchNorm'");
  setup_standalone(*bn, {x}, {x}, 1);
  bn->forward({x}, {x});
  EXPECT_EQ(data(x), data(ref_y));
  x->copy_data_from_host(std::vector<float>(12, 100.0f));
  x->copy_diff_from_host(dy);
  bn->backward_input({x}, {true}, {x});
  const std::vector<float> expected = diff(ref_x);
  expect_near(diff(x), std::vector<double>(expected.begin(), expected.end()));
}

TEST_F(ConvLayersTest, BatchNormErrors) {
  Tensor* x = random_tensor({2, 3, 2, 2}, "x", 1);
  std::string m = setup_error("name: 'bn1' type: 'BatchNorm' param { lr_mult: 0 } "
                              "param { lr_mult: 1 } param { lr_mult: 0 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'bn1' (BatchNorm)"));
  EXPECT_THAT(m, HasSubstr("lr_mult: 1 } (block 1) must be 0"));
  auto fine = make("name: 'bn0' type: 'BatchNorm' param { lr_mult: 0 } param { lr_mult: 0 } "
                   "param { lr_mult: 0 }");
  EXPECT_NO_THROW(fine->setup({x}, {output()}));
  m = setup_error("name: 'bn2' type: 'BatchNorm' batch_norm_param { eps: 0 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 'bn2' (BatchNorm)"));
  EXPECT_THAT(m, HasSubstr("batch_norm_param.eps"));
  m = setup_error("name: 'bn3' type: 'BatchNorm' batch_norm_param { "
                  "moving_average_fraction: 1.5 }", {x});
  EXPECT_THAT(m, HasSubstr("moving_average_fraction"));
}

// A TRAIN net and a TEST net sharing its parameters: TRAIN forwards update Caffe's running
// sums in the shared arena and the TEST net normalises with sums / factor.
TEST_F(ConvLayersTest, BatchNormTestNetUsesTheRunningStatisticsOfTheTrainNet) {
  const char* text = R"(
    name: "bn_net"
    layer { name: "data" type: "Input" top: "data"
            input_param { shape { dim: 4 dim: 2 dim: 1 dim: 3 } } }
    layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn"
            batch_norm_param { moving_average_fraction: 0.9 eps: 0.001 } }
  )";
  const NetParameter param = parse_net_parameter(text, "bn.prototxt");
  Net train(param, TRAIN, backend_, 1);
  Net test(param, TEST, backend_, 1, train.arena_handle());
  for (const ParamInfo& info : train.arena().table()) EXPECT_EQ(info.lr_mult, 0.0f) << info.name;
  ASSERT_EQ(train.arena().table().size(), 3u);
  EXPECT_EQ(train.arena().table()[0].name, "bn/mean");

  // Before any training the factor is 0: y = x / sqrt(eps).
  const std::vector<float> probe = random_values(24, 60, -3, 3);
  test.blob("data").copy_data_from_host(probe);
  test.forward();
  Running running;
  running.mean_sum.assign(2, 0);
  running.var_sum.assign(2, 0);
  expect_near(data(&test.blob("bn")), normalise(probe, 4, 2, 3, {0, 0}, {0, 0}, 0.001));

  for (uint64_t step = 0; step < 3; ++step) {
    SCOPED_TRACE(step);
    // Batches with different statistics per step and channel.
    std::vector<float> batch = random_values(24, 61 + step, -1, 1);
    for (size_t i = 0; i < batch.size(); ++i) batch[i] = batch[i] * (1 + step) + float(step);
    train.blob("data").copy_data_from_host(batch);
    train.forward();
    std::vector<double> mean, var;
    moments(batch, 4, 2, 3, mean, var);
    expect_near(data(&train.blob("bn")), normalise(batch, 4, 2, 3, mean, var, 0.001), 1e-4);
    running.update(batch, 4, 2, 3, 0.9);
  }
  test.forward();
  expect_near(data(&test.blob("bn")),
              normalise(probe, 4, 2, 3, running.mean(), running.var(), 0.001), 1e-4);
}

// Caffe's older pattern: two BatchNorm layers of one name, one per phase, switched by
// include { phase }; they share the statistics by name. The TRAIN net also checks the usual
// in-place BatchNorm + Scale pair against the same net written out of place.
TEST_F(ConvLayersTest, BatchNormPhaseSwitchedLayersAndInPlaceScalePair) {
  const auto net_text = [](bool in_place) {
    const std::string a = in_place ? "x" : "a", b = in_place ? "x" : "b";
    return std::string(R"(
      name: "pair"
      layer { name: "data" type: "Input" top: "data" top: "target"
              input_param { shape { dim: 3 dim: 2 dim: 2 dim: 2 } } }
      layer { name: "pre" type: "Scale" bottom: "data" top: "x"
              scale_param { num_axes: -1 filler { type: "uniform" min: 0.5 max: 1.5 } } }
      layer { name: "bn" type: "BatchNorm" bottom: "x" top: ")") + a + R"("
              batch_norm_param { use_global_stats: false moving_average_fraction: 0.8 }
              param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 }
              include { phase: TRAIN } }
      layer { name: "bn" type: "BatchNorm" bottom: "x" top: ")" + a + R"("
              batch_norm_param { use_global_stats: true }
              include { phase: TEST } }
      layer { name: "scale" type: "Scale" bottom: ")" + a + R"(" top: ")" + b + R"("
              scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                            bias_filler { type: "uniform" min: -1 max: 1 } } }
      layer { name: "loss" type: "EuclideanLoss" bottom: ")" + b + R"(" bottom: "target"
              include { phase: TRAIN } }
    )";
  };
  const std::vector<float> input = random_values(24, 70, -2, 2);
  const std::vector<float> target = random_values(24, 71);
  std::vector<std::vector<float>> grads[2];
  float losses[2] = {0, 0};
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "out of place");
    const NetParameter param = parse_net_parameter(net_text(in_place), "pair.prototxt");
    Net train(param, TRAIN, backend_, 5);
    Net test(param, TEST, backend_, 5, train.arena_handle());
    EXPECT_EQ(train.num_layers(), 5);
    EXPECT_EQ(test.num_layers(), 4);  // no loss
    train.blob("data").copy_data_from_host(input);
    train.blob("target").copy_data_from_host(target);
    train.arena().zero_diff();
    train.forward();
    train.backward();
    losses[in_place] = train.loss();
    for (const ParamInfo& info : train.arena().table()) {
      std::vector<float> g(info.count);
      backend_.copy_to_host(sizeof(float) * info.count, train.arena().diff() + info.offset,
                            g.data());
      grads[in_place].push_back(g);
    }
    // The TEST net's BatchNorm reads the sums the TRAIN forward wrote (factor 1).
    const int pre = 1, bn = 2;
    const std::vector<float> pre_out = [&] {
      std::vector<float> scale = data(train.layer(pre).params()[0]), x(24);
      for (int i = 0; i < 24; ++i) x[i] = input[i % 24] * scale[i % 8];
      return x;
    }();
    std::vector<double> mean, var;
    moments(pre_out, 3, 2, 4, mean, var);
    expect_near(data(train.layer(bn).params()[0]), mean, 1e-4);
    test.blob("data").copy_data_from_host(input);
    test.forward();
    for (double& v : var) v *= 12.0 / 11;  // the TEST net uses the unbiased running variance
    const std::vector<double> normalised = normalise(pre_out, 3, 2, 4, mean, var, 1e-5);
    const std::vector<float> scale = data(test.layer(3).params()[0]);
    const std::vector<float> bias = data(test.layer(3).params()[1]);
    std::vector<double> expected(24);
    for (int i = 0; i < 24; ++i) {
      expected[i] = normalised[i] * scale[(i / 4) % 2] + bias[(i / 4) % 2];
    }
    expect_near(data(&test.blob(in_place ? "x" : "b")), expected, 1e-4);
  }
  EXPECT_NEAR(losses[0], losses[1], 1e-6);
  ASSERT_EQ(grads[0].size(), grads[1].size());
  for (size_t p = 0; p < grads[0].size(); ++p) {
    SCOPED_TRACE(p);
    EXPECT_EQ(testing::compare(grads[1][p], grads[0][p], 1e-5), "");
  }
  // The pre-scale's gradient passes through BatchNorm's backward: it must not be all zero.
  EXPECT_GT(std::abs(grads[0][0][0]) + std::abs(grads[0][0][5]), 1e-6);
}

// ---------------------------------------------------------------- Scale, Bias

TEST_F(ConvLayersTest, ScaleForwardWithBias) {
  auto scale = make("name: 'sc' type: 'Scale' scale_param { bias_term: true }");
  Tensor* x = tensor({2, 3, 2}, "x", iota(12));
  Tensor* y = output();
  setup_standalone(*scale, {x}, {y}, 1);
  ASSERT_EQ(scale->params().size(), 2u);
  expect_near(data(scale->params()[0]), {1, 1, 1});  // default fillers: 1 and 0
  expect_near(data(scale->params()[1]), {0, 0, 0});
  scale->params()[0].tensor->copy_data_from_host({2, -1, 0.5f});
  scale->params()[1].tensor->copy_data_from_host({1, 0, -1});
  scale->forward({x}, {y});
  EXPECT_EQ(y->shape(), x->shape());
  expect_near(data(y), {3, 5, -3, -4, 1.5, 2, 15, 17, -9, -10, 4.5, 5});
}

TEST_F(ConvLayersTest, ScaleGradients) {
  struct Case {
    const char* param;
    Shape x;
    int64_t params;  // parameter elements
  };
  for (const Case& c : std::vector<Case>{
           {"bias_term: true", {2, 3, 2, 2}, 6},
           {"axis: 1 num_axes: 2 bias_term: true", {2, 3, 2}, 12},
           {"axis: -1", {2, 2, 3}, 3},
           {"axis: 0 num_axes: -1", {2, 3}, 6},
           {"num_axes: 0 bias_term: true", {2, 3}, 2}}) {
    SCOPED_TRACE(c.param);
    auto scale = make(std::string("name: 'sc' type: 'Scale' scale_param { ") + c.param +
                      " filler { type: 'uniform' min: -2 max: 2 } "
                      "bias_filler { type: 'gaussian' } }");
    Tensor* x = random_tensor(c.x, "x", 81);
    Tensor* y = output();
    setup_standalone(*scale, {x}, {y}, 1);
    expect_gradients(*scale, {x}, {y}, x->count() + c.params);
  }
}

TEST_F(ConvLayersTest, ScaleInPlace) {
  auto scale = make("name: 'sc' type: 'Scale' scale_param { bias_term: true "
                    "filler { type: 'uniform' min: -2 max: 2 } bias_filler { type: 'gaussian' } }");
  Tensor* x = random_tensor({3, 2, 2}, "x", 82);
  const std::vector<float> input = data(x);
  setup_standalone(*scale, {x}, {x}, 1);
  scale->forward({x}, {x});
  const std::vector<float> s = data(scale->params()[0]), b = data(scale->params()[1]);
  std::vector<double> expected(12);
  for (int i = 0; i < 12; ++i) expected[i] = input[i] * s[(i / 2) % 2] + b[(i / 2) % 2];
  expect_near(data(x), expected);
  // dscale needs the input the top overwrote.
  x->copy_diff_from_host(std::vector<float>(12, 1.0f));
  scale->backward_params({x}, {x});
  double ds0 = 0;
  for (int i = 0; i < 12; ++i)
    if ((i / 2) % 2 == 0) ds0 += input[i];
  EXPECT_NEAR(diff(scale->params()[0].tensor.get())[0], ds0, 1e-5);
  x->copy_data_from_host(input);
  expect_gradients(*scale, {x}, {x}, 12 + 4);
}

TEST_F(ConvLayersTest, BiasForwardAndGradients) {
  auto bias = make("name: 'b' type: 'Bias'");
  Tensor* x = tensor({2, 2, 2}, "x", iota(8));
  Tensor* y = output();
  setup_standalone(*bias, {x}, {y}, 1);
  ASSERT_EQ(bias->params().size(), 1u);
  EXPECT_EQ(bias->params()[0].tensor->shape(), (Shape{2}));
  expect_near(data(bias->params()[0]), {0, 0});
  bias->params()[0].tensor->copy_data_from_host({10, -10});
  bias->forward({x}, {y});
  expect_near(data(y), {11, 12, -7, -6, 15, 16, -3, -2});

  auto b2 = make("name: 'b' type: 'Bias' bias_param { axis: 1 num_axes: 2 "
                 "filler { type: 'gaussian' } }");
  Tensor* x2 = random_tensor({2, 3, 2}, "x", 83);
  Tensor* y2 = output();
  setup_standalone(*b2, {x2}, {y2}, 1);
  expect_gradients(*b2, {x2}, {y2}, 12 + 6);
  // In place.
  auto b3 = make("name: 'b' type: 'Bias' bias_param { filler { type: 'gaussian' } }");
  Tensor* x3 = random_tensor({2, 3, 2}, "x", 84);
  setup_standalone(*b3, {x3}, {x3}, 1);
  expect_gradients(*b3, {x3}, {x3}, 12 + 3);
}

TEST_F(ConvLayersTest, ScaleAndBiasErrors) {
  // (The two-bottom forms' errors: test_caffe_options.cpp.)
  Tensor* x = random_tensor({2, 3, 4}, "x", 1);
  std::string m = setup_error("name: 's2' type: 'Scale' scale_param { axis: 2 num_axes: 2 }", {x});
  EXPECT_THAT(m, HasSubstr("layer 's2' (Scale)"));
  EXPECT_THAT(m, HasSubstr("scale_param.num_axes 2"));
  EXPECT_THAT(m, HasSubstr("(2, 3, 4)"));
  m = setup_error("name: 'b2' type: 'Bias' bias_param { axis: 3 }", {x});
  EXPECT_THAT(m, HasSubstr("bias_param.axis 3"));
  EXPECT_THAT(m, HasSubstr("(2, 3, 4)"));
}

// ---------------------------------------------------------------- Concat

TEST_F(ConvLayersTest, ConcatShapesAndValues) {
  Tensor* a = tensor({2, 1, 2}, "a", {1, 2, 3, 4});
  Tensor* b = tensor({2, 2, 2}, "b", {5, 6, 7, 8, 9, 10, 11, 12});
  auto c1 = make("name: 'cat' type: 'Concat'");
  Tensor* y = output();
  setup_standalone(*c1, {a, b}, {y}, 1);
  c1->forward({a, b}, {y});
  EXPECT_EQ(y->shape(), (Shape{2, 3, 2}));
  expect_near(data(y), {1, 2, 5, 6, 7, 8, 3, 4, 9, 10, 11, 12});
  y->copy_diff_from_host(iota(12, 0));
  c1->backward_input({y}, {true, true}, {a, b});
  expect_near(diff(a), {0, 1, 6, 7});
  expect_near(diff(b), {2, 3, 4, 5, 8, 9, 10, 11});

  // Along the last axis, three bottoms.
  Tensor* c = tensor({2, 1, 1}, "c", {-1, -2});
  Tensor* d = tensor({2, 1, 2}, "d", {-3, -4, -5, -6});
  auto c2 = make("name: 'cat' type: 'Concat' concat_param { axis: -1 }");
  Tensor* z = output();
  setup_standalone(*c2, {a, c, d}, {z}, 1);
  c2->forward({a, c, d}, {z});
  EXPECT_EQ(z->shape(), (Shape{2, 1, 5}));
  expect_near(data(z), {1, 2, -1, -3, -4, 3, 4, -2, -5, -6});
}

TEST_F(ConvLayersTest, ConcatGradients) {
  auto c1 = make("name: 'cat' type: 'Concat'");
  Tensor* a = random_tensor({2, 2, 3}, "a", 91);
  Tensor* b = random_tensor({2, 1, 3}, "b", 92);
  Tensor* y = output();
  setup_standalone(*c1, {a, b}, {y}, 1);
  expect_gradients(*c1, {a, b}, {y}, 12 + 6);

  auto c2 = make("name: 'cat' type: 'Concat' concat_param { axis: 2 }");
  Tensor* c = random_tensor({2, 3, 1, 2}, "c", 93);
  Tensor* d = random_tensor({2, 3, 3, 2}, "d", 94);
  Tensor* e = random_tensor({2, 3, 2, 2}, "e", 95);
  Tensor* z = output();
  setup_standalone(*c2, {c, d, e}, {z}, 1);
  EXPECT_EQ(z->shape(), (Shape{2, 3, 6, 2}));
  expect_gradients(*c2, {c, d, e}, {z}, 12 + 36 + 24);
}

TEST_F(ConvLayersTest, ConcatShapeMismatchIsAnError) {
  const std::string m = setup_error("name: 'cat' type: 'Concat'",
                                    {random_tensor({2, 3, 4}, "a", 1),
                                     random_tensor({2, 5, 3}, "b", 2)});
  EXPECT_THAT(m, HasSubstr("layer 'cat' (Concat)"));
  EXPECT_THAT(m, HasSubstr("'a' is (2, 3, 4)"));
  EXPECT_THAT(m, HasSubstr("'b' is (2, 5, 3)"));
  EXPECT_THAT(setup_error("name: 'cat' type: 'Concat' concat_param { axis: 3 }",
                          {random_tensor({2, 3, 4}, "a", 1)}),
              HasSubstr("concat_param.axis 3"));
}

// ---------------------------------------------------------------- Eltwise

TEST_F(ConvLayersTest, EltwiseForwardAndBackward) {
  Tensor* a = tensor({2, 2}, "a", {1, -2, 3, 0.5f});
  Tensor* b = tensor({2, 2}, "b", {2, 4, 3, -1});
  Tensor* c = tensor({2, 2}, "c", {-1, 1, 5, 2});
  const std::vector<float> dy = {1, 2, 3, 4};
  {
    SCOPED_TRACE("SUM");
    auto sum = make("name: 'e' type: 'Eltwise' eltwise_param { operation: SUM "
                    "coeff: [2, -1, 0.5] }");
    Tensor* y = output();
    setup_standalone(*sum, {a, b, c}, {y}, 1);
    sum->forward({a, b, c}, {y});
    expect_near(data(y), {2 - 2 - 0.5, -4 - 4 + 0.5, 6 - 3 + 2.5, 1 + 1 + 1});
    y->copy_diff_from_host(dy);
    sum->backward_input({y}, {true, true, true}, {a, b, c});
    expect_near(diff(a), {2, 4, 6, 8});
    expect_near(diff(b), {-1, -2, -3, -4});
    expect_near(diff(c), {0.5, 1, 1.5, 2});
  }
  {
    SCOPED_TRACE("PROD");
    auto prod = make("name: 'e' type: 'Eltwise' eltwise_param { operation: PROD }");
    Tensor* y = output();
    setup_standalone(*prod, {a, b, c}, {y}, 1);
    prod->forward({a, b, c}, {y});
    expect_near(data(y), {-2, -8, 45, -1});
    y->copy_diff_from_host(dy);
    prod->backward_input({y}, {true, true, true}, {a, b, c});
    expect_near(diff(a), {1 * -2, 2 * 4, 3 * 15, 4 * -2});
    expect_near(diff(b), {1 * -1, 2 * -2, 3 * 15, 4 * 1});
    expect_near(diff(c), {1 * 2, 2 * -8, 3 * 9, 4 * -0.5});
  }
  {
    SCOPED_TRACE("MAX");
    auto max = make("name: 'e' type: 'Eltwise' eltwise_param { operation: MAX }");
    EXPECT_EQ(max->operations(), std::vector<Operation>{Operation::kEltwiseMax});
    Tensor* y = output();
    setup_standalone(*max, {a, b, c}, {y}, 1);
    max->forward({a, b, c}, {y});
    // b wins elements 0 and 1, c elements 2 and 3 (a and b tie at 3 there, below c's 5).
    expect_near(data(y), {2, 4, 5, 2});
    y->copy_diff_from_host(dy);
    max->backward_input({y}, {true, true, true}, {a, b, c});
    expect_near(diff(a), {0, 0, 0, 0});
    expect_near(diff(b), {1, 2, 0, 0});
    expect_near(diff(c), {0, 0, 3, 4});
  }
  {
    SCOPED_TRACE("MAX ties");
    auto max = make("name: 'e' type: 'Eltwise' eltwise_param { operation: MAX }");
    Tensor* p = tensor({3}, "p", {1, 2, 3});
    Tensor* q = tensor({3}, "q", {1, 5, 3});
    Tensor* y = output();
    setup_standalone(*max, {p, q}, {y}, 1);
    max->forward({p, q}, {y});
    y->copy_diff_from_host({1, 1, 1});
    max->backward_input({y}, {true, true}, {p, q});
    expect_near(diff(p), {1, 0, 1});  // the first bottom wins ties
    expect_near(diff(q), {0, 1, 0});
  }
  EXPECT_TRUE(make("name: 'e' type: 'Eltwise'")->operations().empty());
}

TEST_F(ConvLayersTest, EltwiseGradients) {
  for (const char* param : {"operation: SUM coeff: [1.5, -0.5, 2]", "operation: SUM",
                            "operation: PROD", "operation: MAX"}) {
    SCOPED_TRACE(param);
    auto layer = make(std::string("name: 'e' type: 'Eltwise' eltwise_param { ") + param + " }");
    // Separated values: MAX's winner does not change under the checker's step.
    const std::vector<float> v = separated_values(36, 101);
    Tensor* a = tensor({2, 3, 2}, "a", std::vector<float>(v.begin(), v.begin() + 12));
    Tensor* b = tensor({2, 3, 2}, "b", std::vector<float>(v.begin() + 12, v.begin() + 24));
    Tensor* c = tensor({2, 3, 2}, "c", std::vector<float>(v.begin() + 24, v.end()));
    Tensor* y = output();
    setup_standalone(*layer, {a, b, c}, {y}, 1);
    expect_gradients(*layer, {a, b, c}, {y}, 36);
  }
}

TEST_F(ConvLayersTest, EltwiseErrors) {
  Tensor* a = random_tensor({2, 3}, "a", 1);
  Tensor* b = random_tensor({3, 2}, "b", 2);
  std::string m = setup_error("name: 'e1' type: 'Eltwise'", {a, b});
  EXPECT_THAT(m, HasSubstr("layer 'e1' (Eltwise)"));
  EXPECT_THAT(m, HasSubstr("'a' is (2, 3)"));
  EXPECT_THAT(m, HasSubstr("'b' is (3, 2)"));
  Tensor* c = random_tensor({2, 3}, "c", 3);
  m = setup_error("name: 'e2' type: 'Eltwise' eltwise_param { operation: PROD coeff: [1, 2] }",
                  {a, c});
  EXPECT_THAT(m, HasSubstr("layer 'e2' (Eltwise)"));
  EXPECT_THAT(m, HasSubstr("eltwise_param.coeff applies to operation SUM only, not PROD"));
  m = setup_error("name: 'e3' type: 'Eltwise' eltwise_param { coeff: [1, 2, 3] }", {a, c});
  EXPECT_THAT(m, HasSubstr("one value per bottom: 2 bottoms, 3 coeff values"));
}

// ---------------------------------------------------------------- nets and registration

TEST_F(ConvLayersTest, BottomCountsAreCheckedByTheNet) {
  const std::string input = R"(
    layer { name: "data" type: "Input" top: "data"
            input_param { shape { dim: 1 dim: 1 dim: 2 dim: 2 } } })";
  const auto net_error = [&](const std::string& layers) {
    return error_of([&] { Net net(parse_net_parameter(input + layers, "n"), TRAIN, backend_, 1); });
  };
  // Eltwise needs two bottoms; Pooling allows exactly one top.
  EXPECT_THAT(net_error(R"(layer { name: "sum" type: "Eltwise" bottom: "data" top: "sum" })"),
              HasSubstr("layer 'sum' (Eltwise) takes 2 or more bottom(s), got 1"));
  EXPECT_THAT(net_error(R"(layer { name: "pool" type: "Pooling" bottom: "data" top: "pool"
                                   top: "mask" pooling_param { kernel_size: 2 } })"),
              HasSubstr("layer 'pool' (Pooling) takes 1 top(s), got 2"));
  EXPECT_THAT(net_error(R"(layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
                                   pooling_param { kernel_size: 2 } })"),
              HasSubstr("does not use pooling_param"));
}

TEST_F(ConvLayersTest, SmallConvNetTrainsEndToEndOnTheNativeBackend) {
  // Every layer of this file in one net, forward and backward: shapes line up and the loss
  // and gradients are finite.
  const char* text = R"(
    name: "small"
    layer { name: "data" type: "Input" top: "data" top: "target"
            input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 }
                          shape { dim: 2 dim: 8 dim: 3 dim: 3 } } }
    layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
            convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
    layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
    layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
            scale_param { bias_term: true } }
    layer { name: "conv2" type: "Convolution" bottom: "data" top: "conv2"
            convolution_param { num_output: 4 kernel_size: 1 } }
    layer { name: "bias2" type: "Bias" bottom: "conv2" top: "conv2" }
    layer { name: "sum" type: "Eltwise" bottom: "conv1" bottom: "conv2" top: "sum" }
    layer { name: "max" type: "Eltwise" bottom: "conv1" bottom: "conv2" top: "max"
            eltwise_param { operation: MAX } }
    layer { name: "cat" type: "Concat" bottom: "sum" bottom: "max" top: "cat" }
    layer { name: "pool" type: "Pooling" bottom: "cat" top: "pool"
            pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "pool" bottom: "target" }
  )";
  Net net(parse_net_parameter(text, "small.prototxt"), TRAIN, backend_, 3);
  EXPECT_EQ(net.blob("pool").shape(), (Shape{2, 8, 3, 3}));
  net.blob("data").copy_data_from_host(random_values(2 * 3 * 36, 110));
  net.blob("target").copy_data_from_host(random_values(2 * 8 * 9, 111));
  net.arena().zero_diff();
  net.forward();
  net.backward();
  EXPECT_TRUE(std::isfinite(net.loss()));
  EXPECT_GT(net.loss(), 0.0f);
  std::vector<float> grads(net.arena().count());
  backend_.copy_to_host(sizeof(float) * grads.size(), net.arena().diff(), grads.data());
  double norm = 0;
  for (float g : grads) norm += double(g) * g;
  EXPECT_TRUE(std::isfinite(norm));
  EXPECT_GT(norm, 0.0);
}

TEST_F(ConvLayersTest, EveryLayerTypeIsRegistered) {
  for (const char* type :
       {"Convolution", "Pooling", "BatchNorm", "Scale", "Bias", "Concat", "Eltwise"}) {
    EXPECT_TRUE(LayerRegistry::has(type)) << type;
  }
  EXPECT_EQ(make("name: 'c' type: 'Convolution'")->operations(),
            std::vector<Operation>{Operation::kConvolution});
  EXPECT_EQ(make("name: 'p' type: 'Pooling'")->operations(),
            std::vector<Operation>{Operation::kPooling});
}

}  // namespace
}  // namespace lamina
