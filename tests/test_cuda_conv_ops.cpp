// The convolutional-network operations of the CUDA backend against the Native backend
// (tier 2): convolution in all three directions, pooling, batch normalisation, the
// per-channel operations, copy_rows and the element-wise max, each on the same random
// inputs on both backends and compared at relative error 1e-5 (masks exactly). Then what the
// CUDA side promises beyond equality: convolution algorithms are searched once per geometry,
// and backward results are bit-identical run to run.
//
// Every test needs a GPU and skips (with the reason) without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/tensor.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

constexpr double kTol = 1e-5;

// One named result of a case; exact results (masks, max values) must match bit for bit.
struct Output {
  std::string name;
  std::vector<float> values;
  bool exact = false;
};
using Outputs = std::vector<Output>;

std::vector<float> as_floats(const std::vector<int32_t>& v) {
  return std::vector<float>(v.begin(), v.end());
}

// Random values rounded to a few levels, so that maxima tie often.
std::vector<float> coarse_values(int64_t n, uint64_t seed) {
  std::vector<float> v = random_values(n, seed, -2, 2);
  for (float& x : v) x = std::round(x * 2) / 2;
  return v;
}

std::string describe(const ConvGeometry& g) {
  std::ostringstream out;
  out << "x (" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << ") k " << g.k
      << " kernel " << g.kh << "x" << g.kw << " stride " << g.stride_h << "x" << g.stride_w
      << " pad " << g.pad_h << "x" << g.pad_w << " dilation " << g.dilation_h << "x"
      << g.dilation_w << " groups " << g.groups << " -> " << g.out_h << "x" << g.out_w;
  return out.str();
}

// Caffe's pooled size: rounded up, and the last window must start inside the image or its
// left padding.
int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad) {
  int64_t out = (in + 2 * pad - kernel + stride - 1) / stride + 1;
  if (pad > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

PoolGeometry pool(int64_t n, int64_t c, int64_t h, int64_t w, int64_t kh, int64_t kw,
                  int64_t stride, int64_t pad) {
  PoolGeometry g{};
  g.n = n, g.c = c, g.h = h, g.w = w, g.kh = kh, g.kw = kw;
  g.stride_h = g.stride_w = stride;
  g.pad_h = g.pad_w = pad;
  g.out_h = pooled_size(h, kh, stride, pad);
  g.out_w = pooled_size(w, kw, stride, pad);
  return g;
}

std::string describe(const PoolGeometry& g) {
  std::ostringstream out;
  out << "x (" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << ") kernel " << g.kh << "x"
      << g.kw << " stride " << g.stride_h << "x" << g.stride_w << " pad " << g.pad_h << "x"
      << g.pad_w << " -> " << g.out_h << "x" << g.out_w;
  return out.str();
}

class CudaConvOpsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LAMINA_CUDA_BACKEND_OR_SKIP(backend);
    cuda_ = std::move(backend);
  }

  // Runs one case on both backends; every output must agree to kTol (exact ones bit for bit).
  void expect_same(const std::function<Outputs(Backend&)>& run) {
    const Outputs expected = run(native_);
    const Outputs actual = run(*cuda_);
    ASSERT_EQ(expected.size(), actual.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      const std::string diff = expected[i].exact
                                   ? compare_bits(actual[i].values, expected[i].values)
                                   : compare(actual[i].values, expected[i].values, kTol);
      EXPECT_EQ(diff, "") << "output '" << expected[i].name << "' (cuda vs native)";
    }
  }

  NativeBackend native_;
  std::unique_ptr<Backend> cuda_;
};

// Forward, backward data and backward filter (twice, into non-zero gradients, so that the
// accumulation shows) of one geometry on a backend.
Outputs run_conv(Backend& be, const ConvGeometry& g, bool with_bias) {
  const int64_t x_count = g.n * g.c * g.h * g.w;
  const int64_t w_count = g.k * (g.c / g.groups) * g.kh * g.kw;
  const int64_t y_count = g.n * g.k * g.out_h * g.out_w;
  Floats x(be, random_values(x_count, 1));
  Floats weight(be, random_values(w_count, 2, -0.5f, 0.5f));
  Floats bias(be, random_values(g.k, 3));
  Floats y(be, y_count, std::nanf(""));  // written with =, never read
  be.conv_forward(g, x.get(), weight.get(), with_bias ? bias.get() : nullptr, y.get());

  Floats dy(be, random_values(y_count, 4));
  Floats dx(be, x_count, std::nanf(""));
  be.conv_backward_data(g, weight.get(), dy.get(), dx.get());

  Floats dweight(be, random_values(w_count, 5));
  Floats dbias(be, random_values(g.k, 6));
  be.conv_backward_filter(g, x.get(), dy.get(), dweight.get(), with_bias ? dbias.get() : nullptr);
  be.conv_backward_filter(g, x.get(), dy.get(), dweight.get(), with_bias ? dbias.get() : nullptr);
  Outputs out = {{"y", y.host()}, {"dx", dx.host()}, {"dweight", dweight.host()}};
  if (with_bias) out.push_back({"dbias", dbias.host()});
  return out;
}

const std::vector<ConvGeometry>& conv_cases() {
  static const std::vector<ConvGeometry> cases = {
      conv_geometry(2, 3, 9, 11, 4, 3, 3, 1, 1),              // 3x3, same padding
      conv_geometry(3, 4, 10, 7, 5, 3, 2, 2, 0),              // stride 2, non-square kernel
      conv_geometry(2, 3, 13, 12, 4, 5, 5, 3, 1),             // stride not dividing the input
      conv_geometry(2, 3, 12, 12, 4, 3, 3, 1, 2, 2),          // dilation 2
      conv_geometry(2, 4, 8, 9, 6, 3, 3, 1, 1, 1, 2),         // 2 groups
      conv_geometry(2, 6, 8, 8, 6, 3, 3, 2, 1, 1, 6),         // depthwise
      conv_geometry(2, 8, 7, 6, 5, 1, 1, 1, 0),               // pointwise
      conv_geometry(1, 2, 6, 6, 3, 6, 6, 1, 0),               // kernel = image: 1x1 output
      conv_geometry(4, 16, 28, 28, 32, 3, 3, 1, 1),           // a realistic layer
      conv_geometry(4, 32, 14, 14, 64, 3, 3, 2, 1, 1, 4),     // grouped, strided
  };
  return cases;
}

// ---------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------

TEST_F(CudaConvOpsTest, ConvolutionAllDirections) {
  for (const ConvGeometry& g : conv_cases()) {
    for (bool with_bias : {true, false}) {
      SCOPED_TRACE(::testing::Message() << describe(g) << (with_bias ? " with" : " without")
                                        << " bias");
      expect_same([&](Backend& be) { return run_conv(be, g, with_bias); });
    }
  }
}

TEST_F(CudaConvOpsTest, ConvolutionBackwardIsBitIdenticalRunToRun) {
  for (const ConvGeometry& g : {conv_geometry(4, 16, 28, 28, 32, 3, 3, 1, 1),
                                conv_geometry(8, 32, 14, 14, 32, 3, 3, 1, 1, 1, 32),
                                conv_geometry(2, 3, 13, 12, 4, 5, 5, 3, 1)}) {
    SCOPED_TRACE(describe(g));
    const Outputs first = run_conv(*cuda_, g, true);
    for (int run = 0; run < 3; ++run) {
      const Outputs again = run_conv(*cuda_, g, true);
      ASSERT_EQ(first.size(), again.size());
      for (size_t i = 0; i < first.size(); ++i) {
        EXPECT_EQ(compare_bits(again[i].values, first[i].values), "")
            << "output '" << first[i].name << "', run " << run + 2;
      }
    }
  }
}

TEST_F(CudaConvOpsTest, ConvolutionAlgorithmsAreSearchedOncePerGeometry) {
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: convolution runs by im2col";
  // Geometries no other test uses: the plans are kept per device for the whole process.
  const ConvGeometry a = conv_geometry(3, 5, 17, 19, 7, 3, 3, 1, 1);
  const ConvGeometry b = conv_geometry(3, 5, 17, 19, 7, 3, 3, 2, 1);
  const int64_t before = cuda_diagnostics().conv_algorithm_searches;
  auto searches = [&] { return cuda_diagnostics().conv_algorithm_searches - before; };

  run_conv(*cuda_, a, true);  // all three directions: one search
  EXPECT_EQ(searches(), 1);
  run_conv(*cuda_, a, false);
  run_conv(*cuda_, a, true);
  EXPECT_EQ(searches(), 1) << "the same geometry was searched again";
  auto other = make_cuda_backend(0);  // another backend (another net) on the same device
  run_conv(*other, a, true);
  EXPECT_EQ(searches(), 1) << "a second backend on the device searched again";

  // A new geometry starting with a backward pass is searched once too.
  Floats dy(*cuda_, random_values(b.n * b.k * b.out_h * b.out_w, 7));
  Floats weight(*cuda_, random_values(b.k * b.c * b.kh * b.kw, 8));
  Floats dx(*cuda_, b.n * b.c * b.h * b.w);
  cuda_->conv_backward_data(b, weight.get(), dy.get(), dx.get());
  EXPECT_EQ(searches(), 2);
  run_conv(*cuda_, b, true);
  run_conv(*cuda_, a, true);
  EXPECT_EQ(searches(), 2);
  EXPECT_GT(cuda_diagnostics().dnn_handles_created, 0);
}

// The choices a solver state keeps (Backend::algorithm_choices), taken back by a backend of a
// later run instead of timing: the geometry then runs the algorithms named, with Native's
// results. Choices of another device, unknown lines and algorithms cuDNN refuses for the
// geometry change nothing or are chosen anew.
TEST_F(CudaConvOpsTest, ConvolutionAlgorithmChoicesAreTakenBack) {
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: convolution runs by im2col";
  const ConvGeometry g = conv_geometry(2, 3, 11, 13, 5, 3, 3, 1, 1);  // no other test's
  run_conv(*cuda_, g, true);
  const std::string key = "conv 2 3 11 13 5 3 3 1 1 1 1 1 1 1 11 13 = ";
  auto algorithms_of_g = [&]() -> std::string {
    const std::string choices = cuda_->algorithm_choices();
    const size_t at = choices.find(key);
    if (at == std::string::npos) return "none in:\n" + choices;
    return choices.substr(at + key.size(), choices.find('\n', at) - at - key.size());
  };
  const std::string chosen = algorithms_of_g();
  int forward = -1, data = -1, filter = -1;
  std::istringstream(chosen) >> forward >> data >> filter;
  ASSERT_GE(forward, 0) << chosen;
  const std::string heading = cuda_->algorithm_choices().substr(
      0, cuda_->algorithm_choices().find('\n') + 1);
  ASSERT_EQ(heading.rfind("algorithms for ", 0), 0u) << heading;
  auto line = [&](int f) {
    return key + std::to_string(f) + " " + std::to_string(data) + " " + std::to_string(filter) +
           "\n";
  };
  const int other = forward == 0 ? 1 : 0;  // both implicit GEMMs: any FMA geometry

  cuda_->reuse_algorithm_choices("algorithms for another GPU\n" + line(other));
  run_conv(*cuda_, g, true);
  EXPECT_EQ(algorithms_of_g(), chosen) << "choices for another device were taken";
  cuda_->reuse_algorithm_choices(heading + "something else\n");
  EXPECT_EQ(algorithms_of_g(), chosen);

  cuda_->reuse_algorithm_choices(heading + line(other));
  expect_same([&](Backend& be) { return run_conv(be, g, true); });
  EXPECT_EQ(algorithms_of_g(), std::to_string(other) + " " + std::to_string(data) + " " +
                                   std::to_string(filter));

  cuda_->reuse_algorithm_choices(heading + line(99));  // no such algorithm
  expect_same([&](Backend& be) { return run_conv(be, g, true); });
  int again = -1;
  std::istringstream(algorithms_of_g()) >> again;
  EXPECT_GE(again, 0);
  EXPECT_NE(again, 99);
}

// ---------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------

TEST_F(CudaConvOpsTest, Pooling) {
  const std::vector<PoolGeometry> cases = {
      pool(2, 3, 8, 8, 2, 2, 2, 0),    // dividing, non-overlapping
      pool(2, 3, 8, 9, 3, 3, 2, 0),    // overlapping, not dividing (rounded up)
      pool(2, 3, 7, 7, 3, 3, 2, 1),    // padded
      pool(2, 2, 10, 6, 3, 3, 1, 1),   // stride 1, heavy overlap
      pool(2, 3, 9, 7, 2, 3, 3, 1),    // non-square kernel, padding cut at the end
      pool(3, 4, 6, 5, 6, 5, 1, 0),    // global
      pool(4, 16, 28, 28, 3, 3, 2, 0), // a realistic layer
  };
  for (const PoolGeometry& g : cases) {
    for (PoolMethod method : {PoolMethod::kMax, PoolMethod::kAverage}) {
      for (bool ties : {false, true}) {
        if (method == PoolMethod::kAverage && ties) continue;
        SCOPED_TRACE(::testing::Message()
                     << describe(g) << (method == PoolMethod::kMax ? " max" : " average")
                     << (ties ? " with ties" : ""));
        const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.out_h * g.out_w;
        expect_same([&](Backend& be) -> Outputs {
          Floats x(be, ties ? coarse_values(in, 1) : random_values(in, 1));
          Floats y(be, out, std::nanf(""));
          Ints mask(be, out, -7);
          const bool max = method == PoolMethod::kMax;
          be.pool_forward(method, g, x.get(), y.get(), max ? mask.get() : nullptr);
          Floats dy(be, random_values(out, 2));
          Floats dx(be, in, std::nanf(""));
          be.pool_backward(method, g, dy.get(), max ? mask.get() : nullptr, dx.get());
          Outputs result = {{"y", y.host(), max}, {"dx", dx.host()}};
          if (max) result.push_back({"mask", as_floats(mask.host()), true});
          return result;
        });
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Batch normalisation and per-channel operations
// ---------------------------------------------------------------------------------------

struct ChannelShape {
  int64_t outer, channels, inner;
};

const ChannelShape kChannelShapes[] = {
    {4, 6, 50},       // conv-style
    {32, 3, 1},       // fully connected: one value per channel and row
    {1, 5, 3000},     // one image
    {8, 16, 14 * 14}, // a realistic layer
    {2, 700, 3},      // many channels
    // Few channels with many elements each: the CUDA reductions split each channel's images
    // among blocks (ChannelParts): with 132 SMs into 17 parts of 59 images, the last of 56.
    {1000, 64, 32},
    {3, 4, 4000},     // as many parts as images
};

TEST_F(CudaConvOpsTest, BatchNorm) {
  for (const ChannelShape& s : kChannelShapes) {
    SCOPED_TRACE(::testing::Message() << "(" << s.outer << ", " << s.channels << ", " << s.inner
                                      << ")");
    const int64_t n = s.outer * s.channels * s.inner;
    expect_same([&](Backend& be) -> Outputs {
      Floats x(be, random_values(n, 1, 2.0f, 5.0f));  // an offset mean: variance must be exact
      Floats mean(be, s.channels, std::nanf(""));
      Floats var(be, s.channels, std::nanf(""));
      be.channel_moments(s.outer, s.channels, s.inner, x.get(), mean.get(), var.get());
      Floats y(be, n, std::nanf(""));
      Floats inv_std(be, s.channels, std::nanf(""));
      Floats kept(be, n, std::nanf(""));
      be.batch_norm_forward(s.outer, s.channels, s.inner, 1e-5f, x.get(), mean.get(), var.get(),
                            y.get(), inv_std.get(), kept.get());
      EXPECT_EQ(kept.host(), y.host());
      Floats dy(be, random_values(n, 2));
      Floats dx(be, n, std::nanf(""));
      be.batch_norm_backward(s.outer, s.channels, s.inner, y.get(), dy.get(), inv_std.get(),
                             dx.get());
      // In place, as the BatchNorm layer may run it.
      be.batch_norm_forward(s.outer, s.channels, s.inner, 1e-3f, x.get(), mean.get(), var.get(),
                            x.get(), inv_std.get(), nullptr);
      return {{"mean", mean.host()}, {"var", var.host()},       {"y", y.host()},
              {"dx", dx.host()},     {"y in place", x.host()}, {"inv_std", inv_std.host()}};
    });
    // Running statistics (Caffe's sums and factor); factor 0 gives zero estimates.
    for (float factor : {9.99f, 0.0f}) {
      SCOPED_TRACE(::testing::Message() << "inference, factor " << factor);
      expect_same([&](Backend& be) -> Outputs {
        Floats x(be, random_values(n, 3, -2.0f, 3.0f));
        Floats mean_sum(be, random_values(s.channels, 4, -5.0f, 5.0f));
        Floats var_sum(be, random_values(s.channels, 5, 0.5f, 9.0f));
        Floats f(be, std::vector<float>{factor});
        Floats y(be, n, std::nanf("")), mean(be, s.channels, std::nanf(""));
        Floats inv_std(be, s.channels, std::nanf(""));
        be.batch_norm_inference(s.outer, s.channels, s.inner, 1e-5f, x.get(), mean_sum.get(),
                                var_sum.get(), f.get(), y.get(), mean.get(), inv_std.get());
        be.batch_norm_inference(s.outer, s.channels, s.inner, 1e-5f, x.get(), mean_sum.get(),
                                var_sum.get(), f.get(), x.get(), mean.get(), inv_std.get());
        return {{"y", y.host()}, {"mean", mean.host()}, {"inv_std", inv_std.host()},
                {"y in place", x.host()}};
      });
    }
  }
}

TEST_F(CudaConvOpsTest, ChannelAffine) {
  for (const ChannelShape& s : kChannelShapes) {
    for (int variant = 0; variant < 4; ++variant) {  // scale and bias, scale, bias, in place
      SCOPED_TRACE(::testing::Message() << "(" << s.outer << ", " << s.channels << ", "
                                        << s.inner << ") variant " << variant);
      const int64_t n = s.outer * s.channels * s.inner;
      expect_same([&](Backend& be) -> Outputs {
        Floats x(be, random_values(n, 1));
        Floats scale(be, random_values(s.channels, 2));
        Floats bias(be, random_values(s.channels, 3));
        Floats y(be, n, std::nanf(""));
        const float* sc = variant == 2 ? nullptr : scale.get();
        const float* bi = variant == 1 ? nullptr : bias.get();
        float* out = variant == 3 ? x.get() : y.get();
        be.channel_affine(s.outer, s.channels, s.inner, x.get(), sc, bi, out);
        return {{"y", variant == 3 ? x.host() : y.host()}};
      });
    }
  }
}

TEST_F(CudaConvOpsTest, ChannelReduceAccumulates) {
  for (const ChannelShape& s : kChannelShapes) {
    for (bool product : {true, false}) {
      SCOPED_TRACE(::testing::Message() << "(" << s.outer << ", " << s.channels << ", "
                                        << s.inner << ")" << (product ? " a * b" : " a"));
      const int64_t n = s.outer * s.channels * s.inner;
      expect_same([&](Backend& be) -> Outputs {
        Floats a(be, random_values(n, 1));
        Floats b(be, random_values(n, 2));
        Floats out(be, random_values(s.channels, 3));
        be.channel_reduce(s.outer, s.channels, s.inner, a.get(), product ? b.get() : nullptr,
                          out.get());
        be.channel_reduce(s.outer, s.channels, s.inner, a.get(), product ? b.get() : nullptr,
                          out.get());
        return {{"out", out.host()}};
      });
    }
  }
}

// Batch normalisation with the Scale (and ReLU) it absorbed (batch_norm_scale_*) gives, on
// each backend, the bits of the layers' operations one after the other (in place where the
// layer runs it so: y over x, dx over dy), and the Native backend's values on CUDA.
TEST_F(CudaConvOpsTest, BatchNormWithScaleIsBatchNormThenScaleToTheBit) {
  for (const ChannelShape& s : kChannelShapes) {
    for (const bool relu : {false, true}) {
      SCOPED_TRACE(::testing::Message() << "(" << s.outer << ", " << s.channels << ", " << s.inner
                                        << ")" << (relu ? " with ReLU" : ""));
      const int64_t n = s.outer * s.channels * s.inner, c = s.channels;
      expect_same([&](Backend& be) -> Outputs {
        Floats x(be, random_values(n, 1, 2.0f, 5.0f)), dy(be, random_values(n, 2));
        Floats scale(be, random_values(c, 3)), bias(be, random_values(c, 4));
        Floats mean(be, c, 0.0f), var(be, c, 0.0f);
        be.channel_moments(s.outer, c, s.inner, x.get(), mean.get(), var.get());
        // The two layers.
        Floats y(be, n, 0.0f), z(be, n, 0.0f), g(be, n, 0.0f), dx(be, n, 0.0f);
        Floats inv(be, c, 0.0f), ds(be, random_values(c, 5)), db(be, random_values(c, 6));
        be.batch_norm_forward(s.outer, c, s.inner, 1e-5f, x.get(), mean.get(), var.get(), y.get(),
                              inv.get(), nullptr);
        be.channel_affine(s.outer, c, s.inner, y.get(), scale.get(), bias.get(), z.get());
        Floats d(be, dy.host());  // the ReLU's input gradient
        if (relu) {
          be.activation_forward(Activation::kReLU, n, 0.0f, z.get(), z.get());
          be.activation_backward(Activation::kReLU, n, 0.0f, z.get(), dy.get(), d.get());
        }
        be.scale_gradients(s.outer, c, s.inner, d.get(), y.get(), ds.get(), db.get());
        be.channel_affine(s.outer, c, s.inner, d.get(), scale.get(), nullptr, g.get());
        be.batch_norm_backward(s.outer, c, s.inner, y.get(), g.get(), inv.get(), dx.get());
        // Fused.
        Floats kept(be, n, 0.0f), inv2(be, c, 0.0f), means(be, 2 * c, 0.0f);
        Floats means2(be, 2 * c, 0.0f), ds2(be, random_values(c, 5)), db2(be, random_values(c, 6));
        be.batch_norm_scale_forward(s.outer, c, s.inner, 1e-5f, x.get(), mean.get(), var.get(),
                                    scale.get(), bias.get(), relu, x.get(), inv2.get(),
                                    kept.get());
        be.batch_norm_scale_sums(s.outer, c, s.inner, kept.get(), dy.get(), scale.get(),
                                 bias.get(), relu, means.get(), ds2.get(), db2.get());
        be.batch_norm_scale_sums(s.outer, c, s.inner, kept.get(), dy.get(), scale.get(),
                                 bias.get(), relu, means2.get(), nullptr, nullptr);
        be.batch_norm_scale_backward(s.outer, c, s.inner, kept.get(), dy.get(), inv2.get(),
                                     scale.get(), bias.get(), relu, means.get(), dy.get());
        EXPECT_EQ(kept.host(), y.host());
        EXPECT_EQ(x.host(), z.host());
        EXPECT_EQ(inv2.host(), inv.host());
        EXPECT_EQ(ds2.host(), ds.host());
        EXPECT_EQ(db2.host(), db.host());
        EXPECT_EQ(means2.host(), means.host());
        EXPECT_EQ(dy.host(), dx.host());
        return {{"y", x.host()}, {"dx", dy.host()}, {"dscale", ds2.host()}, {"dbias", db2.host()}};
      });
    }
  }
}

// Scale's two gradients in one call (one pass over dy on CUDA): the same bits as two
// channel_reduce calls, and the Native backend's sums.
TEST_F(CudaConvOpsTest, ScaleGradientsAreTwoChannelReductions) {
  for (const ChannelShape& s : kChannelShapes) {
    SCOPED_TRACE(::testing::Message() << "(" << s.outer << ", " << s.channels << ", " << s.inner
                                      << ")");
    const int64_t n = s.outer * s.channels * s.inner;
    expect_same([&](Backend& be) -> Outputs {
      Floats dy(be, random_values(n, 1)), x(be, random_values(n, 2));
      Floats dscale(be, random_values(s.channels, 3)), dbias(be, random_values(s.channels, 4));
      Floats dscale2(be, random_values(s.channels, 3)), dbias2(be, random_values(s.channels, 4));
      be.scale_gradients(s.outer, s.channels, s.inner, dy.get(), x.get(), dscale.get(),
                         dbias.get());
      be.channel_reduce(s.outer, s.channels, s.inner, dy.get(), x.get(), dscale2.get());
      be.channel_reduce(s.outer, s.channels, s.inner, dy.get(), nullptr, dbias2.get());
      EXPECT_EQ(dscale.host(), dscale2.host());
      EXPECT_EQ(dbias.host(), dbias2.host());
      return {{"dscale", dscale.host()}, {"dbias", dbias.host()}};
    });
  }
}

// ---------------------------------------------------------------------------------------
// copy_rows and the element-wise max
// ---------------------------------------------------------------------------------------

TEST_F(CudaConvOpsTest, CopyRows) {
  // Concat of (n, 3, 5) and (n, 4, 5) along axis 1: rows n, a source's row is its inner
  // block, the destination's stride the concatenated row.
  const int64_t rows = 6, cols_a = 15, cols_b = 20, stride = cols_a + cols_b;
  expect_same([&](Backend& be) -> Outputs {
    Floats a(be, random_values(rows * cols_a, 1));
    Floats b(be, random_values(rows * cols_b, 2));
    Floats dst(be, random_values(rows * stride, 3));
    be.copy_rows(rows, cols_a, a.get(), cols_a, dst.get(), stride);
    be.copy_rows(rows, cols_b, b.get(), cols_b, dst.get() + cols_a, stride);
    // And back (Concat's backward): from the strided rows into a dense block.
    Floats back(be, random_values(rows * cols_b, 4));
    be.copy_rows(rows, cols_b, dst.get() + cols_a, stride, back.get(), cols_b);
    return {{"dst", dst.host(), true}, {"back", back.host(), true}};
  });
}

TEST_F(CudaConvOpsTest, EltwiseMax) {
  const int64_t n = 10007;
  for (bool ties : {false, true}) {
    SCOPED_TRACE(ties ? "with ties" : "random");
    expect_same([&](Backend& be) -> Outputs {
      std::vector<Floats> inputs;
      for (int i = 0; i < 3; ++i) {
        inputs.emplace_back(be, ties ? coarse_values(n, 10 + i) : random_values(n, 10 + i));
      }
      Floats y(be, n, std::nanf(""));
      Ints mask(be, n, -7);
      for (int i = 0; i < 3; ++i) {
        be.eltwise_max_forward(n, i, inputs[i].get(), y.get(), mask.get());
      }
      Floats dy(be, random_values(n, 20));
      Outputs out = {{"y", y.host(), true}, {"mask", as_floats(mask.host()), true}};
      for (int i = 0; i < 3; ++i) {
        Floats dx(be, n, std::nanf(""));
        be.eltwise_max_backward(n, i, dy.get(), mask.get(), dx.get());
        out.push_back({"dx" + std::to_string(i), dx.host(), true});
      }
      return out;
    });
  }
}

TEST_F(CudaConvOpsTest, SupportsEveryOperation) {
  for (Operation op : {Operation::kConvolution, Operation::kPooling, Operation::kBatchNorm,
                       Operation::kChannelAffine, Operation::kRowCopy, Operation::kEltwiseMax,
                       Operation::kBatchNormScale}) {
    EXPECT_TRUE(cuda_->supports(op)) << operation_name(op);
  }
}

}  // namespace
}  // namespace lamina::testing
