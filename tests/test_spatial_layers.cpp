// Caffe's spatial layers LRN, Deconvolution, Im2col and SPP, and their operations (lrn_*,
// im2col, col2im):
//   - one table of layer cases over their options: numerical gradient checks on Native,
//     HostAsDevice and CUDA, and CUDA's forward and backward against Native's (1e-5);
//   - forward values against references computed here in double from the definitions
//     (LRN across and within channels, the within-channel one on large planes with its
//     gradient too, Deconvolution as a scatter-add, Im2col, SPP as Caffe's per-level
//     pooling), and the tops' shapes;
//   - the operations on every backend against the same references, including LRN windows
//     of even size and col2im as im2col's adjoint;
//   - Deconvolution in 16 bits against FP32; the errors of bad parameters and bottoms.
#include <gmock/gmock.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/precision.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

// ---------------------------------------------------------------- the layer cases

std::vector<LayerCase> spatial_cases() {
  const std::string lrn = "type: 'LRN' lrn_param { ";
  const std::string deconv = "type: 'Deconvolution' convolution_param { ";
  const std::string gaussian = " weight_filler { type: 'gaussian' std: 0.3 } ";
  const std::string spp = "type: 'SPP' spp_param { ";
  return {
      // LRN, x (N, C, H, W).
      LayerCase("LrnAcross5", lrn + "local_size: 5 alpha: 1.5 beta: 0.75 k: 2 }",
                {{2, 7, 3, 2}}),
      LayerCase("LrnAcross3", lrn + "local_size: 3 alpha: 2 beta: 0.6 }", {{2, 4, 2, 3}}),
      LayerCase("LrnAcross1", lrn + "local_size: 1 alpha: 3 beta: 1.2 k: 0.5 }",
                {{1, 3, 2, 2}}),
      LayerCase("LrnAcrossWiderThanC", lrn + "local_size: 7 alpha: 2 beta: 0.75 }",
                {{2, 3, 2, 2}}),
      LayerCase("LrnWithin3", lrn + "local_size: 3 alpha: 2 beta: 0.75 "
                "norm_region: WITHIN_CHANNEL }", {{2, 3, 5, 4}}),
      LayerCase("LrnWithin5", lrn + "local_size: 5 alpha: 4 beta: 0.5 k: 3 "
                "norm_region: WITHIN_CHANNEL }", {{1, 2, 6, 7}}),
      LayerCase("LrnWithin1", lrn + "local_size: 1 alpha: 1 beta: 0.9 "
                "norm_region: WITHIN_CHANNEL }", {{2, 2, 3, 3}}),
      LayerCase("LrnWithinWiderThanPlane", lrn + "local_size: 7 alpha: 3 beta: 0.75 "
                "norm_region: WITHIN_CHANNEL }", {{2, 2, 3, 2}}),
      // Deconvolution, x (N, C, H, W) -> (N, K, stride (H - 1) + extent - 2 pad, ...).
      LayerCase("DeconvStridePad", deconv + "num_output: 4 kernel_size: 3 stride: 2 pad: 1" +
                gaussian + "bias_filler { type: 'uniform' min: -0.5 max: 0.5 } }",
                {{2, 3, 4, 3}}),
      LayerCase("DeconvGroupsDilationNoBias", deconv + "num_output: 4 kernel_h: 3 kernel_w: 2 "
                "dilation: 2 group: 2 bias_term: false" + gaussian + "}", {{2, 4, 3, 4}}),
      LayerCase("DeconvRectStride", deconv + "num_output: 2 kernel_size: 3 stride_h: 2 "
                "stride_w: 3 pad_h: 0 pad_w: 1" + gaussian +
                "bias_filler { type: 'uniform' } }", {{1, 2, 3, 3}}),
      LayerCase("DeconvPlain", deconv + "num_output: 3 kernel_size: 2" + gaussian +
                "bias_filler { type: 'uniform' } }", {{2, 2, 2, 3}}),
      // Im2col, x (N, C, H, W) -> (N, C KH KW, OH, OW).
      LayerCase("Im2colPadStride", "type: 'Im2col' convolution_param { kernel_size: 3 "
                "stride: 2 pad: 1 }", {{2, 3, 5, 6}}),
      LayerCase("Im2colRectDilation", "type: 'Im2col' convolution_param { kernel_h: 2 "
                "kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 0 pad_w: 1 dilation: 2 }",
                {{1, 2, 6, 7}}),
      // SPP on non-square bottoms whose sides are not multiples of the bins.
      LayerCase("SppMax1", spp + "pyramid_height: 1 pool: MAX }", {{2, 3, 7, 10}}).distinct(),
      LayerCase("SppMax2", spp + "pyramid_height: 2 pool: MAX }", {{2, 3, 7, 10}}).distinct(),
      LayerCase("SppMax3", spp + "pyramid_height: 3 pool: MAX }", {{2, 3, 7, 10}}).distinct(),
      LayerCase("SppMax3Tall", spp + "pyramid_height: 3 }", {{1, 2, 9, 6}}).distinct(),
      LayerCase("SppAve1", spp + "pyramid_height: 1 pool: AVE }", {{2, 3, 7, 10}}),
      LayerCase("SppAve2", spp + "pyramid_height: 2 pool: AVE }", {{2, 3, 7, 10}}),
      LayerCase("SppAve3", spp + "pyramid_height: 3 pool: AVE }", {{1, 2, 9, 6}}),
  };
}

LAMINA_LAYER_CASES(Spatial, spatial_cases);

// ---------------------------------------------------------------- references (double)

// y (N, C, P) of Caffe's LRN across channels; window [c - (size - 1) / 2, c + size / 2].
std::vector<double> lrn_across_reference(const std::vector<float>& x, int64_t n, int64_t c,
                                         int64_t p, int64_t size, double alpha, double beta,
                                         double k, std::vector<double>* scale = nullptr) {
  std::vector<double> y(x.size()), s(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < p; ++j) {
        double sum = 0;
        for (int64_t o = ch - (size - 1) / 2; o <= ch + size / 2; ++o) {
          if (o < 0 || o >= c) continue;
          const double v = x[(i * c + o) * p + j];
          sum += v * v;
        }
        const int64_t at = (i * c + ch) * p + j;
        s[at] = k + alpha / double(size) * sum;
        y[at] = x[at] * std::pow(s[at], -beta);
      }
  if (scale) *scale = s;
  return y;
}

// Caffe's LRN within channels of x (N C planes of H x W): s = 1 + alpha * (the average of
// x^2 over the size x size window, zero padded), y = x s^-beta. With dy, returns instead the
// gradient dx of sum(dy y).
std::vector<double> lrn_within_reference(const std::vector<float>& x, int64_t planes, int64_t h,
                                         int64_t w, int64_t size, double alpha, double beta,
                                         const std::vector<float>* dy = nullptr) {
  const int64_t pad = (size - 1) / 2;
  std::vector<double> s(x.size()), out(x.size(), 0.0);
  const auto window = [&](int64_t plane, int64_t r, int64_t col, auto f) {
    for (int64_t a = r - pad; a <= r + pad; ++a)
      for (int64_t b = col - pad; b <= col + pad; ++b)
        if (a >= 0 && a < h && b >= 0 && b < w) f((plane * h + a) * w + b);
  };
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t col = 0; col < w; ++col) {
        double sum = 0;
        window(pl, r, col, [&](int64_t q) { sum += double(x[q]) * x[q]; });
        s[(pl * h + r) * w + col] = 1 + alpha * sum / double(size * size);
      }
  for (int64_t pl = 0; pl < planes; ++pl)
    for (int64_t r = 0; r < h; ++r)
      for (int64_t col = 0; col < w; ++col) {
        const int64_t at = (pl * h + r) * w + col;
        if (!dy) {
          out[at] = x[at] * std::pow(s[at], -beta);
          continue;
        }
        // y_at depends on x_at directly and on every x_q of its window through s_at.
        out[at] += (*dy)[at] * std::pow(s[at], -beta);
        const double common = (*dy)[at] * x[at] * -beta * std::pow(s[at], -beta - 1) * alpha /
                              double(size * size) * 2;
        window(pl, r, col, [&](int64_t q) { out[q] += common * x[q]; });
      }
  return out;
}

// Deconvolution of x (N, C, H, W) with weight (C, K / groups, KH, KW) as a scatter-add: each
// input pixel adds its value times the kernel at stride-spaced output positions.
struct DeconvShape {
  int64_t n, c, h, w, k, kh, kw, sh, sw, ph, pw, dh, dw, groups;
  int64_t out_h() const { return sh * (h - 1) + dh * (kh - 1) + 1 - 2 * ph; }
  int64_t out_w() const { return sw * (w - 1) + dw * (kw - 1) + 1 - 2 * pw; }
};

std::vector<double> deconv_reference(const DeconvShape& s, const std::vector<float>& x,
                                     const std::vector<float>& weight,
                                     const std::vector<float>& bias) {
  const int64_t oh = s.out_h(), ow = s.out_w(), cg = s.c / s.groups, kg = s.k / s.groups;
  std::vector<double> y(s.n * s.k * oh * ow, 0.0);
  for (int64_t i = 0; i < s.n; ++i)
    for (int64_t k = 0; k < s.k; ++k)
      for (int64_t p = 0; p < oh * ow; ++p)
        y[(i * s.k + k) * oh * ow + p] = bias.empty() ? 0.0 : bias[k];
  for (int64_t i = 0; i < s.n; ++i)
    for (int64_t ci = 0; ci < s.c; ++ci)
      for (int64_t r = 0; r < s.h; ++r)
        for (int64_t col = 0; col < s.w; ++col) {
          const double v = x[((i * s.c + ci) * s.h + r) * s.w + col];
          const int64_t grp = ci / cg;
          for (int64_t kk = 0; kk < kg; ++kk)
            for (int64_t a = 0; a < s.kh; ++a)
              for (int64_t b = 0; b < s.kw; ++b) {
                const int64_t orow = r * s.sh - s.ph + a * s.dh;
                const int64_t ocol = col * s.sw - s.pw + b * s.dw;
                if (orow < 0 || orow >= oh || ocol < 0 || ocol >= ow) continue;
                const int64_t k = grp * kg + kk;
                y[((i * s.k + k) * oh + orow) * ow + ocol] +=
                    v * weight[((ci * kg + kk) * s.kh + a) * s.kw + b];
              }
        }
  return y;
}

// Im2col of x (N, C, H, W): (N, C KH KW, OH, OW), by definition.
std::vector<double> im2col_reference(const ConvGeometry& g, const std::vector<float>& x) {
  std::vector<double> col(g.n * g.c * g.kh * g.kw * g.out_h * g.out_w);
  int64_t at = 0;
  for (int64_t i = 0; i < g.n; ++i)
    for (int64_t ch = 0; ch < g.c; ++ch)
      for (int64_t a = 0; a < g.kh; ++a)
        for (int64_t b = 0; b < g.kw; ++b)
          for (int64_t r = 0; r < g.out_h; ++r)
            for (int64_t col_i = 0; col_i < g.out_w; ++col_i) {
              const int64_t ih = r * g.stride_h - g.pad_h + a * g.dilation_h;
              const int64_t iw = col_i * g.stride_w - g.pad_w + b * g.dilation_w;
              const bool inside = ih >= 0 && ih < g.h && iw >= 0 && iw < g.w;
              col[at++] = inside ? x[((i * g.c + ch) * g.h + ih) * g.w + iw] : 0.0;
            }
  return col;
}

// SPP of x (N, C, H, W) as Caffe's layers compute it: per level, Pooling with kernel
// ceil(H / bins), stride kernel, pad (kernel bins - H + 1) / 2, which gives bins x bins
// outputs, flattened per sample and concatenated.
std::vector<double> spp_reference(const std::vector<float>& x, int64_t n, int64_t c, int64_t h,
                                  int64_t w, int height, bool max) {
  std::vector<std::vector<double>> rows(n);
  for (int l = 0; l < height; ++l) {
    const int64_t bins = int64_t{1} << l;
    const int64_t kh = (h + bins - 1) / bins, kw = (w + bins - 1) / bins;
    const int64_t ph = (kh * bins - h + 1) / 2, pw = (kw * bins - w + 1) / 2;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t bh = 0; bh < bins; ++bh)
          for (int64_t bw = 0; bw < bins; ++bw) {
            int64_t h0 = bh * kh - ph, w0 = bw * kw - pw;
            int64_t h1 = std::min(h0 + kh, h + ph), w1 = std::min(w0 + kw, w + pw);
            const double size = double((h1 - h0) * (w1 - w0));
            h0 = std::max<int64_t>(h0, 0), w0 = std::max<int64_t>(w0, 0);
            h1 = std::min(h1, h), w1 = std::min(w1, w);
            double acc = max ? -1e30 : 0.0;
            for (int64_t r = h0; r < h1; ++r)
              for (int64_t col = w0; col < w1; ++col) {
                const double v = x[((i * c + ch) * h + r) * w + col];
                acc = max ? std::max(acc, v) : acc + v;
              }
            rows[i].push_back(max ? acc : acc / size);
          }
  }
  std::vector<double> y;
  for (const auto& r : rows) y.insert(y.end(), r.begin(), r.end());
  return y;
}

void expect_near(const std::vector<float>& actual, const std::vector<double>& expected,
                 double tol = 1e-5) {
  ASSERT_EQ(actual.size(), expected.size());
  int shown = 0;
  for (size_t i = 0; i < actual.size() && shown < 5; ++i) {
    if (std::abs(actual[i] - expected[i]) > tol * std::max(1.0, std::abs(expected[i]))) {
      ADD_FAILURE() << "at " << i << ": " << actual[i] << " vs " << expected[i];
      ++shown;
    }
  }
}

// ---------------------------------------------------------------- layers on Native

class SpatialLayers : public ::testing::Test {
 protected:
  std::unique_ptr<Layer> make(const std::string& prototxt) {
    LayerParameter p;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(prototxt, &p)) << prototxt;
    return LayerRegistry::create(p, LayerContext{backend_, TRAIN, 7});
  }
  Tensor* tensor(const Shape& shape, const std::vector<float>& values = {}) {
    tensors_.push_back(std::make_unique<Tensor>(backend_, shape, "x"));
    if (!values.empty()) tensors_.back()->copy_data_from_host(values);
    return tensors_.back().get();
  }
  Tensor* random(const Shape& shape, uint64_t seed, float lo = -1, float hi = 1) {
    return tensor(shape, random_values(shape_count(shape), seed, lo, hi));
  }
  // The layer set up (parameters filled) and run forward on x; its top.
  Tensor* run(Layer& layer, Tensor* x) {
    Tensor* y = tensor({1});
    setup_standalone(layer, {x}, {y}, 3);
    layer.forward({x}, {y});
    return y;
  }
  std::string setup_error(const std::string& prototxt, const Shape& x) {
    auto layer = make(prototxt);
    Tensor* bottom = random(x, 1);
    return error_of([&] { layer->setup({bottom}, {tensor({1})}); });
  }

  NativeBackend backend_;
  std::vector<std::unique_ptr<Tensor>> tensors_;
};

// Across channels with windows wider than C too; within channels Caffe adds 1, so k
// changes nothing there.
TEST_F(SpatialLayers, LrnMatchesReferences) {
  for (const bool within : {false, true}) {
    for (const int size : {1, 3, 5, 7, 9}) {
      SCOPED_TRACE(std::string(within ? "within" : "across") + ", local_size " +
                   std::to_string(size));
      auto lrn = make("name: 'n' type: 'LRN' lrn_param { local_size: " +
                      std::to_string(size) + " alpha: 1.7 beta: 0.6 k: 1.5 norm_region: " +
                      (within ? "WITHIN_CHANNEL }" : "ACROSS_CHANNELS }"));
      Tensor* x = random({2, 6, 5, 4}, 11, -2, 2);
      Tensor* y = run(*lrn, x);
      ASSERT_EQ(y->shape(), (Shape{2, 6, 5, 4}));
      const std::vector<float> xs = x->copy_data_to_host();
      expect_near(y->copy_data_to_host(),
                  within ? lrn_within_reference(xs, 12, 5, 4, size, 1.7, 0.6)
                         : lrn_across_reference(xs, 2, 6, 20, size, 1.7, 0.6, 1.5));
    }
  }
}

// Large planes (300 x 290, so the pooling's windows run over many rows and columns): the
// forward values and the gradient against the reference.
TEST_F(SpatialLayers, LrnWithinChannelOnLargePlanesMatchesReference) {
  const int64_t h = 300, w = 290;
  auto lrn = make("name: 'n' type: 'LRN' lrn_param { local_size: 5 alpha: 3 beta: 0.75 "
                  "norm_region: WITHIN_CHANNEL }");
  Tensor* x = random({3, 1, h, w}, 13, -2, 2);
  Tensor* y = run(*lrn, x);
  const std::vector<float> xs = x->copy_data_to_host();
  expect_near(y->copy_data_to_host(), lrn_within_reference(xs, 3, h, w, 5, 3, 0.75));
  const std::vector<float> dy = random_values(y->count(), 14);
  y->copy_diff_from_host(dy);
  lrn->backward_input({y}, {true}, {x});
  expect_near(x->copy_diff_to_host(), lrn_within_reference(xs, 3, h, w, 5, 3, 0.75, &dy));
}

struct DeconvCase {
  const char* name;
  const char* param;  // convolution_param body
  DeconvShape s;
  bool bias;
};

TEST_F(SpatialLayers, DeconvolutionMatchesScatterAdd) {
  // DeconvShape: n, c, h, w, k, kh, kw, stride h/w, pad h/w, dilation h/w, groups.
  const DeconvCase cases[] = {
      {"stride pad", "num_output: 4 kernel_size: 3 stride: 2 pad: 1",
       {2, 3, 4, 3, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1}, true},
      {"groups dilation", "num_output: 4 kernel_h: 3 kernel_w: 2 dilation: 2 group: 2 "
       "bias_term: false", {2, 4, 3, 4, 4, 3, 2, 1, 1, 0, 0, 2, 2, 2}, false},
      {"rectangular", "num_output: 2 kernel_size: [3, 2] stride: [2, 3] pad: [0, 1]",
       {1, 2, 3, 3, 2, 3, 2, 2, 3, 0, 1, 1, 1, 1}, true},
      {"stride larger than kernel", "num_output: 3 kernel_size: 2 stride: 3 group: 3",
       {2, 3, 2, 2, 3, 2, 2, 3, 3, 0, 0, 1, 1, 3}, true},
  };
  for (const DeconvCase& c : cases) {
    SCOPED_TRACE(c.name);
    auto layer = make(std::string("name: 'd' type: 'Deconvolution' convolution_param { ") +
                      c.param + " weight_filler { type: 'gaussian' std: 0.5 } "
                      "bias_filler { type: 'uniform' min: -1 max: 1 } }");
    const DeconvShape& s = c.s;
    Tensor* x = random({s.n, s.c, s.h, s.w}, 21);
    Tensor* y = run(*layer, x);
    ASSERT_EQ(y->shape(), (Shape{s.n, s.k, s.out_h(), s.out_w()}));
    ASSERT_EQ(layer->params().size(), c.bias ? 2u : 1u);
    EXPECT_EQ(layer->params()[0].tensor->shape(), (Shape{s.c, s.k / s.groups, s.kh, s.kw}));
    const std::vector<float> bias =
        c.bias ? layer->params()[1].tensor->copy_data_to_host() : std::vector<float>{};
    expect_near(y->copy_data_to_host(),
                deconv_reference(s, x->copy_data_to_host(),
                                 layer->params()[0].tensor->copy_data_to_host(), bias));
  }
}

TEST_F(SpatialLayers, DeconvolutionDefaultFillers) {
  auto layer = make("name: 'd' type: 'Deconvolution' convolution_param { num_output: 2 "
                    "kernel_size: 2 }");
  run(*layer, random({1, 3, 2, 2}, 1));
  EXPECT_EQ(layer->params()[0].filler.type(), "xavier");
  EXPECT_EQ(layer->params()[1].filler.type(), "constant");
  EXPECT_EQ(layer->params()[1].filler.value(), 0.0f);
}

TEST_F(SpatialLayers, Im2colMatchesReference) {
  const char* params[] = {"kernel_size: 3 stride: 2 pad: 1",
                          "kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad_w: 1 dilation: 2",
                          "kernel_size: 1", "kernel_size: 4 pad: 2 num_output: 5 group: 2"};
  const ConvGeometry expected[] = {
      // n, c, h, w, k, kh, kw, stride h/w, pad h/w, dilation h/w, groups, out h/w.
      {2, 3, 5, 6, 0, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 3},
      {2, 3, 5, 6, 0, 2, 3, 1, 2, 0, 1, 2, 2, 1, 3, 2},
      {2, 3, 5, 6, 0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 5, 6},
      {2, 3, 5, 6, 0, 4, 4, 1, 1, 2, 2, 1, 1, 1, 6, 7},
  };
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(params[i]);
    auto layer = make(std::string("name: 'i' type: 'Im2col' convolution_param { ") + params[i] +
                      " }");
    Tensor* x = random({2, 3, 5, 6}, 31);
    Tensor* y = run(*layer, x);
    const ConvGeometry& g = expected[i];
    ASSERT_EQ(y->shape(), (Shape{2, 3 * g.kh * g.kw, g.out_h, g.out_w}));
    expect_near(y->copy_data_to_host(), im2col_reference(g, x->copy_data_to_host()), 0);
  }
}

TEST_F(SpatialLayers, SppMatchesCaffesPoolingPerLevel) {
  const Shape shapes[] = {{2, 3, 7, 10}, {1, 2, 9, 6}, {2, 1, 13, 6}};
  for (const Shape& s : shapes) {
    for (const int height : {1, 2, 3}) {
      for (const bool max : {true, false}) {
        SCOPED_TRACE(shape_string(s) + " height " + std::to_string(height) +
                     (max ? " MAX" : " AVE"));
        auto layer = make("name: 's' type: 'SPP' spp_param { pyramid_height: " +
                          std::to_string(height) + (max ? " pool: MAX }" : " pool: AVE }"));
        Tensor* x = random(s, 41, -3, 3);
        Tensor* y = run(*layer, x);
        const int64_t bins = (int64_t{1} << (2 * height)) / 3;  // 1 + 4 + 16 ... = (4^h - 1) / 3
        if (height == 1) {
          EXPECT_EQ(y->shape(), (Shape{s[0], s[1], 1, 1})) << "Caffe's one level, unflattened";
        } else {
          EXPECT_EQ(y->shape(), (Shape{s[0], s[1] * bins}));
        }
        expect_near(y->copy_data_to_host(),
                    spp_reference(x->copy_data_to_host(), s[0], s[1], s[2], s[3], height, max));
      }
    }
  }
}

// The bottom gradient sums the levels': with dtop = 1 everywhere, AVE gives every pixel
// the sum over levels of 1 / (its window's padded size), MAX counts the levels whose window
// maximum it is.
TEST_F(SpatialLayers, SppGradientSumsTheLevels) {
  auto layer = make("name: 's' type: 'SPP' spp_param { pyramid_height: 2 pool: AVE }");
  Tensor* x = random({1, 1, 4, 4}, 5);
  Tensor* y = run(*layer, x);
  ASSERT_EQ(y->shape(), (Shape{1, 5}));
  y->copy_diff_from_host({1, 1, 1, 1, 1});
  layer->backward_input({y}, {true}, {x});
  // Level 0: one 4x4 window (1/16); level 1: four 2x2 windows (1/4).
  EXPECT_THAT(x->copy_diff_to_host(), ::testing::Each(::testing::FloatEq(1.0f / 16 + 0.25f)));

  auto max = make("name: 's' type: 'SPP' spp_param { pyramid_height: 2 pool: MAX }");
  Tensor* xm = tensor({1, 1, 2, 2}, {4, 1, 2, 3});
  Tensor* ym = run(*max, xm);
  ym->copy_diff_from_host({10, 1, 2, 3, 4});
  max->backward_input({ym}, {true}, {xm});
  EXPECT_EQ(xm->copy_diff_to_host(), (std::vector<float>{11, 2, 3, 4}));
}

TEST_F(SpatialLayers, Errors) {
  const Shape x = {2, 3, 5, 9};
  std::string m = setup_error("name: 'n1' type: 'LRN' lrn_param { local_size: 4 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'n1' (LRN)"));
  EXPECT_THAT(m, HasSubstr("lrn_param.local_size must be odd"));
  EXPECT_THAT(m, HasSubstr("got 4"));
  m = setup_error("name: 'n2' type: 'LRN' lrn_param { local_size: 0 "
                  "norm_region: WITHIN_CHANNEL }", x);
  EXPECT_THAT(m, HasSubstr("layer 'n2' (LRN): lrn_param.local_size must be odd"));
  m = setup_error("name: 'n3' type: 'LRN'", {2, 3, 5});
  EXPECT_THAT(m, HasSubstr("layer 'n3' (LRN): expects a 4-D bottom"));

  const std::string d = "type: 'Deconvolution' convolution_param { ";
  m = setup_error("name: 'd1' " + d + "num_output: 2 kernel_size: 3 stride: 0 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd1' (Deconvolution): convolution_param.stride must be "
                           "positive, got 0x0"));
  m = setup_error("name: 'd2' " + d + "kernel_size: 3 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd2' (Deconvolution): convolution_param.num_output must be "
                           "set"));
  m = setup_error("name: 'd3' " + d + "num_output: 4 kernel_size: 3 group: 2 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd3' (Deconvolution): convolution_param.group 2 must divide"));
  m = setup_error("name: 'd4' " + d + "num_output: 2 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd4' (Deconvolution): convolution_param.kernel_size"));
  // 1 (5 - 1) + 3 - 2 * 4 = -1 rows.
  m = setup_error("name: 'd5' " + d + "num_output: 2 kernel_size: 3 pad: 4 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd5' (Deconvolution): the output of bottom 'x' "
                           "(2, 3, 5, 9) would be -1x3"));
  EXPECT_THAT(m, HasSubstr("reduce convolution_param.pad"));
  m = setup_error("name: 'd6' " + d + "num_output: 2 kernel_size: 3 axis: 2 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'd6' (Deconvolution): convolution_param.axis must be 1"));

  m = setup_error("name: 'i1' type: 'Im2col' convolution_param { stride: 2 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'i1' (Im2col): convolution_param.kernel_size"));
  m = setup_error("name: 'i2' type: 'Im2col' convolution_param { kernel_size: 7 }", x);
  EXPECT_THAT(m, HasSubstr("layer 'i2' (Im2col): the 7x7 dilated kernel does not fit"));

  m = setup_error("name: 's1' type: 'SPP' spp_param { pool: AVE }", x);
  EXPECT_THAT(m, HasSubstr("layer 's1' (SPP): spp_param.pyramid_height must be set"));
  m = setup_error("name: 's2' type: 'SPP'", x);
  EXPECT_THAT(m, HasSubstr("layer 's2' (SPP): spp_param.pyramid_height must be set"));
  // Level 2's 4 bins over 5 rows: kernel 2, pad (8 - 5 + 1) / 2 = 2.
  m = setup_error("name: 's3' type: 'SPP' spp_param { pyramid_height: 3 }", x);
  EXPECT_THAT(m, HasSubstr("layer 's3' (SPP): spp_param.pyramid_height 3 is too large for "
                           "bottom 'x' (2, 3, 5, 9): level 2's 4x4 bins need a 2x3 kernel "
                           "padded by 2x2"));
  EXPECT_THAT(m, HasSubstr("use a pyramid_height of at most 2"));
  m = setup_error("name: 's5' type: 'SPP' spp_param { pyramid_height: 1 }", {2, 3});
  EXPECT_THAT(m, HasSubstr("layer 's5' (SPP): expects a 4-D bottom"));
}

// The net rejects settings the layers do not read, and accepts engine as a hint.
TEST(SpatialNet, ParameterMessagesAndEngine) {
  const std::string input = R"(
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 2 dim: 4 dim: 4 } } }
)";
  NativeBackend native;
  const auto build = [&](const std::string& layer) {
    NetParameter param = parse_net_parameter(input + layer, "net");
    Net net(param, TEST, native, 1);
  };
  EXPECT_NO_THROW(build("layer { name: 'n' type: 'LRN' bottom: 'data' top: 'n' "
                        "lrn_param { engine: CUDNN } }"));
  EXPECT_NO_THROW(build("layer { name: 's' type: 'SPP' bottom: 'data' top: 's' "
                        "spp_param { pyramid_height: 2 engine: CAFFE } }"));
  EXPECT_NO_THROW(build("layer { name: 'd' type: 'Deconvolution' bottom: 'data' top: 'd' "
                        "convolution_param { num_output: 1 kernel_size: 2 engine: CUDNN } }"));
  const std::string m = error_of([&] {
    build("layer { name: 'n' type: 'LRN' bottom: 'data' top: 'n' pooling_param { pool: AVE } }");
  });
  EXPECT_THAT(m, HasSubstr("pooling_param"));
}

// ---------------------------------------------------------------- operations on each backend

class SpatialOps : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  Tensor& tensor(const std::vector<float>& values) {
    owned_.push_back(
        std::make_unique<Tensor>(*backend_, Shape{int64_t(values.size())}, "t"));
    owned_.back()->copy_data_from_host(values);
    return *owned_.back();
  }
  std::unique_ptr<Backend> backend_;
  std::vector<std::unique_ptr<Tensor>> owned_;
};

// Windows of even size too: [c - (size - 1) / 2, c + size / 2], and the scale written.
TEST_P(SpatialOps, LrnForwardAndBackwardMatchReferences) {
  const int64_t n = 2, c = 6, p = 5;
  for (const int64_t size : {1, 2, 3, 4, 5, 8}) {
    SCOPED_TRACE("size " + std::to_string(size));
    const LrnArgs args{size, 1.3f, 0.7f, 0.8f};
    const std::vector<float> xs = random_values(n * c * p, 51, -2, 2);
    const std::vector<float> dys = random_values(n * c * p, 52);
    Tensor& x = tensor(xs);
    Tensor& scale = tensor(std::vector<float>(xs.size()));
    Tensor& y = tensor(std::vector<float>(xs.size()));
    Tensor& dy = tensor(dys);
    Tensor& dx = tensor(std::vector<float>(xs.size(), 9.0f));
    backend_->lrn_forward(n, c, p, args, x.data(), scale.mutable_data(), y.mutable_data());
    std::vector<double> s;
    const std::vector<double> expected_y =
        lrn_across_reference(xs, n, c, p, size, 1.3, 0.7, 0.8, &s);
    expect_near(y.copy_data_to_host(), expected_y);
    expect_near(scale.copy_data_to_host(), s);
    backend_->lrn_backward(n, c, p, args, x.data(), y.data(), scale.data(), dy.data(),
                           dx.mutable_data());
    // The contract's formula, in double, from the forward's float y and scale.
    const std::vector<float> yf = y.copy_data_to_host(), sf = scale.copy_data_to_host();
    std::vector<double> expected_dx(xs.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t j = 0; j < p; ++j) {
          double sum = 0;
          for (int64_t o = std::max<int64_t>(ch - (size - 1) / 2, 0);
               o <= std::min(ch + size / 2, c - 1); ++o) {
            const int64_t q = (i * c + o) * p + j;
            sum += double(dys[q]) * yf[q] / sf[q];
          }
          const int64_t at = (i * c + ch) * p + j;
          expected_dx[at] = dys[at] * std::pow(double(sf[at]), -0.7) -
                            2.0 * 1.3 * 0.7 / double(size) * xs[at] * sum;
        }
    expect_near(dx.copy_data_to_host(), expected_dx);
  }
}

// im2col by definition; col2im its adjoint: <im2col(x), col> = <x, col2im(col)>, and exactly
// the sum of the entries read from each pixel.
TEST_P(SpatialOps, Im2colAndItsAdjoint) {
  // n, c, h, w, k, kh, kw, stride h/w, pad h/w, dilation h/w, groups, out h/w.
  const ConvGeometry geometries[] = {{2, 3, 5, 6, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 3, 3},
                                     {1, 2, 6, 7, 1, 2, 3, 1, 2, 0, 1, 2, 2, 1, 4, 3},
                                     {3, 1, 4, 4, 1, 5, 5, 3, 3, 2, 2, 1, 1, 1, 2, 2}};
  for (const ConvGeometry& g : geometries) {
    const int64_t cols = g.n * g.c * g.kh * g.kw * g.out_h * g.out_w;
    const std::vector<float> xs = random_values(g.input_count(), 61);
    const std::vector<float> cs = random_values(cols, 62);
    Tensor& x = tensor(xs);
    Tensor& col = tensor(std::vector<float>(cols, 5.0f));
    Tensor& dcol = tensor(cs);
    Tensor& dx = tensor(std::vector<float>(xs.size(), 5.0f));
    backend_->im2col(g, x.data(), col.mutable_data());
    expect_near(col.copy_data_to_host(), im2col_reference(g, xs), 0);
    backend_->col2im(g, dcol.data(), dx.mutable_data());
    // dx[q] = the sum of dcol over the entries where im2col of the unit vector e_q is 1.
    std::vector<double> expected(xs.size());
    for (size_t q = 0; q < xs.size(); ++q) {
      std::vector<float> unit(xs.size(), 0.0f);
      unit[q] = 1;
      const std::vector<double> reads = im2col_reference(g, unit);
      for (int64_t e = 0; e < cols; ++e) expected[q] += reads[e] * cs[e];
    }
    expect_near(dx.copy_data_to_host(), expected);
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, SpatialOps,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// ---------------------------------------------------------------- 16 bits

// Deconvolution in TF32, BF16 and FP16 on the CPU follows the FP32 layer within their
// rounding (and differs from it: the precision reaches its products): the top, the bottom
// gradient and the parameter gradients.
TEST(SpatialPrecision, DeconvolutionFollowsFp32) {
  const std::string text = R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 4 dim: 3 dim: 3 } shape { dim: 2 } } }
layer { name: "pre" type: "Scale" bottom: "data" top: "x" scale_param { filler { value: 1 } } }
layer { name: "d" type: "Deconvolution" bottom: "x" top: "y" convolution_param { num_output: 4
        kernel_size: 3 stride: 2 pad: 1 group: 2 weight_filler { type: "gaussian" std: 0.3 }
        bias_filler { type: "gaussian" std: 1 } } }
layer { name: "ip" type: "Linear" precision: FP32 bottom: "y" top: "ip"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)";
  NativeBackend native;
  const std::vector<float> data = random_values(72, 71);
  for (const Precision precision : {TF32, BF16, FP16}) {
    SCOPED_TRACE(Precision_Name(precision));
    NetParameter param = parse_net_parameter(text, "net");
    Net fp32(param, TRAIN, native, 1);
    set_default_precision(param, precision);
    Net other(param, TRAIN, native, 1);
    const int d32 = layer_index(fp32, "d"), d = layer_index(other, "d");
    const std::vector<float> dy = random_values(2 * 4 * 5 * 5, 72);
    forward_and_backward(fp32, d32, data, dy);
    forward_and_backward(other, d, data, dy);
    const double tol = precision == BF16 ? 3e-2 : 4e-3;
    EXPECT_EQ(compare(other.blob("y").copy_data_to_host(), fp32.blob("y").copy_data_to_host(),
                      tol), "");
    EXPECT_NE(other.blob("y").copy_data_to_host(), fp32.blob("y").copy_data_to_host());
    EXPECT_EQ(compare(other.blob("x").copy_diff_to_host(), fp32.blob("x").copy_diff_to_host(),
                      tol), "");
    for (int p = 0; p < 2; ++p) {
      EXPECT_EQ(compare(other.layer(d).params()[p].tensor->copy_diff_to_host(),
                        fp32.layer(d32).params()[p].tensor->copy_diff_to_host(), tol), "");
    }
  }
}

}  // namespace
}  // namespace lamina::testing
