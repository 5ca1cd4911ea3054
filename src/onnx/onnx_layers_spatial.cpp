// ONNX for the spatial layers, NCHW: Convolution (Conv), Deconvolution (ConvTranspose),
// Im2col (a grouped Conv with one-hot filters), Pooling and SPP (MaxPool, AveragePool and
// their Global forms), LRN (LRN across channels; within a channel Caffe's composition).
//
// Pooling with Caffe's output size. Caffe rounds up (CEIL) or down and pads both sides by
// pad; ONNX pads each side on its own. The exporter keeps ceil_mode 0 and pads the end by
// e = (OH - 1) stride + kernel - H - pad, so that ONNX's floor gives Caffe's OH (the last
// window ends at H + e). Max pooling ignores padding either way. Caffe's average divides by
// the window clipped to the bottom padded by pad on both sides; ONNX's count_include_pad 1
// divides by the whole kernel: the same wherever no window reaches past H + pad (e <= pad).
// Where one does (CEIL with an overhang), the bottom is padded with zeros by pad first (Pad,
// unless pad is 0) and pooled with count_include_pad 0 and the end padded by e - pad: the
// divisor then counts the cells inside the padded bottom, as Caffe's does.
#include <algorithm>
#include <cmath>

#include "layers/spatial.hpp"
#include "onnx_graph.hpp"

namespace lamina {
namespace {

// ---- pooling ----

enum class Pool { kMax, kAverage };

struct PoolWindow {
  Extent2 kernel, stride, pad;
};

// Pooling into out (OH, OW) over x (N, C, H, W); the result goes to `out_value`.
void pool(LayerNodes& l, Pool kind, const std::string& x, const Shape& xs, const PoolWindow& w,
          Extent2 out, const std::string& node_name, const std::string& out_value) {
  const int64_t in[2] = {xs[2], xs[3]};
  const int64_t k[2] = {w.kernel.h, w.kernel.w}, s[2] = {w.stride.h, w.stride.w};
  const int64_t p[2] = {w.pad.h, w.pad.w}, o[2] = {out.h, out.w};
  int64_t end[2];
  bool overhang = false;  // some average window reaches past H + pad
  for (int a = 0; a < 2; ++a) {
    end[a] = (o[a] - 1) * s[a] + k[a] - in[a] - p[a];
    if (end[a] < 0) {
      // ONNX's floor then still gives o: the pads in [end, end + s - 1] all do.
      LAMINA_REQUIRE(end[a] + s[a] - 1 >= 0, "no ONNX padding gives Caffe's pooled size ",
                     o[a], " of ", in[a], " (kernel ", k[a], ", stride ", s[a], ", pad ", p[a], ")");
      end[a] = 0;
    }
    overhang = overhang || end[a] > p[a];
  }
  onnx::NodeProto* n = nullptr;
  if (kind == Pool::kMax) {
    n = &l.graph.node("MaxPool", {x}, {out_value}, node_name);
    set_attr(*n, "pads", std::vector<int64_t>{p[0], p[1], end[0], end[1]});
  } else if (!overhang) {
    n = &l.graph.node("AveragePool", {x}, {out_value}, node_name);
    set_attr(*n, "pads", std::vector<int64_t>{p[0], p[1], end[0], end[1]});
    set_attr(*n, "count_include_pad", int64_t{1});
  } else {
    std::string padded = x;
    if (p[0] > 0 || p[1] > 0) {
      const std::string pads = l.graph.int64s(node_name + "/pads",
                                              {0, 0, p[0], p[1], 0, 0, p[0], p[1]});
      padded = l.graph.step("Pad", {x, pads}, node_name + "/pad");
    }
    n = &l.graph.node("AveragePool", {padded}, {out_value}, node_name);
    set_attr(*n, "pads", std::vector<int64_t>{0, 0, std::max<int64_t>(end[0] - p[0], 0),
                                              std::max<int64_t>(end[1] - p[1], 0)});
    set_attr(*n, "count_include_pad", int64_t{0});
  }
  set_attr(*n, "kernel_shape", std::vector<int64_t>{k[0], k[1]});
  set_attr(*n, "strides", std::vector<int64_t>{s[0], s[1]});
}

// Stochastic pooling in TEST: sum x^2 / sum x per window, 0 where sum x = 0. The two sums
// share their windows (and so their divisor): the ratio of the averages.
void weighted_pool(LayerNodes& l, const std::string& x, const Shape& xs, const PoolWindow& w,
                   Extent2 out, const std::string& node_name, const std::string& out_value) {
  const std::string squares = l.graph.step("Mul", {x, x}, node_name + "/square");
  const std::string sum2 = l.graph.fresh(node_name + "/mean_square");
  const std::string sum1 = l.graph.fresh(node_name + "/mean");
  pool(l, Pool::kAverage, squares, xs, w, out, node_name + "/pool_square", sum2);
  pool(l, Pool::kAverage, x, xs, w, out, node_name + "/pool", sum1);
  const std::string ratio = l.graph.step("Div", {sum2, sum1}, node_name + "/ratio");
  const std::string zero = l.graph.scalar(node_name + "/zero", 0.0f);
  const std::string empty = l.graph.step("Equal", {sum1, zero}, node_name + "/empty");
  l.graph.node("Where", {empty, zero, ratio}, {out_value}, node_name);
}

PoolWindow pooling_window(const LayerNodes& l) {
  const PoolingParameter& p = l.param().pooling_param();
  const auto one = [](bool has, uint32_t v) {
    return has ? std::vector<int64_t>{v} : std::vector<int64_t>{};
  };
  const std::string m = "pooling_param";
  PoolWindow w;
  w.kernel = spatial_setting("", m, "kernel_size", "kernel", one(p.has_kernel_size(),
                             p.kernel_size()), p.has_kernel_h(), p.kernel_h(), p.has_kernel_w(),
                             p.kernel_w(), 0, true);
  w.stride = spatial_setting("", m, "stride", "stride", one(p.has_stride(), p.stride()),
                             p.has_stride_h(), p.stride_h(), p.has_stride_w(), p.stride_w(), 1,
                             true);
  w.pad = spatial_setting("", m, "pad", "pad", one(p.has_pad(), p.pad()), p.has_pad_h(),
                          p.pad_h(), p.has_pad_w(), p.pad_w(), 0, false);
  return w;
}

void pooling(LayerNodes& l) {
  const PoolingParameter& p = l.param().pooling_param();
  const Shape& xs = l.bottom[0];
  if (p.global_pooling() && p.pool() != PoolingParameter::STOCHASTIC) {
    l.graph.node(p.pool() == PoolingParameter::MAX ? "GlobalMaxPool" : "GlobalAveragePool",
                 {l.in[0]}, {l.out[0]}, l.name());
    return;
  }
  PoolWindow w = pooling_window(l);
  if (p.global_pooling()) w = PoolWindow{{xs[2], xs[3]}, {1, 1}, {0, 0}};
  const Extent2 out{l.top[0][2], l.top[0][3]};
  if (p.pool() == PoolingParameter::STOCHASTIC)
    return weighted_pool(l, l.in[0], xs, w, out, l.name(), l.out[0]);
  pool(l, p.pool() == PoolingParameter::MAX ? Pool::kMax : Pool::kAverage, l.in[0], xs, w, out,
       l.name(), l.out[0]);
}

// SPP: level l pools into bins = 2^l per axis with kernel ceil(H / bins), stride kernel and
// pad (kernel bins - H + 1) / 2 (spp.cpp); each level flattened per sample, then
// concatenated, or the one level's (N, C, 1, 1) with pyramid_height 1.
void spp(LayerNodes& l) {
  const SPPParameter& p = l.param().spp_param();
  const Shape& xs = l.bottom[0];
  std::vector<std::string> levels;
  for (int64_t level = 0; level < int64_t{p.pyramid_height()}; ++level) {
    const int64_t bins = int64_t{1} << level;
    PoolWindow w;
    const auto axis = [&](int64_t in, int64_t& k, int64_t& s, int64_t& pad) {
      k = (in + bins - 1) / bins;
      s = k;
      pad = (k * bins - in + 1) / 2;
    };
    axis(xs[2], w.kernel.h, w.stride.h, w.pad.h);
    axis(xs[3], w.kernel.w, w.stride.w, w.pad.w);
    const Extent2 out{pooled_size(xs[2], w.kernel.h, w.stride.h, w.pad.h, true),
                      pooled_size(xs[3], w.kernel.w, w.stride.w, w.pad.w, true)};
    const std::string name = l.part("level" + std::to_string(level));
    const bool alone = p.pyramid_height() == 1;
    const std::string pooled = alone ? l.out[0] : l.graph.fresh(name);
    if (p.pool() == SPPParameter::STOCHASTIC)
      weighted_pool(l, l.in[0], xs, w, out, name, pooled);
    else
      pool(l, p.pool() == SPPParameter::MAX ? Pool::kMax : Pool::kAverage, l.in[0], xs, w, out,
           name, pooled);
    if (alone) return;
    onnx::NodeProto* flat = nullptr;
    levels.push_back(l.graph.step("Flatten", {pooled}, name + "/flatten", &flat));
    set_attr(*flat, "axis", int64_t{1});
  }
  set_attr(l.graph.node("Concat", levels, {l.out[0]}, l.name()), "axis", int64_t{1});
}

// ---- convolution ----

void set_window(onnx::NodeProto& n, const ConvWindow& w) {
  set_attr(n, "kernel_shape", std::vector<int64_t>{w.kernel.h, w.kernel.w});
  set_attr(n, "strides", std::vector<int64_t>{w.stride.h, w.stride.w});
  set_attr(n, "pads", std::vector<int64_t>{w.pad.h, w.pad.w, w.pad.h, w.pad.w});
  set_attr(n, "dilations", std::vector<int64_t>{w.dilation.h, w.dilation.w});
}

// Convolution and Deconvolution: weight (K, C / group, KH, KW), or Deconvolution's
// (C, K / group, KH, KW), ONNX's layouts of Conv and ConvTranspose; bias (K).
void convolution_of(LayerNodes& l, const char* op) {
  const ConvolutionParameter& p = l.param().convolution_param();
  const ConvWindow w = conv_window("", p);
  std::vector<std::string> inputs{l.in[0], l.weight(0)};
  if (p.bias_term()) inputs.push_back(l.weight(1));
  onnx::NodeProto& n = l.graph.node(op, inputs, {l.out[0]}, l.name());
  set_window(n, w);
  set_attr(n, "group", int64_t{p.group()});
}

void convolution(LayerNodes& l) { convolution_of(l, "Conv"); }
void deconvolution(LayerNodes& l) { convolution_of(l, "ConvTranspose"); }

// Im2col: row c KH KW + i KW + j of the top is input channel c at kernel offset (i, j): a
// convolution with C groups of KH KW one-hot filters, weight (C KH KW, 1, KH, KW).
void im2col(LayerNodes& l) {
  const ConvWindow w = conv_window("", l.param().convolution_param());
  const int64_t c = l.bottom[0][1], taps = w.kernel.h * w.kernel.w;
  std::vector<float> onehot(size_t(c * taps * taps), 0.0f);
  for (int64_t ch = 0; ch < c; ++ch)
    for (int64_t t = 0; t < taps; ++t) onehot[size_t((ch * taps + t) * taps + t)] = 1.0f;
  const std::string filters =
      l.graph.floats(l.part("taps"), {c * taps, 1, w.kernel.h, w.kernel.w}, onehot);
  onnx::NodeProto& n = l.graph.node("Conv", {l.in[0], filters}, {l.out[0]}, l.name());
  set_window(n, w);
  set_attr(n, "group", c);
}

// ---- LRN ----

// ACROSS_CHANNELS is ONNX's LRN: x / (bias + alpha / size * sum x^2)^beta over the size
// channels centred on each (bias = Caffe's k). WITHIN_CHANNEL is Caffe's composition:
// x (1 + alpha avg)^-beta, avg the average pooling of x^2 over size x size windows, stride
// 1, zero padding (size - 1) / 2, divided by size^2 (lrn.cpp).
void lrn(LayerNodes& l) {
  const LRNParameter& p = l.param().lrn_param();
  const int64_t size = p.local_size();
  if (p.norm_region() == LRNParameter::ACROSS_CHANNELS) {
    onnx::NodeProto& n = l.graph.node("LRN", {l.in[0]}, {l.out[0]}, l.name());
    set_attr(n, "size", size);
    set_attr(n, "alpha", p.alpha());
    set_attr(n, "beta", p.beta());
    set_attr(n, "bias", p.k());
    return;
  }
  const std::string squares = l.graph.step("Mul", {l.in[0], l.in[0]}, l.part("square"));
  const std::string avg = l.graph.fresh(l.part("average"));
  const int64_t pad = (size - 1) / 2;
  pool(l, Pool::kAverage, squares, l.bottom[0], PoolWindow{{size, size}, {1, 1}, {pad, pad}},
       Extent2{l.bottom[0][2], l.bottom[0][3]}, l.part("average"), avg);
  const std::string scaled =
      l.graph.step("Mul", {avg, l.graph.scalar(l.part("alpha"), p.alpha())}, l.part("alpha"));
  const std::string base =
      l.graph.step("Add", {scaled, l.graph.scalar(l.part("one"), 1.0f)}, l.part("one"));
  const std::string factor =
      l.graph.step("Pow", {base, l.graph.scalar(l.part("beta"), -p.beta())}, l.part("power"));
  l.graph.node("Mul", {l.in[0], factor}, {l.out[0]}, l.name());
}

}  // namespace

void add_spatial_translators(std::map<std::string, LayerTranslator>& table) {
  table["Convolution"] = convolution;
  table["Deconvolution"] = deconvolution;
  table["Im2col"] = im2col;
  table["Pooling"] = pooling;
  table["SPP"] = spp;
  table["LRN"] = lrn;
}

}  // namespace lamina
