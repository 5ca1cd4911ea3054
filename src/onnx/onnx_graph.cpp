// OnnxGraph: nodes, initializers and unique value names of the graph being exported.
#include "onnx_graph.hpp"

namespace lamina {

std::string OnnxGraph::fresh(const std::string& base) {
  std::string name = base;
  for (int k = 2; used_.count(name) > 0; ++k) name = base + "_" + std::to_string(k);
  used_.insert(name);
  return name;
}

onnx::NodeProto& OnnxGraph::node(const std::string& op, const std::vector<std::string>& inputs,
                                 const std::vector<std::string>& outputs,
                                 const std::string& name) {
  onnx::NodeProto& n = *graph_->add_node();
  n.set_op_type(op);
  n.set_name(name);
  for (const std::string& i : inputs) n.add_input(i);
  for (const std::string& o : outputs) n.add_output(o);
  return n;
}

std::string OnnxGraph::step(const std::string& op, const std::vector<std::string>& inputs,
                            const std::string& name, onnx::NodeProto** made) {
  const std::string out = fresh(name);
  onnx::NodeProto& n = node(op, inputs, {out}, name);
  if (made) *made = &n;
  return out;
}

std::string OnnxGraph::floats(const std::string& name, const Shape& dims,
                              const std::vector<float>& v) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  LAMINA_REQUIRE(count == int64_t(v.size()), "initializer '", name, "' of shape ",
                 shape_string(dims), " given ", v.size(), " values");
  onnx::TensorProto& t = *graph_->add_initializer();
  t.set_name(fresh(name));
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  return t.name();
}

std::string OnnxGraph::scalar(const std::string& name, float v) { return floats(name, {}, {v}); }

std::string OnnxGraph::int64s(const std::string& name, const std::vector<int64_t>& v) {
  onnx::TensorProto& t = *graph_->add_initializer();
  t.set_name(fresh(name));
  t.set_data_type(onnx::TensorProto::INT64);
  t.add_dims(int64_t(v.size()));
  for (int64_t x : v) t.add_int64_data(x);
  return t.name();
}

void OnnxGraph::declare(onnx::ValueInfoProto* info, const std::string& value,
                        const Shape& shape) {
  info->set_name(value);
  onnx::TypeProto_Tensor& t = *info->mutable_type()->mutable_tensor_type();
  t.set_elem_type(onnx::TensorProto::FLOAT);
  onnx::TensorShapeProto& s = *t.mutable_shape();
  for (int64_t d : shape) s.add_dim()->set_dim_value(d);
}

void set_attr(onnx::NodeProto& node, const std::string& name, int64_t v) {
  onnx::AttributeProto& a = *node.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INT);
  a.set_i(v);
}

void set_attr(onnx::NodeProto& node, const std::string& name, float v) {
  onnx::AttributeProto& a = *node.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::FLOAT);
  a.set_f(v);
}

void set_attr(onnx::NodeProto& node, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto& a = *node.add_attribute();
  a.set_name(name);
  a.set_type(onnx::AttributeProto::INTS);
  for (int64_t x : v) a.add_ints(x);
}

std::vector<float> LayerNodes::values(size_t i) const {
  LAMINA_REQUIRE(i < layer.params().size(), "has ", layer.params().size(),
                 " parameter(s); parameter ", i, " is missing");
  return layer.params()[i].tensor->copy_data_to_host();
}

const Shape& LayerNodes::param_shape(size_t i) const { return layer.params()[i].tensor->shape(); }

std::string LayerNodes::weight(size_t i) const { return weight(i, param_shape(i)); }

std::string LayerNodes::weight(size_t i, const Shape& dims) const {
  return graph.floats(layer.params()[i].tensor->name(), dims, values(i));
}

Shape with_trailing_ones(const Shape& dims, int ones) {
  Shape s = dims;
  s.insert(s.end(), size_t(std::max(ones, 0)), 1);
  return s;
}

int canonical(const LayerNodes& l, int axis, int axes, const std::string& field) {
  LAMINA_REQUIRE(axis >= -axes && axis < axes, l.param().type(), "'s ", field, " ", axis,
                 " is out of range for a bottom of ", axes, " axes");
  return axis < 0 ? axis + axes : axis;
}

}  // namespace lamina
