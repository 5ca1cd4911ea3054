// Caffe 1.0's losses and the softmax layers over a class axis (docs/prototxt.md):
//   - every loss and softmax option in one table of layer cases: a numerical gradient check
//     on each backend (Native, HostAsDevice, CUDA) and the device against Native;
//   - forward values against references computed here from the formulas, independently of
//     the backends (each position's softmax in double, the losses as Caffe 1.0 defines them);
//   - Backend::transpose against a reference on every backend;
//   - the errors a user gets: label counts, H of the wrong shape, a missing, unreadable or
//     wrongly shaped source file, bad axes, labels that name no class.
#include <gmock/gmock.h>

#include <cmath>
#include <string>
#include <vector>

#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- references

// H (c, c) with a heavier diagonal: the matrix every infogain check uses.
std::vector<float> infogain_matrix(int c) {
  std::vector<float> h(size_t(c) * c);
  for (int i = 0; i < c; ++i)
    for (int j = 0; j < c; ++j) h[i * c + j] = i == j ? 1.0f : 0.1f * float((i + 2 * j) % 4);
  return h;
}

// H written as Caffe writes a .binaryproto: legacy (1, 1, c, c) floats, or `shape` with
// doubles.
std::string blob_proto_bytes(const std::vector<float>& values, const Shape& shape,
                             bool legacy_doubles = false) {
  BlobProto proto;
  if (legacy_doubles) {
    proto.set_num(int(shape[0]));
    proto.set_channels(int(shape[1]));
    proto.set_height(int(shape[2]));
    proto.set_width(int(shape[3]));
    for (float v : values) proto.add_double_data(v);
  } else {
    for (int64_t d : shape) proto.mutable_shape()->add_dim(d);
    for (float v : values) proto.add_data(v);
  }
  std::string bytes;
  EXPECT_TRUE(proto.SerializeToString(&bytes));
  return bytes;
}

// A (5, 5) H in a file that lives as long as the test process (the layer cases' source).
const std::string& infogain_file() {
  static TempDir dir;
  static const std::string path = [] {
    const std::string p = dir / "infogain5.binaryproto";
    write_bytes(p, blob_proto_bytes(infogain_matrix(5), {1, 1, 5, 5}, true));
    return p;
  }();
  return path;
}

// p = the softmax over C of each position of x (outer, C, inner), in double.
std::vector<double> softmax_positions(const std::vector<float>& x, int64_t outer, int64_t c,
                                      int64_t inner) {
  std::vector<double> p(x.size());
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * c + k) * inner + i; };
      double sum = 0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(double(x[at(k)]));
      for (int64_t k = 0; k < c; ++k) p[at(k)] = std::exp(double(x[at(k)])) / sum;
    }
  }
  return p;
}

double sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// ---------------------------------------------------------------- the layer cases

std::vector<LayerCase> loss_cases() {
  const std::string spatial_loss = "type: 'SoftmaxWithLoss' loss_param { ignore_label: -1 ";
  const std::string sigmoid = "type: 'SigmoidCrossEntropyLoss' ";
  const std::string infogain = "type: 'InfogainLoss' ";
  const std::string source = "infogain_loss_param { source: '" + infogain_file() + "' } ";
  return {
      // Softmax over an axis with positions after it: (N, C, H, W) over C at each (n, h, w).
      LayerCase("SoftmaxSpatial", "type: 'Softmax'", {{2, 3, 2, 2}}),
      LayerCase("SoftmaxSpatialInPlace", "type: 'Softmax'", {{2, 3, 2, 2}}).inplace(),
      LayerCase("SoftmaxAxis2", "type: 'Softmax' softmax_param { axis: 2 }", {{2, 3, 4, 2}}),
      LayerCase("SoftmaxAxisLast", "type: 'Softmax' softmax_param { axis: -1 engine: CAFFE }",
                {{2, 3, 4}}),
      LayerCase("LogSoftmaxSpatial", "type: 'LogSoftmax'", {{2, 3, 2, 2}}),
      // Tiles of the transpose cut across: 40 positions of 33 classes.
      LayerCase("SoftmaxWide", "type: 'Softmax'", {{1, 33, 40}}).grad_tol(2e-3f),
      // SoftmaxWithLoss: labels (N, H, W), one per position; every third one ignored.
      LayerCase("SoftmaxLossSpatial", "type: 'SoftmaxWithLoss'", {{2, 4, 2, 3}, {2, 2, 3}})
          .labels(1, 4),
      LayerCase("SoftmaxLossSpatialValid", spatial_loss + "normalization: VALID }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1),
      LayerCase("SoftmaxLossSpatialFull", spatial_loss + "normalization: FULL }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1),
      LayerCase("SoftmaxLossSpatialBatchSize", spatial_loss + "normalization: BATCH_SIZE }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1),
      LayerCase("SoftmaxLossSpatialNone", spatial_loss + "normalization: NONE }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1),
      LayerCase("SoftmaxLossSpatialNormalizeFalse", spatial_loss + "normalize: false }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1),
      LayerCase("SoftmaxLossSpatialProbTop", "type: 'SoftmaxWithLoss'",
                {{2, 4, 2, 3}, {2, 2, 3}}).labels(1, 4).with_tops(2).visible(1),
      LayerCase("SoftmaxLossAxisLast", "type: 'SoftmaxWithLoss' softmax_param { axis: -1 }",
                {{2, 3, 5}, {2, 3}}).labels(1, 5),
      LayerCase("AccuracySpatial", "type: 'Accuracy' accuracy_param { ignore_label: -1 }",
                {{2, 4, 3, 2}, {2, 3, 2}}).labels(1, 4).ignore(-1).no_gradient(),
      LayerCase("AccuracyAxisLastTop2", "type: 'Accuracy' accuracy_param { axis: -1 top_k: 2 }",
                {{3, 2, 5}, {3, 2}}).labels(1, 5).no_gradient(),
      // SigmoidCrossEntropyLoss: targets of 0 and 1 (the label bottom of 2 classes), with an
      // ignore label; real-valued targets in [0, 1].
      LayerCase("SigmoidCrossEntropy", sigmoid, {{4, 5}, {4, 5}}).labels(1, 2).range(-3, 3),
      LayerCase("SigmoidCrossEntropySoftTargets", sigmoid, {{3, 2, 2}, {12}}).range(0, 1),
      LayerCase("SigmoidCrossEntropyIgnoreBatchSize", sigmoid + "loss_param { ignore_label: -1 }",
                {{4, 5}, {4, 5}}).labels(1, 2).ignore(-1).range(-3, 3),
      LayerCase("SigmoidCrossEntropyValid", sigmoid + "loss_param { ignore_label: -1 "
                "normalization: VALID }", {{4, 5}, {4, 5}}).labels(1, 2).ignore(-1),
      LayerCase("SigmoidCrossEntropyFull", sigmoid + "loss_param { ignore_label: -1 "
                "normalization: FULL }", {{4, 5}, {4, 5}}).labels(1, 2).ignore(-1),
      LayerCase("SigmoidCrossEntropyNone", sigmoid + "loss_param { normalization: NONE }",
                {{4, 5}, {4, 5}}).labels(1, 2),
      LayerCase("SigmoidCrossEntropyNormalizeTrue", sigmoid + "loss_param { ignore_label: -1 "
                "normalize: true }", {{4, 5}, {4, 5}}).labels(1, 2).ignore(-1),
      // HingeLoss: scores in [-2, 2], so some margins are 0 (no gradient) and some are not.
      LayerCase("HingeL1", "type: 'HingeLoss'", {{6, 5}, {6}}).labels(1, 5).range(-2, 2),
      LayerCase("HingeL2", "type: 'HingeLoss' hinge_loss_param { norm: L2 }",
                {{6, 5, 1, 1}, {6, 1}}).labels(1, 5).range(-2, 2),
      LayerCase("MultinomialLogistic", "type: 'MultinomialLogisticLoss'", {{5, 4}, {5}})
          .labels(1, 4).range(0.4f, 1),
      // ContrastiveLoss: similarity 0 or 1 (a label bottom of 2 classes), pairs in [-1, 1].
      LayerCase("Contrastive", "type: 'ContrastiveLoss' contrastive_loss_param { margin: 2 }",
                {{6, 4}, {6, 4}, {6, 1, 1, 1}}).labels(2, 2),
      LayerCase("ContrastiveLegacy", "type: 'ContrastiveLoss' contrastive_loss_param { "
                "margin: 3 legacy_version: true }", {{6, 3, 1, 1}, {6, 3, 1, 1}, {6}})
          .labels(2, 2),
      // InfogainLoss: H from bottom 2 (values in [0, 1]) or from the source file.
      LayerCase("InfogainBottomH", infogain, {{4, 5}, {4}, {5, 5}}).labels(1, 5).range(0, 1),
      LayerCase("InfogainSource", infogain + source, {{4, 5}, {4}}).labels(1, 5),
      LayerCase("InfogainSpatialIgnoreFull", infogain + "loss_param { ignore_label: -1 "
                "normalization: FULL }", {{2, 3, 2, 2}, {2, 2, 2}, {1, 1, 3, 3}})
          .labels(1, 3).ignore(-1).range(0, 1),
      LayerCase("InfogainSpatialValidProbTop", infogain + "loss_param { ignore_label: -1 }",
                {{2, 3, 2, 2}, {2, 2, 2}, {3, 3}}).labels(1, 3).ignore(-1).range(0, 1)
          .with_tops(2).visible(1),
      LayerCase("InfogainAxisLastBatchSize", infogain + "infogain_loss_param { source: '" +
                infogain_file() + "' axis: -1 } loss_param { normalization: BATCH_SIZE }",
                {{2, 3, 5}, {6}}).labels(1, 5),
  };
}

LAMINA_LAYER_CASES(LossLayers, loss_cases);

// ---------------------------------------------------------------- transpose

class TransposeOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  std::unique_ptr<Backend> backend_;
};

// y (outer, cols, rows) = x (outer, rows, cols) transposed, exactly; shapes smaller than a
// tile, across tiles, and with one row or column.
TEST_P(TransposeOnDevice, MatchesTheReference) {
  for (Shape s : {Shape{1, 1, 1}, Shape{3, 5, 7}, Shape{2, 33, 70}, Shape{4, 1, 65},
                  Shape{2, 64, 1}, Shape{5, 40, 32}}) {
    SCOPED_TRACE(shape_string(s));
    const int64_t outer = s[0], rows = s[1], cols = s[2];
    Tensor x(*backend_, s, "x"), y(*backend_, {outer, cols, rows}, "y");
    const std::vector<float> v = random_values(x.count(), 5);
    x.copy_data_from_host(v);
    backend_->transpose(outer, rows, cols, x.data(), y.mutable_data());
    const std::vector<float> got = y.copy_data_to_host();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          ASSERT_EQ(got[(o * cols + c) * rows + r], v[(o * rows + r) * cols + c])
              << "o " << o << " r " << r << " c " << c;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, TransposeOnDevice,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// ---------------------------------------------------------------- forward values

class LossTest : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& prototxt) {
    LayerParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(prototxt, &p)) << prototxt;
    return LayerRegistry::create(p, LayerContext{backend_, TRAIN, 7});
  }
  Tensor* tensor(const Shape& shape, const std::string& name, const std::vector<float>& v) {
    tensors_.push_back(std::make_unique<Tensor>(backend_, shape, name));
    tensors_.back()->copy_data_from_host(v);
    return tensors_.back().get();
  }
  Tensor* output(const std::string& name = "loss") { return tensor({1}, name, {0}); }
  // Sets up and runs the layer; its top 0's value.
  float forward(Layer& layer, const Tensors& bottom, const Tensors& top) {
    setup_standalone(layer, bottom, top, 1);
    layer.forward(bottom, top);
    return top[0]->copy_data_to_host()[0];
  }
  // Runs the backward pass with top diff dloss; the diff of bottom 0.
  std::vector<float> backward(Layer& layer, const Tensors& bottom, const Tensors& top,
                              float dloss) {
    top[0]->copy_diff_from_host({dloss});
    std::vector<bool> propagate;
    for (size_t i = 0; i < bottom.size(); ++i) propagate.push_back(layer.accepts_gradient(int(i)));
    layer.backward_input(top, propagate, bottom);
    return bottom[0]->copy_diff_to_host();
  }

  NativeBackend backend_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

void expect_values(const std::vector<float>& got, const std::vector<double>& want,
                   double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

TEST_F(LossTest, SoftmaxIsOverTheClassAxisAtEachPosition) {
  const std::vector<float> v = random_values(2 * 3 * 4 * 5, 11, -3, 3);
  for (int axis : {1, 2, -1, -3}) {
    SCOPED_TRACE(axis);
    const int a = axis < 0 ? axis + 4 : axis;
    const Shape shape{2, 3, 4, 5};
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; ++d) outer *= shape[d];
    for (int d = a + 1; d < 4; ++d) inner *= shape[d];
    auto softmax = make("name: 'sm' type: 'Softmax' softmax_param { axis: " +
                        std::to_string(axis) + " }");
    Tensor* x = tensor(shape, "x", v);
    Tensor* y = output("y");
    forward(*softmax, {x}, {y});
    expect_values(y->copy_data_to_host(), softmax_positions(v, outer, shape[a], inner));
  }
}

TEST_F(LossTest, LogSoftmaxTakesTheAxisToo) {
  const std::vector<float> v = random_values(2 * 3 * 4, 12, -3, 3);
  auto layer = make("name: 'lsm' type: 'LogSoftmax'");  // axis 1 of (2, 3, 4)
  Tensor* x = tensor({2, 3, 4}, "x", v);
  Tensor* y = output("y");
  forward(*layer, {x}, {y});
  std::vector<double> want = softmax_positions(v, 2, 3, 4);
  for (double& p : want) p = std::log(p);
  expect_values(y->copy_data_to_host(), want);
}

// -sum over positions of ln p[label] / divisor, labels (outer, inner), -1 ignored.
double cross_entropy(const std::vector<double>& p, const std::vector<float>& labels,
                     int64_t c, int64_t inner) {
  double total = 0;
  for (size_t k = 0; k < labels.size(); ++k) {
    if (labels[k] < 0) continue;
    const int64_t o = int64_t(k) / inner, i = int64_t(k) % inner;
    total -= std::log(p[(o * c + int64_t(labels[k])) * inner + i]);
  }
  return total;
}

struct Divisor {
  std::string loss_param;
  double divisor;  // for scores (2, 3, 2, 2) with 8 labels, 3 of them ignored
};

TEST_F(LossTest, SoftmaxWithLossOverPositionsAndItsNormalizations) {
  const std::vector<float> v = random_values(24, 13, -2, 2);
  const std::vector<float> labels = {0, -1, 2, 1, -1, 1, 0, -1};
  const std::vector<double> p = softmax_positions(v, 2, 3, 4);
  for (const Divisor& d : {Divisor{"", 5}, Divisor{"normalization: VALID", 5},
                           Divisor{"normalization: FULL", 8},
                           Divisor{"normalization: BATCH_SIZE", 2},
                           Divisor{"normalization: NONE", 1}, Divisor{"normalize: false", 2},
                           Divisor{"normalize: true", 5},
                           Divisor{"normalize: false normalization: FULL", 8}}) {
    SCOPED_TRACE(d.loss_param);
    auto loss = make("name: 'loss' type: 'SoftmaxWithLoss' loss_param { ignore_label: -1 " +
                     d.loss_param + " }");
    Tensor* x = tensor({2, 3, 2, 2}, "scores", v);
    Tensor* l = tensor({2, 2, 2}, "labels", labels);
    Tensor* y = output();
    Tensor* prob = output("prob");
    EXPECT_NEAR(forward(*loss, {x, l}, {y, prob}), cross_entropy(p, labels, 3, 4) / d.divisor,
                1e-5);
    expect_values(prob->copy_data_to_host(), p);
    // dx = 2 (p - onehot) / divisor at counted positions, 0 at ignored ones.
    const std::vector<float> dx = backward(*loss, {x, l}, {y, prob}, 2);
    for (int64_t o = 0; o < 2; ++o) {
      for (int64_t i = 0; i < 4; ++i) {
        const float label = labels[o * 4 + i];
        for (int64_t c = 0; c < 3; ++c) {
          const int64_t at = (o * 3 + c) * 4 + i;
          const double want = label < 0 ? 0 : 2 * (p[at] - (c == label)) / d.divisor;
          EXPECT_NEAR(dx[at], want, 1e-6) << "o " << o << " c " << c << " i " << i;
        }
      }
    }
  }
}

TEST_F(LossTest, AccuracyOverPositionsSkipsIgnoredLabels) {
  // (N, C, W) = (1, 3, 4): position w's scores are column w.
  const std::vector<float> v = {0.1f, 0.9f, 0.2f, 0.5f,   // class 0
                                0.7f, 0.05f, 0.3f, 0.4f,  // class 1
                                0.2f, 0.05f, 0.5f, 0.1f}; // class 2
  auto acc = make("name: 'acc' type: 'Accuracy' accuracy_param { ignore_label: 2 }");
  Tensor* x = tensor({1, 3, 4}, "scores", v);
  // Right, wrong (1 scores 0.05 < 0.9), ignored, right.
  Tensor* l = tensor({1, 4}, "labels", {1, 1, 2, 0});
  Tensor* y = output("accuracy");
  EXPECT_NEAR(forward(*acc, {x, l}, {y}), 2.0 / 3, 1e-6);
  auto all_ignored = make("name: 'acc' type: 'Accuracy' accuracy_param { ignore_label: 2 }");
  Tensor* l2 = tensor({4}, "labels", {2, 2, 2, 2});
  EXPECT_EQ(forward(*all_ignored, {x, l2}, {y}), 0.0f);  // Caffe: 0 when nothing counts
}

TEST_F(LossTest, SigmoidCrossEntropyMatchesItsDefinition) {
  // Scores with large magnitudes, where the naive formula would overflow.
  const std::vector<float> x = {0.5f, -1, 2, -30, 40, 0, 1.5f, -0.25f};
  const std::vector<float> t = {1, 0, 0.3f, 0, 1, -1, 0.5f, 1};
  auto reference = [&](bool skip_ignored) {
    double total = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (skip_ignored && t[i] == -1) continue;
      // ln s and ln(1 - s) = ln s - x for s = sigmoid(x), without overflow.
      const double ls = x[i] < 0 ? x[i] - std::log1p(std::exp(x[i]))
                                 : -std::log1p(std::exp(-x[i]));
      total -= t[i] * ls + (1 - t[i]) * (ls - x[i]);
    }
    return total;
  };
  // (N, C) = (2, 4): BATCH_SIZE (Caffe's default here) divides by 2.
  for (const Divisor& d : {Divisor{"", 2}, Divisor{"ignore_label: -1", 2},
                           Divisor{"ignore_label: -1 normalization: VALID", 7},
                           Divisor{"ignore_label: -1 normalize: true", 7},
                           Divisor{"ignore_label: -1 normalization: FULL", 8},
                           Divisor{"normalization: NONE", 1}}) {
    SCOPED_TRACE(d.loss_param);
    const bool ignoring = d.loss_param.find("ignore") != std::string::npos;
    auto loss = make("name: 'l' type: 'SigmoidCrossEntropyLoss' loss_param { " + d.loss_param +
                     " }");
    Tensor* xs = tensor({2, 4}, "x", x);
    Tensor* ts = tensor({8}, "t", t);
    Tensor* y = output();
    const float value = forward(*loss, {xs, ts}, {y});
    EXPECT_TRUE(std::isfinite(value));
    EXPECT_NEAR(value, reference(ignoring) / d.divisor, 1e-5 * std::abs(value));
    const std::vector<float> dx = backward(*loss, {xs, ts}, {y}, 3);
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = ignoring && t[i] == -1 ? 0 : 3 * (sigmoid(x[i]) - t[i]) / d.divisor;
      EXPECT_NEAR(dx[i], want, 1e-6) << i;
    }
  }
}

TEST_F(LossTest, HingeL1AndL2) {
  const std::vector<float> x = {0.5f, -2, 1.5f, 0.2f, 3, -0.5f};  // (2, 3)
  const std::vector<float> labels = {2, 0};
  for (int p : {1, 2}) {
    SCOPED_TRACE(p);
    auto loss = make(std::string("name: 'h' type: 'HingeLoss' hinge_loss_param { norm: ") +
                     (p == 1 ? "L1" : "L2") + " }");
    Tensor* xs = tensor({2, 3}, "x", x);
    Tensor* l = tensor({2}, "labels", labels);
    Tensor* y = output();
    double total = 0;
    std::vector<double> dx(6);
    for (int r = 0; r < 2; ++r) {
      for (int j = 0; j < 3; ++j) {
        const double d = j == labels[r] ? -1 : 1;
        const double m = std::max(0.0, 1 + d * x[r * 3 + j]);
        total += p == 1 ? m : m * m;
        dx[r * 3 + j] = d * (p == 1 ? (m > 0) : 2 * m) * 0.5 / 2;  // dloss 0.5, N 2
      }
    }
    EXPECT_NEAR(forward(*loss, {xs, l}, {y}), total / 2, 1e-5);
    expect_values(backward(*loss, {xs, l}, {y}, 0.5f), dx);
  }
}

TEST_F(LossTest, MultinomialLogisticFloorsZeroProbabilities) {
  auto loss = make("name: 'm' type: 'MultinomialLogisticLoss'");
  Tensor* p = tensor({3, 2}, "prob", {0.25f, 0.75f, 0.5f, 0.5f, 1, 0});
  Tensor* l = tensor({3, 1, 1, 1}, "labels", {1, 0, 1});
  Tensor* y = output();
  // The last row's probability 0 counts as 1e-20.
  const double want = -(std::log(0.75) + std::log(0.5) + std::log(1e-20)) / 3;
  EXPECT_NEAR(forward(*loss, {p, l}, {y}), want, 1e-5 * want);
  const std::vector<float> dx = backward(*loss, {p, l}, {y}, 1);
  expect_values({dx.begin(), dx.begin() + 5}, {0, -1 / 0.75 / 3, -1 / 0.5 / 3, 0, 0}, 1e-5);
  EXPECT_FLOAT_EQ(dx[5], float(-1 / 1e-20 / 3));
}

TEST_F(LossTest, ContrastiveLegacyAndNot) {
  const std::vector<float> a = {0, 0, 1, 1, 0.5f, 0.5f};  // (3, 2)
  const std::vector<float> b = {0.3f, 0.4f, 1, 1, 0.5f, 1.5f};
  const std::vector<float> similar = {0, 1, 0};  // distances 0.5, 0, 1
  for (bool legacy : {false, true}) {
    SCOPED_TRACE(legacy);
    auto loss = make(std::string("name: 'c' type: 'ContrastiveLoss' contrastive_loss_param { "
                                 "margin: 0.8 legacy_version: ") +
                     (legacy ? "true" : "false") + " }");
    Tensor* ta = tensor({3, 2, 1, 1}, "a", a);
    Tensor* tb = tensor({3, 2, 1, 1}, "b", b);
    Tensor* ts = tensor({3, 1, 1, 1}, "similar", similar);
    Tensor* y = output();
    // Pair 0 (dissimilar, d = 0.5): legacy max(0.8 - 0.25, 0), else max(0.8 - 0.5, 0)^2;
    // pair 1 (similar): d^2 = 0; pair 2 (dissimilar, d = 1): 0 either way.
    const double first = legacy ? 0.55 : 0.09;
    EXPECT_NEAR(forward(*loss, {ta, tb, ts}, {y}), first / (2 * 3), 1e-6);
    // Pair 0's gradient for a: legacy -diff / N, else -(0.8 - 0.5) / (0.5 + 1e-4) diff / N.
    const std::vector<float> da = backward(*loss, {ta, tb, ts}, {y}, 1);
    const double beta = legacy ? -1.0 / 3 : -(0.3 / (0.5 + 1e-4)) / 3;
    expect_values(da, {beta * -0.3, beta * -0.4, 0, 0, 0, 0}, 1e-6);
    EXPECT_EQ(tb->copy_diff_to_host()[0], -da[0]);
  }
}

// The loss of Caffe 1.0's InfogainLoss from its definition: softmax of the scores over the
// class axis, then -sum over counted positions of sum_j H[label, j] ln p_j.
double infogain_reference(const std::vector<float>& x, const std::vector<float>& labels,
                          const std::vector<float>& h, int64_t outer, int64_t c,
                          int64_t inner) {
  const std::vector<double> p = softmax_positions(x, outer, c, inner);
  double total = 0;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const float label = labels[o * inner + i];
      if (label < 0) continue;
      for (int64_t j = 0; j < c; ++j)
        total -= h[int64_t(label) * c + j] * std::log(p[(o * c + j) * inner + i]);
    }
  }
  return total;
}

TEST_F(LossTest, InfogainFromABottomOverPositions) {
  const std::vector<float> x = random_values(2 * 3 * 4, 21, -2, 2);  // (2, 3, 4)
  const std::vector<float> labels = {2, 0, -1, 1, 1, 1, 0, -1};       // (2, 4)
  const std::vector<float> h = infogain_matrix(3);
  for (const Divisor& d : {Divisor{"", 6}, Divisor{"normalization: FULL", 8},
                           Divisor{"normalization: BATCH_SIZE", 2},
                           Divisor{"normalization: NONE", 1}}) {
    SCOPED_TRACE(d.loss_param);
    auto loss = make("name: 'ig' type: 'InfogainLoss' loss_param { ignore_label: -1 " +
                     d.loss_param + " }");
    Tensor* xs = tensor({2, 3, 4}, "x", x);
    Tensor* l = tensor({2, 4}, "labels", labels);
    Tensor* hs = tensor({3, 3}, "H", h);
    Tensor* y = output();
    Tensor* prob = output("prob");
    EXPECT_NEAR(forward(*loss, {xs, l, hs}, {y, prob}),
                infogain_reference(x, labels, h, 2, 3, 4) / d.divisor, 1e-5);
    expect_values(prob->copy_data_to_host(), softmax_positions(x, 2, 3, 4));
  }
}

TEST_F(LossTest, InfogainFromASourceFile) {
  TempDir dir;
  const std::vector<float> x = random_values(4 * 5, 22, -2, 2);
  const std::vector<float> labels = {4, 0, 2, 2};
  const std::vector<float> h = infogain_matrix(5);
  const std::string legacy = dir / "legacy.binaryproto", shaped = dir / "shaped.binaryproto";
  write_bytes(legacy, blob_proto_bytes(h, {1, 1, 5, 5}, true));
  write_bytes(shaped, blob_proto_bytes(h, {5, 5}));
  const double want = infogain_reference(x, labels, h, 4, 5, 1) / 4;
  for (const std::string& file : {legacy, shaped}) {
    SCOPED_TRACE(file);
    auto loss = make("name: 'ig' type: 'InfogainLoss' infogain_loss_param { source: '" + file +
                     "' }");
    Tensor* xs = tensor({4, 5}, "x", x);
    Tensor* l = tensor({4}, "labels", labels);
    Tensor* y = output();
    EXPECT_NEAR(forward(*loss, {xs, l}, {y}), want, 1e-5);
  }
}

// ---------------------------------------------------------------- errors

class LossErrors : public LossTest {
 protected:
  // The setup error of a layer on these bottoms.
  std::string setup_error(const std::string& prototxt, const Tensors& bottom, int tops = 1) {
    auto layer = make(prototxt);
    Tensors top;
    for (int i = 0; i < tops; ++i) top.push_back(output("t" + std::to_string(i)));
    return error_of([&] { layer->setup(bottom, top); });
  }
  Tensor* zeros(const Shape& shape, const std::string& name) {
    return tensor(shape, name, std::vector<float>(shape_count(shape), 0.0f));
  }
};

TEST_F(LossErrors, LabelCountsMustMatchThePositions) {
  // (N, C, H, W) = (2, 3, 2, 2) needs N H W = 8 labels; N = 2 is Lamina's old meaning.
  for (const char* type : {"SoftmaxWithLoss", "Accuracy", "InfogainLoss"}) {
    SCOPED_TRACE(type);
    Tensors bottom = {zeros({2, 3, 2, 2}, "scores"), zeros({2}, "labels")};
    if (std::string(type) == "InfogainLoss") bottom.push_back(zeros({3, 3}, "H"));
    const std::string message =
        setup_error(std::string("name: 'l' type: '") + type + "'", bottom);
    EXPECT_THAT(message, HasSubstr(std::string("layer 'l' (") + type + "): "));
    EXPECT_THAT(message, HasSubstr("one label per position"));
    EXPECT_THAT(message, HasSubstr("2 x 4 = 8 labels"));
    EXPECT_THAT(message, HasSubstr("(2)"));
  }
  for (const char* type : {"HingeLoss", "MultinomialLogisticLoss"}) {
    SCOPED_TRACE(type);
    const std::string message = setup_error(std::string("name: 'l' type: '") + type + "'",
                                            {zeros({4, 3}, "scores"), zeros({3}, "labels")});
    EXPECT_THAT(message, HasSubstr(std::string("layer 'l' (") + type + "): "));
    EXPECT_THAT(message, HasSubstr("(4, 3)"));
  }
  EXPECT_THAT(setup_error("name: 's' type: 'SigmoidCrossEntropyLoss'",
                          {zeros({4, 3}, "x"), zeros({4}, "t")}),
              HasSubstr("layer 's' (SigmoidCrossEntropyLoss): scores 'x' (4, 3) and targets "
                        "'t' (4) must hold the same number of values"));
}

TEST_F(LossErrors, ContrastiveShapes) {
  const std::string c = "name: 'c' type: 'ContrastiveLoss'";
  EXPECT_THAT(setup_error(c, {zeros({4, 3, 2, 1}, "a"), zeros({4, 3, 2, 1}, "b"),
                              zeros({4}, "s")}),
              HasSubstr("layer 'c' (ContrastiveLoss): features 'a' must be (N, C) or "
                        "(N, C, 1, 1), got (4, 3, 2, 1)"));
  EXPECT_THAT(setup_error(c, {zeros({4, 3}, "a"), zeros({4, 2}, "b"), zeros({4}, "s")}),
              HasSubstr("must have the same shape"));
  EXPECT_THAT(setup_error(c, {zeros({4, 3}, "a"), zeros({4, 3}, "b"), zeros({3}, "s")}),
              HasSubstr("expected one similarity per pair (4"));
}

TEST_F(LossErrors, BadAxes) {
  EXPECT_THAT(setup_error("name: 's' type: 'Softmax' softmax_param { axis: 2 }",
                          {zeros({4, 3}, "x")}),
              HasSubstr("layer 's' (Softmax): softmax_param.axis 2 is out of range for bottom "
                        "'x' of shape (4, 3)"));
  EXPECT_THAT(setup_error("name: 's' type: 'SoftmaxWithLoss' softmax_param { axis: -3 }",
                          {zeros({4, 3}, "x"), zeros({4}, "l")}),
              HasSubstr("layer 's' (SoftmaxWithLoss): softmax_param.axis -3 is out of range"));
  EXPECT_THAT(setup_error("name: 'a' type: 'Accuracy' accuracy_param { axis: 5 }",
                          {zeros({4, 3}, "x"), zeros({4}, "l")}),
              HasSubstr("layer 'a' (Accuracy): accuracy_param.axis 5 is out of range"));
  EXPECT_THAT(setup_error("name: 'i' type: 'InfogainLoss' infogain_loss_param { axis: 3 }",
                          {zeros({4, 3}, "x"), zeros({4}, "l"), zeros({3, 3}, "H")}),
              HasSubstr("layer 'i' (InfogainLoss): infogain_loss_param.axis 3 is out of range"));
}

TEST_F(LossErrors, InfogainMatrix) {
  TempDir dir;
  const std::string ig = "name: 'ig' type: 'InfogainLoss' ";
  auto bottoms = [&] { return Tensors{zeros({4, 3}, "x"), zeros({4}, "l")}; };
  auto with_source = [&](const std::string& path) {
    return ig + "infogain_loss_param { source: '" + path + "' }";
  };
  // H of the wrong shape, as a bottom and in a file.
  Tensors b = bottoms();
  b.push_back(zeros({3, 4}, "H"));
  EXPECT_THAT(setup_error(ig, b), HasSubstr("layer 'ig' (InfogainLoss): H (bottom 'H') must "
                                            "hold 3 x 3 values for the 3 classes of scores "
                                            "(4, 3), got (3, 4)"));
  b.back() = zeros({9}, "H");  // Caffe 1.0 checks only the count: (9) is H row-major
  {
    auto layer = make(ig);
    Tensors top = {output("t0")};
    EXPECT_NO_THROW(layer->setup(b, top));
  }
  const std::string wrong = dir / "wrong.binaryproto";
  write_bytes(wrong, blob_proto_bytes(infogain_matrix(4), {1, 1, 4, 4}, true));
  EXPECT_THAT(setup_error(with_source(wrong), bottoms()),
              HasSubstr("must hold 3 x 3 values for the 3 classes of scores (4, 3), got "
                        "(1, 1, 4, 4)"));
  // No H at all; a missing file; a file that is not a BlobProto; data and shape that differ.
  EXPECT_THAT(setup_error(ig, bottoms()),
              HasSubstr("layer 'ig' (InfogainLoss): needs the infogain matrix H (3, 3): set "
                        "infogain_loss_param.source"));
  const std::string missing = setup_error(with_source(dir / "missing.binaryproto"), bottoms());
  EXPECT_THAT(missing, HasSubstr("layer 'ig' (InfogainLoss): infogain matrix file "
                                 "(infogain_loss_param.source) '"));
  EXPECT_THAT(missing, HasSubstr("missing.binaryproto': cannot open: No such file"));
  const std::string garbage = dir / "garbage.binaryproto";
  write_bytes(garbage, std::string("\xff\xff\xff\xff not a proto", 16));
  EXPECT_THAT(setup_error(with_source(garbage), bottoms()),
              HasSubstr("is not a BlobProto (Caffe's binary .binaryproto format)"));
  const std::string short_data = dir / "short.binaryproto";
  write_bytes(short_data, blob_proto_bytes({1, 2, 3}, {3, 3}));
  EXPECT_THAT(setup_error(with_source(short_data), bottoms()),
              HasSubstr("holds 3 values, but its shape (3, 3) has 9"));
  EXPECT_THAT(setup_error(with_source(dir.path().string()), bottoms()),
              HasSubstr("layer 'ig' (InfogainLoss): infogain matrix file"));
  // Both a bottom and a source; Caffe's older normalize.
  b = bottoms();
  b.push_back(zeros({3, 3}, "H"));
  EXPECT_THAT(setup_error(with_source(wrong), b),
              HasSubstr("H comes from bottom 'H', so infogain_loss_param.source"));
  EXPECT_THAT(setup_error(ig + "loss_param { normalize: true }", b),
              HasSubstr("layer 'ig' (InfogainLoss): loss_param.normalize is Caffe's older "
                        "form"));
}

// Native throws naming the label; CUDA makes the loss NaN (backend.hpp).
TEST_F(LossErrors, LabelsThatNameNoClass) {
  for (const char* type : {"HingeLoss", "MultinomialLogisticLoss", "InfogainLoss"}) {
    SCOPED_TRACE(type);
    auto layer = make(std::string("name: 'l' type: '") + type + "'");
    Tensors bottom = {tensor({2, 3}, "x", random_values(6, 3, 0.1f, 1)),
                      tensor({2}, "labels", {1, 3})};
    if (std::string(type) == "InfogainLoss") bottom.push_back(zeros({3, 3}, "H"));
    Tensor* y = output();
    setup_standalone(*layer, bottom, {y}, 1);
    const std::string message = error_of([&] { layer->forward(bottom, {y}); });
    EXPECT_THAT(message, HasSubstr(std::string(type) + ": label 3 of row 1 is not a class "
                                   "index: the scores have 3 classes"));
  }
}

TEST(LossLayerTypes, AreRegisteredAsLosses) {
  NativeBackend backend;
  for (const char* type : {"SigmoidCrossEntropyLoss", "HingeLoss", "MultinomialLogisticLoss",
                           "ContrastiveLoss", "InfogainLoss"}) {
    SCOPED_TRACE(type);
    LayerParameter p;
    p.set_name("l");
    p.set_type(type);
    auto layer = LayerRegistry::create(p, LayerContext{backend, TRAIN, 1});
    EXPECT_TRUE(layer->is_loss());
    EXPECT_TRUE(layer->accepts_gradient(0));
    EXPECT_FALSE(layer->accepts_gradient(layer->min_bottoms() == 3 ? 2 : 1));
  }
}

}  // namespace
}  // namespace lamina::testing
