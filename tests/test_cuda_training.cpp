// Layers and training on the CUDA backend, against the Native backend (tiers 1-3 on the GPU):
//   - every layer case of one table: a numerical gradient check on each backend, and the same
//     forward/backward on Native and on the device, compared at relative error 1e-5;
//   - the MNIST MLP trained 200 iterations on both: the same displayed losses (1e-4 relative)
//     and test accuracies within 0.1 percentage point;
//   - a steady-state iteration makes no host/device copy; one read per displayed loss
//     (counted by wrapping the backend in a CountingBackend);
//   - one context, stream and cuBLAS handle per device, however many backends and nets.
//
// Devices: Cuda (skips visibly without a GPU) and HostAsDevice, a NativeBackend that says it
// is not host memory. HostAsDevice runs everywhere: through it the harness, the residency
// bookkeeping of tensors and the transfer counts are tested without a GPU.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/gradient_checker.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "forwarding_backend.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

// ---------------------------------------------------------------- backends

// NativeBackend behind the interface of a device: is_host() is false, so tensors keep host
// mirrors and move values only through copy_to_host/copy_from_host. gemm_skew perturbs every
// gemm and fused Linear product by that relative amount, to show the comparisons catch a
// wrong kernel.
class HostAsDeviceBackend final : public ForwardingBackend {
 public:
  float gemm_skew = 0;

  std::string name() const override { return "host-as-device"; }
  bool is_host() const override { return false; }
  void gemm(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, float alpha,
            const float* a, const float* b, float beta, float* c) override {
    inner_.gemm(ta, tb, m, n, k, alpha * (1 + gemm_skew), a, b, beta, c);
  }
  void linear_forward(int64_t rows, int64_t n, int64_t k, const float* x, const float* w,
                      const float* bias, bool relu, float* y) override {
    inner_.linear_forward(rows, n, k, x, w, bias, relu, y);
    if (gemm_skew != 0) inner_.scal(rows * n, 1 + gemm_skew, y);
  }
};

enum class Device { kNative, kHostAsDevice, kCuda };

std::string device_name(Device d) {
  return d == Device::kNative ? "Native" : d == Device::kHostAsDevice ? "HostAsDevice" : "Cuda";
}

// Opens the backend of kind into out, or skips the calling test (call it from SetUp).
void open_backend(Device kind, std::unique_ptr<Backend>& out) {
  if (kind == Device::kNative) out = std::make_unique<NativeBackend>();
  if (kind == Device::kHostAsDevice) out = std::make_unique<HostAsDeviceBackend>();
  if (kind != Device::kCuda) return;
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda);
  out = std::move(cuda);
}

// ---------------------------------------------------------------- the layer cases

// One layer on fixed random inputs. Labels are valid class indices, except that with an
// ignore label every third row (1, 4, ...) carries it.
struct LayerCase {
  std::string name;
  std::string prototxt;
  std::vector<Shape> bottoms;
  int label_bottom = -1, classes = 0;
  bool has_ignore = false;
  int ignore_label = 0;
  float lo = -1, hi = 1;   // range of the other bottoms' values
  // Values 0.05 apart in a shuffled order, so no two lie within the gradient check's step
  // (max pooling, Eltwise MAX: a step across a tie moves the arg-max).
  bool distinct_values = false;
  int tops = 1;
  bool in_place = false;   // top 0 is bottom 0
  bool has_gradient = true;
  // Gradient check only: skip inputs within kink_range of 0 (ReLU), let the objective see the
  // first visible_tops tops (-1: all), re-create the layer before every forward (replay).
  float kink_range = -1;
  int visible_tops = -1;
  bool replay = false;
  // A layer the case's layer absorbs (Layer::absorb), as the net fuses them.
  std::string absorbed;

  LayerCase(std::string n, std::string p, std::vector<Shape> b)
      : name(std::move(n)), prototxt(std::move(p)), bottoms(std::move(b)) {}
  LayerCase& labels(int bottom, int c) { label_bottom = bottom, classes = c; return *this; }
  LayerCase& ignore(int label) { has_ignore = true, ignore_label = label; return *this; }
  LayerCase& range(float l, float h) { lo = l, hi = h; return *this; }
  LayerCase& distinct() { distinct_values = true; return *this; }
  LayerCase& with_tops(int n) { tops = n; return *this; }
  LayerCase& inplace() { in_place = true; return *this; }
  LayerCase& no_gradient() { has_gradient = false; return *this; }
  LayerCase& kink(float r) { kink_range = r; return *this; }
  LayerCase& visible(int n) { visible_tops = n; return *this; }
  LayerCase& replayed() { replay = true; return *this; }
  LayerCase& absorbing(std::string p) { absorbed = std::move(p); return *this; }

  LayerParameter param() const {
    LayerParameter p;
    const std::string text = "name: '" + name + "' " + prototxt;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &p)) << text;
    return p;
  }
  std::vector<float> values(size_t i) const {  // bottom i's values, the same on every backend
    const int64_t n = shape_count(bottoms[i]);
    if (distinct_values && int(i) != label_bottom) {
      std::vector<float> v(n);
      for (int64_t k = 0; k < n; ++k) v[k] = 0.05f * float(k - n / 2 + int64_t(i) * n);
      std::shuffle(v.begin(), v.end(), std::mt19937_64(100 + i));
      return v;
    }
    if (int(i) != label_bottom) return random_values(n, 100 + i, lo, hi);
    std::mt19937_64 rng(100 + i);
    std::vector<float> v(n);
    for (int64_t r = 0; r < n; ++r)
      v[r] = has_ignore && r % 3 == 1 ? float(ignore_label) : float(rng() % classes);
    return v;
  }
};

void PrintTo(const LayerCase& c, std::ostream* out) { *out << c.name; }

std::vector<LayerCase> layer_cases() {
  const char* kIgnored = "type: 'SoftmaxWithLoss' loss_param { ignore_label: -1 normalization: ";
  return {
      // (4, 6) -> (4, 3); (3, 2, 2) -> (3, 3); (2, 3, 4) -> (2, 3, 2)
      LayerCase("LinearBias", "type: 'Linear' inner_product_param { num_output: 3 "
                "bias_filler { type: 'gaussian' } }", {{4, 6}}),
      LayerCase("LinearNoBias", "type: 'Linear' inner_product_param { num_output: 3 "
                "bias_term: false }", {{3, 2, 2}}),
      LayerCase("LinearAxis2", "type: 'Linear' inner_product_param { num_output: 2 axis: 2 "
                "bias_filler { type: 'gaussian' } }", {{2, 3, 4}}),
      // Linear with the in-place ReLU after it fused in (the net's Linear + ReLU).
      LayerCase("LinearReLUFused", "type: 'Linear' inner_product_param { num_output: 5 "
                "bias_filler { type: 'gaussian' } }", {{4, 6}})
          .absorbing("name: 'relu' type: 'ReLU'"),
      LayerCase("LinearNoBiasReLUFused", "type: 'Linear' inner_product_param { num_output: 5 "
                "bias_term: false }", {{3, 7}})
          .absorbing("name: 'relu' type: 'ReLU'"),
      // Elementwise, (3, 4); the gradient check's step is 0.01.
      LayerCase("ReLU", "type: 'ReLU'", {{3, 4}}).kink(0.011f),
      LayerCase("LeakyReLU", "type: 'ReLU' relu_param { negative_slope: 0.2 }", {{3, 4}})
          .kink(0.011f),
      LayerCase("ReLUInPlace", "type: 'ReLU' relu_param { negative_slope: 0.1 }", {{3, 4}})
          .inplace().kink(0.011f),
      LayerCase("Sigmoid", "type: 'Sigmoid'", {{3, 4}}),
      LayerCase("TanH", "type: 'TanH'", {{3, 4}}),
      // Rows N = 3 of 4 columns.
      LayerCase("Softmax", "type: 'Softmax'", {{3, 2, 2}}),
      LayerCase("LogSoftmax", "type: 'LogSoftmax'", {{3, 4}}),
      // Scores (N, C), labels (N) in [0, C); with ignore_label rows 1 and 4 are ignored.
      LayerCase("SoftmaxLoss", "type: 'SoftmaxWithLoss'", {{4, 5, 1, 1}, {4}}).labels(1, 5),
      LayerCase("SoftmaxLossIgnoreValid", std::string(kIgnored) + "VALID }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossFull", std::string(kIgnored) + "FULL }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossBatchSize", std::string(kIgnored) + "BATCH_SIZE }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossNone", std::string(kIgnored) + "NONE }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      // Top 1 is the probabilities (N, C), an output whose diff is not propagated.
      LayerCase("SoftmaxLossProbTop", "type: 'SoftmaxWithLoss'", {{4, 5}, {4}}).labels(1, 5)
          .with_tops(2).visible(1),
      LayerCase("NegativeLogLikelihood", "type: 'NegativeLogLikelihood'", {{5, 3}, {5}})
          .labels(1, 3).range(-3, 0),
      LayerCase("EuclideanLoss", "type: 'EuclideanLoss'", {{3, 2}, {3, 2, 1}}),
      LayerCase("AccuracyTop1", "type: 'Accuracy'", {{8, 5}, {8}}).labels(1, 5).no_gradient(),
      LayerCase("AccuracyTop3", "type: 'Accuracy' accuracy_param { top_k: 3 }", {{8, 5}, {8}})
          .labels(1, 5).no_gradient(),
      // (2, 3, 2, 2) -> (2, 12); (2, 3, 4) -> (2, 6, 2)
      LayerCase("Flatten", "type: 'Flatten'", {{2, 3, 2, 2}}),
      LayerCase("Reshape", "type: 'Reshape' reshape_param { shape { dim: 0 dim: -1 dim: 2 } }",
                {{2, 3, 4}}),
      LayerCase("DropoutTrain", "type: 'Dropout' dropout_param { dropout_ratio: 0.3 }",
                {{4, 6}}).replayed(),
      LayerCase("Split", "type: 'Split'", {{3, 2}}).with_tops(3),
      // Convolutional layers: x (N, C, H, W).
      LayerCase("ConvStridePad", "type: 'Convolution' convolution_param { num_output: 4 "
                "kernel_size: 3 stride: 2 pad: 1 weight_filler { type: 'gaussian' std: 0.3 } "
                "bias_filler { type: 'uniform' min: -0.1 max: 0.1 } }", {{2, 3, 7, 6}}),
      LayerCase("ConvGroupsDilation", "type: 'Convolution' convolution_param { num_output: 4 "
                "kernel_h: 3 kernel_w: 2 dilation: 2 group: 2 bias_term: false "
                "weight_filler { type: 'gaussian' std: 0.3 } }", {{2, 4, 8, 7}}),
      LayerCase("PoolMaxOverlapping", "type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 "
                "stride: 2 }", {{2, 3, 7, 6}}).distinct(),
      LayerCase("PoolAvePadded", "type: 'Pooling' pooling_param { pool: AVE kernel_size: 3 "
                "stride: 2 pad: 1 }", {{2, 3, 7, 6}}),
      LayerCase("PoolGlobal", "type: 'Pooling' pooling_param { pool: AVE global_pooling: true }",
                {{2, 3, 4, 5}}),
      LayerCase("BatchNormTrain", "type: 'BatchNorm'", {{4, 3, 2, 2}}),
      LayerCase("ScaleWithBias", "type: 'Scale' scale_param { bias_term: true filler { "
                "type: 'uniform' min: 0.5 max: 1.5 } bias_filler { type: 'uniform' } }",
                {{2, 3, 2, 2}}),
      LayerCase("Bias", "type: 'Bias' bias_param { filler { type: 'uniform' } }", {{2, 3, 2}}),
      LayerCase("Concat", "type: 'Concat'", {{2, 3, 2}, {2, 1, 2}}),
      LayerCase("EltwiseSumCoeff", "type: 'Eltwise' eltwise_param { operation: SUM coeff: 1.5 "
                "coeff: -0.5 }", {{3, 4}, {3, 4}}),
      LayerCase("EltwiseProd", "type: 'Eltwise' eltwise_param { operation: PROD }",
                {{3, 4}, {3, 4}, {3, 4}}),
      LayerCase("EltwiseMax", "type: 'Eltwise' eltwise_param { operation: MAX }",
                {{3, 4}, {3, 4}}).distinct(),
  };
}

constexpr uint64_t kLayerSeed = 7;   // the layer's own seed (Dropout's masks)
constexpr uint64_t kFillerSeed = 3;  // the parameters' fillers

// The bottoms (with the case's values) and tops of one case on one backend.
struct Blobs {
  std::vector<std::unique_ptr<Tensor>> owned;
  Tensors bottom, top;
  Blobs(Backend& backend, const LayerCase& c, int tops) {
    for (size_t i = 0; i < c.bottoms.size(); ++i) {
      owned.push_back(std::make_unique<Tensor>(backend, c.bottoms[i], "b" + std::to_string(i)));
      owned.back()->copy_data_from_host(c.values(i));
      bottom.push_back(owned.back().get());
    }
    for (int i = 0; i < tops; ++i) {
      if (c.in_place && i == 0) {
        top.push_back(bottom[0]);
        continue;
      }
      owned.push_back(std::make_unique<Tensor>(backend, Shape{1}, "t" + std::to_string(i)));
      top.push_back(owned.back().get());
    }
  }
};

// What the gradient check runs for replayed or partly visible cases: it re-creates the layer
// before every forward (Dropout then draws the same mask at every evaluation), and gives the
// layer extra tops the objective does not see. Layers with parameters need neither.
class CheckAdapter final : public Layer {
 public:
  CheckAdapter(const LayerCase& c, Backend& backend)
      : Layer(c.param(), LayerContext{backend, TRAIN, kLayerSeed}), replay_(c.replay) {
    for (int i = c.visible_tops < 0 ? c.tops : c.visible_tops; i < c.tops; ++i)
      hidden_.push_back(std::make_unique<Tensor>(backend, Shape{1}, "hidden"));
    renew();
  }
  bool accepts_gradient(int i) const override { return inner_->accepts_gradient(i); }
  void setup(const Tensors& bottom, const Tensors& top) override {
    inner_->setup(bottom, all(top));
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    if (replay_) {
      renew();
      inner_->setup(bottom, all(top));
    }
    inner_->forward(bottom, all(top));
  }
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    inner_->backward_input(all(top), propagate, bottom);
  }

 private:
  void renew() { inner_ = LayerRegistry::create(param_, LayerContext{backend_, phase_, seed_}); }
  Tensors all(Tensors top) const {
    for (const auto& t : hidden_) top.push_back(t.get());
    return top;
  }
  bool replay_;
  std::vector<std::unique_ptr<Tensor>> hidden_;
  std::unique_ptr<Layer> inner_;
};

// Everything one case computes on one backend, named for failure messages.
using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;

// The case's layer, set up by the caller; with `absorbed`, after absorbing that layer.
std::unique_ptr<Layer> make_case_layer(const LayerCase& c, Backend& backend) {
  auto layer = LayerRegistry::create(c.param(), LayerContext{backend, TRAIN, kLayerSeed});
  if (!c.absorbed.empty()) {
    LayerParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(c.absorbed, &p)) << c.absorbed;
    auto next = LayerRegistry::create(p, LayerContext{backend, TRAIN, kLayerSeed});
    EXPECT_TRUE(layer->absorb(*next)) << c.name << " does not absorb " << c.absorbed;
  }
  return layer;
}

// Runs a case: setup, forward, random top diffs, backward_params then backward_input. params
// holds the parameter values to load (Native's) or, when empty, receives the filler's values.
Outputs run_case(Backend& backend, const LayerCase& c, std::vector<std::vector<float>>& params) {
  auto layer = make_case_layer(c, backend);
  Blobs b(backend, c, c.tops);
  setup_standalone(*layer, b.bottom, b.top, kFillerSeed);
  std::vector<Param>& ps = layer->params();
  if (params.empty()) {
    for (Param& p : ps) params.push_back(p.tensor->copy_data_to_host());
  } else {
    for (size_t k = 0; k < ps.size(); ++k) ps[k].tensor->copy_data_from_host(params.at(k));
  }
  layer->forward(b.bottom, b.top);
  Outputs out;
  for (size_t i = 0; i < b.top.size(); ++i)
    out.push_back({"top " + std::to_string(i), b.top[i]->copy_data_to_host()});

  // Stale bottom diffs first (layers overwrite them); tops that alias a bottom then take theirs.
  std::vector<bool> propagate;
  for (Tensor* x : b.bottom) {
    propagate.push_back(layer->accepts_gradient(int(propagate.size())));
    x->copy_diff_from_host(std::vector<float>(x->count(), 7.0f));
  }
  for (size_t i = 0; i < b.top.size(); ++i)
    b.top[i]->copy_diff_from_host(random_values(b.top[i]->count(), 200 + i));
  for (Param& p : ps) p.tensor->copy_diff_from_host(std::vector<float>(p.tensor->count(), 0.0f));
  layer->backward_params(b.top, b.bottom);
  layer->backward_input(b.top, propagate, b.bottom);
  for (size_t i = 0; i < b.bottom.size(); ++i) {
    if (!propagate[i]) continue;
    out.push_back({"bottom diff " + std::to_string(i), b.bottom[i]->copy_diff_to_host()});
  }
  for (size_t k = 0; k < ps.size(); ++k)
    out.push_back({"param diff " + ps[k].tensor->name(), ps[k].tensor->copy_diff_to_host()});
  return out;
}

// One line per output of actual that differs from expected by more than tol (relative).
std::vector<std::string> differences(const Outputs& expected, const Outputs& actual, double tol) {
  std::vector<std::string> found;
  if (expected.size() != actual.size()) return {"the runs produced different outputs"};
  for (size_t i = 0; i < expected.size(); ++i) {
    const std::string d = compare(actual[i].second, expected[i].second, tol);
    if (!d.empty()) found.push_back(expected[i].first + ": " + d);
  }
  return found;
}

using LayerParam = std::tuple<Device, LayerCase>;

class LayerOnDevice : public ::testing::TestWithParam<LayerParam> {
 protected:
  void SetUp() override { open_backend(std::get<0>(GetParam()), backend_); }
  const LayerCase& layer_case() const { return std::get<1>(GetParam()); }
  std::unique_ptr<Backend> backend_;
};

class LayerGradient : public LayerOnDevice {};
class LayerMatchesNative : public LayerOnDevice {};

TEST_P(LayerGradient, MatchesCentralDifferences) {
  const LayerCase& c = layer_case();
  const bool adapted = c.replay || c.visible_tops >= 0;
  std::unique_ptr<Layer> layer =
      adapted ? std::make_unique<CheckAdapter>(c, *backend_)
              : make_case_layer(c, *backend_);
  Blobs b(*backend_, c, c.visible_tops < 0 ? c.tops : c.visible_tops);
  setup_standalone(*layer, b.bottom, b.top, kFillerSeed);
  GradientCheckOptions options;
  options.threshold = 1e-3f;
  options.kink_range = c.kink_range;
  const GradientCheckResult r = check_gradients(*layer, b.bottom, b.top, options);
  EXPECT_TRUE(r.ok) << r.summary();
  EXPECT_EQ(r.checked > 0, c.has_gradient) << r.summary();
}

TEST_P(LayerMatchesNative, ForwardAndBackward) {
  const LayerCase& c = layer_case();
  NativeBackend native;
  std::vector<std::vector<float>> params;
  const Outputs expected = run_case(native, c, params);
  const Outputs actual = run_case(*backend_, c, params);
  for (const std::string& d : differences(expected, actual, 1e-5))
    ADD_FAILURE() << backend_->name() << " vs native, " << d;
}

std::string layer_test_name(const ::testing::TestParamInfo<LayerParam>& info) {
  return device_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

INSTANTIATE_TEST_SUITE_P(Layers, LayerGradient,
                         ::testing::Combine(::testing::Values(Device::kNative,
                                                              Device::kHostAsDevice,
                                                              Device::kCuda),
                                            ::testing::ValuesIn(layer_cases())),
                         layer_test_name);
INSTANTIATE_TEST_SUITE_P(Layers, LayerMatchesNative,
                         ::testing::Combine(::testing::Values(Device::kHostAsDevice,
                                                              Device::kCuda),
                                            ::testing::ValuesIn(layer_cases())),
                         layer_test_name);

// The comparison is not vacuous: a gemm off by 1e-4 (relative) fails it.
TEST(LayerMatchesNativeHarness, CatchesAWrongKernel) {
  const LayerCase c = layer_cases().front();  // LinearBias
  ASSERT_EQ(c.name, "LinearBias");
  NativeBackend native;
  HostAsDeviceBackend skewed;
  skewed.gemm_skew = 1e-4f;
  std::vector<std::vector<float>> params;
  const Outputs expected = run_case(native, c, params);
  const std::vector<std::string> found = differences(expected, run_case(skewed, c, params), 1e-5);
  // The top (linear_forward), the bottom diff and the weight diff (gemms) are skewed; the
  // bias diff (linear_bias_backward) is not.
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].rfind("top 0: normalized error", 0), 0u) << found[0];
}

// ---------------------------------------------------------------- training

::testing::AssertionResult mnist_available() {
  const std::string dir = mnist_dir();
  for (const char* file : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string path = dir + "/" + file;
    if (!std::filesystem::exists(path) && !std::filesystem::exists(path + ".gz")) {
      return ::testing::AssertionFailure() << dir << "/" << file << " is missing: run "
             << "scripts/fetch_mnist.sh " << dir << " (or set LAMINA_MNIST_DIR)";
    }
  }
  return ::testing::AssertionSuccess();
}

// The MLP of models/mnist (784-512-512-10, batch 64), seed 1, with a test net of 100 batches.
mnist::Model mlp_model() {
  mnist::ModelOptions options;
  options.data_dir = mnist_dir();
  options.seed = 1;
  return mnist::load_model("mlp", options);
}

class TrainingOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  std::unique_ptr<Backend> backend_;
};

// Trains the MNIST MLP in `precision` for 200 iterations on the CPU and on the device, from
// the same seed, and compares: the loss every 20 iterations within loss_tol (relative), the
// test accuracies within accuracy_tol.
void expect_training_matches_the_cpu(Backend& device, Precision precision, double loss_tol,
                                     float accuracy_tol) {
  ASSERT_TRUE(mnist_available());
  mnist::Model m = mlp_model();
  m.solver.set_display(20);
  m.solver.set_average_loss(1);
  m.solver.set_precision(precision);
  NativeBackend cpu;
  Solver reference(m.solver, m.net, cpu, m.net_path);
  Solver solver(m.solver, m.net, device, m.net_path);
  reference.step(200);
  solver.step(200);

  const std::vector<LossRecord>& a = reference.loss_history();
  const std::vector<LossRecord>& b = solver.loss_history();
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), a.size());
  const std::string name = Precision_Name(precision);
  std::printf("%9s %12s %12s %10s   (%s, %s)\n", "iteration", "cpu", "device", "rel diff",
              device.name().c_str(), name.c_str());
  for (size_t i = 0; i < a.size(); ++i) {
    const double rel = std::abs(double(b[i].loss) - a[i].loss) / std::abs(double(a[i].loss));
    std::printf("%9d %12.7f %12.7f %10.2e\n", a[i].iteration, a[i].loss, b[i].loss, rel);
    EXPECT_EQ(b[i].iteration, a[i].iteration);
    EXPECT_LE(rel, loss_tol) << "iteration " << a[i].iteration << ": cpu " << a[i].loss
                             << ", device " << b[i].loss;
  }
  EXPECT_LT(a.back().loss, 0.5 * a.front().loss) << "the MLP must have trained";

  if (reference.scales_loss()) {
    const Solver::LossScaleState sa = reference.loss_scale_state(), sb = solver.loss_scale_state();
    std::printf("loss scale: cpu %g (%lld skipped), device %g (%lld skipped)\n", sa.scale,
                (long long)sa.skipped, sb.scale, (long long)sb.skipped);
    EXPECT_EQ(sb.scale, sa.scale);
    EXPECT_EQ(sb.skipped, sa.skipped);
  }
  const float cpu_accuracy = reference.test().value("accuracy");
  const float accuracy = solver.test().value("accuracy");
  std::printf("%s test accuracy: cpu %.2f%%, device %.2f%%\n", name.c_str(),
              100 * cpu_accuracy, 100 * accuracy);
  EXPECT_LE(std::abs(accuracy - cpu_accuracy), accuracy_tol + 1e-6f);
}

TEST_P(TrainingOnDevice, MlpLossesAndAccuracyMatchTheCpu) {
  expect_training_matches_the_cpu(*backend_, FP32, 1e-4, 0.001f);  // 10 of 10,000 images
}

// The same in TF32 on both. The CPU rounds each product's operands to nearest; the GPU's
// tensor cores convert them their own way and sum in their own order, so products differ by
// up to about 2^-10 of their size (against FP32's 2^-23 summation differences, for which
// 1e-4 holds above). 200 steps of a stable SGD keep the losses within a small multiple of
// that: 1e-2 relative, and the test accuracies within 0.3 points (30 of 10,000 images).
TEST_P(TrainingOnDevice, MlpInTf32MatchesTheCpuInTf32) {
  expect_training_matches_the_cpu(*backend_, TF32, 1e-2, 0.003f);
}

// The same in BF16 on both: both read the same 16-bit operands exactly and sum in FP32, so
// a stored value differs only where the two sums' order moves it across a rounding boundary,
// by one BF16 step (2^-8 of it) in a small fraction of values. Those steps feed the next
// layers and iterations like TF32's operand rounding does, a little larger: 2e-2 relative on
// the losses, and the test accuracies within 0.3 points.
TEST_P(TrainingOnDevice, MlpInBf16MatchesTheCpuInBf16) {
  expect_training_matches_the_cpu(*backend_, BF16, 2e-2, 0.003f);
}

// The same in FP16 with loss scaling on both: FP16 keeps 11 significant bits, so its
// rounding boundaries are 8 times denser than BF16's and the two sums' order crosses one
// about as often, by a step 8 times smaller. The losses within 1e-2, the accuracies within 0.3
// points; the loss scale must be the same on both.
TEST_P(TrainingOnDevice, MlpInFp16MatchesTheCpuInFp16) {
  expect_training_matches_the_cpu(*backend_, FP16, 1e-2, 0.003f);
}

TEST_P(TrainingOnDevice, SteadyStateIterationsMakeNoTransfers) {
  ASSERT_TRUE(mnist_available());
  mnist::Model m = mlp_model();  // 937 iterations per epoch: the steps below stay in epoch 0
  m.solver.clear_test_iter();    // training only (test_interval is 0)
  m.solver.set_display(0);
  CountingBackend counting(*backend_);
  using Transfers = CountingBackend::Transfers;
  // Gradient clipping computes its norm and scale in backend memory too.
  for (double clip : {0.0, 0.5}) {
    SCOPED_TRACE(clip > 0 ? "clip_gradients 0.5" : "no clipping");
    m.solver.set_clip_gradients(clip);
    Solver solver(m.solver, m.net, counting, m.net_path);
    const Transfers setup = counting.transfers();
    EXPECT_GT(setup.from_host, 0) << "uploading the data set and the weights is counted";
    solver.step(3);  // warm-up
    const Transfers before = counting.transfers();
    solver.step(50);
    EXPECT_EQ(counting.transfers().to_host, before.to_host);
    EXPECT_EQ(counting.transfers().from_host, before.from_host);
    EXPECT_EQ(counting.transfers().bytes, before.bytes);
  }
  m.solver.clear_clip_gradients();
  {
    // FP16: the loss scale and its finiteness test advance in backend memory too.
    SCOPED_TRACE("FP16 with loss scaling");
    m.solver.set_precision(FP16);
    Solver solver(m.solver, m.net, counting, m.net_path);
    ASSERT_TRUE(solver.scales_loss());
    solver.step(3);
    const Transfers before = counting.transfers();
    solver.step(50);
    EXPECT_EQ(counting.transfers().to_host, before.to_host);
    EXPECT_EQ(counting.transfers().from_host, before.from_host);
    m.solver.clear_precision();
  }
  // Displaying reads the loss ring (smoothed_loss: one copy_to_host of average_loss floats).
  m.solver.set_display(10);
  Solver solver(m.solver, m.net, counting, m.net_path);
  solver.step(3);  // displays iteration 0
  const Transfers before = counting.transfers();
  solver.step(50);  // iterations 3..52 display 10, 20, 30, 40, 50
  EXPECT_EQ(counting.transfers().to_host, before.to_host + 5);
  EXPECT_EQ(counting.transfers().from_host, before.from_host);
  EXPECT_EQ(solver.loss_history().size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Mlp, TrainingOnDevice,
                         ::testing::Values(Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// Two backends of device 0, a training net and a test net on each, trained and tested: the
// device's context, its three streams (main, side lane, collective lane) and the lanes'
// cuBLAS handles exist once for the whole process.
TEST(CudaHandles, CreatedOncePerDeviceAcrossRunsAndNets) {
  const CudaDiagnostics start = cuda_diagnostics();  // earlier tests may have made them
  LAMINA_CUDA_BACKEND_OR_SKIP(first);
  ASSERT_TRUE(mnist_available());
  const CudaDiagnostics created = cuda_diagnostics();
  EXPECT_LE(created.contexts_created, start.contexts_created + 1);
  EXPECT_LE(created.streams_created, start.streams_created + 3);
  EXPECT_LE(created.blas_handles_created, start.blas_handles_created + 2);
  EXPECT_EQ(created.contexts_created, 1) << "this process uses device 0 only";
  EXPECT_EQ(created.streams_created, 3);
  EXPECT_EQ(created.blas_handles_created, 2);

  std::unique_ptr<Backend> second = make_cuda_backend(0);
  mnist::Model m = mlp_model();
  m.solver.set_display(2);
  m.solver.set_test_iter(0, 2);
  m.solver.set_test_interval(3);
  Solver a(m.solver, m.net, *first, m.net_path);
  Solver b(m.solver, m.net, *second, m.net_path);
  for (Solver* solver : {&a, &b, &a}) {
    solver->step(7);  // tests every 3 iterations, from iteration 0
    EXPECT_TRUE(std::isfinite(solver->test().value("loss")));
  }
  EXPECT_EQ(a.test_history().size(), 7u);  // iterations 0, 3, 6, 7, then 9, 12, 14
  EXPECT_EQ(b.test_history().size(), 4u);  // iterations 0, 3, 6, 7
  const CudaDiagnostics end = cuda_diagnostics();
  EXPECT_EQ(end.contexts_created, created.contexts_created);
  EXPECT_EQ(end.streams_created, created.streams_created);
  EXPECT_EQ(end.blas_handles_created, created.blas_handles_created);
  EXPECT_LE(end.dnn_handles_created, 2);
}

}  // namespace
}  // namespace lamina::testing
