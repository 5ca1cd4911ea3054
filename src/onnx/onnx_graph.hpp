// The ONNX graph being written, and what a layer's translation is given (onnx_layers_*.cpp).
//
// OnnxGraph wraps the GraphProto: nodes with their attributes, initializers (float weights,
// int64 lists such as Reshape's target shape), and unique value names. ONNX values are
// written once (SSA), while a Lamina blob may be written several times (layers in place);
// the exporter (onnx_export.cpp) gives each write of a blob its own name and each layer the
// names to read and write (LayerNodes).
//
// Conventions: every value is FP32 unless a node says otherwise (ArgMax's and TopK's
// indices are int64 and cast back to float at once, as Lamina's indices are floats).
// Shapes are the net's, fixed: the batch is the deploy net's Input shape.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

class OnnxGraph {
 public:
  explicit OnnxGraph(onnx::GraphProto* graph) : graph_(graph) {}

  // A value name not used yet: base, else base_2, base_3, ...
  std::string fresh(const std::string& base);
  // Reserves a name (a blob's last version, a graph input) so that fresh() never returns it.
  void reserve(const std::string& name) { used_.insert(name); }

  // Adds a node named `name` (the layer's name, or "<layer>/<step>"); returns it for
  // attributes.
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& inputs,
                        const std::vector<std::string>& outputs, const std::string& name);
  // Adds a node with one output, a fresh value named after the node; returns that value.
  std::string step(const std::string& op, const std::vector<std::string>& inputs,
                   const std::string& name, onnx::NodeProto** made = nullptr);

  // Initializers (constant inputs), named `name` (made unique); each returns its value name.
  std::string floats(const std::string& name, const Shape& dims, const std::vector<float>& v);
  std::string scalar(const std::string& name, float v);  // shape ()
  std::string int64s(const std::string& name, const std::vector<int64_t>& v);  // shape (n)

  // Declares a value's type and shape (FP32): a graph input, an output or an intermediate
  // value whose shape strict shape inference must then reproduce.
  void declare(onnx::ValueInfoProto* info, const std::string& value, const Shape& shape);

  onnx::GraphProto& proto() { return *graph_; }

 private:
  onnx::GraphProto* graph_;
  std::set<std::string> used_;
};

// Attributes.
void set_attr(onnx::NodeProto& node, const std::string& name, int64_t v);
void set_attr(onnx::NodeProto& node, const std::string& name, float v);
void set_attr(onnx::NodeProto& node, const std::string& name, const std::vector<int64_t>& v);

// One layer's translation: the layer (its settings and parameters), the ONNX names of its
// bottoms (in) and of the values it must write for its tops (out), and the bottoms' and
// tops' shapes as the net has them.
struct LayerNodes {
  const Layer& layer;
  OnnxGraph& graph;
  std::vector<std::string> in, out;
  std::vector<Shape> bottom, top;

  const std::string& name() const { return layer.name(); }
  const LayerParameter& param() const { return layer.param(); }
  // Parameter i's values and shape.
  std::vector<float> values(size_t i) const;
  const Shape& param_shape(size_t i) const;
  // Parameter i as an initializer named after it, in its own shape or in `dims`.
  std::string weight(size_t i) const;
  std::string weight(size_t i, const Shape& dims) const;
  // "<layer>/<step>": the name of one of several nodes.
  std::string part(const std::string& step) const { return name() + "/" + step; }
};

// Translates one layer into nodes; throws an Error for settings ONNX cannot express.
using LayerTranslator = void (*)(LayerNodes&);

// The translators by Lamina layer type, of each group (onnx_layers_*.cpp).
void add_affine_translators(std::map<std::string, LayerTranslator>& table);
void add_spatial_translators(std::map<std::string, LayerTranslator>& table);
void add_pointwise_translators(std::map<std::string, LayerTranslator>& table);
void add_shape_translators(std::map<std::string, LayerTranslator>& table);

// Shared by the translators: `dims` followed by `ones` axes of 1, so that ONNX's right-aligned
// broadcasting puts a per-channel parameter (C) over (N, C, H, W) as (C, 1, 1).
Shape with_trailing_ones(const Shape& dims, int ones);
// An axis as Caffe writes it (negative counts from the end), checked against `axes`.
int canonical(const LayerNodes& l, int axis, int axes, const std::string& field);

}  // namespace lamina
