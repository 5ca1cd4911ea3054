// TF32 on the CUDA backend (tier 2): gemm, linear_forward and the three convolution
// directions within TF32's error bound of the exact products, with TF32's rounding (tensor
// cores ran) and bit-identical run to run; a TF32 convolution's algorithms are kept apart
// from its FP32 ones in algorithm_choices.
//
// Then the 16-bit storage conversions, bit for bit against the Native backend's. Every test
// needs a GPU and skips (with the reason) without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

// The bound of a TF32 result against the exact one, whatever the GPU's conversion (rounding
// or truncating each operand: at most 2^-10 relative, so 2^-9 + 2^-20 per term) and
// summation order (at most 2 k 2^-24 of the sum of |terms| for k terms in FP32, counting the
// FP32 reference's own error too), given sum_abs = the sum of |terms|.
double bound(int64_t k, double sum_abs) {
  return (std::ldexp(1.0, -9) + std::ldexp(1.0, -20) + 2 * k * std::ldexp(1.0, -24)) * sum_abs +
         1e-30;
}

std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::abs(x);
  return v;
}

// One operation's output: on the GPU in TF32 and in FP32, the Native FP32 result (the exact
// one within FP32's error) and the sums of |terms| per element (the operation on |inputs|).
struct Results {
  std::vector<float> tf32, fp32, reference, sum_abs;
};

// Runs op(backend, inputs) (which returns its output) in each way.
using Inputs = std::vector<std::vector<float>>;
using Op = std::function<std::vector<float>(Backend&, const Inputs&)>;

Results run(Backend& cuda, const Inputs& inputs, const Op& op) {
  NativeBackend native;
  Results r;
  {
    MathScope tf32(cuda, Math::kTF32);
    r.tf32 = op(cuda, inputs);
    EXPECT_EQ(op(cuda, inputs), r.tf32) << "TF32 results are the same run to run";
  }
  r.fp32 = op(cuda, inputs);
  r.reference = op(native, inputs);
  Inputs abs_inputs;
  for (const auto& v : inputs) abs_inputs.push_back(absolute(v));
  r.sum_abs = op(native, abs_inputs);
  return r;
}

// FP32 products on these sizes are off from the exact ones by about 1e-6 (normalized);
// TF32's by about 2.6e-4 (2^-11 per operand, random signs). Between the two: TF32 ran.
constexpr double kTf32Evidence = 3e-5;

// Checks every TF32 result against the bound and returns the normalized error against the
// exact results (printed).
double expect_tf32(const Results& r, int64_t k) {
  EXPECT_EQ(r.tf32.size(), r.reference.size());
  int64_t outside = 0;
  for (size_t i = 0; i < r.tf32.size() && i < r.reference.size(); ++i) {
    if (std::abs(double(r.tf32[i]) - r.reference[i]) > bound(k, r.sum_abs[i]) && outside++ < 3) {
      ADD_FAILURE() << "[" << i << "] TF32 " << r.tf32[i] << ", exact " << r.reference[i]
                    << ", bound " << bound(k, r.sum_abs[i]);
    }
  }
  const double error = normalized_error(r.tf32, r.reference);
  std::printf("normalized error against the exact results: TF32 %.2e, FP32 %.2e\n", error,
              normalized_error(r.fp32, r.reference));
  return error;
}

class CudaTf32 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_compiled()) GTEST_SKIP() << "built without CUDA";
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present";
    cuda_ = make_cuda_backend(0);
    if (!cuda_->supports_math(Math::kTF32)) GTEST_SKIP() << "this GPU has no TF32 tensor cores";
  }
  std::unique_ptr<Backend> cuda_;
};

TEST_F(CudaTf32, GemmInEveryTransposition) {
  const int64_t m = 96, n = 80, k = 512;
  for (Transpose ta : {Transpose::kNo, Transpose::kYes}) {
    for (Transpose tb : {Transpose::kNo, Transpose::kYes}) {
      SCOPED_TRACE(std::to_string(int(ta)) + std::to_string(int(tb)));
      const Op op = [&](Backend& be, const Inputs& in) {
        Floats a(be, in[0]), b(be, in[1]), c(be, m * n);
        be.gemm(ta, tb, m, n, k, 1.0f, a.get(), b.get(), 0.0f, c.get());
        return c.host();
      };
      EXPECT_GT(expect_tf32(run(*cuda_, {random_values(m * k, 1), random_values(k * n, 2)}, op),
                            k),
                kTf32Evidence)
          << "cuBLAS's FAST_TF32 products round their operands";
    }
  }
}

// A large C = alpha A^T B + beta C (a weight gradient's layout) transposes A and B first
// (tf32_gemm.cu): sizes that are not multiples of the transposition's 32 x 32 tiles, and a
// C that is added to, within TF32's bound. (No evidence of TF32's rounding is asked: the
// product's algorithm is chosen by timing, and at this size the fastest may run in FP32.)
TEST_F(CudaTf32, LargeWeightGradientLayoutAddsToC) {
  const int64_t m = 520, n = 515, k = 300;
  const Op op = [&](Backend& be, const Inputs& in) {
    Floats a(be, in[0]), b(be, in[1]), c(be, in[2]);
    be.gemm(Transpose::kYes, Transpose::kNo, m, n, k, 0.5f, a.get(), b.get(), 1.0f, c.get());
    return c.host();
  };
  const Inputs inputs = {random_values(k * m, 3), random_values(k * n, 4),
                         random_values(m * n, 5)};
  expect_tf32(run(*cuda_, inputs, op), k + 1);
}

TEST_F(CudaTf32, LinearForwardWithBiasAndRelu) {
  const int64_t rows = 64, n = 72, k = 300;
  const Op op = [&](Backend& be, const Inputs& in) {
    Floats x(be, in[0]), w(be, in[1]), bias(be, in[2]), y(be, rows * n);
    be.linear_forward(rows, n, k, x.get(), w.get(), bias.get(), false, y.get());
    return y.host();
  };
  const Inputs in = {random_values(rows * k, 3), random_values(n * k, 4), random_values(n, 5)};
  EXPECT_GT(expect_tf32(run(*cuda_, in, op), k + 1), kTf32Evidence);
  // With the ReLU: the same values where positive (|relu(a) - relu(b)| <= |a - b|).
  const Op relu = [&](Backend& be, const Inputs& v) {
    Floats x(be, v[0]), w(be, v[1]), bias(be, v[2]), y(be, rows * n);
    be.linear_forward(rows, n, k, x.get(), w.get(), bias.get(), true, y.get());
    return y.host();
  };
  const Results r = run(*cuda_, in, relu), plain = run(*cuda_, in, op);
  for (size_t i = 0; i < r.tf32.size(); ++i)
    ASSERT_EQ(r.tf32[i], std::max(plain.tf32[i], 0.0f)) << i;
}

// Large enough for cuDNN's tensor-core kernels: on small convolutions (16 channels, 12x12)
// it runs FMA kernels whatever the math allows, and TF32 then changes nothing.
ConvGeometry geometry() { return conv_geometry(32, 128, 28, 28, 128, 3, 3, 1, 1); }

TEST_F(CudaTf32, ConvolutionInAllThreeDirections) {
  const ConvGeometry g = geometry();
  const int64_t xs = g.n * g.c * g.h * g.w, ws = g.k * g.c * g.kh * g.kw,
                ys = g.n * g.k * g.out_h * g.out_w;
  const std::vector<float> x = random_values(xs, 6), w = random_values(ws, 7),
                           dy = random_values(ys, 8);
  // TF32 lets cuDNN use tensor cores without forcing them: among its tensor-op algorithms
  // some compute a direction in FP32 (backward data, on some runs). Every direction must be
  // within TF32's bound, and at least one must show TF32's rounding.
  double largest = 0;
  SCOPED_TRACE("forward");
  largest = std::max(largest, expect_tf32(run(*cuda_, {x, w}, [&](Backend& be, const Inputs& in) {
    Floats xx(be, in[0]), ww(be, in[1]), y(be, ys);
    be.conv_forward(g, xx.get(), ww.get(), nullptr, y.get());
    return y.host();
  }), g.c * g.kh * g.kw));
  SCOPED_TRACE("backward data");
  largest = std::max(largest, expect_tf32(run(*cuda_, {w, dy}, [&](Backend& be, const Inputs& in) {
    Floats ww(be, in[0]), dyy(be, in[1]), dx(be, xs);
    be.conv_backward_data(g, ww.get(), dyy.get(), dx.get());
    return dx.host();
  }), g.k * g.kh * g.kw));
  SCOPED_TRACE("backward filter");
  largest = std::max(largest, expect_tf32(run(*cuda_, {x, dy}, [&](Backend& be, const Inputs& in) {
    Floats xx(be, in[0]), dyy(be, in[1]), dw(be, ws);
    be.conv_backward_filter(g, xx.get(), dyy.get(), dw.get(), nullptr);
    return dw.host();
  }), g.n * g.out_h * g.out_w));
  EXPECT_GT(largest, kTf32Evidence) << "no direction ran on TF32 tensor cores";

  if (!cudnn_compiled()) return;
  std::printf("%s", cuda_->algorithm_choices().c_str());
  // The TF32 plan's algorithms are a line of their own ("conv-tf32"), which a later run
  // takes back without touching the FP32 plan of the same geometry.
  const std::string key = " 32 128 28 28 128 3 3 1 1 1 1 1 1 1 28 28 = ";
  auto line_of = [&](const std::string& word) {
    const std::string choices = cuda_->algorithm_choices();
    const size_t at = choices.find("\n" + word + key);
    if (at == std::string::npos) return "none in:\n" + choices;
    return choices.substr(at + 1, choices.find('\n', at + 1) - at - 1);
  };
  const std::string fp32 = line_of("conv"), tf32 = line_of("conv-tf32");
  // Algorithms are numbers, with a "t" where they run in tensor-op math, or "g<i>@<list>"
  // for a graph API plan; the forward becomes another legacy algorithm.
  std::string forward, data, filter;
  std::istringstream(tf32.substr(tf32.find('=') + 1)) >> forward >> data >> filter;
  ASSERT_FALSE(filter.empty()) << tf32;
  const bool legacy_zero = forward[0] != 'g' && std::stoi(forward) == 0;
  const std::string other =
      "conv-tf32" + key + (legacy_zero ? "1t" : "0") + " " + data + " " + filter;
  const std::string choices = cuda_->algorithm_choices();
  cuda_->reuse_algorithm_choices(choices.substr(0, choices.find('\n') + 1) + other + "\n");
  Floats xx(*cuda_, x), ww(*cuda_, w), y(*cuda_, ys);
  {
    MathScope tf32_math(*cuda_, Math::kTF32);
    cuda_->conv_forward(g, xx.get(), ww.get(), nullptr, y.get());
  }
  EXPECT_EQ(line_of("conv-tf32"), other);
  EXPECT_EQ(line_of("conv"), fp32);
}

// 16-bit storage: the CUDA backend's conversions give the Native backend's bits (which
// tests/test_half.cpp holds to the references), every 257th FP32 pattern and every 16-bit one.
TEST(CudaHalf, ConversionsGiveNativesBits) {
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda_);
  std::vector<float> x;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 257) {
    const uint32_t bits = uint32_t(b);
    float f;
    std::memcpy(&f, &bits, sizeof(f));
    x.push_back(f);
  }
  std::vector<uint16_t> all(0x10000);
  for (uint32_t h = 0; h < 0x10000; ++h) all[h] = uint16_t(h);
  NativeBackend native;
  for (Half format : {Half::kBF16, Half::kFP16}) {
    const int64_t n = int64_t(x.size());
    std::vector<uint16_t> want(n);
    native.to_half(format, n, x.data(), want.data());
    Floats dx(*cuda_, x);
    Array<uint16_t> dh(*cuda_, size_t(n));
    cuda_->to_half(format, n, dx.get(), dh.get());
    EXPECT_TRUE(dh.host() == want) << "to_half, format " << int(format);

    std::vector<float> back(all.size());
    native.from_half(format, int64_t(all.size()), all.data(), back.data());
    Array<uint16_t> dall(*cuda_, all);
    Floats dback(*cuda_, all.size());
    cuda_->from_half(format, int64_t(all.size()), dall.get(), dback.get());
    const std::vector<float> got = dback.host();
    EXPECT_EQ(std::memcmp(got.data(), back.data(), sizeof(float) * back.size()), 0)
        << "from_half, format " << int(format);
  }
}

}  // namespace
}  // namespace lamina::testing
