// NativeBackend, operation by operation, against straightforward reference loops evaluated
// in double inside the test (the semantics are the comments in backend.hpp). Inputs are
// random, non-zero, of odd sizes; elementwise operations also run on 100003 elements so the
// thread pool's path is exercised (on three threads), and in place. NativeBackend memory is host memory, so the tests
// pass std::vector storage directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <stdlib.h>

#include "forwarding_backend.hpp"
#include "lamina/common.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/solver_config.hpp"
#include "test_util.hpp"
#include "update_layouts.hpp"

namespace lamina {
namespace {

using testing::compare;
using testing::error_of;
using testing::random_values;

// The thread pool is created on first use with LAMINA_NUM_THREADS threads, else with the
// cores OpenBLAS leaves free, which can be none (the loops then run on the calling thread).
// Three threads unless the environment says otherwise, so the parallel paths are exercised.
const bool kPoolThreadsSet = setenv("LAMINA_NUM_THREADS", "3", /*overwrite=*/0) == 0;

// actual agrees with expected to tol (normalised error); else the first differences.
::testing::AssertionResult matches(const std::vector<float>& actual,
                                   const std::vector<float>& expected, double tol) {
  const std::string mismatch = compare(actual, expected, tol);
  if (mismatch.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << mismatch;
}
#define EXPECT_MATCH(actual, expected, tol) EXPECT_TRUE(matches((actual), (expected), (tol)))

std::vector<float> to_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

// Class indices in [0, cols), stored as floats.
std::vector<float> random_labels(int64_t rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> dist(0, cols - 1);
  std::vector<float> labels(rows);
  for (auto& l : labels) l = static_cast<float>(dist(rng));
  return labels;
}

// Relative closeness of two scalars.
void expect_scalar_near(double actual, double expected, double rel_tol) {
  EXPECT_NEAR(actual, expected, rel_tol * std::max(1.0, std::abs(expected)));
}

class NativeBackendTest : public ::testing::Test {
 protected:
  NativeBackend backend_;
};

// ---------------------------------------------------------------------------------------
// Memory
// ---------------------------------------------------------------------------------------

TEST_F(NativeBackendTest, MemoryIsAlignedAndCopies) {
  const int64_t n = 1001;
  const size_t bytes = sizeof(float) * n;
  auto* a = static_cast<float*>(backend_.allocate(bytes));
  auto* b = static_cast<float*>(backend_.allocate(bytes + 3));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a) % 64, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b) % 64, 0u);

  backend_.fill(n, 2.5f, a);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 2.5f) << "fill, element " << i;
  backend_.zero(bytes, a);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], 0.0f) << "zero, element " << i;

  const std::vector<float> source = random_values(n, 1);
  backend_.copy_from_host(bytes, source.data(), a);
  backend_.copy(bytes, a, b);
  std::vector<float> back(n, 0.0f);
  backend_.copy_to_host(bytes, b, back.data());
  EXPECT_EQ(back, source);

  EXPECT_TRUE(backend_.is_host());
  EXPECT_EQ(backend_.name(), "native");
  backend_.deallocate(a);
  backend_.deallocate(b);
}

// The test decorator that counts transfers: copies to and from the host, never the
// operations that stay in backend memory.
TEST(CountingBackend, CountsCopiesButNotOperations) {
  NativeBackend native;
  testing::CountingBackend be(native);
  EXPECT_EQ(be.name(), "native");
  const int64_t n = 100;
  const std::vector<float> x = random_values(n, 1);
  std::vector<float> a(n), b(n, 1.0f), back(n);
  float result = 0;
  be.copy_from_host(sizeof(float) * n, x.data(), a.data());
  be.axpy(n, 2.0f, a.data(), b.data());
  be.dot(n, a.data(), b.data(), &result);
  be.synchronize();
  EXPECT_EQ(be.transfers().from_host, 1);
  EXPECT_EQ(be.transfers().to_host, 0);
  EXPECT_EQ(be.transfers().bytes, int64_t(sizeof(float)) * n);

  be.copy_to_host(sizeof(float) * n, b.data(), back.data());
  EXPECT_EQ(be.transfers().from_host, 1);
  EXPECT_EQ(be.transfers().to_host, 1);
  EXPECT_EQ(be.transfers().bytes, int64_t(sizeof(float)) * 2 * n);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(back[i], 2.0f * x[i] + 1.0f) << i;
}

TEST_F(NativeBackendTest, FillTakesTheParallelPath) {
  std::vector<float> x(100003, -1.0f);
  backend_.fill(static_cast<int64_t>(x.size()), 0.25f, x.data());
  EXPECT_EQ(std::count(x.begin(), x.end(), 0.25f), static_cast<int64_t>(x.size()));
}

TEST_F(NativeBackendTest, AllocationFailureThrowsWithTheByteCount) {
  const size_t bytes = std::numeric_limits<size_t>::max() / 2 + 1;  // beyond PTRDIFF_MAX
  try {
    backend_.allocate(bytes);
    FAIL() << "allocating " << bytes << " bytes did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(bytes)), std::string::npos) << e.what();
  }
}

// ---------------------------------------------------------------------------------------
// Optional operations
// ---------------------------------------------------------------------------------------

constexpr Operation kOptional[] = {Operation::kConvolution,   Operation::kPooling,
                                   Operation::kBatchNorm,     Operation::kChannelAffine,
                                   Operation::kRowCopy,       Operation::kEltwiseMax,
                                   Operation::kBatchNormScale};

TEST_F(NativeBackendTest, SupportsEveryOptionalOperation) {
  for (Operation op : kOptional) EXPECT_TRUE(backend_.supports(op)) << operation_name(op);
}

// What a new backend starts as: memory, BLAS, the MLP operations and the update, nothing else.
class MinimalBackend final : public testing::CoreForwardingBackend {
 public:
  std::string name() const override { return "minimal"; }
};

TEST(MinimalBackend, OptionalOperationsAreUnsupportedAndThrowNamingBackendAndOperation) {
  MinimalBackend be;
  for (Operation op : kOptional) EXPECT_FALSE(be.supports(op)) << operation_name(op);
  std::vector<float> f(64, 1.0f);
  std::vector<int32_t> mask(64, 0);
  float* p = f.data();
  const ConvGeometry conv{1, 1, 2, 2, 1, 1, 1, 1, 1, 0, 0, 1, 1, 1, 2, 2};
  const PoolGeometry pool{1, 1, 2, 2, 1, 1, 1, 1, 0, 0, 2, 2};
  const std::pair<Operation, std::function<void()>> calls[] = {
      {Operation::kConvolution, [&] { be.conv_forward(conv, p, p, p, p); }},
      {Operation::kConvolution, [&] { be.conv_backward_data(conv, p, p, p); }},
      {Operation::kConvolution, [&] { be.conv_backward_filter(conv, p, p, p, p); }},
      {Operation::kPooling, [&] { be.pool_forward(PoolMethod::kMax, pool, p, p, mask.data()); }},
      {Operation::kPooling,
       [&] { be.pool_backward(PoolMethod::kMax, pool, p, mask.data(), p); }},
      {Operation::kBatchNorm, [&] { be.channel_moments(1, 2, 2, p, p, p); }},
      {Operation::kBatchNorm, [&] { be.batch_norm_forward(1, 2, 2, 1e-5f, p, p, p, p, p, p); }},
      {Operation::kBatchNorm, [&] { be.batch_norm_backward(1, 2, 2, p, p, p, p); }},
      {Operation::kChannelAffine, [&] { be.channel_affine(1, 2, 2, p, p, p, p); }},
      {Operation::kChannelAffine, [&] { be.channel_reduce(1, 2, 2, p, p, p); }},
      {Operation::kRowCopy, [&] { be.copy_rows(2, 2, p, 2, p + 8, 2); }},
      {Operation::kEltwiseMax, [&] { be.eltwise_max_forward(4, 1, p, p, mask.data()); }},
      {Operation::kEltwiseMax, [&] { be.eltwise_max_backward(4, 1, p, mask.data(), p); }},
      {Operation::kBatchNormScale,
       [&] { be.batch_norm_scale_forward(1, 2, 2, 1e-5f, p, p, p, p, p, false, p, p, p + 8); }},
      {Operation::kBatchNormScale,
       [&] { be.batch_norm_scale_sums(1, 2, 2, p, p, p, p, false, p, nullptr, nullptr); }},
      {Operation::kBatchNormScale,
       [&] { be.batch_norm_scale_backward(1, 2, 2, p, p, p, p, p, false, p, p); }},
  };
  for (const auto& [op, call] : calls) {
    const std::string message = error_of(call);
    EXPECT_NE(message.find("the minimal backend does not implement " +
                           std::string(operation_name(op))),
              std::string::npos)
        << message;
  }
  EXPECT_EQ(f, std::vector<float>(64, 1.0f)) << "an unsupported operation wrote its output";
}

// An MLP needs nothing optional: the same losses and gradients as on Native; a layer that
// needs an optional operation is refused when the net is built.
TEST(MinimalBackend, RunsAnMlpAndRefusesALayerNeedingAnOptionalOperation) {
  const NetParameter mlp = parse_net_parameter(R"(
    layer { name: "in" type: "Input" top: "x" top: "label"
            input_param { shape { dim: 8 dim: 5 } shape { dim: 8 } } }
    layer { name: "fc1" type: "Linear" bottom: "x" top: "h"
            inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
    layer { name: "drop" type: "Dropout" bottom: "h" top: "h" }
    layer { name: "fc2" type: "Linear" bottom: "h" top: "y"
            inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "loss" }
    layer { name: "acc" type: "Accuracy" bottom: "y" bottom: "label" top: "acc" })",
                                               "mlp.prototxt");
  const std::vector<float> x = random_values(40, 1);
  const std::vector<float> labels = {0, 1, 2, 0, 1, 2, 0, 1};
  auto run = [&](Backend& be) {
    Net net(mlp, TRAIN, be, 7);
    net.blob("x").copy_data_from_host(x);
    net.blob("label").copy_data_from_host(labels);
    net.arena().zero_diff();
    net.forward();
    net.backward();
    std::vector<float> out = net.arena().to_host(net.arena().diff());  // every gradient
    out.push_back(net.loss());
    return out;
  };
  NativeBackend native;
  MinimalBackend minimal;
  EXPECT_EQ(run(minimal), run(native));

  const NetParameter concat = parse_net_parameter(R"(
    layer { name: "in" type: "Input" top: "a" top: "b"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 4 } } }
    layer { name: "join" type: "Concat" bottom: "a" bottom: "b" top: "ab" })", "concat.prototxt");
  const std::string message = error_of([&] { Net net(concat, TRAIN, minimal, 1); });
  EXPECT_NE(message.find("layer 'join' (Concat) needs strided row copies"), std::string::npos)
      << message;
}

// ---------------------------------------------------------------------------------------
// BLAS
// ---------------------------------------------------------------------------------------

class GemmTest : public NativeBackendTest,
                 public ::testing::WithParamInterface<std::tuple<Transpose, Transpose>> {};

TEST_P(GemmTest, MatchesReference) {
  const auto [trans_a, trans_b] = GetParam();
  const int64_t m = 37, n = 53, k = 29;
  const float alpha = 0.7f, beta = -0.3f;
  const auto a = random_values(m * k, 2);  // (m, k), or (k, m) when transposed
  const auto b = random_values(k * n, 3);  // (k, n), or (n, k) when transposed
  auto c = random_values(m * n, 4);        // (m, n)
  std::vector<double> expected(m * n);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = trans_a == Transpose::kNo ? a[i * k + p] : a[p * m + i];
        const double bv = trans_b == Transpose::kNo ? b[p * n + j] : b[j * k + p];
        sum += av * bv;
      }
      expected[i * n + j] = alpha * sum + double(beta) * c[i * n + j];
    }
  }
  backend_.gemm(trans_a, trans_b, m, n, k, alpha, a.data(), b.data(), beta, c.data());
  EXPECT_MATCH(c, to_float(expected), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(
    AllTransposes, GemmTest,
    ::testing::Combine(::testing::Values(Transpose::kNo, Transpose::kYes),
                       ::testing::Values(Transpose::kNo, Transpose::kYes)),
    [](const auto& info) {
      return std::string(std::get<0>(info.param) == Transpose::kNo ? "N" : "T") +
             (std::get<1>(info.param) == Transpose::kNo ? "N" : "T");
    });

// The fused Linear against its definition, computed here in double: small (one thread) and
// large enough for the thread pool (each column's sum still runs over the rows in order).
TEST_F(NativeBackendTest, LinearForwardAndBiasBackwardMatchTheirDefinition) {
  for (const auto [rows, n, k] : {std::tuple<int64_t, int64_t, int64_t>{3, 5, 4}, {100, 700, 9}}) {
    SCOPED_TRACE(::testing::Message() << rows << "x" << n << "x" << k);
    const std::vector<float> x = random_values(rows * k, 1), w = random_values(n * k, 2),
                             bias = random_values(n, 3), dy = random_values(rows * n, 4),
                             db0 = random_values(n, 5);
    for (bool relu : {false, true}) {
      std::vector<float> y(rows * n, 9.0f);
      backend_.linear_forward(rows, n, k, x.data(), w.data(), bias.data(), relu, y.data());
      std::vector<float> dz(rows * n, 9.0f), db = db0;
      backend_.linear_bias_backward(rows, n, relu ? y.data() : nullptr, dy.data(),
                                    relu ? dz.data() : nullptr, db.data());
      std::vector<double> sums(n, 0.0);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t j = 0; j < n; ++j) {
          double z = bias[j];
          for (int64_t i = 0; i < k; ++i) z += double(x[r * k + i]) * w[j * k + i];
          const double expected = relu ? std::max(z, 0.0) : z;
          ASSERT_NEAR(y[r * n + j], expected, 1e-5) << "y " << r << ", " << j;
          const float g = relu && !(y[r * n + j] > 0) ? 0.0f : dy[r * n + j];
          if (relu) ASSERT_EQ(dz[r * n + j], g) << "dz " << r << ", " << j;
          sums[j] += g;
        }
      }
      for (int64_t j = 0; j < n; ++j) ASSERT_NEAR(db[j], db0[j] + sums[j], 1e-4) << "db " << j;
      if (!relu) EXPECT_EQ(dz, std::vector<float>(rows * n, 9.0f)) << "dz is not written";
    }
  }
}

TEST_F(NativeBackendTest, GemmWithZeroBetaIgnoresOldC) {
  const int64_t m = 5, n = 3, k = 7;
  const auto a = random_values(m * k, 5);
  const auto b = random_values(k * n, 6);
  std::vector<float> c(m * n, std::numeric_limits<float>::quiet_NaN());
  std::vector<double> expected(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) expected[i * n + j] += 2.0 * a[i * k + p] * b[p * n + j];
  backend_.gemm(Transpose::kNo, Transpose::kNo, m, n, k, 2.0f, a.data(), b.data(), 0.0f,
                c.data());
  EXPECT_MATCH(c, to_float(expected), 1e-5);
}

TEST_F(NativeBackendTest, GemmWithEmptyInnerDimensionScalesC) {
  auto c = random_values(6, 7);
  std::vector<float> expected(c.size());
  for (size_t i = 0; i < c.size(); ++i) expected[i] = 0.5f * c[i];
  backend_.gemm(Transpose::kNo, Transpose::kNo, 2, 3, 0, 1.0f, nullptr, nullptr, 0.5f, c.data());
  EXPECT_EQ(c, expected);
}

TEST_F(NativeBackendTest, GemvBothWays) {
  const int64_t m = 37, n = 53;
  const float alpha = 1.3f, beta = 0.4f;
  const auto a = random_values(m * n, 8);  // (m, n)
  for (Transpose trans : {Transpose::kNo, Transpose::kYes}) {
    SCOPED_TRACE(trans == Transpose::kNo ? "A x" : "A^T x");
    const int64_t out = trans == Transpose::kNo ? m : n;
    const int64_t in = trans == Transpose::kNo ? n : m;
    const auto x = random_values(in, 9);
    auto y = random_values(out, 10);
    std::vector<double> expected(out);
    for (int64_t i = 0; i < out; ++i) {
      double sum = 0;
      for (int64_t j = 0; j < in; ++j) {
        sum += double(trans == Transpose::kNo ? a[i * n + j] : a[j * n + i]) * x[j];
      }
      expected[i] = alpha * sum + double(beta) * y[i];
    }
    backend_.gemv(trans, m, n, alpha, a.data(), x.data(), beta, y.data());
    EXPECT_MATCH(y, to_float(expected), 1e-5);
  }
}

TEST_F(NativeBackendTest, LevelOneOperations) {
  for (int64_t n : {int64_t{1001}, int64_t{100003}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = random_values(n, 11);
    const auto y0 = random_values(n, 12);
    std::vector<double> expected(n);

    auto y = y0;
    backend_.axpy(n, 0.75f, x.data(), y.data());
    for (int64_t i = 0; i < n; ++i) expected[i] = 0.75 * x[i] + y0[i];
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "axpy";

    y = y0;
    backend_.axpby(n, 0.75f, x.data(), -1.25f, y.data());
    for (int64_t i = 0; i < n; ++i) expected[i] = 0.75 * x[i] - 1.25 * y0[i];
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "axpby";

    y = y0;
    backend_.scal(n, -2.5f, y.data());
    for (int64_t i = 0; i < n; ++i) expected[i] = -2.5 * y0[i];
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "scal";

    y = y0;
    backend_.mul(n, x.data(), y0.data(), y.data());
    for (int64_t i = 0; i < n; ++i) expected[i] = double(x[i]) * y0[i];
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "mul";
    y = y0;
    backend_.mul(n, x.data(), y.data(), y.data());  // in place
    EXPECT_MATCH(y, to_float(expected), 1e-6) << "mul in place";

    double dot = 0, dot_abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      dot += double(x[i]) * y0[i];
      dot_abs += std::abs(double(x[i]) * y0[i]);
    }
    // Accumulated in double and rounded once: within one float rounding of the sum.
    float result = std::nanf("");
    backend_.dot(n, x.data(), y0.data(), &result);
    EXPECT_NEAR(result, dot, 1e-7 * dot_abs) << "dot";
  }
}

// ---------------------------------------------------------------------------------------
// Activations
// ---------------------------------------------------------------------------------------

struct ActivationCase {
  Activation f;
  float negative_slope;
  const char* name;
};

class ActivationTest : public NativeBackendTest,
                       public ::testing::WithParamInterface<ActivationCase> {};

// f(x) and f'(x) in double, from the input x.
double reference_forward(const ActivationCase& c, double x) {
  switch (c.f) {
    case Activation::kReLU: return x > 0 ? x : c.negative_slope * x;
    case Activation::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case Activation::kTanH: return std::tanh(x);
  }
  return 0;
}

double reference_derivative(const ActivationCase& c, double x) {
  switch (c.f) {
    case Activation::kReLU: return x > 0 ? 1.0 : c.negative_slope;
    case Activation::kSigmoid: {
      const double s = 1.0 / (1.0 + std::exp(-x));
      return s * (1 - s);
    }
    case Activation::kTanH: return 1 - std::tanh(x) * std::tanh(x);
  }
  return 0;
}

TEST_P(ActivationTest, ForwardAndBackwardMatchReference) {
  const ActivationCase& c = GetParam();
  for (int64_t n : {int64_t{37 * 53}, int64_t{100003}}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const auto x = random_values(n, 13, -3, 3);
    const auto dy = random_values(n, 14);
    std::vector<double> expected_y(n), expected_dx(n);
    for (int64_t i = 0; i < n; ++i) {
      expected_y[i] = reference_forward(c, x[i]);
      expected_dx[i] = dy[i] * reference_derivative(c, x[i]);
    }

    std::vector<float> y(n);
    backend_.activation_forward(c.f, n, c.negative_slope, x.data(), y.data());
    EXPECT_MATCH(y, to_float(expected_y), 1e-6) << "forward";
    auto in_place = x;
    backend_.activation_forward(c.f, n, c.negative_slope, in_place.data(), in_place.data());
    EXPECT_EQ(in_place, y) << "forward in place";

    std::vector<float> dx(n);
    backend_.activation_backward(c.f, n, c.negative_slope, y.data(), dy.data(), dx.data());
    EXPECT_MATCH(dx, to_float(expected_dx), 1e-5) << "backward";
    auto grad_in_place = dy;
    backend_.activation_backward(c.f, n, c.negative_slope, in_place.data(),
                                 grad_in_place.data(), grad_in_place.data());
    EXPECT_EQ(grad_in_place, dx) << "backward in place";
  }
}

INSTANTIATE_TEST_SUITE_P(AllFunctions, ActivationTest,
                         ::testing::Values(ActivationCase{Activation::kReLU, 0.0f, "ReLU"},
                                           ActivationCase{Activation::kReLU, 0.1f, "LeakyReLU"},
                                           ActivationCase{Activation::kSigmoid, 0.1f, "Sigmoid"},
                                           ActivationCase{Activation::kTanH, 0.1f, "TanH"}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------
// Softmax
// ---------------------------------------------------------------------------------------

// Random scores (rows, cols) in [-5, 5], with row 3 around 1000 and row 5 all equal to 1000.
std::vector<float> softmax_inputs(int64_t rows, int64_t cols, uint64_t seed) {
  auto x = random_values(rows * cols, seed, -5, 5);
  for (int64_t j = 0; j < cols; ++j) {
    x[3 * cols + j] = 1000.0f + 0.5f * static_cast<float>(j % 7);
    x[5 * cols + j] = 1000.0f;
  }
  return x;
}

// Row-wise softmax or log-softmax in double, max subtracted.
std::vector<double> reference_softmax(int64_t rows, int64_t cols, bool log,
                                      const std::vector<float>& x) {
  std::vector<double> y(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.data() + r * cols;
    const double max = *std::max_element(xr, xr + cols);
    double sum = 0;
    for (int64_t j = 0; j < cols; ++j) sum += std::exp(xr[j] - max);
    for (int64_t j = 0; j < cols; ++j) {
      y[r * cols + j] = log ? xr[j] - max - std::log(sum) : std::exp(xr[j] - max) / sum;
    }
  }
  return y;
}

TEST_F(NativeBackendTest, SoftmaxForwardAndBackward) {
  const int64_t rows = 37, cols = 53;
  const auto x = softmax_inputs(rows, cols, 15);
  const auto dy = random_values(rows * cols, 16);
  for (bool log : {false, true}) {
    SCOPED_TRACE(log ? "log-softmax" : "softmax");
    const auto expected_y = reference_softmax(rows, cols, log, x);
    std::vector<float> y(rows * cols);
    backend_.softmax_forward(rows, cols, log, x.data(), y.data());
    EXPECT_MATCH(y, to_float(expected_y), 1e-6);
    for (float v : y) ASSERT_TRUE(std::isfinite(v));
    EXPECT_NEAR(y[5 * cols], log ? -std::log(double(cols)) : 1.0 / cols, 1e-6)
        << "equal scores of 1000 give a uniform row";
    auto in_place = x;
    backend_.softmax_forward(rows, cols, log, in_place.data(), in_place.data());
    EXPECT_EQ(in_place, y) << "forward in place";

    // From the backend's own output y, in double.
    std::vector<double> expected_dx(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < cols; ++j) {
        sum += log ? double(dy[r * cols + j]) : double(dy[r * cols + j]) * y[r * cols + j];
      }
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t i = r * cols + j;
        expected_dx[i] = log ? dy[i] - std::exp(double(y[i])) * sum : y[i] * (dy[i] - sum);
      }
    }
    std::vector<float> dx(rows * cols);
    backend_.softmax_backward(rows, cols, log, y.data(), dy.data(), dx.data());
    EXPECT_MATCH(dx, to_float(expected_dx), 1e-5);
    auto grad_in_place = dy;
    backend_.softmax_backward(rows, cols, log, y.data(), grad_in_place.data(),
                              grad_in_place.data());
    EXPECT_EQ(grad_in_place, dx) << "backward in place";
  }
}

TEST_F(NativeBackendTest, SoftmaxOfManyRowsTakesTheParallelPath) {
  const int64_t rows = 1001, cols = 67;
  const auto x = softmax_inputs(rows, cols, 17);
  for (bool log : {false, true}) {
    std::vector<float> y(rows * cols);
    backend_.softmax_forward(rows, cols, log, x.data(), y.data());
    EXPECT_MATCH(y, to_float(reference_softmax(rows, cols, log, x)), 1e-6)
        << (log ? "log-softmax" : "softmax");
  }
}

// ---------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------

struct LossCase {
  Normalization normalization;
  bool has_ignore_label;
  const char* name;
};

class LossTest : public NativeBackendTest, public ::testing::WithParamInterface<LossCase> {
 protected:
  static constexpr int64_t kRows = 37;
  static constexpr int kCols = 11;
  static constexpr int kIgnore = 5;  // a real class: rows with label 5 are skipped

  LossOptions options() const {
    LossOptions o;
    o.has_ignore_label = GetParam().has_ignore_label;
    o.ignore_label = kIgnore;
    o.normalization = GetParam().normalization;
    return o;
  }
  bool ignored(float label) const {
    return GetParam().has_ignore_label && static_cast<int>(label) == kIgnore;
  }
  // The normaliser the contract asks for, given the labels.
  double expected_norm(const std::vector<float>& labels) const {
    int64_t valid = 0;
    for (float l : labels) valid += !ignored(l);
    switch (GetParam().normalization) {
      case Normalization::kFull:
      case Normalization::kBatchSize: return kRows;
      case Normalization::kValid: return std::max<int64_t>(valid, 1);
      case Normalization::kNone: return 1;
    }
    return 0;
  }
  std::vector<float> labels() const {
    auto l = random_labels(kRows, kCols, 18);
    l[0] = kIgnore;  // at least one ignored row
    l[3] = 0;        // row 3 of softmax_inputs is around 1000: a loss of about 3
    l[4] = 1;
    return l;
  }
};

TEST_P(LossTest, SoftmaxCrossEntropyForwardAndBackward) {
  const auto x = softmax_inputs(kRows, kCols, 19);
  auto x_mod = x;
  // A row whose label has underflowing probability: loss 1000, finite.
  x_mod[4 * kCols + 0] = 1000.0f;
  x_mod[4 * kCols + 1] = 0.0f;
  const auto label = labels();
  const auto p = reference_softmax(kRows, kCols, false, x_mod);
  const auto logp = reference_softmax(kRows, kCols, true, x_mod);
  const double norm_expected = expected_norm(label);
  double loss_expected = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    if (!ignored(label[r])) loss_expected -= logp[r * kCols + static_cast<int>(label[r])];
  }
  loss_expected /= norm_expected;

  std::vector<float> prob(kRows * kCols);
  float loss = -1, norm = -1;
  backend_.softmax_cross_entropy_forward(kRows, kCols, x_mod.data(), label.data(), options(),
                                         prob.data(), &loss, &norm);
  EXPECT_MATCH(prob, to_float(p), 1e-6);
  EXPECT_EQ(norm, static_cast<float>(norm_expected));
  ASSERT_TRUE(std::isfinite(loss));
  expect_scalar_near(loss, loss_expected, 1e-6);

  const float dloss = 1.7f;
  std::vector<double> dx_expected(kRows * kCols, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    if (ignored(label[r])) continue;
    for (int j = 0; j < kCols; ++j) {
      dx_expected[r * kCols + j] =
          (prob[r * kCols + j] - (j == static_cast<int>(label[r]) ? 1.0 : 0.0)) * dloss / norm;
    }
  }
  std::vector<float> dx(kRows * kCols, 99.0f);
  backend_.softmax_cross_entropy_backward(kRows, kCols, prob.data(), label.data(), options(),
                                          &norm, &dloss, dx.data());
  EXPECT_MATCH(dx, to_float(dx_expected), 1e-6);
  for (int64_t r = 0; r < kRows; ++r) {
    if (!ignored(label[r])) continue;
    for (int j = 0; j < kCols; ++j) ASSERT_EQ(dx[r * kCols + j], 0.0f) << "ignored row " << r;
  }
  auto in_place = prob;  // dx written over prob
  backend_.softmax_cross_entropy_backward(kRows, kCols, in_place.data(), label.data(),
                                          options(), &norm, &dloss, in_place.data());
  EXPECT_EQ(in_place, dx) << "backward in place";
}

TEST_P(LossTest, NllForwardAndBackward) {
  const auto logp = random_values(kRows * kCols, 20, -6, -0.01f);
  const auto label = labels();
  const double norm_expected = expected_norm(label);
  double loss_expected = 0;
  for (int64_t r = 0; r < kRows; ++r) {
    if (!ignored(label[r])) loss_expected -= logp[r * kCols + static_cast<int>(label[r])];
  }
  loss_expected /= norm_expected;

  float loss = -1, norm = -1;
  backend_.nll_loss_forward(kRows, kCols, logp.data(), label.data(), options(), &loss, &norm);
  EXPECT_EQ(norm, static_cast<float>(norm_expected));
  expect_scalar_near(loss, loss_expected, 1e-6);

  const float dloss = 0.6f;
  std::vector<double> dx_expected(kRows * kCols, 0.0);
  for (int64_t r = 0; r < kRows; ++r) {
    if (!ignored(label[r])) {
      dx_expected[r * kCols + static_cast<int>(label[r])] = -double(dloss) / norm_expected;
    }
  }
  std::vector<float> dx(kRows * kCols, 99.0f);
  backend_.nll_loss_backward(kRows, kCols, label.data(), options(), &norm, &dloss, dx.data());
  EXPECT_MATCH(dx, to_float(dx_expected), 1e-6);
  for (size_t i = 0; i < dx.size(); ++i) {
    if (dx_expected[i] == 0) {
      ASSERT_EQ(dx[i], 0.0f) << "element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    AllNormalizations, LossTest,
    ::testing::Values(LossCase{Normalization::kFull, false, "Full"},
                      LossCase{Normalization::kValid, false, "Valid"},
                      LossCase{Normalization::kBatchSize, false, "BatchSize"},
                      LossCase{Normalization::kNone, false, "None"},
                      LossCase{Normalization::kFull, true, "FullIgnore"},
                      LossCase{Normalization::kValid, true, "ValidIgnore"},
                      LossCase{Normalization::kBatchSize, true, "BatchSizeIgnore"},
                      LossCase{Normalization::kNone, true, "NoneIgnore"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST_F(NativeBackendTest, LossesWithEveryRowIgnoredAreZeroOverOne) {
  const int64_t rows = 3, cols = 4;
  const auto x = random_values(rows * cols, 21);
  const std::vector<float> labels(rows, 2.0f);
  LossOptions options;
  options.has_ignore_label = true;
  options.ignore_label = 2;
  options.normalization = Normalization::kValid;
  std::vector<float> prob(rows * cols);
  float loss = -1, norm = -1;
  backend_.softmax_cross_entropy_forward(rows, cols, x.data(), labels.data(), options,
                                         prob.data(), &loss, &norm);
  EXPECT_EQ(loss, 0.0f);
  EXPECT_EQ(norm, 1.0f);
  loss = norm = -1;
  backend_.nll_loss_forward(rows, cols, x.data(), labels.data(), options, &loss, &norm);
  EXPECT_EQ(loss, 0.0f);
  EXPECT_EQ(norm, 1.0f);
  float acc = -1;
  backend_.accuracy(rows, cols, 1, x.data(), labels.data(), options, &acc);
  EXPECT_EQ(acc, 0.0f);
}

TEST_F(NativeBackendTest, EuclideanLossForwardAndBackward) {
  const int64_t rows = 37, cols = 53;
  const auto a = random_values(rows * cols, 22);
  const auto b = random_values(rows * cols, 23);
  std::vector<double> diff_expected(rows * cols);
  double loss_expected = 0;
  for (int64_t i = 0; i < rows * cols; ++i) {
    diff_expected[i] = double(a[i]) - b[i];
    loss_expected += diff_expected[i] * diff_expected[i];
  }
  loss_expected /= 2.0 * rows;

  std::vector<float> diff(rows * cols);
  float loss = -1;
  backend_.euclidean_loss_forward(rows, cols, a.data(), b.data(), diff.data(), &loss);
  EXPECT_MATCH(diff, to_float(diff_expected), 1e-6);
  expect_scalar_near(loss, loss_expected, 1e-6);

  const float dloss = 0.6f;
  for (float sign : {1.0f, -1.0f}) {
    SCOPED_TRACE(sign > 0 ? "d/da" : "d/db");
    std::vector<double> dx_expected(rows * cols);
    for (int64_t i = 0; i < rows * cols; ++i) dx_expected[i] = sign * dloss / rows * diff[i];
    std::vector<float> dx(rows * cols);
    backend_.euclidean_loss_backward(rows, cols, sign, diff.data(), &dloss, dx.data());
    EXPECT_MATCH(dx, to_float(dx_expected), 1e-6);
  }
}

// ---------------------------------------------------------------------------------------
// Accuracy
// ---------------------------------------------------------------------------------------

// Caffe 1.0's rule: right when fewer than top_k other classes score at least the label's
// score (a tie counts against the label).
TEST_F(NativeBackendTest, AccuracyCountsTiesAgainstTheLabelAndSkipsIgnoredRows) {
  const int64_t rows = 6, cols = 4;
  const std::vector<float> x = {
      0.1f, 0.5f, 0.5f, 0.2f,  // label 1 ties with 2: top-2 and top-3 only
      0.9f, 0.5f, 0.5f, 0.2f,  // label 2, one greater and one tied: top-3 only
      0.9f, 0.8f, 0.7f, 0.1f,  // label 3, three greater: wrong for top-1 to top-3
      0.3f, 0.3f, 0.3f, 0.3f,  // label 0, all tied: wrong for top-1 to top-3
      0.0f, 0.0f, 9.0f, 0.0f,  // ignored
      0.1f, 0.9f, 0.3f, 0.2f,  // label 1, alone on top: right
  };
  const std::vector<float> labels = {1, 2, 3, 0, -1, 1};
  LossOptions options;
  options.has_ignore_label = true;
  options.ignore_label = -1;
  const float expected[] = {1.0f / 5, 2.0f / 5, 3.0f / 5, 5.0f / 5};
  for (int top_k = 1; top_k <= 4; ++top_k) {
    float out = -1;
    backend_.accuracy(rows, cols, top_k, x.data(), labels.data(), options, &out);
    EXPECT_FLOAT_EQ(out, expected[top_k - 1]) << "top-" << top_k;
  }
}

TEST_F(NativeBackendTest, AccuracyMatchesReferenceOnRandomScores) {
  const int64_t rows = 37;
  const int cols = 11;
  auto x = random_values(rows * cols, 24);
  for (int64_t i = 0; i < rows * cols; i += 5) x[i] = 0.25f;  // some ties
  auto labels = random_labels(rows, cols, 25);
  // Every third row: the label's score tied by the next class, and often the highest.
  for (int64_t r = 0; r < rows; r += 3) {
    const int64_t label = static_cast<int64_t>(labels[r]);
    x[r * cols + label] = x[r * cols + (label + 1) % cols] = 2.0f;
  }
  for (bool ignore : {false, true}) {
    LossOptions options;
    options.has_ignore_label = ignore;
    options.ignore_label = 4;
    for (int top_k : {1, 3}) {
      SCOPED_TRACE("top_k " + std::to_string(top_k) + (ignore ? ", ignore 4" : ""));
      int64_t correct = 0, valid = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const int label = static_cast<int>(labels[r]);
        if (ignore && label == 4) continue;
        // Sorted descending, the scores at least the label's come first, the label's own
        // among them: the label is right when fewer than top_k others are there.
        std::vector<float> row(x.begin() + r * cols, x.begin() + (r + 1) * cols);
        std::sort(row.begin(), row.end(), std::greater<float>());
        const int64_t at_least =
            std::upper_bound(row.begin(), row.end(), x[r * cols + label], std::greater<float>()) -
            row.begin();
        correct += at_least - 1 < top_k;
        ++valid;
      }
      float out = -1;
      backend_.accuracy(rows, cols, top_k, x.data(), labels.data(), options, &out);
      EXPECT_FLOAT_EQ(out, static_cast<float>(double(correct) / valid));
      EXPECT_GT(out, 0.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------
// Dropout and data
// ---------------------------------------------------------------------------------------

TEST_F(NativeBackendTest, DropoutMaskFollowsTheCounterGenerator) {
  const int64_t n = 100003;
  const float ratio = 0.3f;
  const uint64_t seed = 42, offset = 1000;
  const float scale = 1.0f / (1.0f - ratio);
  const auto x = random_values(n, 26, 0.5f, 2.0f);
  std::vector<float> mask(n, -1.0f), y(n);
  PassCounter counter;
  backend_.dropout_forward(n, ratio, seed, offset, &counter, x.data(), mask.data(), y.data());
  EXPECT_EQ(counter.passes, 1);

  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = counter_uniform(seed, offset + i) >= ratio;
    ASSERT_EQ(mask[i], keep ? scale : 0.0f) << "mask element " << i;
    ASSERT_EQ(y[i], x[i] * mask[i]) << "y element " << i;
    kept += mask[i] != 0;
  }
  EXPECT_NEAR(double(kept) / n, 1.0 - ratio, 0.01);

  std::vector<float> mask_again(n), y_again = x;  // same seed/offset/pass, in place
  PassCounter again;
  backend_.dropout_forward(n, ratio, seed, offset, &again, y_again.data(), mask_again.data(),
                           y_again.data());
  EXPECT_EQ(mask_again, mask);
  EXPECT_EQ(y_again, y);

  std::vector<float> mask_other(n), y_other(n);  // the next pass draws from offset + n
  backend_.dropout_forward(n, ratio, seed, offset, &counter, x.data(), mask_other.data(),
                           y_other.data());
  EXPECT_EQ(counter.passes, 2);
  std::vector<float> mask_next(n), y_next(n);
  PassCounter fresh;
  backend_.dropout_forward(n, ratio, seed, offset + n, &fresh, x.data(), mask_next.data(),
                           y_next.data());
  EXPECT_EQ(mask_next, mask_other);
  int64_t differing = 0;
  for (int64_t i = 0; i < n; ++i) differing += mask_other[i] != mask[i];
  // Independent masks differ in about 2 * 0.3 * 0.7 = 42% of the elements.
  EXPECT_GT(differing, n / 3) << "another offset must give another mask";
  std::vector<float> mask_shifted(n - 1), y_shifted(n - 1);
  PassCounter shifted;
  backend_.dropout_forward(n - 1, ratio, seed, offset + 1, &shifted, x.data(),
                           mask_shifted.data(), y_shifted.data());
  EXPECT_TRUE(std::equal(mask_shifted.begin(), mask_shifted.end(), mask.begin() + 1))
      << "element i of offset o + 1 is element i + 1 of offset o";
}

// Without shuffle, batches walk the samples from `first` and wrap around; with shuffle, pass p
// takes batch (first + p) of the epochs' permutations, an epoch being its full batches.
TEST_F(NativeBackendTest, GatherBatchWalksTheOrderAndAdvancesTheCounter) {
  const int64_t samples = 10, cols = 7, batch = 4;
  std::mt19937 rng(27);
  std::vector<uint8_t> src(samples * cols);
  for (auto& v : src) v = static_cast<uint8_t>(rng() % 256);
  std::vector<uint8_t> labels = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
  std::vector<int32_t> even(samples), odd(samples);
  for (int32_t i = 0; i < samples; ++i) even[i] = i, odd[i] = int32_t(samples - 1 - i);
  std::shuffle(even.begin(), even.end(), rng);
  const float scale = 1.0f / 255.0f;
  // (shuffle, first, the samples of passes 0, 1, 2 in order)
  struct Case { bool shuffle; int64_t first; std::vector<int64_t> samples; };
  const Case cases[] = {
      {false, 7, {7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8}},
      // 2 batches per epoch (samples 8, 9 of each permutation skipped); pass 0 is batch 1.
      {true, 1, {even[4], even[5], even[6], even[7], odd[0], odd[1], odd[2], odd[3],
                 odd[4], odd[5], odd[6], odd[7]}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shuffle ? "shuffle" : "in order");
    PassCounter counter;
    BatchOrder order;
    order.counter = &counter, order.first = c.first, order.batch = batch;
    order.samples = samples, order.shuffle = c.shuffle;
    order.order[0] = even.data(), order.order[1] = odd.data();
    for (int64_t p = 0; p < 3; ++p) {
      std::vector<float> dst(batch * cols, -1.0f), label(batch, -1.0f);
      backend_.gather_batch(order, GatherTop{src.data(), cols, scale, dst.data()},
                            GatherTop{labels.data(), 1, 1.0f, label.data()});
      EXPECT_EQ(counter.passes, p + 1);
      for (int64_t r = 0; r < batch; ++r) {
        const int64_t s = c.samples[p * batch + r];
        ASSERT_EQ(label[r], float(labels[s])) << "pass " << p << " row " << r;
        for (int64_t j = 0; j < cols; ++j) {
          ASSERT_EQ(dst[r * cols + j], scale * static_cast<float>(src[s * cols + j]))
              << "pass " << p << " row " << r << " column " << j;
        }
      }
    }
  }
}

// Data parallel: the workers' rows of each pass, rank by rank, are the rows one worker with
// their batches together takes, in and out of shuffle, across epochs and wrapping around.
TEST(BatchOrderTest, WorkersShareEachPassOfTheWholeJob) {
  const int64_t samples = 14, batch = 3, workers = 2;
  std::vector<int32_t> even(samples), odd(samples);
  for (int64_t i = 0; i < samples; ++i) even[i] = int32_t((i * 5) % samples), odd[i] = int32_t(samples - 1 - i);
  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffle" : "in order");
    BatchOrder alone;
    alone.first = shuffle ? 1 : 5, alone.batch = batch * workers, alone.samples = samples;
    alone.shuffle = shuffle, alone.order[0] = even.data(), alone.order[1] = odd.data();
    for (int64_t rank = 0; rank < workers; ++rank) {
      BatchOrder mine = alone;
      mine.batch = batch, mine.workers = workers, mine.rank = rank;
      for (int64_t p = 0; p < 5; ++p) {
        EXPECT_EQ(mine.epoch(p), alone.epoch(p));
        EXPECT_EQ(mine.cursor(p), alone.cursor(p));
        for (int64_t r = 0; r < batch; ++r)
          ASSERT_EQ(mine.sample(p, r), alone.sample(p, rank * batch + r))
              << "worker " << rank << " pass " << p << " row " << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Solver update
// ---------------------------------------------------------------------------------------

class UpdateTest : public NativeBackendTest,
                   public ::testing::WithParamInterface<std::tuple<UpdateRule, Regularization>> {
};

// One step of the backend.hpp formulas in double, for the elements of one segment.
void reference_update(const UpdateArgs& a, const testing::TestStep& t, const ParamSegment& seg,
                      std::vector<double>& w, const std::vector<float>& g,
                      std::vector<double>& h, std::vector<double>& h2) {
  const double lr = double(t.lr) * seg.lr_mult;
  const double decay = double(a.weight_decay) * seg.decay_mult;
  const double b1 = a.momentum, b2 = a.momentum2;
  const double correction =
      std::sqrt(1 - std::pow(b2, double(t.step))) / (1 - std::pow(b1, double(t.step)));
  for (int64_t i = seg.offset; i < seg.offset + seg.count; ++i) {
    const double reg = a.regularization == Regularization::kL2 ? w[i]
                                                                : (w[i] > 0) - (w[i] < 0);
    const double gs = double(t.grad_scale) * g[i];
    const double gp = gs + decay * reg;
    switch (a.rule) {
      case UpdateRule::kSGD:
        h[i] = a.momentum * h[i] + lr * gp;
        w[i] -= h[i];
        break;
      case UpdateRule::kNesterov: {
        const double h_old = h[i];
        h[i] = a.momentum * h[i] + lr * gp;
        w[i] -= (1 + a.momentum) * h[i] - a.momentum * h_old;
        break;
      }
      case UpdateRule::kAdam:
        h[i] = b1 * h[i] + (1 - b1) * gp;
        h2[i] = b2 * h2[i] + (1 - b2) * gp * gp;
        w[i] -= lr * correction * h[i] / (std::sqrt(h2[i]) + a.delta);
        break;
      case UpdateRule::kAdamW:
        h[i] = b1 * h[i] + (1 - b1) * gs;
        h2[i] = b2 * h2[i] + (1 - b2) * gs * gs;
        w[i] -= lr * (correction * h[i] / (std::sqrt(h2[i]) + a.delta) + decay * w[i]);
        break;
      case UpdateRule::kRMSProp:
        h[i] = b2 * h[i] + (1 - b2) * gp * gp;
        w[i] -= lr * gp / (std::sqrt(h[i]) + a.delta);
        break;
      case UpdateRule::kAdaGrad:
        h[i] += gp * gp;
        w[i] -= lr * gp / (std::sqrt(h[i]) + a.delta);
        break;
      case UpdateRule::kAdaDelta: {  // decay momentum over both averages, as Caffe
        const double m = a.momentum;
        h[i] = m * h[i] + (1 - m) * gp * gp;
        const double step = gp * std::sqrt((h2[i] + a.delta) / (h[i] + a.delta));
        h2[i] = m * h2[i] + (1 - m) * step * step;
        w[i] -= lr * step;
        break;
      }
    }
  }
}

// The rules that keep a second history (history2).
bool two_histories(UpdateRule rule) {
  return rule == UpdateRule::kAdam || rule == UpdateRule::kAdamW ||
         rule == UpdateRule::kAdaDelta;
}

// Segments and their block table in host memory, as NativeBackend::update reads them.
struct HostLayout {
  HostLayout(std::vector<ParamSegment> s, int64_t n)
      : segments(std::move(s)),
        blocks(block_segments(segments, n)),
        layout{n, segments.data(), int(segments.size()), blocks.data()} {}
  HostLayout(const HostLayout&) = delete;
  bool in_segment(int64_t i) const {
    for (const auto& s : segments) {
      if (i >= s.offset && i < s.offset + s.count) return true;
    }
    return false;
  }
  const std::vector<ParamSegment> segments;
  const std::vector<int32_t> blocks;
  const UpdateLayout layout;
};

TEST(BlockSegments, EachBlockNamesTheSegmentItHoldsOrNone) {
  // [0, 41), [64, 194) over three blocks, an empty segment, [256, 320), then padding.
  const std::vector<ParamSegment> segments = {
      {0, 41, 1, 1}, {64, 130, 1, 1}, {256, 0, 1, 1}, {256, 64, 1, 1}};
  EXPECT_EQ(block_segments(segments, 448), (std::vector<int32_t>{0, 1, 1, 1, 3, -1, -1}));
  EXPECT_EQ(block_segments({}, 128), (std::vector<int32_t>{-1, -1}));
  EXPECT_TRUE(block_segments({}, 0).empty());
}

TEST(BlockSegmentsDeathTest, ALayoutTheUpdateCannotReadIsAnInternalError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(block_segments({{8, 4, 1, 1}}, 64), "not aligned");           // misaligned
  EXPECT_DEATH(block_segments({{0, 70, 1, 1}, {64, 4, 1, 1}}, 128), "overlaps");
  EXPECT_DEATH(block_segments({{64, 4, 1, 1}, {0, 4, 1, 1}}, 128), "precedes");  // unsorted
  EXPECT_DEATH(block_segments({{64, 65, 1, 1}}, 128), "leaves the arena");
  EXPECT_DEATH(block_segments({}, 100), "not a multiple");
}

TEST_P(UpdateTest, TwoStepsOverTwoSegmentsMatchTheFormulas) {
  const auto [rule, regularization] = GetParam();
  // Arena: segment 0 [0, 41), padding [41, 64), segment 1 [64, 101), padding [101, 128).
  const int64_t n = 128;
  const HostLayout layout({{0, 41, 1.0f, 1.0f}, {64, 37, 2.0f, 0.5f}}, n);
  const auto in_segment = [&](int64_t i) { return layout.in_segment(i); };

  UpdateArgs args;
  args.rule = rule;
  args.regularization = regularization;
  args.momentum = 0.9f;
  args.momentum2 = 0.99f;
  args.delta = 1e-6f;
  args.weight_decay = 0.01f;
  testing::TestStep t;
  t.lr = 0.05f;
  t.grad_scale = 0.5f;

  auto w = random_values(n, 28);
  w[5] = w[70] = 0.0f;  // L1's sign(0) = 0
  auto h = random_values(n, 29, 0.01f, 0.5f);  // non-negative: RMSProp/AdaGrad/Adam's v
  auto h2 = random_values(n, 30, 0.01f, 0.5f);
  std::vector<double> w_ref(w.begin(), w.end()), h_ref(h.begin(), h.end()),
      h2_ref(h2.begin(), h2.end());
  const auto w0 = w, h0 = h, h20 = h2;

  for (int64_t step = 1; step <= 2; ++step) {
    t.step = step;
    const auto g = random_values(n, 30 + step);
    const StepState state = testing::step_state(args, t);
    backend_.update(args, &state, layout.layout, w.data(), g.data(), h.data(),
                    two_histories(rule) ? h2.data() : nullptr);
    for (const auto& s : layout.segments) reference_update(args, t, s, w_ref, g, h_ref, h2_ref);
  }

  EXPECT_MATCH(w, to_float(w_ref), 1e-5) << "weights";
  EXPECT_MATCH(h, to_float(h_ref), 1e-5) << "history";
  if (two_histories(rule)) EXPECT_MATCH(h2, to_float(h2_ref), 1e-5) << "history2";
  int64_t changed = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (in_segment(i)) {
      changed += w[i] != w0[i];
      continue;
    }
    ASSERT_EQ(w[i], w0[i]) << "padding weight " << i << " changed";
    ASSERT_EQ(h[i], h0[i]) << "padding history " << i << " changed";
    ASSERT_EQ(h2[i], h20[i]) << "padding history2 " << i << " changed";
  }
  EXPECT_EQ(changed, 41 + 37) << "every weight inside a segment moves";
}

INSTANTIATE_TEST_SUITE_P(
    AllRules, UpdateTest,
    ::testing::Combine(::testing::Values(UpdateRule::kSGD, UpdateRule::kNesterov,
                                         UpdateRule::kAdam, UpdateRule::kAdamW,
                                         UpdateRule::kRMSProp, UpdateRule::kAdaGrad,
                                         UpdateRule::kAdaDelta),
                       ::testing::Values(Regularization::kL2, Regularization::kL1)),
    [](const auto& info) {
      return std::string(solver_type_name(std::get<0>(info.param))) +
             (std::get<1>(info.param) == Regularization::kL2 ? "L2" : "L1");
    });

// A segment longer than the parallel threshold, so the update runs on all threads.
TEST_F(NativeBackendTest, UpdateOfALargeSegment) {
  const int64_t count = 100003, n = 100032;
  const HostLayout layout({{0, count, 1.5f, 2.0f}}, n);
  UpdateArgs args;
  args.rule = UpdateRule::kNesterov;
  args.momentum = 0.9f;
  args.weight_decay = 0.001f;
  testing::TestStep t;
  t.lr = 0.1f;
  const StepState state = testing::step_state(args, t);
  auto w = random_values(n, 40);
  auto h = random_values(n, 41);
  const auto g = random_values(n, 42);
  std::vector<double> w_ref(w.begin(), w.end()), h_ref(h.begin(), h.end()), unused;
  backend_.update(args, &state, layout.layout, w.data(), g.data(), h.data(), nullptr);
  reference_update(args, t, layout.segments[0], w_ref, g, h_ref, unused);
  EXPECT_MATCH(w, to_float(w_ref), 1e-5);
  EXPECT_MATCH(h, to_float(h_ref), 1e-5);
}

// The rule with momentum (or beta1) 0.9 and weight decay 0.01.
UpdateArgs momentum_and_decay(UpdateRule rule) {
  UpdateArgs args;
  args.rule = rule;
  args.momentum = 0.9f;
  args.weight_decay = 0.01f;
  return args;
}

// The step the many-segment tests update with: lr 0.05, Adam's third update.
testing::TestStep third_step() {
  testing::TestStep t;
  t.lr = 0.05f;
  t.step = 3;
  return t;
}

// 320 parameters of varied sizes (under one block, several blocks, empty; gaps of padding
// blocks), with the arena large enough that the pool's ranges split segments and padding:
// every element of every segment moves as the formulas say, with its segment's multipliers,
// and no padding element changes.
TEST_F(NativeBackendTest, UpdateOfManySegmentsInOnePass) {
  const std::vector<ParamSegment> segments = testing::varied_segments(320, 150, 4000, 43);
  const int64_t n = testing::arena_size(segments);
  ASSERT_GT(n, int64_t{1} << 16);
  const HostLayout layout(segments, n);
  for (UpdateRule rule : {UpdateRule::kSGD, UpdateRule::kAdam}) {
    SCOPED_TRACE(solver_type_name(rule));
    const UpdateArgs args = momentum_and_decay(rule);
    const testing::TestStep t = third_step();
    const StepState state = testing::step_state(args, t);
    auto w = random_values(n, 44);
    auto h = random_values(n, 45, 0.01f, 0.5f);
    auto h2 = random_values(n, 46, 0.01f, 0.5f);
    const auto g = random_values(n, 47);
    const auto w0 = w, h0 = h, h20 = h2;
    std::vector<double> w_ref(w.begin(), w.end()), h_ref(h.begin(), h.end()),
        h2_ref(h2.begin(), h2.end());
    backend_.update(args, &state, layout.layout, w.data(), g.data(), h.data(), h2.data());
    for (const auto& s : segments) reference_update(args, t, s, w_ref, g, h_ref, h2_ref);
    EXPECT_MATCH(w, to_float(w_ref), 1e-5) << "weights";
    EXPECT_MATCH(h, to_float(h_ref), 1e-5) << "history";
    EXPECT_MATCH(h2, to_float(h2_ref), 1e-5) << "history2";
    for (int64_t i = 0; i < n; ++i) {
      if (layout.in_segment(i)) continue;
      ASSERT_EQ(w[i], w0[i]) << "padding weight " << i << " changed";
      ASSERT_EQ(h[i], h0[i]) << "padding history " << i << " changed";
      ASSERT_EQ(h2[i], h20[i]) << "padding history2 " << i << " changed";
    }
  }
}

// The arena updated in parts (a data-parallel job updates each gradient bucket's part once
// its sum is done; a part may also start inside a parameter) gives the same bits as one
// update of the whole arena, for every rule.
TEST_F(NativeBackendTest, UpdateInPartsEqualsOneUpdateOfTheArena) {
  const std::vector<ParamSegment> segments = testing::varied_segments(320, 150, 4000, 51);
  const int64_t n = testing::arena_size(segments);
  const HostLayout layout(segments, n);
  const int64_t cuts[] = {0, segments[40].offset, segments[250].offset + kArenaBlock, n};
  ASSERT_GT(cuts[2] - cuts[1], int64_t{1} << 16) << "a part the thread pool splits";
  for (UpdateRule rule : {UpdateRule::kSGD, UpdateRule::kNesterov, UpdateRule::kAdam,
                          UpdateRule::kAdamW, UpdateRule::kRMSProp, UpdateRule::kAdaGrad,
                          UpdateRule::kAdaDelta}) {
    SCOPED_TRACE(solver_type_name(rule));
    const UpdateArgs args = momentum_and_decay(rule);
    const testing::TestStep t = third_step();
    const StepState state = testing::step_state(args, t);
    const auto g = random_values(n, 52);
    auto w = random_values(n, 53), h = random_values(n, 54, 0.01f, 0.5f),
         h2 = random_values(n, 55, 0.01f, 0.5f);
    auto w_parts = w, h_parts = h, h2_parts = h2;
    backend_.update(args, &state, layout.layout, w.data(), g.data(), h.data(), h2.data());
    for (int k = 2; k >= 0; --k) {  // the last part first, as the buckets come
      UpdateLayout part = layout.layout;
      part.first = cuts[k];
      part.n = cuts[k + 1] - cuts[k];
      backend_.update(args, &state, part, w_parts.data(), g.data(), h_parts.data(),
                      h2_parts.data());
    }
    EXPECT_EQ(testing::compare_bits(w_parts, w), "") << "weights";
    EXPECT_EQ(testing::compare_bits(h_parts, h), "") << "history";
    EXPECT_EQ(testing::compare_bits(h2_parts, h2), "") << "history2";
  }
}

}  // namespace
}  // namespace lamina
