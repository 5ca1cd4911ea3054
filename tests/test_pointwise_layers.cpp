// Caffe's element-wise layers (AbsVal, BNLL, Power, Exp, Log, Threshold, Clip, Swish, ELU),
// PReLU and MVN (the kPointwise group):
//   - every layer and its main options in a LayerCase table: gradient checks on Native,
//     HostAsDevice and CUDA, and CUDA against Native (tests/layer_cases.hpp);
//   - forward values and gradients against the formulas computed here in double, at the
//     points where Caffe's conventions decide (a kink, a clip bound, power 0), on each device;
//   - PReLU's and MVN's outputs and gradients against references computed here;
//   - the errors of bad parameters and shapes, naming the layer; the nets' in-place rules.
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// ---------------------------------------------------------------- the layer cases

// Elementwise cases on (2, 3, 4); the gradient check's step is 0.01, so kink(0.011) skips
// inputs where it would straddle a kink at 0, and distinct values (0.05 apart, from -0.6)
// stay clear of the kinks placed between them.
std::vector<LayerCase> pointwise_cases() {
  const Shape x{2, 3, 4};
  return {
      LayerCase("AbsVal", "type: 'AbsVal'", {x}).kink(0.011f),
      LayerCase("AbsValInPlace", "type: 'AbsVal'", {x}).inplace().kink(0.011f),
      LayerCase("BNLL", "type: 'BNLL'", {x}).range(-3, 3),
      LayerCase("BNLLInPlace", "type: 'BNLL'", {x}).range(-3, 3).inplace(),
      // power 2 (its own gradient formula), 0.5 with and without shift, 3 without, 1, 0,
      // scale 0; x ranges where shift + scale x > 0.
      LayerCase("PowerSquare", "type: 'Power' power_param { power: 2 scale: 0.5 shift: 1 }",
                {x}),
      LayerCase("PowerSqrt", "type: 'Power' power_param { power: 0.5 scale: 2 shift: 3 }", {x}),
      LayerCase("PowerSqrtNoShift", "type: 'Power' power_param { power: 0.5 scale: 2 }", {x})
          .range(0.5f, 2),
      LayerCase("PowerCubeNoShift", "type: 'Power' power_param { power: 3 scale: 1.5 }", {x}),
      LayerCase("PowerOne", "type: 'Power' power_param { power: 1 scale: -2 shift: 1 }", {x}),
      LayerCase("PowerZero", "type: 'Power' power_param { power: 0 scale: 2 }", {x}),
      LayerCase("PowerScaleZero", "type: 'Power' power_param { power: 2 scale: 0 shift: 3 }",
                {x}),
      LayerCase("PowerSquareInPlace", "type: 'Power' power_param { power: 2 shift: 1 }", {x})
          .inplace(),
      LayerCase("PowerGeneralInPlace", "type: 'Power' power_param { power: -1.5 scale: 1.2 "
                "shift: 2 }", {x}).inplace(),
      LayerCase("Exp", "type: 'Exp'", {x}),
      LayerCase("ExpBase", "type: 'Exp' exp_param { base: 2 scale: 0.5 shift: 1 }", {x}),
      LayerCase("ExpInPlace", "type: 'Exp' exp_param { base: 3 shift: -0.5 }", {x}).inplace(),
      LayerCase("Log", "type: 'Log'", {x}).range(0.5f, 2),
      LayerCase("LogBase", "type: 'Log' log_param { base: 10 scale: 2 shift: 0.5 }", {x})
          .range(0, 1),
      LayerCase("LogInPlace", "type: 'Log' log_param { base: 2 shift: 2 }", {x}).inplace(),
      LayerCase("Threshold", "type: 'Threshold'", {x}).kink(0.011f),
      LayerCase("ThresholdAt", "type: 'Threshold' threshold_param { threshold: 0.125 }", {x})
          .distinct(),
      LayerCase("Clip", "type: 'Clip' clip_param { min: -0.175 max: 0.325 }", {x}).distinct(),
      LayerCase("ClipInPlace", "type: 'Clip' clip_param { min: -0.425 max: 0.075 }", {x})
          .distinct().inplace(),
      LayerCase("Swish", "type: 'Swish'", {x}).range(-3, 3),
      LayerCase("SwishBeta", "type: 'Swish' swish_param { beta: 2.5 }", {x}),
      LayerCase("SwishInPlace", "type: 'Swish' swish_param { beta: 0.5 }", {x}).inplace(),
      LayerCase("ELU", "type: 'ELU'", {x}).range(-2, 2).kink(0.011f),
      LayerCase("ELUAlpha", "type: 'ELU' elu_param { alpha: 0.4 }", {x}).kink(0.011f),
      LayerCase("ELUInPlace", "type: 'ELU' elu_param { alpha: 2 }", {x}).inplace().kink(0.011f),
      // PReLU on (N, C, H, W) and (N, C); its slope from the default filler (0.25) or another.
      LayerCase("PReLU", "type: 'PReLU' prelu_param { filler { type: 'uniform' min: -0.5 "
                "max: 0.8 } }", {{2, 3, 2, 2}}).kink(0.011f),
      LayerCase("PReLUShared", "type: 'PReLU' prelu_param { channel_shared: true }",
                {{2, 3, 2, 2}}).kink(0.011f),
      LayerCase("PReLUTwoAxes", "type: 'PReLU'", {{4, 5}}).kink(0.011f),
      LayerCase("PReLUInPlace", "type: 'PReLU' prelu_param { filler { type: 'uniform' } }",
                {{2, 3, 2, 2}}).inplace().kink(0.011f),
      // MVN rows: (N C) of H W, or with across_channels (N) of C H W.
      LayerCase("MVN", "type: 'MVN'", {{2, 3, 2, 3}}),
      LayerCase("MVNNoVariance", "type: 'MVN' mvn_param { normalize_variance: false }",
                {{2, 3, 2, 3}}),
      LayerCase("MVNAcrossChannels", "type: 'MVN' mvn_param { across_channels: true }",
                {{2, 3, 2, 2}}),
      LayerCase("MVNAcrossNoVariance", "type: 'MVN' mvn_param { across_channels: true "
                "normalize_variance: false }", {{3, 2, 4}}),
      LayerCase("MVNInPlace", "type: 'MVN'", {{2, 2, 5}}).inplace(),
      LayerCase("MVNNoVarianceInPlace", "type: 'MVN' mvn_param { normalize_variance: false }",
                {{2, 2, 5}}).inplace(),
  };
}

LAMINA_LAYER_CASES(Pointwise, pointwise_cases);

// ---------------------------------------------------------------- values

// A layer's function and derivative, in double, at inputs that include the points where
// Caffe's conventions decide.
struct ValueCase {
  std::string name, prototxt;
  std::vector<float> x;
  std::function<double(double)> f, df;
};

double sigmoid(double v) { return 1 / (1 + std::exp(-v)); }

const std::vector<float> kSpread = {-3, -1.5f, -1, -0.5f, -0.1f, 0, 0.1f, 0.3f, 0.5f, 1, 2, 4};

std::vector<ValueCase> value_cases() {
  const std::vector<float> positive = {0.05f, 0.2f, 0.5f, 0.9f, 1, 1.7f, 2.5f, 4};
  const double ln2 = std::log(2.0), ln10 = std::log(10.0);
  return {
      {"AbsVal", "type: 'AbsVal'", kSpread, [](double x) { return std::abs(x); },
       [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }},  // sign(0) = 0
      {"BNLL", "type: 'BNLL'", {-30, -2, -0.5f, 0, 0.5f, 3, 49, 60, 80},
       [](double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); },
       [](double x) { return sigmoid(std::min(x, 50.0)); }},
      {"PowerCube", "type: 'Power' power_param { power: 3 scale: 0.5 shift: 1 }", kSpread,
       [](double x) { return std::pow(1 + 0.5 * x, 3); },
       [](double x) { return 1.5 * std::pow(1 + 0.5 * x, 2); }},
      {"PowerSquare", "type: 'Power' power_param { power: 2 scale: -2 shift: 0.5 }", kSpread,
       [](double x) { return std::pow(0.5 - 2 * x, 2); },
       [](double x) { return -4 * (0.5 - 2 * x); }},
      {"PowerSqrtNoShift", "type: 'Power' power_param { power: 0.5 scale: 3 }", positive,
       [](double x) { return std::sqrt(3 * x); },
       [](double x) { return 1.5 / std::sqrt(3 * x); }},
      {"PowerOne", "type: 'Power' power_param { power: 1 scale: 3 shift: -1 }", kSpread,
       [](double x) { return 3 * x - 1; }, [](double) { return 3.0; }},
      {"PowerZero", "type: 'Power' power_param { power: 0 scale: 2 shift: -5 }", kSpread,
       [](double) { return 1.0; }, [](double) { return 0.0; }},
      {"PowerScaleZero", "type: 'Power' power_param { power: 3 scale: 0 shift: 2 }", kSpread,
       [](double) { return 8.0; }, [](double) { return 0.0; }},
      {"Exp", "type: 'Exp'", kSpread, [](double x) { return std::exp(x); },
       [](double x) { return std::exp(x); }},
      {"ExpBase", "type: 'Exp' exp_param { base: 2 scale: 1.5 shift: -1 }", kSpread,
       [](double x) { return std::pow(2.0, 1.5 * x - 1); },
       [=](double x) { return ln2 * 1.5 * std::pow(2.0, 1.5 * x - 1); }},
      {"Log", "type: 'Log'", positive, [](double x) { return std::log(x); },
       [](double x) { return 1 / x; }},
      {"LogBase", "type: 'Log' log_param { base: 10 scale: 2 shift: 0.5 }", positive,
       [=](double x) { return std::log(2 * x + 0.5) / ln10; },
       [=](double x) { return 2 / ((2 * x + 0.5) * ln10); }},
      // x = threshold gives 0 (strictly above is 1); the gradient is 0.
      {"Threshold", "type: 'Threshold' threshold_param { threshold: 0.5 }", kSpread,
       [](double x) { return x > 0.5 ? 1.0 : 0.0; }, [](double) { return 0.0; }},
      // The bounds themselves pass the gradient (Caffe's inclusive bounds).
      {"Clip", "type: 'Clip' clip_param { min: -0.5 max: 1 }", kSpread,
       [](double x) { return std::min(std::max(x, -0.5), 1.0); },
       [](double x) { return x >= -0.5 && x <= 1 ? 1.0 : 0.0; }},
      {"Swish", "type: 'Swish' swish_param { beta: 1.5 }", kSpread,
       [](double x) { return x * sigmoid(1.5 * x); },
       [](double x) {
         const double s = sigmoid(1.5 * x);
         return s + 1.5 * x * s * (1 - s);
       }},
      // At 0: y = 0 and Caffe's derivative y + alpha.
      {"ELU", "type: 'ELU' elu_param { alpha: 0.7 }", kSpread,
       [](double x) { return x > 0 ? x : 0.7 * (std::exp(x) - 1); },
       [](double x) { return x > 0 ? 1 : 0.7 * std::exp(x); }},
  };
}

void expect_close(const std::vector<float>& actual, const std::vector<double>& expected,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (size_t i = 0; i < actual.size(); ++i) {
    EXPECT_NEAR(actual[i], expected[i], 2e-6 * std::max(1.0, std::abs(expected[i])))
        << what << " [" << i << "]";
  }
}

class PointwiseValues : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  std::unique_ptr<Layer> make(const std::string& prototxt) {
    LayerParameter p;
    const std::string text = "name: 'layer' " + prototxt;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
    return LayerRegistry::create(p, LayerContext{*backend_, TRAIN, 1});
  }
  std::unique_ptr<Backend> backend_;
};

TEST_P(PointwiseValues, MatchTheFormulas) {
  for (const ValueCase& c : value_cases()) {
    SCOPED_TRACE(c.name);
    for (const bool in_place : {false, true}) {
      const int64_t n = static_cast<int64_t>(c.x.size());
      auto layer = make(c.prototxt);
      Tensor x(*backend_, {n}, "x"), y(*backend_, {1}, "y");
      Tensor* top = in_place ? &x : &y;
      x.copy_data_from_host(c.x);
      setup_standalone(*layer, {&x}, {top}, 1);
      layer->forward({&x}, {top});
      std::vector<double> want_y, want_dx;
      const std::vector<float> dy = random_values(n, 5, 0.5f, 1.5f);
      for (int64_t i = 0; i < n; ++i) {
        want_y.push_back(c.f(c.x[i]));
        want_dx.push_back(dy[i] * c.df(c.x[i]));
      }
      expect_close(top->copy_data_to_host(), want_y, in_place ? "y (in place)" : "y");
      top->copy_diff_from_host(dy);
      layer->backward_input({top}, {true}, {&x});
      expect_close(x.copy_diff_to_host(), want_dx, in_place ? "dx (in place)" : "dx");
    }
  }
}

// x (2, 3, 2) against slopes 0.1, -0.2, 0.5 (or 0.3 for all): y, dx, and dslope added to.
TEST_P(PointwiseValues, PReLUPerChannelAndShared) {
  const std::vector<float> xs = {-1, 2, 0, -0.5f, 3, -2, 0.5f, -1.5f, -0.25f, 1, 0, -4};
  const std::vector<float> dy = random_values(12, 9, -1, 1);
  for (const bool shared : {false, true}) {
    SCOPED_TRACE(shared ? "shared" : "per channel");
    auto layer = make(std::string("type: 'PReLU' prelu_param { channel_shared: ") +
                      (shared ? "true }" : "false }"));
    Tensor x(*backend_, {2, 3, 2}, "x"), y(*backend_, {1}, "y");
    x.copy_data_from_host(xs);
    setup_standalone(*layer, {&x}, {&y}, 1);
    Tensor& slope = *layer->params()[0].tensor;
    ASSERT_EQ(slope.shape(), (Shape{shared ? 1 : 3}));
    EXPECT_EQ(slope.copy_data_to_host(), std::vector<float>(shared ? 1 : 3, 0.25f));
    const std::vector<float> a =
        shared ? std::vector<float>{0.3f} : std::vector<float>{0.1f, -0.2f, 0.5f};
    slope.copy_data_from_host(a);
    slope.copy_diff_from_host(std::vector<float>(a.size(), 1.0f));
    layer->forward({&x}, {&y});
    y.copy_diff_from_host(dy);
    layer->backward_params({&y}, {&x});
    layer->backward_input({&y}, {true}, {&x});
    std::vector<double> want_y, want_dx, want_dslope(a.size(), 1.0);  // added to 1
    for (int i = 0; i < 12; ++i) {
      const size_t c = shared ? 0 : (i / 2) % 3;
      want_y.push_back(xs[i] > 0 ? xs[i] : a[c] * xs[i]);
      want_dx.push_back(xs[i] > 0 ? dy[i] : a[c] * dy[i]);
      if (xs[i] <= 0) want_dslope[c] += double(dy[i]) * xs[i];
    }
    expect_close(y.copy_data_to_host(), want_y, "y");
    expect_close(x.copy_diff_to_host(), want_dx, "dx");
    expect_close(slope.copy_diff_to_host(), want_dslope, "dslope");
  }
}

// MVN on x (2, 3, 4): rows of 4 (N C rows) or 12 (across channels), with eps 0.1 so that
// adding it to the standard deviation (Caffe) and not to the variance shows.
TEST_P(PointwiseValues, MVNMatchesCaffesFormulas) {
  const std::vector<float> xs = random_values(24, 11, -2, 3);
  const std::vector<float> dy = random_values(24, 12, -1, 1);
  for (const bool across : {false, true}) {
    for (const bool variance : {true, false}) {
      SCOPED_TRACE(std::string(across ? "across channels" : "per channel") +
                   (variance ? ", variance" : ", mean only"));
      auto layer = make(std::string("type: 'MVN' mvn_param { eps: 0.1 across_channels: ") +
                        (across ? "true" : "false") + " normalize_variance: " +
                        (variance ? "true }" : "false }"));
      Tensor x(*backend_, {2, 3, 4}, "x"), y(*backend_, {1}, "y");
      x.copy_data_from_host(xs);
      setup_standalone(*layer, {&x}, {&y}, 1);
      layer->forward({&x}, {&y});
      y.copy_diff_from_host(dy);
      layer->backward_input({&y}, {true}, {&x});
      const int dim = across ? 12 : 4;
      std::vector<double> want_y(24), want_dx(24);
      for (int r = 0; r < 24 / dim; ++r) {
        double mean = 0, var = 0, mean_dy = 0, mean_dyy = 0;
        for (int i = r * dim; i < (r + 1) * dim; ++i) mean += xs[i] / double(dim);
        for (int i = r * dim; i < (r + 1) * dim; ++i) var += std::pow(xs[i] - mean, 2) / dim;
        const double scale = variance ? 1 / (std::sqrt(var) + 0.1) : 1;
        for (int i = r * dim; i < (r + 1) * dim; ++i) {
          want_y[i] = (xs[i] - mean) * scale;
          mean_dy += dy[i] / double(dim);
          mean_dyy += dy[i] * want_y[i] / dim;
        }
        for (int i = r * dim; i < (r + 1) * dim; ++i) {
          want_dx[i] = variance ? (dy[i] - mean_dy - want_y[i] * mean_dyy) * scale
                                : dy[i] - mean_dy;
        }
      }
      expect_close(y.copy_data_to_host(), want_y, "y");
      expect_close(x.copy_diff_to_host(), want_dx, "dx");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PointwiseValues,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice,
                                           Device::kCuda),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return device_name(info.param);
                         });

// ---------------------------------------------------------------- operations at scale

// The operations on arrays large enough for the device's grid-stride loops, 16-byte groups
// and split per-channel sums (ChannelParts: few channels of many values), against Native.
class PointwiseAtScale : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }

  // op(the arrays' pointers) on `backend`, the arrays holding `values`; their values after.
  using Op = std::function<void(Backend&, const std::vector<float*>&)>;
  static std::vector<std::vector<float>> run(Backend& backend,
                                             const std::vector<std::vector<float>>& values,
                                             const Op& op) {
    std::vector<std::unique_ptr<Tensor>> arrays;
    std::vector<float*> pointers;
    for (const std::vector<float>& v : values) {
      arrays.push_back(std::make_unique<Tensor>(backend, Shape{int64_t(v.size())}, "a"));
      arrays.back()->copy_data_from_host(v);
    }
    for (auto& a : arrays) pointers.push_back(a->mutable_data());
    op(backend, pointers);
    std::vector<std::vector<float>> out;
    for (auto& a : arrays) out.push_back(a->copy_data_to_host());
    return out;
  }

  // Runs op on Native and on the device and compares every array.
  void expect_same(const std::string& what, const std::vector<std::vector<float>>& values,
                   const Op& op) {
    NativeBackend native;
    const auto expected = run(native, values, op), actual = run(*backend_, values, op);
    for (size_t i = 0; i < expected.size(); ++i)
      EXPECT_EQ(compare(actual[i], expected[i], 1e-5), "") << what << ", array " << i;
  }

  std::unique_ptr<Backend> backend_;
};

TEST_P(PointwiseAtScale, FunctionsMatchNative) {
  using Fn = PointwiseFn;
  // Constants as the layers make them; Power and Log shifted into their domain for x in
  // [-2, 2].
  const std::vector<std::pair<std::string, Pointwise>> functions = {
      {"AbsVal", {Fn::kAbsVal}}, {"BNLL", {Fn::kBNLL}},
      {"Power", {Fn::kPower, 1.5f, 0.8f, 2}}, {"Exp", {Fn::kExp, 0.6931f, 0.5f}},
      {"Log", {Fn::kLog, 1.5f, 4, 0.4343f}}, {"Threshold", {Fn::kThreshold, 0.3f}},
      {"Clip", {Fn::kClip, -0.5f, 1}}, {"Swish", {Fn::kSwish, 1.5f}},
      {"ELU", {Fn::kELU, 0.7f}}};
  const int64_t n = (int64_t{1} << 20) + 3;
  const std::vector<float> x = random_values(n, 1, -2, 2), dy = random_values(n, 2);
  for (const auto& [name, f] : functions) {
    expect_same(name + " forward", {x, std::vector<float>(n)},
                [&, f = f](Backend& b, const std::vector<float*>& p) {
                  b.pointwise_forward(f, n, p[0], p[1]);
                });
    // y for Exp's gradient; dx in place on dy.
    expect_same(name + " backward", {x, x, dy},
                [&, f = f](Backend& b, const std::vector<float*>& p) {
                  b.pointwise_forward(f, n, p[0], p[1]);
                  b.pointwise_backward(f, n, p[0], p[1], p[2], p[2]);
                });
  }
}

// PReLU on (16, 3, inner): inner 1024 (16-byte groups, the slope sums split) and 1023.
TEST_P(PointwiseAtScale, PReLUMatchesNative) {
  for (const int64_t inner : {1024, 1023}) {
    const int64_t outer = 16, channels = 3, n = outer * channels * inner;
    const std::vector<float> x = random_values(n, 3), dy = random_values(n, 4);
    const std::vector<float> slope = {0.25f, -0.5f, 0.1f};
    const std::string what = "inner " + std::to_string(inner);
    expect_same(what + " forward", {x, slope, std::vector<float>(n)},
                [&](Backend& b, const std::vector<float*>& p) {
                  b.prelu_forward(outer, channels, inner, p[0], p[1], p[2]);
                });
    // The slope gradient added to ones; dx in place on dy.
    expect_same(what + " backward", {x, dy, slope, std::vector<float>(3, 1.0f)},
                [&](Backend& b, const std::vector<float*>& p) {
                  b.prelu_backward(outer, channels, inner, p[0], p[1], p[2], nullptr, p[3]);
                  b.prelu_backward(outer, channels, inner, p[0], p[1], p[2], p[1], nullptr);
                });
  }
}

INSTANTIATE_TEST_SUITE_P(Devices, PointwiseAtScale,
                         ::testing::Values(Device::kHostAsDevice, Device::kCuda),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return device_name(info.param);
                         });

// ---------------------------------------------------------------- errors

struct BadLayer {
  std::string name, prototxt;
  Shape bottom;
  std::string message;
};

void PrintTo(const BadLayer& b, std::ostream* out) { *out << b.name; }

class PointwiseErrors : public ::testing::TestWithParam<BadLayer> {};

TEST_P(PointwiseErrors, NameTheLayerAndTheSetting) {
  const BadLayer& b = GetParam();
  NativeBackend native;
  LayerParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString("name: 'bad' " + b.prototxt, &p));
  auto layer = LayerRegistry::create(p, LayerContext{native, TRAIN, 1});
  Tensor x(native, b.bottom, "x"), y(native, {1}, "y");
  const std::string message = error_of([&] { layer->setup({&x}, {&y}); });
  EXPECT_THAT(message, AllOf(HasSubstr("layer 'bad' (" + p.type() + "): "),
                             HasSubstr(b.message)));
}

INSTANTIATE_TEST_SUITE_P(
    Layers, PointwiseErrors,
    ::testing::Values(
        BadLayer{"ClipMinAboveMax", "type: 'Clip' clip_param { min: 1 max: 0.5 }", {4},
                 "clip_param.min (1) must not exceed clip_param.max (0.5)"},
        BadLayer{"ClipWithoutMax", "type: 'Clip' clip_param { min: 1 }", {4},
                 "clip_param needs both min and max"},
        BadLayer{"ClipWithoutParam", "type: 'Clip'", {4}, "clip_param needs both min and max"},
        BadLayer{"ExpBaseZero", "type: 'Exp' exp_param { base: 0 }", {4},
                 "exp_param.base must be positive, or -1 for e; got 0"},
        BadLayer{"ExpBaseNegative", "type: 'Exp' exp_param { base: -2 }", {4},
                 "exp_param.base must be positive, or -1 for e; got -2"},
        BadLayer{"ExpBaseInfinite", "type: 'Exp' exp_param { base: inf }", {4},
                 "exp_param.base must be positive, or -1 for e; got inf"},
        BadLayer{"LogBaseNegative", "type: 'Log' log_param { base: -0.5 }", {4},
                 "log_param.base must be positive, or -1 for e; got -0.5"},
        BadLayer{"LogBaseOne", "type: 'Log' log_param { base: 1 }", {4},
                 "log_param.base must not be 1"},
        BadLayer{"PReLUOneAxis", "type: 'PReLU'", {6},
                 "bottom 'x' must have at least 2 axes (N, C, ...), got shape (6)"},
        BadLayer{"MVNNegativeEps", "type: 'MVN' mvn_param { eps: -0.001 }", {2, 3},
                 "mvn_param.eps must be >= 0, got -0.001"}),
    [](const ::testing::TestParamInfo<BadLayer>& info) { return info.param.name; });

// ---------------------------------------------------------------- in nets

constexpr const char* kInput =
    R"(layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
       layer { name: "ip" type: "Linear" bottom: "data" top: "h"
               inner_product_param { num_output: 4 } } )";

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

std::string net_error(const std::string& layers) {
  return error_of([&] {
    Net net(parse_net_parameter(std::string(kInput) + layers, "net.prototxt"), TRAIN, native(),
            1);
  });
}

// Sigmoid's, TanH's and ReLU's messages carry Caffe's engine, which the nets accept.
TEST(PointwiseNets, AcceptActivationEngines) {
  Net net(parse_net_parameter(std::string(kInput) + R"(
      layer { name: "s" type: "Sigmoid" bottom: "h" top: "s" sigmoid_param { engine: CAFFE } }
      layer { name: "t" type: "TanH" bottom: "s" top: "t" tanh_param { engine: CUDNN } }
      layer { name: "r" type: "ReLU" bottom: "t" top: "r" relu_param { engine: CAFFE } })",
                              "net.prototxt"),
          TRAIN, native(), 1);
  EXPECT_EQ(net.num_layers(), 5);
}

// A layer reads only its own message: a Power layer given exp_param is refused.
TEST(PointwiseNets, RefuseAnotherLayersParameters) {
  EXPECT_THAT(net_error(R"(layer { name: "p" type: "Power" bottom: "h" top: "p"
                                   exp_param { base: 2 } })"),
              AllOf(HasSubstr("'p'"), HasSubstr("exp_param")));
  EXPECT_THAT(net_error(R"(layer { name: "a" type: "AbsVal" bottom: "h" top: "a"
                                   power_param { power: 2 } })"),
              AllOf(HasSubstr("'a'"), HasSubstr("power_param")));
}

// In place, Exp's gradient is its output, which a later in-place layer may not overwrite;
// the layers that keep x (ELU, Power, PReLU) leave their tops free.
TEST(PointwiseNets, InPlaceChainsKeepWhatBackwardReads) {
  EXPECT_THAT(net_error(R"(
      layer { name: "e" type: "Exp" bottom: "h" top: "h" }
      layer { name: "c" type: "Clip" bottom: "h" top: "h" clip_param { min: 0 max: 2 } })"),
              AllOf(HasSubstr("layer 'c' (Clip)"), HasSubstr("layer 'e' (Exp)")));
  EXPECT_THAT(net_error(R"(
      layer { name: "m" type: "MVN" bottom: "h" top: "h" }
      layer { name: "a" type: "AbsVal" bottom: "h" top: "h" })"),
              AllOf(HasSubstr("layer 'a' (AbsVal)"), HasSubstr("layer 'm' (MVN)")));
  Net net(parse_net_parameter(std::string(kInput) + R"(
      layer { name: "elu" type: "ELU" bottom: "h" top: "h" }
      layer { name: "pow" type: "Power" bottom: "h" top: "h" power_param { power: 2 } }
      layer { name: "prelu" type: "PReLU" bottom: "h" top: "h" }
      layer { name: "mvn" type: "MVN" bottom: "h" top: "h"
              mvn_param { normalize_variance: false } }
      layer { name: "swish" type: "Swish" bottom: "h" top: "h" }
      layer { name: "exp" type: "Exp" bottom: "h" top: "h" })",
                              "net.prototxt"),
          TRAIN, native(), 1);
  EXPECT_EQ(net.num_layers(), 8);
}

}  // namespace
}  // namespace lamina::testing
