// The CUDA backend's 16-bit convolutional operations (backend.hpp, the optional groups in 16
// bits) against the Native backend's (tier 2), in BF16 and in FP16: convolution in all three
// directions (cuDNN) and pooling (per-channel operations: test_cuda_half_norm.cpp). Inputs are
// random values already in the format, so both backends start from the same exact operands; the
// checks are half_compare.hpp's. What each comparison allows, with S the sum of |products|
// behind a result:
//  - dx: an ulp, or where the sum cancels the two FP32 sums' difference (fp32_bound of S)
//    plus an ulp; at least 99% the same values (test_cuda_half_ops.cpp says why).
//  - y: the product is rounded, then the FP32 bias added and the sum rounded again, so the
//    two products may round to neighbouring values an ulp of the product apart (at most
//    ulp(S)) before the bias: that much more where a sum cancels.
//  - dweight (FP32, two calls added): each call's gradient rounded once on both, so up to an
//    ulp of it (at most ulp(S)) plus fp32_bound apart per call, and FP32's rounding of the
//    sums.
//  - dbias (FP32 from double sums on both): fp32_bound.
//  - Pooling: the same values (maxima exact, sums of values in quarters, exact in any order)
//    and masks.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "half_compare.hpp"
#include "lamina/backend.hpp"
#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

class CudaHalfConv : public CudaHalfTest {};

struct ConvResults {
  Bits y, dx;
  std::vector<float> dweight, dbias;
};

// Forward (with bias), backward data, and backward filter twice into non-zero gradients.
ConvResults run_conv(Backend& be, Half f, const ConvGeometry& g) {
  Halves x(be, random_bits(f, g.input_count(), 1));
  Halves w(be, random_bits(f, g.weight_count(), 2, -0.5f, 0.5f));
  Floats bias(be, random_values(g.k, 3));
  Halves y(be, g.output_count(), uint16_t{0x7fc0});  // written, never read
  be.conv_forward(f, g, x.get(), w.get(), bias.get(), y.get());
  Halves dy(be, random_bits(f, g.output_count(), 4));
  Halves dx(be, g.input_count(), uint16_t{0x7fc0});
  be.conv_backward_data(f, g, w.get(), dy.get(), dx.get());
  Floats dweight(be, random_values(g.weight_count(), 5));
  Floats dbias(be, random_values(g.k, 6));
  for (int call = 0; call < 2; ++call)
    be.conv_backward_filter(f, g, x.get(), dy.get(), dweight.get(), dbias.get());
  return {y.host(), dx.host(), dweight.host(), dbias.host()};
}

// The sums of |products| behind each result, from the inputs' magnitudes (Native, FP32).
struct Magnitudes {
  std::vector<float> y, dx, dweight, dbias;
};

Magnitudes magnitudes(Half f, const ConvGeometry& g) {
  NativeBackend native;
  const std::vector<float> x = absolute(values(f, random_bits(f, g.input_count(), 1)));
  const std::vector<float> w = absolute(values(f, random_bits(f, g.weight_count(), 2, -0.5f,
                                                              0.5f)));
  const std::vector<float> dy = absolute(values(f, random_bits(f, g.output_count(), 4)));
  Magnitudes m{std::vector<float>(g.output_count()), std::vector<float>(g.input_count()),
               std::vector<float>(g.weight_count()), std::vector<float>(g.k)};
  native.conv_forward(g, x.data(), w.data(), nullptr, m.y.data());
  native.conv_backward_data(g, w.data(), dy.data(), m.dx.data());
  native.conv_backward_filter(g, x.data(), dy.data(), m.dweight.data(), m.dbias.data());
  return m;
}

const std::vector<ConvGeometry>& cases() {
  static const std::vector<ConvGeometry> geometries = {
      conv_geometry(2, 3, 9, 11, 4, 3, 3, 1, 1),           // 3x3, same padding
      conv_geometry(3, 4, 10, 7, 5, 3, 2, 2, 0),           // stride 2, non-square kernel
      conv_geometry(2, 3, 12, 12, 4, 3, 3, 1, 2, 2),       // dilation 2
      conv_geometry(2, 4, 8, 9, 6, 3, 3, 1, 1, 1, 2),      // 2 groups
      conv_geometry(2, 8, 7, 6, 5, 1, 1, 1, 0),            // pointwise
      conv_geometry(8, 64, 16, 16, 64, 3, 3, 1, 1),        // tensor-core sized
      conv_geometry(4, 32, 14, 14, 64, 3, 3, 2, 1, 1, 4),  // grouped, strided
  };
  return geometries;
}

// Runs g on both backends and compares every result with the bounds above.
void expect_conv_matches_native(Backend& cuda, Backend& native, Half f, const ConvGeometry& g) {
  SCOPED_TRACE(::testing::Message() << "x (" << g.n << ", " << g.c << ", " << g.h << ", "
                                    << g.w << ") k " << g.k << " kernel " << g.kh << "x" << g.kw
                                    << " groups " << g.groups);
  const ConvResults c = run_conv(cuda, f, g), n = run_conv(native, f, g);
  const Magnitudes m = magnitudes(f, g);
  const int64_t taps = (g.c / g.groups) * g.kh * g.kw;
  std::vector<double> y_bound(m.y.size()), dw_bound(m.dweight.size());
  for (size_t i = 0; i < y_bound.size(); ++i)
    y_bound[i] = ulp(f, m.y[i]) + fp32_bound(taps, m.y[i]);
  const std::vector<float> dweight0 = random_values(g.weight_count(), 5);
  for (size_t i = 0; i < dw_bound.size(); ++i) {
    dw_bound[i] =
        2 * (ulp(f, m.dweight[i]) + fp32_bound(g.n * g.out_h * g.out_w, m.dweight[i])) +
        std::ldexp(4.0, -24) * (std::abs(dweight0[i]) + 2 * m.dweight[i]);
  }
  expect_half_close(f, c.y, n.y, y_bound);
  expect_half_close(f, c.dx, n.dx, fp32_bounds((g.k / g.groups) * g.kh * g.kw, m.dx));
  expect_floats_close(c.dweight, n.dweight, dw_bound);
  // m.dbias = the sum of |dy| per channel.
  expect_floats_close(c.dbias, n.dbias, fp32_bounds(g.n * g.out_h * g.out_w, m.dbias));
}

TEST_P(CudaHalfConv, ConvolutionAllDirections) {
  for (const ConvGeometry& g : cases()) expect_conv_matches_native(*cuda_, native_, format(), g);
}

// Every direction with the algorithms chosen for it gives the same bits run after run (only
// deterministic algorithms are taken), as exact resumption needs.
TEST_P(CudaHalfConv, ResultsAreBitIdenticalRunToRun) {
  for (const ConvGeometry& g : cases()) {
    const ConvResults a = run_conv(*cuda_, format(), g), b = run_conv(*cuda_, format(), g);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.dweight, b.dweight);
    EXPECT_EQ(a.dbias, b.dbias);
  }
}

// Directions without a cuDNN algorithm (here -1 taken back from a solver state) widen their
// operands and run the float im2col: Native's results all the same.
TEST_P(CudaHalfConv, DirectionsWithoutACudnnAlgorithmRunByIm2col) {
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: every test here runs im2col";
  const Half f = format();
  const std::string word = f == Half::kBF16 ? "conv-bf16 " : "conv-fp16 ";
  for (const ConvGeometry& g : {conv_geometry(2, 4, 7, 8, 6, 3, 3, 2, 1, 1, 2),  // no other
                                conv_geometry(2, 6, 5, 7, 3, 1, 1, 1, 0)}) {     // test's
    run_conv(*cuda_, f, g);  // planned by timing
    std::ostringstream key;
    for (int64_t v : {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
                      g.pad_w, g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w})
      key << ' ' << v;
    const std::string line = word.substr(0, word.size() - 1) + key.str() + " = -1 -1 -1";
    const std::string choices = cuda_->algorithm_choices();
    cuda_->reuse_algorithm_choices(choices.substr(0, choices.find('\n') + 1) + line + "\n");
    expect_conv_matches_native(*cuda_, native_, f, g);
    EXPECT_NE(cuda_->algorithm_choices().find(line + "\n"), std::string::npos)
        << cuda_->algorithm_choices();
  }
}

// A 16-bit geometry is planned apart from the float modes, and its choices are kept under
// its own word in the solver state's text.
TEST_P(CudaHalfConv, AlgorithmChoicesNameTheFormat) {
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: convolution runs by im2col";
  const Half f = format();
  const ConvGeometry g = conv_geometry(2, 5, 9, 9, 3, 3, 3, 1, 1);  // no other test's
  run_conv(*cuda_, f, g);
  const std::string word = f == Half::kBF16 ? "conv-bf16 " : "conv-fp16 ";
  const std::string choices = cuda_->algorithm_choices();
  const std::string key = word + "2 5 9 9 3 3 3 1 1 1 1 1 1 1 9 9 = ";
  const size_t at = choices.find(key);
  ASSERT_NE(at, std::string::npos) << choices;
  // Each direction a legacy algorithm ("7", "7t") or a graph API plan ("g2"), not -1.
  std::istringstream in(choices.substr(at + key.size()));
  for (int i = 0; i < 3; ++i) {
    std::string token;
    in >> token;
    EXPECT_TRUE(!token.empty() && (token[0] == 'g' || std::isdigit(token[0])))
        << "cuDNN ran none: " << choices;
  }
}

// A solver state's graph API plans ("g<i>@<fingerprint of the list>", cudnn_graph.cpp) are
// taken back: each direction timing gave a graph plan is set to another plan of the same
// list (the first, or the second if it was the first), which then runs with Native's
// results, the same bits run to run. A plan named in a list of another fingerprint is
// chosen anew.
TEST_P(CudaHalfConv, GraphApiPlansAreTakenBackWithNativesResults) {
  if (!cudnn_compiled()) GTEST_SKIP() << "built without cuDNN: convolution runs by im2col";
  const Half f = format();
  const std::string word = f == Half::kBF16 ? "conv-bf16" : "conv-fp16";
  int graph_directions = 0;
  for (const ConvGeometry& g : {conv_geometry(8, 64, 16, 16, 64, 3, 3, 1, 1),  // no other
                                conv_geometry(8, 32, 15, 13, 64, 3, 3, 2, 1)}) {  // test's
    run_conv(*cuda_, f, g);  // planned by timing
    std::ostringstream key;
    key << word;
    for (int64_t v : {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h,
                      g.pad_w, g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w})
      key << ' ' << v;
    const std::string choices = cuda_->algorithm_choices();
    const std::string heading = choices.substr(0, choices.find('\n') + 1);
    const size_t at = choices.find(key.str() + " = ");
    ASSERT_NE(at, std::string::npos) << choices;
    std::istringstream in(choices.substr(at + key.str().size() + 3));
    std::string tokens[3], other[3], foreign[3];
    for (int d = 0; d < 3; ++d) {
      in >> tokens[d];
      other[d] = foreign[d] = tokens[d];
      if (tokens[d][0] != 'g') continue;
      ++graph_directions;
      const size_t list = tokens[d].find('@');
      other[d] = (tokens[d].substr(0, list) == "g0" ? "g1" : "g0") + tokens[d].substr(list);
      foreign[d] = "g0@1234";
    }
    const std::string line = key.str() + " = " + other[0] + " " + other[1] + " " + other[2];
    cuda_->reuse_algorithm_choices(heading + line + "\n");
    expect_conv_matches_native(*cuda_, native_, f, g);
    EXPECT_NE(cuda_->algorithm_choices().find(line + "\n"), std::string::npos)
        << "wanted " << line << " in " << cuda_->algorithm_choices();
    const ConvResults a = run_conv(*cuda_, f, g), b = run_conv(*cuda_, f, g);
    EXPECT_EQ(a.y, b.y);
    EXPECT_EQ(a.dx, b.dx);
    EXPECT_EQ(a.dweight, b.dweight);

    const std::string stale =
        key.str() + " = " + foreign[0] + " " + foreign[1] + " " + foreign[2];
    cuda_->reuse_algorithm_choices(heading + stale + "\n");
    expect_conv_matches_native(*cuda_, native_, f, g);
    EXPECT_EQ(cuda_->algorithm_choices().find("@1234"), std::string::npos);
  }
  if (graph_directions == 0)
    GTEST_SKIP() << "timing chose no graph API plan for these geometries on this GPU"
                 << " (or LAMINA_CUDNN_GRAPH=0)";
}

TEST_P(CudaHalfConv, PoolingGivesNativesValuesAndMasks) {
  const Half f = format();
  for (const PoolGeometry& g : {PoolGeometry{2, 3, 9, 9, 3, 3, 2, 2, 1, 1, 5, 5},
                                PoolGeometry{3, 4, 8, 8, 2, 2, 2, 2, 0, 0, 4, 4},
                                PoolGeometry{2, 64, 32, 32, 32, 32, 1, 1, 0, 0, 1, 1}}) {
    const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.out_h * g.out_w;
    std::vector<float> coarse = random_values(in, 11, -2, 2);
    for (float& v : coarse) v = std::round(v * 4) / 4;  // ties: the first in row order wins
    const Bits x = to_bits(f, coarse), dy = random_bits(f, out, 12);
    for (PoolMethod method : {PoolMethod::kMax, PoolMethod::kAverage}) {
      SCOPED_TRACE(method == PoolMethod::kMax ? "max" : "average");
      Bits y[2], dx[2];
      std::vector<int32_t> mask[2];
      Backend* backends[2] = {cuda_.get(), &native_};
      for (int b = 0; b < 2; ++b) {
        Halves dx_(*backends[b], in), y_(*backends[b], out), x_(*backends[b], x),
            dy_(*backends[b], dy);
        Ints mask_(*backends[b], out, -3);
        backends[b]->pool_forward(f, method, g, x_.get(), y_.get(), mask_.get());
        backends[b]->pool_backward(f, method, g, dy_.get(), mask_.get(), dx_.get());
        y[b] = y_.host();
        dx[b] = dx_.host();
        mask[b] = mask_.host();
      }
      expect_same_values(f, y[0], y[1]);
      expect_same_values(f, dx[0], dx[1]);
      if (method == PoolMethod::kMax) EXPECT_EQ(mask[0], mask[1]);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaHalfConv, ::testing::Values(Half::kBF16, Half::kFP16),
                         [](const auto& info) { return format_name(info.param); });

}  // namespace
}  // namespace lamina::testing
