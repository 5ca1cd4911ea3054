// BF16 storage on the CPU (docs/precision.md): tensors stored in 16 bits, the net's choice of
// storage per layer and the Convert layers it inserts, each 16-bit layer's forward and
// backward against its FP32 result within a bound derived from the precision (BF16 and
// FP16), the weights' 16-bit copy, and training with FP32 master weights.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "lamina/registry.hpp"
#include "lamina/rounding.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::ElementsAre;
using testing::layer_names;
using ::testing::HasSubstr;
using testing::random_values;

// The unit roundoff of a 16-bit format: rounding to nearest moves a value by at most u of
// it, 2^-8 in BF16 (8 significant bits), 2^-11 in FP16 (11).
double unit_of(Half f) { return std::ldexp(1.0, f == Half::kBF16 ? -8 : -11); }

std::vector<float> rounded(const std::vector<float>& v, Half f = Half::kBF16) {
  std::vector<float> out;
  for (float x : v)
    out.push_back(f == Half::kBF16 ? bf16_to_float(float_to_bf16(x))
                                   : fp16_to_float(float_to_fp16(x)));
  return out;
}

TEST(Bf16Storage, TensorsRoundOnTheWayInAndReadExactly) {
  NativeBackend native;
  Tensor t(native, {4}, "t", DType::kBF16);
  EXPECT_EQ(t.dtype(), DType::kBF16);
  const float tie = 1.0f + std::ldexp(1.0f, -8);  // halfway between 1 and 1 + 2^-7
  t.copy_data_from_host({tie, 3.14159f, -0.0f, 1e-40f});
  const std::vector<float> back = t.copy_data_to_host();
  EXPECT_EQ(back[0], 1.0f) << "a tie goes to the even neighbour";
  EXPECT_EQ(back[1], 3.140625f);
  EXPECT_TRUE(std::signbit(back[2]));
  EXPECT_EQ(back[3], bf16_to_float(float_to_bf16(1e-40f))) << "subnormals are kept";
  EXPECT_EQ(t.half_data()[1], float_to_bf16(3.14159f)) << "the array holds the 16 bits";
  t.reshape({2});  // shrinking keeps the memory; transfers cover the new count
  EXPECT_THAT(t.copy_data_to_host(), ElementsAre(1.0f, 3.140625f));
}

NetParameter mlp(Precision p) {
  NetParameter param = parse_net_parameter(testing::kSmallMlp, "net");
  set_default_precision(param, p);
  return param;
}

TEST(Bf16Net, LayersStoreInBf16AndConvertAtTheEdges) {
  NativeBackend native;
  Net net(mlp(BF16), TRAIN, native, 1);
  // The data layer and the loss have no 16-bit path: a Convert before ip1 rounds the data,
  // one after ip2 widens the scores; the ReLU is fused into ip1.
  EXPECT_THAT(layer_names(net), ElementsAre("data", "data_BF16", "ip1", "relu1", "ip2",
                                            "ip2_FP32", "loss"));
  std::vector<DType> storage;
  for (int i = 0; i < net.num_layers(); ++i) storage.push_back(net.layer_storage(i));
  EXPECT_THAT(storage, ElementsAre(DType::kF32, DType::kBF16, DType::kBF16, DType::kBF16,
                                   DType::kBF16, DType::kF32, DType::kF32));
  EXPECT_EQ(net.blob("ip1").dtype(), DType::kBF16);
  EXPECT_EQ(net.blob("label").dtype(), DType::kF32);
  EXPECT_TRUE(net.layer_fused(3));
  EXPECT_TRUE(net.arena().has_half_copy());
  EXPECT_EQ(net.blob("ip2_FP32").dtype(), DType::kF32);
}

// A layer from outside Lamina that works in place and has no 16-bit path (every layer of
// Lamina's that works in place has one): the identity.
class InPlaceFp32Layer final : public Layer {
 public:
  using Layer::Layer;
  bool supports_in_place() const override { return true; }
  void setup(const Tensors& bottom, const Tensors& top) override {
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    if (top[0] == bottom[0]) return;
    backend_.copy(sizeof(float) * bottom[0]->count(), bottom[0]->data(), top[0]->mutable_data());
  }
  void backward_input(const Tensors& top, const std::vector<bool>&,
                      const Tensors& bottom) override {
    if (top[0] == bottom[0]) return;
    backend_.copy(sizeof(float) * top[0]->count(), top[0]->diff(), bottom[0]->mutable_diff());
  }
};

TEST(Bf16Net, PrecisionsAreParsedAndRefusedWithTheirFix) {
  static const bool registered = [] {
    register_layer<InPlaceFp32Layer>("TestInPlaceFp32");
    return true;
  }();
  ASSERT_TRUE(registered);
  EXPECT_EQ(parse_precision("bf16", "--precision"), BF16);
  EXPECT_EQ(parse_precision("Fp16", "--precision"), FP16);
  NativeBackend native;
  // An in-place layer cannot have a Convert before it. One that can run in 16 bits runs in
  // its blob's storage, whatever its own precision: a ReLU in FP32 in place on a BF16
  // Linear's output runs in BF16 (and is fused), one in BF16 on an FP32 output in FP32.
  NetParameter param = mlp(FP32);
  param.mutable_layer(1)->set_precision(BF16);
  param.mutable_layer(2)->add_bottom("ip1");
  param.mutable_layer(2)->add_top("ip1");
  {
    Net net(param, TRAIN, native, 1);
    EXPECT_THAT(layer_names(net), ElementsAre("data", "data_BF16", "ip1", "relu1", "ip1_FP32",
                                              "ip2", "loss"));
    EXPECT_EQ(net.layer_storage(3), DType::kBF16);
    EXPECT_TRUE(net.layer_fused(3));
  }
  NetParameter reversed = param;
  reversed.mutable_layer(1)->set_precision(FP32);
  reversed.mutable_layer(2)->set_precision(BF16);
  {
    Net net(reversed, TRAIN, native, 1);
    EXPECT_THAT(layer_names(net), ElementsAre("data", "ip1", "relu1", "ip2", "loss"));
    EXPECT_EQ(net.layer_storage(2), DType::kF32);
  }
  // A layer without a 16-bit path in place on a 16-bit layer's top makes that layer store
  // it in FP32.
  NetParameter dropout = param;
  dropout.mutable_layer(2)->set_type("TestInPlaceFp32");
  {
    Net net(dropout, TRAIN, native, 1);
    EXPECT_THAT(layer_names(net), ElementsAre("data", "ip1", "relu1", "ip2", "loss"));
    EXPECT_EQ(net.layer_storage(1), DType::kF32);
  }
  // On a 16-bit blob whose producer has no FP32 to fall back on, it is refused, saying what
  // to do.
  NetParameter converted = parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 4 } } }
layer { name: "half" type: "Convert" precision: BF16 }
layer { name: "drop" type: "TestInPlaceFp32" bottom: "half" top: "half" }
)", "net");
  EXPECT_THAT(testing::error_of([&] { Net(converted, TRAIN, native, 1); }),
              HasSubstr("layer 'drop' (TestInPlaceFp32) has no 16-bit path, so it cannot work in "
                        "place on 'half', which layer 'half' stores in BF16: give its top a name "
                        "of its own (a Convert then goes before it), or run layer 'half' in FP32"));
  // Not in place, it gets a Convert.
  dropout.mutable_layer(2)->set_top(0, "r");
  {
    Net net(dropout, TRAIN, native, 1);
    EXPECT_THAT(layer_names(net), ElementsAre("data", "data_BF16", "ip1", "ip1_FP32", "relu1",
                                              "ip2", "loss"));
  }
  // A loss weight on a BF16 top is refused (a loss is FP32).
  NetParameter weighted = parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 4 } } }
layer { name: "ip" type: "Linear" precision: BF16 loss_weight: 1
        inner_product_param { num_output: 1 } }
)", "net");
  EXPECT_THAT(testing::error_of([&] { Net(weighted, TRAIN, native, 1); }),
              HasSubstr("layer 'ip': loss_weight is set on top 'ip', which the layer stores in "
                        "BF16; a loss is FP32"));
  // A Convert takes a name no layer or blob has.
  NetParameter taken = mlp(BF16);
  taken.mutable_layer(2)->set_name("data_BF16");
  {
    Net net(taken, TRAIN, native, 1);
    EXPECT_THAT(layer_names(net), ElementsAre("data", "data_BF16_", "ip1", "data_BF16", "ip2",
                                              "ip2_FP32", "loss"));
  }
}

const char* kLinear = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 8 dim: 24 } shape { dim: 8 } } }
layer { name: "ip0" type: "Linear" precision: FP32 inner_product_param { num_output: 24
        weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip1" type: "Linear" inner_product_param { num_output: 16
        weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "ip2" type: "Linear" precision: FP32 inner_product_param { num_output: 5 } }
layer { name: "loss" type: "SoftmaxWithLoss" }
)";

// A Linear layer (8 x 24 -> 16, with bias; ip1, between two FP32 layers) in BF16 or FP16
// against FP32: same weights, input and top gradient. The format rounds x, W and dy (the
// Convert and the 16-bit copy: a relative u each, u = 2^-8 in BF16, 2^-11 in FP16) and
// every 16-bit result once; sums run in FP32 either way. So each output differs from FP32's
// by at most 2 u S + u |y| (S = the sum of |operand products| behind it), plus FP32's own
// rounding, covered by 1% of the first term (the values stay far from FP16's limits).
class HalfLayers : public ::testing::TestWithParam<Precision> {};

TEST_P(HalfLayers, LinearStaysWithinItsFormatOfFp32ForwardAndBackward) {
  NativeBackend native;
  const Precision p = GetParam();
  const Half format = half_format(storage_of(p));
  const double unit = unit_of(format);
  const NetParameter param = parse_net_parameter(kLinear, "net");
  NetParameter half = param;
  set_default_precision(half, p);
  Net n32(param, TRAIN, native, 1), n16(half, TRAIN, native, 1);
  const int ip32 = 2, ip16 = 3;
  const std::string name = Precision_Name(p);
  ASSERT_THAT(layer_names(n16), ElementsAre("data", "ip0", "ip0_" + name, "ip1", "ip1_FP32",
                                            "ip2", "loss"));
  const int64_t rows = 8, k = 24, n = 16;
  const std::vector<float> data = random_values(rows * k, 5), dy = random_values(rows * n, 6);
  testing::forward_and_backward(n32, ip32, data, dy);
  testing::forward_and_backward(n16, ip16, data, dy);
  const std::vector<float> x = n32.blob("ip0").copy_data_to_host();
  const std::vector<float> w = n32.layer(ip32).params()[0].tensor->copy_data_to_host();
  const std::vector<float> y32 = n32.blob("ip1").copy_data_to_host();
  const std::vector<float> y16 = n16.blob("ip1").copy_data_to_host();
  EXPECT_EQ(y16, rounded(y16, format)) << "the top holds " << name << " values";
  auto bound = [&](double sum, double value) {
    return 2.02 * unit * sum + unit * std::abs(value);
  };
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t c = 0; c < k; ++c) s += std::abs(x[r * k + c] * w[j * k + c]);
      EXPECT_NEAR(y16[r * n + j], y32[r * n + j], bound(s, y32[r * n + j])) << r << "," << j;
    }
  }
  EXPECT_NE(y16, y32) << name << " must change the results";
  // dx = dy W (16-bit), dW = dy^T x and db = column sums of dy (FP32: no final rounding).
  const std::vector<float> dx32 = n32.blob("ip0").copy_diff_to_host();
  const std::vector<float> dx16 = n16.blob("ip0_" + name).copy_diff_to_host();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t j = 0; j < n; ++j) s += std::abs(dy[r * n + j] * w[j * k + c]);
      EXPECT_NEAR(dx16[r * k + c], dx32[r * k + c], bound(s, dx32[r * k + c])) << r << "," << c;
    }
  }
  const std::vector<float> dw32 = n32.layer(ip32).params()[0].tensor->copy_diff_to_host();
  const std::vector<float> dw16 = n16.layer(ip16).params()[0].tensor->copy_diff_to_host();
  const std::vector<float> db32 = n32.layer(ip32).params()[1].tensor->copy_diff_to_host();
  const std::vector<float> db16 = n16.layer(ip16).params()[1].tensor->copy_diff_to_host();
  for (int64_t j = 0; j < n; ++j) {
    double sb = 0;
    for (int64_t r = 0; r < rows; ++r) sb += std::abs(dy[r * n + j]);
    EXPECT_NEAR(db16[j], db32[j], 1.01 * unit * sb) << j;
    for (int64_t c = 0; c < k; ++c) {
      double s = 0;
      for (int64_t r = 0; r < rows; ++r) s += std::abs(dy[r * n + j] * x[r * k + c]);
      EXPECT_NEAR(dw16[j * k + c], dw32[j * k + c], 2.02 * unit * s) << j << "," << c;
    }
  }
  EXPECT_NE(dw16, rounded(dw16, format)) << "parameter gradients stay FP32";
}

// The activations in 16 bits: f of the rounded input, rounded once; backward likewise. With
// |f'| <= 1 (ReLU, TanH) or 1/4 (Sigmoid), the output moves by at most u |x| + u |y|.
TEST_P(HalfLayers, ActivationsStayWithinItsFormatOfFp32) {
  NativeBackend native;
  const Half format = half_format(storage_of(GetParam()));
  const double unit = unit_of(format);
  const int64_t n = 1000;
  const std::vector<float> x = random_values(n, 7, -4, 4), dy = random_values(n, 8);
  std::vector<uint16_t> x16(n), dy16(n), y16(n), dx16(n);
  native.to_half(format, n, x.data(), x16.data());
  native.to_half(format, n, dy.data(), dy16.data());
  std::vector<float> y(n), dx(n), y_back(n), dx_back(n);
  for (Activation f : {Activation::kReLU, Activation::kSigmoid, Activation::kTanH}) {
    native.activation_forward(f, n, 0.0f, x.data(), y.data());
    native.activation_backward(f, n, 0.0f, y.data(), dy.data(), dx.data());
    native.activation_forward(format, f, n, 0.0f, x16.data(), y16.data());
    native.activation_backward(format, f, n, 0.0f, y16.data(), dy16.data(), dx16.data());
    native.from_half(format, n, y16.data(), y_back.data());
    native.from_half(format, n, dx16.data(), dx_back.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(y_back[i], y[i], unit * (std::abs(x[i]) + std::abs(y[i])) + 1e-7)
          << int(f) << " at " << i;
      // dx = dy g(y), |g| <= 1 and |g'| <= 2 on these outputs: the rounding of dy, of y
      // (through g), and of dx.
      ASSERT_NEAR(dx_back[i], dx[i],
                  unit * (std::abs(dy[i]) * (1 + 2 * (std::abs(y[i]) + std::abs(x[i]))) +
                           std::abs(dx[i])) + 1e-7)
          << int(f) << " at " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, HalfLayers, ::testing::Values(BF16, FP16),
                         [](const auto& info) { return Precision_Name(info.param); });

// The weights' 16-bit copy follows the FP32 weights however they change: forward refreshes it.
TEST(Bf16Net, TheWeightsCopyIsRefreshedBeforeEachForwardPass) {
  NativeBackend native;
  Net net(mlp(BF16), TRAIN, native, 1);
  net.blob("data").copy_data_from_host(random_values(8 * 24, 3));
  net.forward();
  ASSERT_NE(net.blob("ip1").copy_data_to_host(), std::vector<float>(8 * 16, 0.0f));
  net.arena().from_host(std::vector<float>(net.arena().count(), 0.0f), net.arena().data());
  net.forward();
  EXPECT_EQ(net.blob("ip1").copy_data_to_host(), std::vector<float>(8 * 16, 0.0f))
      << "zero weights and biases give zero outputs";
}

// Training: the update runs on the FP32 master weights; a BF16 step's loss and updated
// weights stay within BF16's precision of FP32's, and the net learns.
TEST(TrainingInBf16, MasterWeightsStayFp32AndTheNetTrains) {
  NativeBackend native;
  const SolverParameter sp = parse_solver_parameter("base_lr: 0.2 random_seed: 3", "solver");
  SolverParameter bf16_sp = sp;
  bf16_sp.set_precision(BF16);
  const NetParameter net = parse_net_parameter(testing::kSmallMlp, "net");
  Solver fp32(sp, net, native), bf16(bf16_sp, net, native);
  const std::vector<float> x = random_values(8 * 24, 13);
  const std::vector<float> labels = {0, 2, 1, 4, 3, 0, 1, 2};
  for (Solver* s : {&fp32, &bf16}) {
    s->net().blob("data").copy_data_from_host(x);
    s->net().blob("label").copy_data_from_host(labels);
  }
  fp32.step(1);
  bf16.step(1);
  // Scores within 2^-7 or so of FP32's (two layers of 2 u relative error on sums of a few
  // terms): the loss and the one-step update within 2%.
  const float loss32 = fp32.net().loss(), loss16 = bf16.net().loss();
  EXPECT_NE(loss32, loss16);
  EXPECT_NEAR(loss16, loss32, 0.02 * std::abs(loss32));
  const ParamArena& a = fp32.net().arena();
  const ParamArena& b = bf16.net().arena();
  const std::vector<float> wa(a.data(), a.data() + a.count()), wb(b.data(), b.data() + b.count());
  EXPECT_LE(testing::normalized_error(wa, wb), 0.02);
  EXPECT_NE(wb, rounded(wb)) << "the master weights are FP32, not BF16 values";
  bf16.step(60);
  EXPECT_LT(bf16.net().loss(), 0.3f * loss16) << "the BF16 net trains";
  // The update writes the weights' BF16 copy (forward no longer refreshes it): after the
  // last update it holds the rounded weights.
  EXPECT_EQ(testing::half_copy_mismatch(native, bf16.net().arena(), Half::kBF16), "");
}

// Weights written behind the solver's back (a program, a load) reach the BF16 copy at the
// next step() call: zero weights and biases give every class the same score, a loss of ln 5.
TEST(TrainingInBf16, WeightsWrittenBetweenStepsReachTheCopy) {
  NativeBackend native;
  SolverParameter sp = parse_solver_parameter("base_lr: 0.2 random_seed: 3", "solver");
  sp.set_precision(BF16);
  Solver solver(sp, parse_net_parameter(testing::kSmallMlp, "net"), native);
  solver.net().blob("data").copy_data_from_host(random_values(8 * 24, 13));
  solver.net().blob("label").copy_data_from_host({0, 2, 1, 4, 3, 0, 1, 2});
  solver.step(1);
  ASSERT_GT(std::abs(solver.net().loss() - std::log(5.0f)), 1e-2);
  ParamArena& arena = solver.net().arena();
  arena.from_host(std::vector<float>(arena.count(), 0.0f), arena.data());
  solver.step(1);
  EXPECT_NEAR(solver.net().loss(), std::log(5.0f), 1e-6);
}

}  // namespace
}  // namespace lamina
