// ONNX for the layers that move, pick or reduce values: Flatten and Reshape (Reshape to the
// net's top shape), Concat, Slice (Split), Crop (Slice), Tile, Reduction (ReduceSum,
// ReduceL1, ReduceSumSquare, ReduceMean, times coeff), ArgMax (TopK), Embed and BatchReindex
// (Gather on the integer parts of the float indices), Parameter (its value as an
// initializer), Silence (nothing: its bottoms are simply not outputs).
#include <limits>

#include "onnx_graph.hpp"

namespace lamina {
namespace {

void reshape(LayerNodes& l) {
  l.graph.node("Reshape", {l.in[0], l.graph.int64s(l.part("shape"), l.top[0])}, {l.out[0]},
               l.name());
}

void concat(LayerNodes& l) {
  const ConcatParameter& p = l.param().concat_param();
  const int axis = p.has_concat_dim() ? int(p.concat_dim())
                                      : canonical(l, p.axis(), int(l.top[0].size()), "axis");
  set_attr(l.graph.node("Concat", l.in, l.out, l.name()), "axis", int64_t{axis});
}

// The parts' sizes are the tops' dims along the axis.
void slice(LayerNodes& l) {
  const SliceParameter& p = l.param().slice_param();
  const int axis = p.has_slice_dim() ? int(p.slice_dim())
                                     : canonical(l, p.axis(), int(l.bottom[0].size()), "axis");
  std::vector<int64_t> sizes;
  for (const Shape& t : l.top) sizes.push_back(t[size_t(axis)]);
  onnx::NodeProto& n =
      l.graph.node("Split", {l.in[0], l.graph.int64s(l.part("sizes"), sizes)}, l.out, l.name());
  set_attr(n, "axis", int64_t{axis});
}

// The axes from crop_param.axis on take the reference's sizes, read from x at the offsets.
void crop(LayerNodes& l) {
  const CropParameter& p = l.param().crop_param();
  const Shape& xs = l.bottom[0];
  const int start = canonical(l, p.axis(), int(xs.size()), "crop_param.axis");
  std::vector<int64_t> starts, ends, axes;
  for (int a = start; a < int(xs.size()); ++a) {
    const int64_t offset =
        p.offset_size() == 0 ? 0 : p.offset(p.offset_size() == 1 ? 0 : a - start);
    starts.push_back(offset);
    ends.push_back(offset + l.top[0][size_t(a)]);
    axes.push_back(a);
  }
  l.graph.node("Slice", {l.in[0], l.graph.int64s(l.part("starts"), starts),
                         l.graph.int64s(l.part("ends"), ends), l.graph.int64s(l.part("axes"), axes)},
               {l.out[0]}, l.name());
}

void tile(LayerNodes& l) {
  const TileParameter& p = l.param().tile_param();
  const Shape& xs = l.bottom[0];
  std::vector<int64_t> repeats(xs.size(), 1);
  repeats[size_t(canonical(l, p.axis(), int(xs.size()), "tile_param.axis"))] = p.tiles();
  l.graph.node("Tile", {l.in[0], l.graph.int64s(l.part("repeats"), repeats)}, {l.out[0]},
               l.name());
}

// Every axis from reduction_param.axis on is reduced; the top keeps the dims before it.
void reduction(LayerNodes& l) {
  const ReductionParameter& p = l.param().reduction_param();
  const Shape& xs = l.bottom[0];
  std::vector<int64_t> axes;
  for (int a = canonical(l, p.axis(), int(xs.size()), "reduction_param.axis");
       a < int(xs.size()); ++a)
    axes.push_back(a);
  const bool scaled = p.coeff() != 1;
  const std::string reduced = scaled ? l.graph.fresh(l.part("reduce")) : l.out[0];
  onnx::NodeProto* n = nullptr;
  switch (p.operation()) {
    case ReductionParameter::SUM:  // axes are an input of ReduceSum since opset 13
      n = &l.graph.node("ReduceSum", {l.in[0], l.graph.int64s(l.part("axes"), axes)}, {reduced},
                        l.name());
      break;
    case ReductionParameter::ASUM:
      n = &l.graph.node("ReduceL1", {l.in[0]}, {reduced}, l.name());
      break;
    case ReductionParameter::SUMSQ:
      n = &l.graph.node("ReduceSumSquare", {l.in[0]}, {reduced}, l.name());
      break;
    case ReductionParameter::MEAN:
      n = &l.graph.node("ReduceMean", {l.in[0]}, {reduced}, l.name());
      break;
  }
  if (p.operation() != ReductionParameter::SUM) set_attr(*n, "axes", axes);
  set_attr(*n, "keepdims", int64_t{0});
  if (scaled)
    l.graph.node("Mul", {reduced, l.graph.scalar(l.part("coeff"), p.coeff())}, {l.out[0]},
                 l.part("coeff"));
}

// ArgMax: the top_k largest along the axis (without one, over everything after axis 0),
// larger indices first among equal values (Caffe's order). ONNX's TopK puts the lower index
// first, so it runs on the axis reversed, and index i there is D - 1 - i.
void argmax(LayerNodes& l) {
  const ArgMaxParameter& p = l.param().argmax_param();
  const Shape& xs = l.bottom[0];
  std::string x = l.in[0];
  int axis = 1;
  int64_t d = 0;
  if (p.has_axis()) {
    axis = canonical(l, p.axis(), int(xs.size()), "argmax_param.axis");
    d = xs[size_t(axis)];
  } else {
    d = 1;
    for (size_t a = 1; a < xs.size(); ++a) d *= xs[a];
    x = l.graph.step("Reshape", {x, l.graph.int64s(l.part("rows"), {xs[0], d})}, l.part("rows"));
  }
  const std::string reversed = l.graph.step(
      "Slice", {x, l.graph.int64s(l.part("reverse_starts"), {-1}),
                l.graph.int64s(l.part("reverse_ends"), {std::numeric_limits<int64_t>::min()}),
                l.graph.int64s(l.part("reverse_axes"), {axis}),
                l.graph.int64s(l.part("reverse_steps"), {-1})},
      l.part("reverse"));
  const std::string values = l.graph.fresh(l.part("values"));
  const std::string positions = l.graph.fresh(l.part("positions"));
  onnx::NodeProto& topk =
      l.graph.node("TopK", {reversed, l.graph.int64s(l.part("k"), {int64_t{p.top_k()}})},
                   {values, positions}, l.part("topk"));
  set_attr(topk, "axis", int64_t{axis});
  if (p.has_axis() && p.out_max_val()) {
    l.graph.node("Identity", {values}, {l.out[0]}, l.name());
    return;
  }
  onnx::NodeProto* cast = nullptr;
  const std::string reversed_index = l.graph.step("Cast", {positions}, l.part("cast"), &cast);
  set_attr(*cast, "to", int64_t{onnx::TensorProto::FLOAT});
  const std::string last = l.graph.scalar(l.part("last"), float(d - 1));
  if (p.has_axis()) {
    l.graph.node("Sub", {last, reversed_index}, {l.out[0]}, l.name());
    return;
  }
  const std::string index = l.graph.step("Sub", {last, reversed_index}, l.part("index"));
  const std::string top_shape = l.graph.int64s(l.part("shape"), l.top[0]);
  if (!p.out_max_val()) {
    l.graph.node("Reshape", {index, top_shape}, {l.out[0]}, l.name());
    return;
  }
  // (N, 2, top_k): the indices, then the values.
  const std::string row = l.graph.int64s(l.part("row"), {xs[0], 1, int64_t{p.top_k()}});
  const std::string a = l.graph.step("Reshape", {index, row}, l.part("index_row"));
  const std::string b = l.graph.step("Reshape", {values, row}, l.part("value_row"));
  onnx::NodeProto* join = nullptr;
  const std::string both = l.graph.step("Concat", {a, b}, l.part("join"), &join);
  set_attr(*join, "axis", int64_t{1});
  l.graph.node("Reshape", {both, top_shape}, {l.out[0]}, l.name());
}

// The integer part of float indices, as int64 (Cast truncates toward zero, as Lamina reads
// an index).
std::string indices(LayerNodes& l, const std::string& v) {
  onnx::NodeProto* cast = nullptr;
  const std::string out = l.graph.step("Cast", {v}, l.part("indices"), &cast);
  set_attr(*cast, "to", int64_t{onnx::TensorProto::INT64});
  return out;
}

// Embed: rows of the weight (input_dim, num_output), plus the bias (num_output).
void embed(LayerNodes& l) {
  const bool bias = l.param().embed_param().bias_term();
  const std::string idx = indices(l, l.in[0]);
  const std::string rows = bias ? l.graph.fresh(l.part("rows")) : l.out[0];
  l.graph.node("Gather", {l.weight(0), idx}, {rows}, bias ? l.part("rows") : l.name());
  if (bias) l.graph.node("Add", {rows, l.weight(1)}, {l.out[0]}, l.name());
}

void batch_reindex(LayerNodes& l) {
  set_attr(l.graph.node("Gather", {l.in[0], indices(l, l.in[1])}, {l.out[0]}, l.name()), "axis",
           int64_t{0});
}

void parameter(LayerNodes& l) { l.graph.node("Identity", {l.weight(0)}, {l.out[0]}, l.name()); }

void silence(LayerNodes&) {}

}  // namespace

void add_shape_translators(std::map<std::string, LayerTranslator>& table) {
  table["Flatten"] = reshape;
  table["Reshape"] = reshape;
  table["Concat"] = concat;
  table["Slice"] = slice;
  table["Crop"] = crop;
  table["Tile"] = tile;
  table["Reduction"] = reduction;
  table["ArgMax"] = argmax;
  table["Embed"] = embed;
  table["BatchReindex"] = batch_reindex;
  table["Parameter"] = parameter;
  table["Silence"] = silence;
}

}  // namespace lamina
