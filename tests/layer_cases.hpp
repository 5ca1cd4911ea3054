// The layer-case harness: one layer on fixed random inputs (LayerCase), checked on each
// backend by central differences (LayerGradient) and against the Native backend's forward and
// backward (LayerMatchesNative). A test file lists its cases and instantiates both suites with
// LAMINA_LAYER_CASES(prefix, cases).
//
// Devices: Cuda (skips visibly without a GPU) and HostAsDevice, a NativeBackend that says it
// is not host memory. HostAsDevice runs everywhere: through it the harness and the residency
// bookkeeping of tensors are tested without a GPU.
#pragma once

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "lamina/gradient_checker.hpp"
#include "lamina/registry.hpp"
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
  // The relative error allowed between a backend and Native (LayerMatchesNative), and the
  // gradient check's threshold.
  double tolerance = 1e-5;
  float grad_threshold = 1e-3f;

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
  LayerCase& tol(double t) { tolerance = t; return *this; }
  LayerCase& grad_tol(float t) { grad_threshold = t; return *this; }

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
  options.threshold = c.grad_threshold;
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
  for (const std::string& d : differences(expected, actual, c.tolerance))
    ADD_FAILURE() << backend_->name() << " vs native, " << d;
}

std::string layer_test_name(const ::testing::TestParamInfo<LayerParam>& info) {
  return device_name(std::get<0>(info.param)) + "_" + std::get<1>(info.param).name;
}

}  // namespace
}  // namespace lamina::testing

// Both suites over the cases returned by `cases` (a function), on every device.
#define LAMINA_LAYER_CASES(prefix, cases)                                                   \
  INSTANTIATE_TEST_SUITE_P(                                                                 \
      prefix, LayerGradient,                                                                \
      ::testing::Combine(::testing::Values(Device::kNative, Device::kHostAsDevice,          \
                                           Device::kCuda),                                  \
                         ::testing::ValuesIn(cases())),                                     \
      layer_test_name);                                                                     \
  INSTANTIATE_TEST_SUITE_P(                                                                 \
      prefix, LayerMatchesNative,                                                           \
      ::testing::Combine(::testing::Values(Device::kHostAsDevice, Device::kCuda),           \
                         ::testing::ValuesIn(cases())),                                     \
      layer_test_name)
