// ONNX for the layers with weights applied per output or per channel, and the normalisations:
// InnerProduct/Linear (Gemm, between Flatten and Reshape where the axes ask for them), Scale
// and Bias (Mul and Add of the parameter broadcast from its axis), BatchNorm
// (BatchNormalization with Caffe's running statistics divided by their factor; with batch
// statistics, their composition), MVN, Softmax and LogSoftmax (over their axis).
#include <cmath>

#include "onnx_graph.hpp"

namespace lamina {
namespace {

// bottom viewed as (M, K) (M the product of the dims before axis), weight (N, K), or (K, N)
// transposed; top (dims before axis, N).
void linear(LayerNodes& l) {
  const InnerProductParameter& p = l.param().inner_product_param();
  const Shape& xs = l.bottom[0];
  const int axis = canonical(l, p.axis(), int(xs.size()), "inner_product_param.axis");
  std::string x = l.in[0];
  if (xs.size() != 2 || axis != 1) {
    onnx::NodeProto* flat = nullptr;
    x = l.graph.step("Flatten", {x}, l.part("flatten"), &flat);
    set_attr(*flat, "axis", int64_t{axis});
  }
  std::vector<std::string> inputs{x, l.weight(0)};
  if (p.bias_term()) inputs.push_back(l.weight(1));
  const bool matrix_top = l.top[0].size() == 2;
  const std::string product = matrix_top ? l.out[0] : l.graph.fresh(l.part("gemm"));
  onnx::NodeProto& gemm = l.graph.node("Gemm", inputs, {product}, l.name());
  set_attr(gemm, "transB", int64_t{p.transpose() ? 0 : 1});
  if (!matrix_top)
    l.graph.node("Reshape", {product, l.graph.int64s(l.part("shape"), l.top[0])}, {l.out[0]},
                 l.part("reshape"));
}

// Where Scale's or Bias's parameter sits in bottom 0: from axis `first`, with `ones` axes of
// bottom 0 after it.
struct Broadcast {
  Shape dims;  // the parameter's shape
  int ones;
};

Broadcast broadcast_of(const LayerNodes& l, int axis, int num_axes) {
  const int axes = int(l.bottom[0].size());
  Shape dims;
  int first = 0;
  if (l.in.size() == 2) {  // bottom 1 is the parameter; no axes: a scalar
    dims = l.bottom[1];
    if (!dims.empty()) first = canonical(l, axis, axes, "axis");
  } else {
    first = canonical(l, axis, axes, "axis");
    const int end = num_axes == -1 ? axes : first + num_axes;
    dims.assign(l.bottom[0].begin() + first, l.bottom[0].begin() + end);
  }
  return {dims, axes - first - int(dims.size())};
}

// Bottom 1 (the two-bottom form) reshaped to broadcast over bottom 0.
std::string broadcast_bottom(LayerNodes& l, const Broadcast& b) {
  if (b.ones == 0 || b.dims.empty()) return l.in[1];
  return l.graph.step("Reshape", {l.in[1], l.graph.int64s(l.part("shape"),
                                                          with_trailing_ones(b.dims, b.ones))},
                      l.part("broadcast"));
}

// top = x * scale + bias; parameters: scale then bias, or (two bottoms) the bias alone.
void scale(LayerNodes& l) {
  const ScaleParameter& p = l.param().scale_param();
  const Broadcast b = broadcast_of(l, p.axis(), p.num_axes());
  const Shape dims = with_trailing_ones(b.dims, b.ones);
  const std::string factor = l.in.size() == 2 ? broadcast_bottom(l, b) : l.weight(0, dims);
  if (!p.bias_term()) {
    l.graph.node("Mul", {l.in[0], factor}, {l.out[0]}, l.name());
    return;
  }
  const std::string scaled = l.graph.step("Mul", {l.in[0], factor}, l.part("scale"));
  l.graph.node("Add", {scaled, l.weight(l.layer.params().size() - 1, dims)}, {l.out[0]},
               l.name());
}

void bias(LayerNodes& l) {
  const BiasParameter& p = l.param().bias_param();
  const Broadcast b = broadcast_of(l, p.axis(), p.num_axes());
  const std::string term = l.in.size() == 2 ? broadcast_bottom(l, b)
                                            : l.weight(0, with_trailing_ones(b.dims, b.ones));
  l.graph.node("Add", {l.in[0], term}, {l.out[0]}, l.name());
}

// The axes of x (N, C, ...) from `first` on.
std::vector<int64_t> axes_from(const Shape& xs, int first) {
  std::vector<int64_t> axes;
  for (int a = first; a < int(xs.size()); ++a) axes.push_back(a);
  return axes;
}

std::string reduce_mean(LayerNodes& l, const std::string& x, const std::vector<int64_t>& axes,
                        const std::string& step) {
  onnx::NodeProto* n = nullptr;
  const std::string mean = l.graph.step("ReduceMean", {x}, l.part(step), &n);
  set_attr(*n, "axes", axes);
  set_attr(*n, "keepdims", int64_t{1});
  return mean;
}

// BatchNorm: (x - mean) / sqrt(var + eps) per channel (axis 1). With the running statistics
// (TEST's default) mean = mean_sum / factor, var = var_sum / factor (0 while factor is 0), as
// batch_norm.cpp reads Caffe's three blobs; BatchNormalization with scale 1 and bias 0.
// With batch statistics: the mean and biased variance of the batch over every axis but 1.
void batch_norm(LayerNodes& l) {
  const BatchNormParameter& p = l.param().batch_norm_param();
  const bool global = p.has_use_global_stats() ? p.use_global_stats() : l.layer.phase() == TEST;
  const Shape& xs = l.bottom[0];
  if (!global) {
    std::vector<int64_t> axes = axes_from(xs, 2);
    axes.insert(axes.begin(), 0);
    const std::string centred =
        l.graph.step("Sub", {l.in[0], reduce_mean(l, l.in[0], axes, "mean")}, l.part("centre"));
    const std::string squares = l.graph.step("Mul", {centred, centred}, l.part("square"));
    const std::string var = reduce_mean(l, squares, axes, "variance");
    const std::string plus_eps =
        l.graph.step("Add", {var, l.graph.scalar(l.part("eps"), p.eps())}, l.part("eps"));
    const std::string std = l.graph.step("Sqrt", {plus_eps}, l.part("std"));
    l.graph.node("Div", {centred, std}, {l.out[0]}, l.name());
    return;
  }
  const std::vector<float> factor = l.values(2);
  const float f = factor[0] == 0 ? 0.0f : 1.0f / factor[0];
  std::vector<float> mean = l.values(0), var = l.values(1);
  for (float& m : mean) m *= f;
  for (float& v : var) v *= f;
  const Shape c{int64_t(mean.size())};
  onnx::NodeProto& n = l.graph.node(
      "BatchNormalization",
      {l.in[0], l.graph.floats(l.part("scale"), c, std::vector<float>(mean.size(), 1.0f)),
       l.graph.floats(l.part("bias"), c, std::vector<float>(mean.size(), 0.0f)),
       l.graph.floats(l.part("mean"), c, mean), l.graph.floats(l.part("variance"), c, var)},
      {l.out[0]}, l.name());
  set_attr(n, "epsilon", p.eps());
}

// MVN: per row (the axes from 2 on, or from 1 on across channels) y = (x - mean) /
// (sqrt(var) + eps), var biased; or x - mean without normalize_variance.
void mvn(LayerNodes& l) {
  const MVNParameter& p = l.param().mvn_param();
  const Shape& xs = l.bottom[0];
  const int first = p.across_channels() ? 1 : 2;
  LAMINA_REQUIRE(int(xs.size()) > first, "exports MVN rows of at least one axis: a bottom of "
                 "more than ", first, " axes, got ", shape_string(xs));
  const std::vector<int64_t> axes = axes_from(xs, first);
  const std::string mean = reduce_mean(l, l.in[0], axes, "mean");
  if (!p.normalize_variance()) {
    l.graph.node("Sub", {l.in[0], mean}, {l.out[0]}, l.name());
    return;
  }
  const std::string centred = l.graph.step("Sub", {l.in[0], mean}, l.part("centre"));
  const std::string squares = l.graph.step("Mul", {centred, centred}, l.part("square"));
  const std::string std =
      l.graph.step("Sqrt", {reduce_mean(l, squares, axes, "variance")}, l.part("std"));
  const std::string divisor =
      l.graph.step("Add", {std, l.graph.scalar(l.part("eps"), p.eps())}, l.part("eps"));
  l.graph.node("Div", {centred, divisor}, {l.out[0]}, l.name());
}

void softmax_of(LayerNodes& l, const char* op) {
  const int axis = canonical(l, l.param().softmax_param().axis(), int(l.bottom[0].size()),
                             "softmax_param.axis");
  set_attr(l.graph.node(op, {l.in[0]}, {l.out[0]}, l.name()), "axis", int64_t{axis});
}

void softmax(LayerNodes& l) { softmax_of(l, "Softmax"); }
void log_softmax(LayerNodes& l) { softmax_of(l, "LogSoftmax"); }

}  // namespace

void add_affine_translators(std::map<std::string, LayerTranslator>& table) {
  table["InnerProduct"] = linear;
  table["Linear"] = linear;
  table["Scale"] = scale;
  table["Bias"] = bias;
  table["BatchNorm"] = batch_norm;
  table["MVN"] = mvn;
  table["Softmax"] = softmax;
  table["LogSoftmax"] = log_softmax;
}

}  // namespace lamina
