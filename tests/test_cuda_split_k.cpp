// Lamina's split-K FP32 product (src/backends/cuda/split_k_gemm.cu), one of the candidates an
// FP32 cuBLASLt plan times. A test makes every plan of its shape run it by handing the
// backend algorithm lines that name it ("= splitk", as a solver state would), then holds it
// to the Native backend's gemm and Linear forward: the MNIST MLP's products, shapes with one
// part and with the most parts, odd sizes that leave partial tiles, every transposition,
// beta (C not read when it is 0), the bias and the ReLU. The same bits come back run after
// run, after products of other shapes (each case's plan is made and timed, other shapes'
// products run in between, then the split-K kernel is forced), so the tile counters are back
// at zero between products.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

struct Shape {
  int64_t m, n, k;
};

class CudaSplitK : public ::testing::Test {
 protected:
  void SetUp() override {
    LAMINA_CUDA_BACKEND_OR_SKIP(backend);
    cuda_ = std::move(backend);
  }

  // Makes the FP32 plans whose lines start with prefix run the split-K kernel; returns how
  // many lines it named.
  int choose_split_k(const std::string& prefix) {
    std::istringstream in(cuda_->algorithm_choices());
    std::string heading, line, rewritten;
    std::getline(in, heading);
    int named = 0;
    while (std::getline(in, line)) {
      const size_t equals = line.find(" = ");
      // "... <math> <ab> <d> <sm_target> = ": FP32 math, FP32 operands and result, all SMs.
      if (line.rfind(prefix, 0) != 0 || equals == std::string::npos ||
          line.compare(equals - 8, 8, " 0 0 0 0") != 0)
        continue;
      rewritten += line.substr(0, equals + 3) + "splitk" +
                   line.substr(line.find(' ', equals + 3)) + "\n";
      ++named;
    }
    cuda_->reuse_algorithm_choices(heading + "\n" + rewritten);
    return named;
  }

  // Whether every FP32 line starting with prefix names the split-K kernel.
  bool runs_split_k(const std::string& prefix) const {
    std::istringstream in(cuda_->algorithm_choices());
    std::string line;
    int seen = 0;
    while (std::getline(in, line)) {
      if (line.rfind(prefix, 0) != 0 || line.find(" 0 0 0 0 = ") == std::string::npos) continue;
      ++seen;
      if (line.find(" = splitk ") == std::string::npos) return false;
    }
    return seen > 0;
  }

  NativeBackend native_;
  std::unique_ptr<Backend> cuda_;
};

// The row-major product C (m, n) = op(A) op(B) is cuBLASLt's column-major C^T = op(B)^T
// op(A)^T: "gemm <trans_b> <trans_a> <n> <m> <k> ".
std::string gemm_prefix(const GemmCase& s) {
  std::ostringstream out;
  out << "gemm " << (s.trans_b == Transpose::kYes) << ' ' << (s.trans_a == Transpose::kYes)
      << ' ' << s.n << ' ' << s.m << ' ' << s.k << ' ';
  return out.str();
}

TEST_F(CudaSplitK, GemmMatchesNativeInEveryTransposition) {
  const std::vector<std::array<int64_t, 3>> shapes = {
      {64, 512, 784}, {20, 512, 512}, {64, 10, 512},  {256, 512, 10}, {10, 512, 64},
      {512, 784, 20}, {37, 45, 133},  {1, 17, 9},     {37, 45, 1333}, {200, 300, 5000}};
  for_each_gemm_case(shapes, [&](const GemmCase& s) {
    // With beta 0, C is not read: on the GPU it starts as NaN.
    auto product = [&](Backend& be) {
      Floats a(be, random_values(s.m * s.k, 1)), b(be, random_values(s.k * s.n, 2));
      Floats c(be, s.beta == 0 && !be.is_host() ? std::vector<float>(s.m * s.n, std::nanf(""))
                                                : random_values(s.m * s.n, 3));
      be.gemm(s.trans_a, s.trans_b, s.m, s.n, s.k, 0.7f, a.get(), b.get(), s.beta, c.get());
      return c.host();
    };
    const std::vector<float> expected = product(native_);
    product(*cuda_);  // plans the shape
    const std::string prefix = gemm_prefix(s);
    ASSERT_GT(choose_split_k(prefix), 0) << cuda_->algorithm_choices();
    const std::vector<float> first = product(*cuda_);
    ASSERT_TRUE(runs_split_k(prefix)) << cuda_->algorithm_choices();
    EXPECT_EQ(compare(first, expected, 1e-5), "");
    EXPECT_EQ(compare_bits(product(*cuda_), first), "") << "not the same bits again";
  });
}

TEST_F(CudaSplitK, LinearForwardWithBiasAndReluMatchesNative) {
  // rows, n (outputs), k (inputs): the MNIST MLP's layers at batch 20 and 256, and odd ones.
  const Shape shapes[] = {{20, 512, 784}, {256, 512, 512}, {64, 10, 512}, {33, 70, 999}};
  for (const Shape& s : shapes) {
    for (bool relu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "rows " << s.m << " n " << s.n << " k " << s.k
                                        << " relu " << relu);
      auto forward = [&](Backend& be) {
        Floats x(be, random_values(s.m * s.k, 4)), w(be, random_values(s.n * s.k, 5));
        Floats bias(be, random_values(s.n, 6)), y(be, s.m * s.n);
        be.linear_forward(s.m, s.n, s.k, x.get(), w.get(), bias.get(), relu, y.get());
        return y.host();
      };
      const std::vector<float> expected = forward(native_);
      forward(*cuda_);
      std::ostringstream prefix;
      prefix << "gemm 1 0 " << s.n << ' ' << s.m << ' ' << s.k << ' ';
      ASSERT_GT(choose_split_k(prefix.str()), 0) << cuda_->algorithm_choices();
      const std::vector<float> first = forward(*cuda_);
      ASSERT_TRUE(runs_split_k(prefix.str())) << cuda_->algorithm_choices();
      EXPECT_EQ(compare(first, expected, 1e-5), "");
      if (relu) {
        int zeros = 0;
        for (float v : first) zeros += v == 0.0f;
        EXPECT_GT(zeros, 0) << "the ReLU left no zero";
      }
      EXPECT_EQ(compare_bits(forward(*cuda_), first), "");
    }
  }
}

TEST_F(CudaSplitK, NonFiniteValuesFollowTheReluLayersRule) {
  // A NaN or -inf pre-activation gives NaN, as the ReLU layer and the Native backend do; +inf
  // stays.
  const int64_t rows = 4, n = 3, k = 40;
  std::vector<float> x(rows * k, 0.25f), w(n * k, 1.0f);
  x[0 * k + 5] = std::numeric_limits<float>::quiet_NaN();
  x[1 * k + 7] = -std::numeric_limits<float>::infinity();
  x[2 * k + 9] = std::numeric_limits<float>::infinity();
  auto forward = [&](Backend& be) {
    Floats xs(be, x), ws(be, w), bias(be, std::vector<float>(n, -1.0f)), y(be, rows * n);
    be.linear_forward(rows, n, k, xs.get(), ws.get(), bias.get(), true, y.get());
    return y.host();
  };
  const std::vector<float> expected = forward(native_);
  forward(*cuda_);
  ASSERT_GT(choose_split_k("gemm 1 0 3 4 40 "), 0) << cuda_->algorithm_choices();
  const std::vector<float> got = forward(*cuda_);
  ASSERT_TRUE(runs_split_k("gemm 1 0 3 4 40 "));
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(std::isnan(got[i]), std::isnan(expected[i])) << i;
    if (!std::isnan(expected[i])) EXPECT_EQ(got[i], expected[i]) << i;
  }
  EXPECT_TRUE(std::isnan(got[0]) && std::isnan(got[n]));  // NaN and -inf rows
  EXPECT_EQ(got[2 * n], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[3 * n], 9.0f);  // 40 x 0.25 - 1
}

}  // namespace
}  // namespace lamina::testing
