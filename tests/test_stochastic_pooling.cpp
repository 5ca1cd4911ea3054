// Stochastic pooling (Caffe's pool: STOCHASTIC) in Pooling and SPP:
//   - a table of TRAIN cases, each evaluation drawing the same numbers (the layer re-created
//     before every forward, as Dropout's case): gradient checks on Native, HostAsDevice and
//     CUDA, and the CUDA forward and backward against Native's;
//   - on every backend: TEST's sum x^2 / sum x against a reference computed here (an
//     all-zero window gives 0), its gradient by central differences and against Native's;
//     TRAIN's choices against a walk written here over the uniforms counter_rng.hpp gives,
//     with dtop routed to them (overlapping windows adding); 20000 choices whose frequencies
//     must match x_j / sum x within 4 sigma;
//   - the draws as layer state: passes differ, set_state and replayed resume the sequence,
//     data-parallel workers draw their own;
//   - errors naming the layer (a pad, SPP levels that would need one, a state of the wrong
//     size); a 16-bit net, which runs the pooling in FP32; a net's layer states.
#include <gmock/gmock.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lamina/counter_rng.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- the layer cases

// Positive inputs (stochastic pooling samples x_j / sum x); at the gradient check's step
// no choice moves for these inputs and draws (a moved choice would fail the check).
std::vector<LayerCase> stochastic_cases() {
  const std::string pool = "type: 'Pooling' pooling_param { pool: STOCHASTIC ";
  const std::string spp = "type: 'SPP' spp_param { pool: STOCHASTIC ";
  return {
      LayerCase("PoolOverlapping", pool + "kernel_size: 3 stride: 2 }", {{2, 3, 7, 6}})
          .range(0.2f, 1).replayed(),
      LayerCase("PoolTiled", pool + "kernel_size: 2 stride: 2 }", {{2, 2, 4, 6}})
          .range(0.2f, 1).replayed(),
      LayerCase("PoolRectFloor", pool + "kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 "
                "round_mode: FLOOR }", {{1, 3, 4, 7}}).range(0.2f, 1).replayed(),
      LayerCase("PoolGlobal", pool + "global_pooling: true }", {{2, 3, 3, 4}})
          .range(0.2f, 1).replayed(),
      LayerCase("Spp1", spp + "pyramid_height: 1 }", {{2, 3, 3, 5}}).range(0.2f, 1).replayed(),
      LayerCase("Spp3", spp + "pyramid_height: 3 }", {{2, 2, 4, 4}}).range(0.2f, 1).replayed(),
  };
}

LAMINA_LAYER_CASES(Stochastic, stochastic_cases);

// ---------------------------------------------------------------- references

constexpr uint64_t kSeed = 11;

// Window (oh, ow) of a stride x stride kernel without pad, clipped to the (h, w) plane.
struct Win {
  int64_t h0, h1, w0, w1;
};
Win window(int64_t h, int64_t w, int64_t k, int64_t stride, int64_t oh, int64_t ow) {
  return {oh * stride, std::min(oh * stride + k, h), ow * stride, std::min(ow * stride + k, w)};
}

// TEST: sum x^2 / sum x over the window of plane xp (width w), 0 for a zero sum.
double weighted(const float* xp, int64_t w, const Win& win) {
  double sum = 0, squares = 0;
  for (int64_t i = win.h0; i < win.h1; ++i) {
    for (int64_t j = win.w0; j < win.w1; ++j) {
      sum += xp[i * w + j];
      squares += double(xp[i * w + j]) * xp[i * w + j];
    }
  }
  return sum == 0 ? 0.0 : squares / sum;
}

// TRAIN: the index i w + j of the element the uniform u picks: the first whose cumulative
// sum reaches u times the window's sum.
int64_t picked(const float* xp, int64_t w, const Win& win, float u) {
  std::vector<double> cumulative;
  std::vector<int64_t> index;
  for (int64_t i = win.h0; i < win.h1; ++i) {
    for (int64_t j = win.w0; j < win.w1; ++j) {
      cumulative.push_back((cumulative.empty() ? 0.0 : cumulative.back()) + xp[i * w + j]);
      index.push_back(i * w + j);
    }
  }
  const double threshold = double(u) * cumulative.back();
  for (size_t k = 0; k < cumulative.size(); ++k) {
    if (cumulative[k] >= threshold) return index[k];
  }
  return -1;
}

// A stochastic pooling's shapes (no pad, Caffe's rounding up).
struct Shape4 {
  int64_t n, c, h, w, k, stride;
  int64_t out_h() const { return (h - k + stride - 1) / stride + 1; }
  int64_t out_w() const { return (w - k + stride - 1) / stride + 1; }
  int64_t outputs() const { return n * c * out_h() * out_w(); }
  std::string prototxt() const {
    return "name: 'pool' type: 'Pooling' pooling_param { pool: STOCHASTIC kernel_size: " +
           std::to_string(k) + " stride: " + std::to_string(stride) + " }";
  }
};

// ---------------------------------------------------------------- on every backend

class StochasticPooling : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }

  std::unique_ptr<Layer> make(const std::string& text, Phase phase, Backend* on = nullptr) {
    LayerParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
    return LayerRegistry::create(p, LayerContext{on ? *on : *backend_, phase, kSeed});
  }
  Tensor* tensor(const std::vector<float>& values, const lamina::Shape& shape,
                 Backend* on = nullptr) {
    tensors_.push_back(std::make_unique<Tensor>(on ? *on : *backend_, shape, "x"));
    tensors_.back()->copy_data_from_host(values);
    return tensors_.back().get();
  }
  Tensor* output(Backend* on = nullptr) { return tensor({0.0f}, {1}, on); }

  // Forward, then backward of dy; returns (y, dx).
  static std::pair<std::vector<float>, std::vector<float>> run(Layer& layer, Tensor* x,
                                                                Tensor* y,
                                                                const std::vector<float>& dy) {
    layer.forward({x}, {y});
    y->copy_diff_from_host(dy);
    x->copy_diff_from_host(std::vector<float>(x->count(), 7.0f));
    layer.backward_input({y}, {true}, {x});
    return {y->copy_data_to_host(), x->copy_diff_to_host()};
  }

  std::unique_ptr<Backend> backend_;
  NativeBackend native_;  // the reference; declared before the tensors on it, so it outlives them
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

// Windows 2 x 2 with stride 2 and 3 x 3 with stride 1 over (2, 2, 4, 4); in plane 0 the
// top-left 2 x 2 is zeros (its TEST value 0), and plane 1 holds a negative window (Caffe's
// sum x^2 / sum x, negative).
TEST_P(StochasticPooling, TestPhaseIsSumOfSquaresOverSum) {
  std::vector<float> v = random_values(64, 3, 0.1f, 2);
  for (const int i : {0, 1, 4, 5}) v[i] = 0;
  for (const int i : {16, 17, 20, 21}) v[i] = -float(i) / 8;
  for (const int64_t k : {2, 3}) {
    SCOPED_TRACE("kernel " + std::to_string(k));
    const Shape4 s{2, 2, 4, 4, k, 4 - k};
    auto layer = make(s.prototxt(), TEST);
    Tensor* x = tensor(v, {2, 2, 4, 4});
    Tensor* y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    ASSERT_EQ(y->shape(), (lamina::Shape{2, 2, s.out_h(), s.out_w()}));
    layer->forward({x}, {y});
    const std::vector<float> got = y->copy_data_to_host();
    int64_t i = 0;
    for (int64_t p = 0; p < 4; ++p) {
      for (int64_t oh = 0; oh < s.out_h(); ++oh) {
        for (int64_t ow = 0; ow < s.out_w(); ++ow, ++i) {
          const double want = weighted(v.data() + p * 16, 4, window(4, 4, k, s.stride, oh, ow));
          EXPECT_NEAR(got[i], want, 1e-6 * std::abs(want)) << "output " << i;
        }
      }
    }
    if (k == 2) EXPECT_EQ(got[0], 0.0f) << "the all-zero window";
    if (k == 2) EXPECT_LT(got[4], 0.0f) << "the negative window";
  }
}

// The TEST function's gradient (Pooling with overlapping windows, SPP's two levels) by
// central differences, and on a device against Native's forward and backward.
TEST_P(StochasticPooling, TestPhaseGradient) {
  const std::vector<std::pair<std::string, lamina::Shape>> layers = {
      {"name: 'pool' type: 'Pooling' pooling_param { pool: STOCHASTIC kernel_size: 3 "
       "stride: 2 }", {2, 2, 7, 6}},
      {"name: 'spp' type: 'SPP' spp_param { pool: STOCHASTIC pyramid_height: 2 }",
       {2, 2, 4, 6}},
  };
  for (const auto& [text, shape] : layers) {
    SCOPED_TRACE(text);
    const std::vector<float> v = random_values(shape_count(shape), 5, 0.2f, 1);
    auto layer = make(text, TEST);
    Tensor* x = tensor(v, shape);
    Tensor* y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    GradientCheckOptions options;
    options.threshold = 1e-3f;
    const GradientCheckResult r = check_gradients(*layer, {x}, {y}, options);
    EXPECT_TRUE(r.ok) << r.summary();
    EXPECT_EQ(r.checked, x->count());
    if (GetParam() == Device::kNative) continue;

    auto reference = make(text, TEST, &native_);
    Tensor* nx = tensor(v, shape, &native_);
    Tensor* ny = output(&native_);
    setup_standalone(*reference, {nx}, {ny}, 1);
    const std::vector<float> dy = random_values(ny->count(), 6);
    const auto want = run(*reference, nx, ny, dy);
    const auto got = run(*layer, x, y, dy);
    EXPECT_EQ(compare(got.first, want.first, 1e-6), "") << "top";
    EXPECT_EQ(compare(got.second, want.second, 1e-6), "") << "bottom diff";
  }
}

// Two passes over (2, 3, 5, 5), 3 x 3 windows with stride 2 (overlapping), plane 0's first
// window all zeros (the threshold 0 takes its first element, as in Caffe): each top is the
// element the walk picks for u = counter_uniform(seed, pass * outputs + i), and dx sums dy
// over the windows that picked each element.
TEST_P(StochasticPooling, TrainPicksTheWalksElementAndRoutesTheGradientThere) {
  const Shape4 s{2, 3, 5, 5, 3, 2};
  std::vector<float> v = random_values(150, 7, 0.05f, 1);
  for (const int i : {0, 1, 2, 5, 6, 7, 10, 11, 12}) v[i] = 0;
  auto layer = make(s.prototxt(), TRAIN);
  Tensor* x = tensor(v, {2, 3, 5, 5});
  Tensor* y = output();
  setup_standalone(*layer, {x}, {y}, 1);
  const int64_t outputs = s.outputs(), per_plane = s.out_h() * s.out_w();
  std::vector<int64_t> first_pass;
  for (uint64_t pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    const std::vector<float> dy = random_values(outputs, 20 + pass);
    const auto [top, dx] = run(*layer, x, y, dy);
    std::vector<float> want_dx(150, 0.0f);
    std::vector<int64_t> chosen;
    for (int64_t i = 0; i < outputs; ++i) {
      const int64_t p = i / per_plane, o = i % per_plane;
      const float u = counter_uniform(kSeed, pass * outputs + i);
      const int64_t j = picked(v.data() + p * 25, 5,
                               window(5, 5, 3, 2, o / s.out_w(), o % s.out_w()), u);
      ASSERT_GE(j, 0);
      chosen.push_back(j);
      EXPECT_EQ(top[i], v[p * 25 + j]) << "output " << i;
      want_dx[p * 25 + j] += dy[i];
    }
    EXPECT_EQ(top[0], 0.0f);
    EXPECT_EQ(chosen[0], 0) << "the zero window takes its first element";
    EXPECT_EQ(compare(dx, want_dx, 1e-7), "");
    if (pass == 0) first_pass = chosen;
    if (pass == 1) EXPECT_NE(chosen, first_pass) << "the second pass draws anew";
  }
}

// SPP's levels draw from one sequence: level l's output i (N, C, bins, bins) takes number
// N offset_l + i of the pass, offset_l its first column in a sample's row of C (1 + 4) values.
TEST_P(StochasticPooling, SppLevelsDrawTheirPlacesInTheTop) {
  const std::vector<float> v = random_values(2 * 2 * 4 * 4, 9, 0.05f, 1);
  auto layer = make("name: 'spp' type: 'SPP' spp_param { pool: STOCHASTIC "
                    "pyramid_height: 2 }", TRAIN);
  Tensor* x = tensor(v, {2, 2, 4, 4});
  Tensor* y = output();
  setup_standalone(*layer, {x}, {y}, 1);
  ASSERT_EQ(y->shape(), (lamina::Shape{2, 10}));
  for (uint64_t pass = 0; pass < 2; ++pass) {
    SCOPED_TRACE("pass " + std::to_string(pass));
    layer->forward({x}, {y});
    const std::vector<float> top = y->copy_data_to_host();
    for (int64_t level = 0; level < 2; ++level) {
      const int64_t bins = level + 1, k = 4 / bins, offset = level * 2;
      for (int64_t i = 0; i < 2 * 2 * bins * bins; ++i) {
        const int64_t plane = i / (bins * bins), o = i % (bins * bins);
        const int64_t n = plane / 2, c = plane % 2;
        const float u = counter_uniform(kSeed, pass * 20 + 2 * offset + i);
        const int64_t j = picked(v.data() + plane * 16, 4,
                                 window(4, 4, k, k, o / bins, o % bins), u);
        EXPECT_EQ(top[n * 10 + offset + c * bins * bins + o], v[plane * 16 + j])
            << "level " << level << " output " << i;
      }
    }
  }
}

// 20000 windows of x = (0.5, 0, 1.5, 2): element j is picked with probability x_j / 4.
// Each count must lie within 4 standard deviations of its expectation (a uniform or an
// arg-max sampler is hundreds of deviations off), and the zero is never picked.
TEST_P(StochasticPooling, ChoiceFrequenciesAreProportionalToTheValues) {
  const std::vector<float> plane = {0.5f, 0.0f, 1.5f, 2.0f};
  const int64_t planes = 5000, passes = 4;
  std::vector<float> v;
  for (int64_t p = 0; p < planes; ++p) v.insert(v.end(), plane.begin(), plane.end());
  auto layer = make(Shape4{1, planes, 2, 2, 2, 2}.prototxt(), TRAIN);
  Tensor* x = tensor(v, {1, planes, 2, 2});
  Tensor* y = output();
  setup_standalone(*layer, {x}, {y}, 1);
  std::vector<int64_t> counts(4, 0);
  for (int64_t pass = 0; pass < passes; ++pass) {
    layer->forward({x}, {y});
    for (const float top : y->copy_data_to_host()) {
      const auto at = std::find(plane.begin(), plane.end(), top);
      ASSERT_NE(at, plane.end()) << top;
      ++counts[at - plane.begin()];
    }
  }
  EXPECT_EQ(counts[1], 0);
  const double draws = double(planes * passes);
  for (int j = 0; j < 4; ++j) {
    const double p = plane[j] / 4.0;
    const double sigma = std::sqrt(draws * p * (1 - p));
    EXPECT_LE(std::abs(counts[j] - draws * p), 4 * sigma + 1e-9)
        << "element " << j << ": " << counts[j] << " of " << draws << ", expected p " << p;
  }
}

// The draws are state: after a pass the state is (seed, outputs); a fresh layer given it
// draws the first layer's second pass; replayed passes move it; a second worker draws
// other numbers while the state keeps the job's seed.
TEST_P(StochasticPooling, DrawsResumeFromTheState) {
  const Shape4 s{2, 2, 6, 6, 2, 2};
  const std::vector<float> v = random_values(144, 13, 0.05f, 1);
  const auto build = [&](Tensor*& x, Tensor*& y) {
    auto layer = make(s.prototxt(), TRAIN);
    x = tensor(v, {2, 2, 6, 6});
    y = output();
    setup_standalone(*layer, {x}, {y}, 1);
    return layer;
  };
  Tensor *x1, *y1, *x2, *y2;
  auto first = build(x1, y1);
  auto second = build(x2, y2);
  EXPECT_EQ(first->state(), (std::vector<int64_t>{int64_t(kSeed), 0}));
  first->forward({x1}, {y1});
  const std::vector<int64_t> after_one = first->state();
  EXPECT_EQ(after_one, (std::vector<int64_t>{int64_t(kSeed), s.outputs()}));
  const std::vector<float> pass0 = y1->copy_data_to_host();
  first->forward({x1}, {y1});
  const std::vector<float> pass1 = y1->copy_data_to_host();
  EXPECT_NE(pass0, pass1);

  second->set_state(after_one);
  second->forward({x2}, {y2});
  EXPECT_EQ(y2->copy_data_to_host(), pass1);
  second->replayed(3);
  EXPECT_EQ(second->state(), (std::vector<int64_t>{int64_t(kSeed), 5 * s.outputs()}));

  Tensor *x3, *y3;
  auto worker = build(x3, y3);
  EXPECT_TRUE(worker->set_worker(1, 2));
  worker->forward({x3}, {y3});
  EXPECT_NE(y3->copy_data_to_host(), pass0) << "worker 1 draws its own numbers";
  EXPECT_EQ(worker->state(), after_one);
}

INSTANTIATE_TEST_SUITE_P(Devices, StochasticPooling,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice,
                                           Device::kCuda),
                         [](const ::testing::TestParamInfo<Device>& info) {
                           return device_name(info.param);
                         });

// ---------------------------------------------------------------- errors, 16 bits

std::string setup_error(const std::string& text, const lamina::Shape& shape,
                        Phase phase = TRAIN) {
  NativeBackend backend;
  LayerParameter p;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
  auto layer = LayerRegistry::create(p, LayerContext{backend, phase, kSeed});
  Tensor x(backend, shape, "x"), y(backend, {1}, "y");
  return error_of([&] { layer->setup({&x}, {&y}); });
}

TEST(StochasticPoolingErrors, PadAndSppLevelsThatNeedOneAreRefused) {
  std::string m = setup_error("name: 'p1' type: 'Pooling' pooling_param { pool: STOCHASTIC "
                              "kernel_size: 3 stride: 2 pad: 1 }", {2, 3, 6, 6});
  EXPECT_THAT(m, HasSubstr("layer 'p1' (Pooling): pooling_param.pad must be 0 with pool: "
                           "STOCHASTIC (Caffe pads only MAX and AVE pooling), got 1x1"));
  m = setup_error("name: 'p2' type: 'Pooling' pooling_param { pool: STOCHASTIC "
                  "kernel_size: 3 pad_h: 0 pad_w: 2 }", {2, 3, 6, 6}, TEST);
  EXPECT_THAT(m, HasSubstr("layer 'p2' (Pooling): pooling_param.pad must be 0"));
  // Level 1: 2 bins over 5 rows, kernel 3, pad (6 - 5 + 1) / 2 = 1; over 8 columns none.
  m = setup_error("name: 's1' type: 'SPP' spp_param { pool: STOCHASTIC pyramid_height: 3 }",
                  {2, 3, 5, 8});
  EXPECT_THAT(m, HasSubstr("layer 's1' (SPP): spp_param.pool: STOCHASTIC takes no pad "
                           "(Caffe pads only MAX and AVE pooling), but level 1's 2x2 bins "
                           "over bottom 'x' (2, 3, 5, 8) need a pad of 1x0"));
  EXPECT_THAT(m, HasSubstr("or use a pyramid_height of at most 1"));
}

TEST(StochasticPoolingErrors, AStateOfTheWrongSizeIsRefused) {
  NativeBackend backend;
  LayerParameter p;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'p' type: 'Pooling' pooling_param { pool: STOCHASTIC kernel_size: 2 }", &p));
  Tensor x(backend, {1, 1, 4, 4}, "x"), y(backend, {1}, "y");
  auto train = LayerRegistry::create(p, LayerContext{backend, TRAIN, kSeed});
  train->setup({&x}, {&y});
  EXPECT_THAT(error_of([&] { train->set_state({1, 2, 3}); }),
              HasSubstr("layer 'p' (Pooling): the snapshot holds 3 state values; a layer "
                        "drawing random numbers keeps 2 (seed, offset)"));
  // TEST draws nothing and keeps no state.
  auto test = LayerRegistry::create(p, LayerContext{backend, TEST, kSeed});
  test->setup({&x}, {&y});
  EXPECT_TRUE(test->state().empty());
  EXPECT_THAT(error_of([&] { test->set_state({1, 2}); }),
              HasSubstr("layer 'p' (Pooling): the snapshot holds 2 state value(s)"));
}

// In BF16 the Scale before the pooling stores 16 bits; the net converts its top to FP32
// for the stochastic pooling, whose top stays FP32, and the net runs forward and backward.
TEST(StochasticPoolingPrecision, A16BitNetPoolsInFp32) {
  NetParameter param = parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 2 dim: 4 dim: 4 } shape { dim: 2 } } }
layer { name: "sc" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "pool" type: "Pooling" bottom: "x" top: "pool"
        pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "Linear" bottom: "pool" top: "ip" inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)", "net");
  set_default_precision(param, BF16);
  NativeBackend backend;
  Net net(param, TRAIN, backend, 1);
  ASSERT_TRUE(net.has_blob("x_FP32"));
  EXPECT_EQ(net.blob("x").dtype(), DType::kBF16);
  EXPECT_EQ(net.blob("x_FP32").dtype(), DType::kF32);
  EXPECT_EQ(net.blob("pool").dtype(), DType::kF32);
  net.blob("data").copy_data_from_host(random_values(64, 1, 0.1f, 1));
  net.blob("label").copy_data_from_host({0, 1});
  net.forward();
  net.backward();
  EXPECT_TRUE(std::isfinite(net.loss()));
}

// In a TRAIN net the pooling's draws are part of the net's layer states (snapshots) and
// nothing keeps its step from being captured; a TEST net has no state for it.
TEST(StochasticPoolingNet, DrawsAreNetStateAndTheStepCanBeCaptured) {
  const std::string text = R"(
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool"
        pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 } }
)";
  NativeBackend backend;
  Net train(parse_net_parameter(text, "net"), TRAIN, backend, 1);
  EXPECT_EQ(train.capture_blocker(), "");
  ASSERT_EQ(train.layer_states().count("pool"), 1u);
  const std::vector<int64_t> before = train.layer_states().at("pool");
  ASSERT_EQ(before.size(), 2u);
  EXPECT_EQ(before[1], 0);
  train.blob("data").copy_data_from_host(random_values(96, 2, 0.1f, 1));
  train.forward();
  EXPECT_EQ(train.layer_states().at("pool"), (std::vector<int64_t>{before[0], 2 * 3 * 2 * 2}));
  Net test(parse_net_parameter(text, "net"), TEST, backend, 1);
  EXPECT_EQ(test.layer_states().count("pool"), 0u);
}

}  // namespace
}  // namespace lamina::testing
