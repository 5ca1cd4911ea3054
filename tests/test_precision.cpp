// Precisions on the CPU (precision.hpp, backend.hpp's Math): TF32 rounding bit for bit
// against an independent reference, the Native backend's TF32 products (FP32 products of the
// rounded operands, within TF32's bound of FP32), and how a precision is chosen (solver,
// Sequential container, layer, Split) and refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "forwarding_backend.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "lamina/rounding.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_config.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::Floats;
using testing::random_values;

uint32_t bits_of(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b;
}
float from_bits(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

// The reference: testing::reference_round with TF32's 10 mantissa bits and FP32's exponent
// range (a value past TF32's largest becomes infinity).
float reference_tf32(float x) {
  if (!std::isfinite(x)) return x;
  bool overflow = false;
  const double v = testing::reference_round(x, 10, -126, std::ldexp(1.0, 128), &overflow);
  if (overflow) return std::copysign(INFINITY, x);
  return std::copysign(static_cast<float>(v), x);
}

TEST(Tf32Rounding, HandPickedCases) {
  const float one = 1.0f, ulp = std::ldexp(1.0f, -10);  // TF32's spacing at 1
  EXPECT_EQ(round_to_tf32(one + ulp / 2), one) << "a tie goes to the even neighbour, 1";
  EXPECT_EQ(round_to_tf32(one + 3 * ulp / 2), one + 2 * ulp) << "a tie goes to 1 + 2 ulp";
  EXPECT_EQ(round_to_tf32(one + ulp / 2 + std::ldexp(1.0f, -23)), one + ulp) << "past half";
  EXPECT_EQ(round_to_tf32(-(one + 3 * ulp / 2)), -(one + 2 * ulp)) << "the sign is kept";
  EXPECT_EQ(bits_of(round_to_tf32(FLT_MAX)), 0x7f800000u) << "past the largest: infinity";
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0x7f7fefffu))), 0x7f7fe000u) << "the largest";
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0x00001000u))), 0u) << "subnormal tie to even 0";
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0x00003000u))), 0x00004000u) << "subnormal tie up";
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0x00001001u))), 0x00002000u) << "subnormal up";
  EXPECT_EQ(bits_of(round_to_tf32(-0.0f)), 0x80000000u);
  EXPECT_EQ(bits_of(round_to_tf32(-INFINITY)), 0xff800000u);
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0x7fc00001u))), 0x7fc00001u) << "NaN payload kept";
  EXPECT_EQ(bits_of(round_to_tf32(from_bits(0xff800001u))), 0xff800001u) << "NaN stays NaN";
}

TEST(Tf32Rounding, MatchesTheReferenceBitForBit) {
  auto check = [](uint32_t b) {
    const float x = from_bits(b);
    const float got = round_to_tf32(x), want = reference_tf32(x);
    if (bits_of(got) != bits_of(want)) {
      ADD_FAILURE() << std::hex << "x bits 0x" << b << ": got 0x" << bits_of(got) << ", want 0x"
                    << bits_of(want);
      return false;
    }
    return true;
  };
  // Every 4099th pattern (all exponents, both signs, NaNs and subnormals), then every low
  // 14-bit pattern (all ties and their neighbours) at a few exponents, then random ones.
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099)
    if (!check(uint32_t(b))) return;
  for (uint32_t high : {0x00000000u, 0x00800000u, 0x3f800000u, 0x7f7f0000u, 0xbf800000u})
    for (uint32_t low = 0; low < (1u << 14); ++low)
      if (!check(high | low)) return;
  std::mt19937 gen(7);
  for (int i = 0; i < 1000000; ++i)
    if (!check(uint32_t(gen()))) return;
}

// ---------------------------------------------------------------------------------------
// The Native backend's TF32 products

std::vector<float> rounded(std::vector<float> v) {
  for (float& x : v) x = round_to_tf32(x);
  return v;
}

void expect_same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_EQ(bits_of(a[i]), bits_of(b[i])) << "at " << i << ": " << a[i] << " vs " << b[i];
}

TEST(NativeTf32, GemmIsTheFp32GemmOfTheRoundedOperands) {
  NativeBackend native;
  // Large enough (over 2^15 elements per operand) for the rounding to run on the pool.
  const int64_t m = 190, n = 170, k = 200;
  const std::vector<float> a = random_values(m * k, 1), b = random_values(k * n, 2),
                           c0 = random_values(m * n, 3);
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      SCOPED_TRACE(std::to_string(int(ta)) + std::to_string(int(tb)));
      Floats c_tf32(native, c0), c_ref(native, c0);
      {
        MathScope tf32(native, Math::kTF32);
        native.gemm(ta, tb, m, n, k, 0.75f, a.data(), b.data(), 0.5f, c_tf32.get());
      }
      EXPECT_EQ(native.math(), Math::kFP32) << "the scope restores the math";
      const std::vector<float> ra = rounded(a), rb = rounded(b);
      native.gemm(ta, tb, m, n, k, 0.75f, ra.data(), rb.data(), 0.5f, c_ref.get());
      expect_same_bits(c_tf32.host(), c_ref.host());
    }
  }
}

// The error bound of a TF32 product against the exact one: each operand is off by at most
// half of TF32's spacing (2^-11 relative), so each term a b by at most 2^-10 + 2^-22 of |a b|,
// and the FP32 sum of k terms adds at most k 2^-24 of sum |a b|.
double tf32_bound(int64_t k, double sum_abs) {
  return (std::ldexp(1.0, -10) + std::ldexp(1.0, -22) + k * std::ldexp(1.0, -24)) * sum_abs;
}

TEST(NativeTf32, WithinTheBoundOfTheExactProductAndNotFp32s) {
  NativeBackend native;
  const int64_t m = 16, n = 16, k = 256;
  const std::vector<float> a = random_values(m * k, 4), b = random_values(k * n, 5);
  Floats c_tf32(native, m * n), c_fp32(native, m * n);
  native.gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1, a.data(), b.data(), 0, c_fp32.get());
  native.set_math(Math::kTF32);
  native.gemm(Transpose::kNo, Transpose::kNo, m, n, k, 1, a.data(), b.data(), 0, c_tf32.get());
  native.set_math(Math::kFP32);
  const std::vector<float> t = c_tf32.host(), f = c_fp32.host();
  int differ = 0;
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double exact = 0, sum_abs = 0;
      for (int64_t p = 0; p < k; ++p) {
        exact += double(a[i * k + p]) * b[p * n + j];
        sum_abs += std::abs(double(a[i * k + p]) * b[p * n + j]);
      }
      EXPECT_LE(std::abs(t[i * n + j] - exact), tf32_bound(k, sum_abs)) << i << "," << j;
      differ += t[i * n + j] != f[i * n + j];
    }
  }
  EXPECT_GT(differ, m * n / 2) << "TF32 rounds most products differently from FP32";
}

TEST(NativeTf32, LinearAndConvolutionRoundTheirOperands) {
  NativeBackend native;
  const int64_t rows = 5, n = 7, k = 40;
  const std::vector<float> x = random_values(rows * k, 6), w = random_values(n * k, 7),
                           bias = random_values(n, 8);
  Floats y(native, rows * n), y_ref(native, rows * n);
  native.set_math(Math::kTF32);
  native.linear_forward(rows, n, k, x.data(), w.data(), bias.data(), true, y.get());
  native.set_math(Math::kFP32);
  const std::vector<float> rx = rounded(x), rw = rounded(w);
  native.linear_forward(rows, n, k, rx.data(), rw.data(), bias.data(), true, y_ref.get());
  expect_same_bits(y.host(), y_ref.host());

  const ConvGeometry g = testing::conv_geometry(3, 4, 9, 8, 6, 3, 3, 1, 1, 1, 2);
  const int64_t xs = g.n * g.c * g.h * g.w, ws = g.k * (g.c / g.groups) * g.kh * g.kw,
                ys = g.n * g.k * g.out_h * g.out_w;
  const std::vector<float> cx = random_values(xs, 9), cw = random_values(ws, 10),
                           cb = random_values(g.k, 11), dy = random_values(ys, 12);
  const std::vector<float> rcx = rounded(cx), rcw = rounded(cw), rdy = rounded(dy);
  auto run = [&](Math math, const std::vector<float>& x_, const std::vector<float>& w_,
                 const std::vector<float>& dy_) {
    MathScope scope(native, math);
    Floats out(native, ys), dx(native, xs), dw(native, ws, 0.25f), db(native, g.k);
    native.conv_forward(g, x_.data(), w_.data(), cb.data(), out.get());
    native.conv_backward_data(g, w_.data(), dy_.data(), dx.get());
    native.conv_backward_filter(g, x_.data(), dy_.data(), dw.get(), db.get());
    return std::vector<std::vector<float>>{out.host(), dx.host(), dw.host(), db.host()};
  };
  const auto tf32 = run(Math::kTF32, cx, cw, dy), reference = run(Math::kFP32, rcx, rcw, rdy);
  for (size_t i = 0; i < 3; ++i) {  // y, dx, dweight: products
    SCOPED_TRACE("output " + std::to_string(i));
    expect_same_bits(tf32[i], reference[i]);
  }
  // The bias gradient is a sum of dy, not a product: FP32's, from dy as it is.
  expect_same_bits(tf32[3], run(Math::kFP32, cx, cw, dy)[3]);
}

// ---------------------------------------------------------------------------------------
// Choosing a precision

const char* kNet = R"(
name: "p"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "mlp" type: "Sequential" precision: TF32
  layer { name: "ip1" type: "Linear" inner_product_param { num_output: 5
          weight_filler { type: "gaussian" std: 0.7 } } }
  layer { name: "relu1" type: "ReLU" precision: FP32 }
}
layer { name: "ip2" type: "Linear"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.7 } } }
layer { name: "loss" type: "SoftmaxWithLoss" }
)";

std::vector<Math> maths(const Net& net) {
  std::vector<Math> out;
  for (int i = 0; i < net.num_layers(); ++i) out.push_back(net.layer_math(i));
  return out;
}

TEST(ChoosingPrecision, ContainersLayersAndTheSolverDefault) {
  NativeBackend native;
  const NetParameter param = parse_net_parameter(kNet, "net");
  const Net alone(param, TRAIN, native, 1);
  EXPECT_THAT(maths(alone), ElementsAre(Math::kFP32, Math::kTF32, Math::kFP32, Math::kFP32,
                                        Math::kFP32));
  NetParameter tf32 = param;
  set_default_precision(tf32, TF32);  // what the solver does with precision: TF32
  const Net net(tf32, TRAIN, native, 1);
  EXPECT_THAT(maths(net), ElementsAre(Math::kTF32, Math::kTF32, Math::kFP32, Math::kTF32,
                                      Math::kTF32));
  EXPECT_EQ(parse_precision("tf32", "--precision"), TF32);
  EXPECT_EQ(parse_precision("FP32", "--precision"), FP32);
  EXPECT_THAT(testing::error_of([] { parse_precision("tf-32", "--precision"); }),
              HasSubstr("--precision 'tf-32' is not a precision; give fp32, tf32, bf16 or "
                        "fp16"));
  EXPECT_EQ(parse_precision("fp16", "--precision"), FP16);
}

TEST(ChoosingPrecision, ASplitRunsInItsProducersPrecision) {
  NativeBackend native;
  Net net(parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "Linear" precision: TF32 inner_product_param { num_output: 2 } }
layer { name: "a" type: "ReLU" bottom: "ip" top: "a" }
layer { name: "b" type: "ReLU" bottom: "ip" top: "b" }
)", "net"), TRAIN, native, 1);
  ASSERT_EQ(net.layer(2).type(), std::string("Split"));
  EXPECT_EQ(net.layer_math(2), Math::kTF32);
}

TEST(ChoosingPrecision, LossScaleFieldsAreCheckedWhereTheyAreWritten) {
  testing::TempDir dir;
  const std::string solver =
      dir.write("solver.prototxt", "base_lr: 0.1\nprecision: FP16\nloss_scale: -2\n");
  auto check = [&] { check_solver_parameter(read_solver_parameter(solver), solver); };
  EXPECT_THAT(testing::error_of(check),
              HasSubstr(solver + ":3: loss_scale is -2; give the scale (at least 2^-24, "
                        "5.96e-08) FP16 training starts its loss gradient at (65536 when left "
                        "out)"));
  const std::string interval = dir.write(
      "interval.prototxt", "base_lr: 0.1\nprecision: FP16\nloss_scale_growth_interval: 0\n");
  auto check_interval = [&] {
    check_solver_parameter(read_solver_parameter(interval), interval);
  };
  EXPECT_THAT(testing::error_of(check_interval),
              HasSubstr(interval + ":3: loss_scale_growth_interval is 0; give the number (>= "
                        "1) of finite iterations in a row"));
}

// A backend whose products know only FP32: a TF32 layer is refused when the net is built.
class Fp32OnlyBackend : public testing::CoreForwardingBackend {
 public:
  bool supports_math(Math math) const override { return math == Math::kFP32; }
};

TEST(ChoosingPrecision, ABackendWithoutTf32RefusesTf32Layers) {
  Fp32OnlyBackend backend;
  EXPECT_THAT(testing::error_of([&] { Net(parse_net_parameter(kNet, "net"), TRAIN, backend, 1); }),
              HasSubstr("layer 'mlp/ip1' (Linear) runs in TF32, which the native backend does "
                        "not implement; train in FP32"));
}

// ---------------------------------------------------------------------------------------
// Training in TF32

TEST(TrainingInTf32, LayersStayWithinTf32OfFp32AndTrain) {
  NativeBackend native;
  const SolverParameter sp = parse_solver_parameter("base_lr: 0.2 random_seed: 3", "solver");
  SolverParameter tf32_sp = sp;
  tf32_sp.set_precision(TF32);
  NetParameter net = parse_net_parameter(kNet, "net");
  net.mutable_layer(1)->clear_precision();
  Solver fp32(sp, net, native), tf32(tf32_sp, net, native);
  EXPECT_EQ(tf32.net().layer_math(1), Math::kTF32);
  const std::vector<float> x = random_values(12, 13), labels = {0, 2, 1, 2};
  for (Solver* s : {&fp32, &tf32}) {
    s->net().blob("data").copy_data_from_host(x);
    s->net().blob("label").copy_data_from_host(labels);
  }
  fp32.step(1);
  tf32.step(1);
  // One step from the same weights: the loss, then the updated weights, within TF32's
  // relative precision (2^-10 per product; 3e-3 leaves room for the sums of a few terms).
  const float loss32 = fp32.net().loss(), loss_tf32 = tf32.net().loss();
  EXPECT_NE(loss32, loss_tf32) << "TF32 must change the products";
  EXPECT_NEAR(loss_tf32, loss32, 3e-3 * std::abs(loss32));
  const ParamArena& a = fp32.net().arena();
  const ParamArena& b = tf32.net().arena();
  EXPECT_LE(testing::normalized_error(std::vector<float>(a.data(), a.data() + a.count()),
                                      std::vector<float>(b.data(), b.data() + b.count())),
            3e-3);
  tf32.step(50);
  EXPECT_LT(tf32.net().loss(), 0.5f * loss_tf32) << "the TF32 net trains";
}

}  // namespace
}  // namespace lamina
