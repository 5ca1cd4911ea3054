// The CUDA backend's 16-bit operations (backend.hpp, "16-bit storage") against the Native
// backend's (tier 2), in BF16 and in FP16: gemm with an FP32 and a 16-bit C, linear_forward,
// linear_bias_backward and the activations. Inputs are random values already in the format,
// so both backends start from the same exact operands. What each comparison allows:
//  - 16-bit sums (gemm, linear_forward): one unit in the last place (ulp) of the format.
//    Both backends round their FP32 sum once, to nearest even, but add it in different
//    orders (cuBLAS's tensor-core tiles, OpenBLAS's loops), so the two FP32 sums may differ
//    by a few FP32 ulps and round to neighbouring 16-bit values. Where a sum cancels (a
//    result far smaller than the sum of |terms|), that FP32 difference, at most fp32_bound,
//    can exceed an ulp of the small result: there fp32_bound plus an ulp is allowed. At
//    least 99% of the values must be the same: a difference of a few FP32 ulps crosses a
//    rounding boundary about 2^-16 (BF16) or 2^-13 (FP16) of the time.
//  - FP32 results (gemm's float C, the bias gradient): within fp32_bound.
//  - Sigmoid and TanH: one ulp, 99% the same (CUDA's expf and tanhf differ from the host's by
//    an FP32 ulp or two).
//  - ReLU, the empty product's beta C and linear_bias_backward's dz: the same values (a
//    select, and one FP32 multiplication, the same on both; +0 and -0 count as the same).
// Every test needs a GPU that supports the format and skips (with the reason) without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "half_compare.hpp"
#include "lamina/backend.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/rounding.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

struct Shape {
  int64_t m, n, k;
};
// Odd sizes (nothing aligned, cuBLASLt may refuse the fused Linear) and aligned ones.
// Odd, aligned, and narrow with a long sum (where cuBLAS splits sums it would keep in a
// 16-bit C's type).
const Shape kShapes[] = {{37, 19, 45}, {256, 512, 384}, {1024, 10, 4096}};

std::string describe(const Shape& s) {
  return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k);
}

class CudaHalfOps : public CudaHalfTest {};

// C (m, n) = alpha op(A) op(B) + beta C on `backend`, C of type T (float or 16-bit).
template <class T>
std::vector<T> run_gemm(Backend& backend, Half f, Transpose ta, Transpose tb, const Shape& s,
                        float alpha, const Bits& a, const Bits& b, float beta,
                        const std::vector<T>& c) {
  Halves da(backend, a), db(backend, b);
  Array<T> dc(backend, c);
  backend.gemm(f, ta, tb, s.m, s.n, s.k, alpha, da.get(), db.get(), beta, dc.get());
  return dc.host();
}

TEST_P(CudaHalfOps, GemmInEveryTranspositionWithFloatAnd16BitC) {
  const Half f = format();
  uint64_t seed = 1;
  for (const Shape& s : kShapes) {
    const Bits a = random_bits(f, s.m * s.k, seed++), b = random_bits(f, s.k * s.n, seed++);
    const std::vector<float> c_float = values(f, random_bits(f, s.m * s.n, seed++));
    const Bits c_half = to_bits(f, c_float);
    for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
      for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
        // beta 0 overwrites C; beta 1 accumulates into it (with alpha != 1).
        for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.75f, 1.0f}}) {
          SCOPED_TRACE(describe(s) + " ta " + std::to_string(int(ta)) + " tb " +
                       std::to_string(int(tb)) + " beta " + std::to_string(beta));
          // The sums of |terms|: |alpha| |A| |B| + |beta| |C|, in FP32 on the host.
          std::vector<float> sum_abs = absolute(c_float);
          native_.gemm(ta, tb, s.m, s.n, s.k, std::abs(alpha), absolute(values(f, a)).data(),
                       absolute(values(f, b)).data(), beta, sum_abs.data());
          const std::vector<double> bound = fp32_bounds(s.k + 2, sum_abs);

          const auto cuda_float = run_gemm(*cuda_, f, ta, tb, s, alpha, a, b, beta, c_float);
          expect_floats_close(cuda_float,
                              run_gemm(native_, f, ta, tb, s, alpha, a, b, beta, c_float), bound);
          const auto cuda_half = run_gemm(*cuda_, f, ta, tb, s, alpha, a, b, beta, c_half);
          expect_half_close(f, cuda_half,
                            run_gemm(native_, f, ta, tb, s, alpha, a, b, beta, c_half), bound);
          EXPECT_TRUE(cuda_half == run_gemm(*cuda_, f, ta, tb, s, alpha, a, b, beta, c_half))
              << "the same bits run to run";
        }
      }
    }
  }
}

// The cuBLASLt products' algorithm choices (lt_matmul.cu) in the text a solver state keeps:
// a "gemm ..." line per product, taken back by a later run instead of timing. The product
// then runs the candidate named, with Native's results; a choice naming no candidate, or
// made on another device, changes nothing.
TEST_P(CudaHalfOps, GemmAlgorithmChoicesAreTakenBack) {
  const Half f = format();
  const Shape s{192, 320, 448};  // no other test's
  const Bits a = random_bits(f, s.m * s.k, 40), b = random_bits(f, s.n * s.k, 41);
  const std::vector<float> zeros(s.m * s.n, 0.0f);
  auto product = [&](Backend& be) {
    return run_gemm(be, f, Transpose::kNo, Transpose::kYes, s, 1.0f, a, b, 0.0f, zeros);
  };
  std::vector<float> sum_abs(zeros);
  native_.gemm(Transpose::kNo, Transpose::kYes, s.m, s.n, s.k, 1.0f,
               absolute(values(f, a)).data(), absolute(values(f, b)).data(), 0.0f,
               sum_abs.data());
  const std::vector<double> bound = fp32_bounds(s.k, sum_abs);
  const std::vector<float> expected = product(native_);
  expect_floats_close(product(*cuda_), expected, bound);

  // C = A B^T, row-major, is column-major C^T = B A^T: "gemm 1 0 n m k <epilogue> <align>
  // <math> <A and B's cudaDataType_t: 14 BF16, 2 FP16> <D's: 0 FP32> <SM target: 0, all> =
  // <candidate> <fingerprint of the candidates>".
  const std::string key = "gemm 1 0 320 192 448 ";
  const std::string types = f == Half::kBF16 ? " 14 0 0 = " : " 2 0 0 = ";
  auto line_of_s = [&]() -> std::string {
    std::istringstream in(cuda_->algorithm_choices());
    std::string line;
    while (std::getline(in, line))
      if (line.rfind(key, 0) == 0 && line.find(types) != std::string::npos) return line;
    return "none";
  };
  const std::string chosen = line_of_s();
  ASSERT_NE(chosen, "none") << cuda_->algorithm_choices();
  const size_t equals = chosen.find(" = ");
  const std::string list = chosen.substr(chosen.find(' ', equals + 3));  // " <fingerprint>"
  const int other = std::stoi(chosen.substr(equals + 3)) == 0 ? 1 : 0;
  auto with_index = [&](int i) { return chosen.substr(0, equals + 3) + std::to_string(i) + list; };
  const std::string choices = cuda_->algorithm_choices();
  const std::string heading = choices.substr(0, choices.find('\n') + 1);

  cuda_->reuse_algorithm_choices("algorithms for another GPU\n" + with_index(other) + "\n");
  EXPECT_EQ(line_of_s(), chosen) << "a choice for another device was taken";
  cuda_->reuse_algorithm_choices(heading + with_index(other) + "\n");
  product(*cuda_);
  if (line_of_s() == chosen && other == 1)
    GTEST_SKIP() << "cuBLASLt offers one algorithm for this product on this GPU: " << chosen;
  EXPECT_EQ(line_of_s(), with_index(other));
  const std::vector<float> taken = product(*cuda_);
  expect_floats_close(taken, expected, bound);
  EXPECT_TRUE(taken == product(*cuda_)) << "the same bits run to run";
  // A candidate the product does not have, or a list of other candidates: timed anew.
  cuda_->reuse_algorithm_choices(heading + with_index(99) + "\n");
  expect_floats_close(product(*cuda_), expected, bound);
  EXPECT_NE(line_of_s().find(list), std::string::npos);
  EXPECT_EQ(line_of_s().find(" = 99 "), std::string::npos);
  const std::string foreign = chosen.substr(0, equals + 3) + std::to_string(other) + " 1234";
  cuda_->reuse_algorithm_choices(heading + foreign + "\n");
  expect_floats_close(product(*cuda_), expected, bound);
  EXPECT_NE(line_of_s().find(list), std::string::npos) << "a list of 1234 was taken";
}

// k = 0: C = beta C, each value rounded once; beta 0 does not read C (NaN there becomes 0).
TEST_P(CudaHalfOps, GemmOfAnEmptySumScalesC) {
  const Half f = format();
  const Shape s{37, 19, 0};
  const Bits c_half = random_bits(f, s.m * s.n, 11, -4, 4);
  const std::vector<float> c_float = random_values(s.m * s.n, 12, -4, 4);
  for (float beta : {0.0f, 1.0f, 0.3f}) {
    SCOPED_TRACE("beta " + std::to_string(beta));
    Bits half_in = c_half;
    std::vector<float> float_in = c_float;
    if (beta == 0) {
      half_in.assign(half_in.size(), f == Half::kBF16 ? 0x7fc0 : 0x7e00);
      float_in.assign(float_in.size(), NAN);
    }
    const Bits half_out = run_gemm(*cuda_, f, Transpose::kNo, Transpose::kNo, s, 1.0f, {}, {},
                                   beta, half_in);
    expect_same_values(f, half_out, run_gemm(native_, f, Transpose::kNo, Transpose::kNo, s, 1.0f,
                                             {}, {}, beta, half_in));
    if (beta == 1) EXPECT_TRUE(half_out == half_in);
    const std::vector<float> float_out = run_gemm(*cuda_, f, Transpose::kNo, Transpose::kNo, s,
                                                  1.0f, {}, {}, beta, float_in);
    EXPECT_TRUE(float_out == run_gemm(native_, f, Transpose::kNo, Transpose::kNo, s, 1.0f, {},
                                      {}, beta, float_in));
  }
}

// y (rows, n) = act(x (rows, k) W (n, k)^T + bias) on `backend`; bias empty: none.
Bits run_linear(Backend& backend, Half f, const Shape& s, const Bits& x, const Bits& w,
                const std::vector<float>& bias, bool relu) {
  Halves dx(backend, x), dw(backend, w), dy(backend, size_t(s.m * s.n), uint16_t{0x1234});
  Floats dbias(backend, bias);
  backend.linear_forward(f, s.m, s.n, s.k, dx.get(), dw.get(), bias.empty() ? nullptr : dbias.get(),
                         relu, dy.get());
  return dy.host();
}

TEST_P(CudaHalfOps, LinearForwardWithAndWithoutBiasAndRelu) {
  const Half f = format();
  uint64_t seed = 20;
  // The shapes above, and an empty product (y = act(bias)).
  for (const Shape& s : {kShapes[0], kShapes[1], Shape{37, 19, 0}}) {
    const Bits x = random_bits(f, s.m * s.k, seed++), w = random_bits(f, s.n * s.k, seed++);
    const std::vector<float> bias = random_values(s.n, seed++);  // FP32, not rounded
    for (bool with_bias : {false, true}) {
      for (bool relu : {false, true}) {
        SCOPED_TRACE(describe(s) + (with_bias ? " bias" : "") + (relu ? " relu" : ""));
        const std::vector<float> b = with_bias ? bias : std::vector<float>{};
        std::vector<float> sum_abs(size_t(s.m * s.n));
        native_.linear_forward(s.m, s.n, s.k, absolute(values(f, x)).data(),
                               absolute(values(f, w)).data(),
                               with_bias ? absolute(bias).data() : nullptr, false,
                               sum_abs.data());
        const Bits cuda = run_linear(*cuda_, f, s, x, w, b, relu);
        expect_half_close(f, cuda, run_linear(native_, f, s, x, w, b, relu),
                          fp32_bounds(s.k + 1, sum_abs));
        EXPECT_TRUE(cuda == run_linear(*cuda_, f, s, x, w, b, relu)) << "the same bits run to run";
      }
    }
  }
}

// The FP32 bias is added to the FP32 product before y's one rounding, not rounded first:
// with every product exactly 1 and bias = half an ulp of 1 plus a little (exact in FP32, but
// half an ulp once rounded to the format), y must round up to the value after 1; a bias
// rounded to 16 bits first would make it a tie, rounded to 1 itself.
TEST_P(CudaHalfOps, LinearForwardAddsTheFloatBiasBeforeTheOneRounding) {
  const Half f = format();
  const double half_ulp = std::ldexp(1.0, -mantissa_bits(f) - 1);
  const float bias_value = float(half_ulp + std::ldexp(half_ulp, -12));
  const uint16_t one = bits_of(f, 1.0f), after_one = uint16_t(one + 1);
  ASSERT_EQ(value_of(f, bits_of(f, bias_value)), float(half_ulp)) << "the bias rounds to a tie";
  for (const Shape& s : {Shape{64, 64, 64}, kShapes[0]}) {
    Bits x(size_t(s.m * s.k), 0), w(size_t(s.n * s.k), 0);
    for (int64_t r = 0; r < s.m; ++r) x[size_t(r * s.k)] = one;  // x[r][0] = 1
    for (int64_t j = 0; j < s.n; ++j) w[size_t(j * s.k)] = one;  // W[j][0] = 1
    const std::vector<float> bias(size_t(s.n), bias_value);
    for (bool relu : {false, true}) {
      SCOPED_TRACE(describe(s) + (relu ? " relu" : ""));
      const Bits want(size_t(s.m * s.n), after_one);
      EXPECT_TRUE(run_linear(*cuda_, f, s, x, w, bias, relu) == want);
      EXPECT_TRUE(run_linear(native_, f, s, x, w, bias, relu) == want);
    }
  }
}

TEST_P(CudaHalfOps, LinearBiasBackwardIsExactAndSumsInFloat) {
  const Half f = format();
  uint64_t seed = 40;
  // kShapes, then rows split into parts of 128 with a part left over, and more rows than
  // 65535 parts of 128 (linear_bias_backward.cu).
  for (const Shape& s : {kShapes[0], kShapes[1], kShapes[2], Shape{300, 70, 0},
                         Shape{65535 * 128 + 1, 1, 0}}) {
    const int64_t count = s.m * s.n;
    Bits y = random_bits(f, count, seed++);
    for (int64_t i = 0; i < count; i += 7) y[size_t(i)] = 0;  // ReLU outputs: some exactly 0
    const Bits dy = random_bits(f, count, seed++);
    const std::vector<float> db0 = random_values(s.n, seed++);
    for (bool with_y : {false, true}) {
      SCOPED_TRACE(describe(s) + (with_y ? " with y" : " without y"));
      // in_place: dz is dy (as after a ReLU that works in place).
      auto run = [&](Backend& backend, bool in_place, Bits* dz) {
        Halves dy_d(backend, dy), y_d(backend, y), dz_d(backend, size_t(count), uint16_t{0x1234});
        Floats db(backend, db0);
        backend.linear_bias_backward(f, s.m, s.n, with_y ? y_d.get() : nullptr, dy_d.get(),
                                     in_place ? dy_d.get() : dz_d.get(), db.get());
        *dz = in_place ? dy_d.host() : dz_d.host();
        return db.host();
      };
      Bits cuda_dz, native_dz, in_place_dz;
      const std::vector<float> cuda_db = run(*cuda_, false, &cuda_dz);
      const std::vector<float> native_db = run(native_, false, &native_dz);
      EXPECT_TRUE(cuda_dz == native_dz) << "dz bit for bit";
      if (with_y) {
        EXPECT_TRUE(run(*cuda_, true, &in_place_dz) == cuda_db) << "in place";
        EXPECT_TRUE(in_place_dz == cuda_dz) << "in place";
      }
      if (!with_y) EXPECT_TRUE(cuda_dz == Bits(size_t(count), 0x1234)) << "dz is not written";
      // db[c] += the column sums of dz: rows terms and db's own value.
      std::vector<float> sum_abs = absolute(db0);
      const std::vector<float> dz_abs = absolute(values(f, with_y ? cuda_dz : dy));
      for (int64_t i = 0; i < count; ++i) sum_abs[size_t(i % s.n)] += dz_abs[size_t(i)];
      expect_floats_close(cuda_db, native_db, fp32_bounds(s.m + 1, sum_abs));
    }
  }
}

struct ActivationCase {
  Activation f;
  float slope;
  const char* name;
};
const ActivationCase kActivations[] = {{Activation::kReLU, 0.0f, "ReLU"},
                                       {Activation::kReLU, 0.1f, "leaky ReLU"},
                                       {Activation::kSigmoid, 0.0f, "Sigmoid"},
                                       {Activation::kTanH, 0.0f, "TanH"}};

TEST_P(CudaHalfOps, ActivationsForwardAndBackwardAlsoInPlace) {
  const Half f = format();
  const int64_t n = 100003;
  const Bits x = random_bits(f, n, 60, -4, 4), dy = random_bits(f, n, 61);
  for (const ActivationCase& a : kActivations) {
    SCOPED_TRACE(a.name);
    auto forward = [&](Backend& backend, bool in_place) {
      Halves xd(backend, x), yd(backend, size_t(n));
      backend.activation_forward(f, a.f, n, a.slope, xd.get(), in_place ? xd.get() : yd.get());
      return in_place ? xd.host() : yd.host();
    };
    const Bits y = forward(*cuda_, false), native_y = forward(native_, false);
    if (a.f == Activation::kReLU) {
      expect_same_values(f, y, native_y);
    } else {
      expect_half_close(f, y, native_y);
    }
    EXPECT_TRUE(forward(*cuda_, true) == y) << "in place";

    // Backward from Native's output, so both start from the same y.
    auto backward = [&](Backend& backend, bool in_place) {
      Halves yd(backend, native_y), dyd(backend, dy), dxd(backend, size_t(n));
      backend.activation_backward(f, a.f, n, a.slope, yd.get(), dyd.get(),
                                  in_place ? dyd.get() : dxd.get());
      return in_place ? dyd.host() : dxd.host();
    };
    const Bits dx = backward(*cuda_, false), native_dx = backward(native_, false);
    if (a.f == Activation::kReLU) {
      EXPECT_TRUE(dx == native_dx) << "ReLU's backward bit for bit";
    } else {
      expect_half_close(f, dx, native_dx);
    }
    EXPECT_TRUE(backward(*cuda_, true) == dx) << "in place";
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaHalfOps, ::testing::Values(Half::kBF16, Half::kFP16),
                         [](const ::testing::TestParamInfo<Half>& info) {
                           return std::string(format_name(info.param));
                         });

}  // namespace
}  // namespace lamina::testing
