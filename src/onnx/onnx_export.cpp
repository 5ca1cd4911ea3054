// export_onnx: walks a built net layer by layer and writes its ONNX graph (onnx_export.hpp).
//
// Blob versions. A blob written several times (layers working in place) becomes one ONNX
// value per write: the last write keeps the blob's name (so outputs are named as the net's
// blobs are), earlier ones are named "<blob>/<layer that wrote it>". An Input layer's blob
// keeps its name as the graph input even when a later layer writes it in place. Split tops
// are the same value as their bottom (no node; an Identity names one that is an output).
// Every value a layer writes is declared with the net's shape, so strict shape inference
// checks each translation's shapes.
#include <onnx/checker.h>
#include <onnx/shape_inference/implementation.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "lamina/backend_factory.hpp"
#include "lamina/io.hpp"
#include "lamina/onnx_export.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/version.hpp"
#include "lamina/weights_file.hpp"
#include "onnx_graph.hpp"

namespace lamina {
namespace {

const std::map<std::string, LayerTranslator>& translators() {
  static const std::map<std::string, LayerTranslator> table = [] {
    std::map<std::string, LayerTranslator> t;
    add_affine_translators(t);
    add_spatial_translators(t);
    add_pointwise_translators(t);
    add_shape_translators(t);
    return t;
  }();
  return table;
}

// Why a layer without a translation has none, and what to do.
std::string why_not_exported(const Layer& layer) {
  const std::string& type = layer.type();
  if (layer.is_loss() || type == "Accuracy")
    return "a loss or accuracy layer is part of training, not of the model: export the deploy "
           "net (models/mnist/*_deploy.prototxt: an Input layer for the data, no loss)";
  if (layer.min_bottoms() == 0)
    return "it reads its data itself, and an ONNX model takes its inputs from outside: export "
           "the deploy net, with an Input layer of the same top shapes in its place";
  if (type == "Filter")
    return "its tops' row counts depend on the selector's values, and the exported graph has "
           "the net's fixed shapes";
  if (type == "HDF5Output") return "it writes files; remove it from the deploy net";
  if (!layer.param().has_type() || type.empty()) return "it has no type";
  std::string list;
  for (const std::string& t : onnx_exportable_types()) list += (list.empty() ? "" : ", ") + t;
  return "ONNX export has no translation for this type (custom layers included); the types "
         "it translates are " + list;
}

std::string layer_label(const Layer& layer) {
  return "layer '" + layer.name() + "' (" + layer.type() + ")";
}

class Exporter {
 public:
  Exporter(Net& net, onnx::GraphProto* graph) : net_(net), graph_(graph) {
    for (const std::string& name : net.blob_names()) blob_name_[&net.blob(name)] = name;
  }

  void run() {
    count_writes();
    for (int i = 0; i < net_.num_layers(); ++i) translate(i);
    for (const std::string& blob : output_blobs()) {
      Tensor& t = net_.blob(blob);
      std::string value = current_.at(&t);
      // A Split's top is its bottom's value: the output gets the blob's name (unless an
      // input holds it: a blob written in place from a graph input).
      if (value != blob && !inputs_.count(blob)) {
        graph_.node("Identity", {value}, {blob}, blob + "/output");
        value = blob;
      }
      graph_.declare(graph_.proto().add_output(), value, t.shape());
      outputs_.push_back(blob);
    }
    // An output's value is declared as an output, not again as an intermediate value.
    std::set<std::string> outputs;
    for (const onnx::ValueInfoProto& v : graph_.proto().output()) outputs.insert(v.name());
    for (const auto& [value, shape] : written_)
      if (!outputs.count(value)) graph_.declare(graph_.proto().add_value_info(), value, shape);
  }

  // The blobs of the graph's outputs, in order.
  const std::vector<std::string>& outputs() const { return outputs_; }

  // The layer whose node a checker's message names (the longest node name in it), or null.
  const Layer* layer_named_in(const std::string& message) const {
    const Layer* found = nullptr;
    size_t longest = 0;
    for (const auto& [node, layer] : node_layer_)
      if (node.size() > longest && message.find(node) != std::string::npos) {
        found = layer;
        longest = node.size();
      }
    return found;
  }

 private:
  // The blobs whose last value no later layer reads, in the order they were made (Caffe's
  // outputs: unlike Net::output_names, a blob an in-place layer writes last counts).
  std::vector<std::string> output_blobs() const {
    std::vector<const Tensor*> available;
    for (int i = 0; i < net_.num_layers(); ++i) {
      for (Tensor* b : net_.layer_bottoms(i))
        available.erase(std::remove(available.begin(), available.end(), b), available.end());
      for (Tensor* t : net_.layer_tops(i))
        if (std::find(available.begin(), available.end(), t) == available.end())
          available.push_back(t);
    }
    std::vector<std::string> names;
    for (const Tensor* t : available) names.push_back(blob_name_.at(t));
    LAMINA_REQUIRE(!names.empty(), "net '", net_.name(), "' has no outputs (every blob is read "
                   "by a later layer) and exports to no ONNX graph");
    return names;
  }

  bool is_input(int i) const { return net_.layer(i).type() == "Input"; }

  // How often each blob is written; no other value takes a blob's name.
  void count_writes() {
    for (int i = 0; i < net_.num_layers(); ++i) {
      if (net_.layer(i).type() == "Split") continue;
      for (Tensor* t : net_.layer_tops(i)) {
        ++writes_[t];
        if (is_input(i)) input_blob_.insert(t);
      }
    }
    for (const auto& [t, name] : blob_name_) graph_.reserve(name);
  }

  // The name of the value a write of blob t by layer i makes.
  std::string next_version(Tensor* t, const Layer& layer) {
    const std::string& blob = blob_name_.at(t);
    const int k = done_[t]++;
    const bool keeps_name = input_blob_.count(t) ? k == 0 : k == writes_[t] - 1;
    return keeps_name ? blob : graph_.fresh(blob + "/" + layer.name());
  }

  void translate(int i) {
    const Layer& layer = net_.layer(i);
    const Tensors bottoms = net_.layer_bottoms(i), tops = net_.layer_tops(i);
    if (layer.type() == "Split") {  // every top is the bottom's value
      for (Tensor* t : tops) current_[t] = current_.at(bottoms[0]);
      return;
    }
    if (layer.type() == "Input") {
      for (Tensor* t : tops) {
        current_[t] = next_version(t, layer);
        graph_.declare(graph_.proto().add_input(), current_[t], t->shape());
        inputs_.insert(current_[t]);
      }
      return;
    }
    const auto found = translators().find(layer.type());
    LAMINA_REQUIRE(found != translators().end(), layer_label(layer), " cannot be exported to "
                   "ONNX: ", why_not_exported(layer));
    LayerNodes l{layer, graph_, {}, {}, {}, {}};
    for (Tensor* b : bottoms) {
      l.in.push_back(current_.at(b));
      l.bottom.push_back(b->shape());
    }
    for (Tensor* t : tops) {
      l.out.push_back(next_version(t, layer));
      l.top.push_back(t->shape());
    }
    const int first_node = graph_.proto().node_size();
    try {
      found->second(l);
    } catch (const Error& e) {
      fail(layer_label(layer), " cannot be exported to ONNX: ", e.what());
    }
    for (int n = first_node; n < graph_.proto().node_size(); ++n)
      node_layer_[graph_.proto().node(n).name()] = &layer;
    for (size_t k = 0; k < tops.size(); ++k) {
      current_[tops[k]] = l.out[k];
      written_.emplace_back(l.out[k], l.top[k]);
    }
  }

  Net& net_;
  OnnxGraph graph_;
  std::map<const Tensor*, std::string> blob_name_;
  std::map<const Tensor*, int> writes_, done_;
  std::set<const Tensor*> input_blob_;
  std::map<const Tensor*, std::string> current_;  // the value holding each blob now
  std::set<std::string> inputs_;
  std::vector<std::string> outputs_;  // the output blobs
  std::vector<std::pair<std::string, Shape>> written_;  // every value a layer wrote
  std::map<std::string, const Layer*> node_layer_;
};

// ONNX's checker, then strict shape inference (type checks, node errors thrown, data
// propagation) on a copy; a failure names the layer whose node it concerns.
void check(const onnx::ModelProto& model, const Exporter& exporter) {
  const char* stage = "checker";
  try {
    onnx::checker::check_model(model);
    stage = "strict shape inference";
    onnx::ModelProto inferred = model;
    onnx::shape_inference::InferShapes(inferred, onnx::OpSchemaRegistry::Instance(),
                                       onnx::ShapeInferenceOptions(true, 1, true));
  } catch (const std::exception& e) {
    const Layer* layer = exporter.layer_named_in(e.what());
    fail(layer ? layer_label(*layer) + ": " : std::string("the exported model: "), "ONNX's ",
         stage, " refused the exported nodes: ", e.what());
  }
}

}  // namespace

std::vector<std::string> onnx_exportable_types() {
  std::vector<std::string> types{"Input", "Split"};
  for (const auto& [type, translate] : translators()) types.push_back(type);
  std::sort(types.begin(), types.end());
  return types;
}

OnnxModel export_onnx(Net& net, const std::string& producer) {
  onnx::ModelProto model;
  model.set_ir_version(onnx::IR_VERSION);
  model.set_producer_name(producer);
  model.set_producer_version(version());
  onnx::OperatorSetIdProto& opset = *model.add_opset_import();
  opset.set_domain("");
  opset.set_version(kOnnxOpset);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name(net.name().empty() ? "net" : net.name());
  Exporter exporter(net, &graph);
  exporter.run();
  check(model, exporter);

  OnnxModel out;
  LAMINA_REQUIRE(model.SerializeToString(&out.bytes), "could not serialize the ONNX model of "
                 "net '", net.name(), "'");
  for (const onnx::ValueInfoProto& v : graph.input()) out.inputs.push_back(v.name());
  for (const onnx::ValueInfoProto& v : graph.output()) out.outputs.push_back(v.name());
  out.output_blobs = exporter.outputs();
  out.nodes = graph.node_size();
  for (const onnx::TensorProto& t : graph.initializer()) {
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    if (t.data_type() == onnx::TensorProto::FLOAT) out.weights += n;
  }
  return out;
}

void write_onnx(const OnnxModel& model, const std::string& path) {
  write_file_atomically(path, model.bytes);
}

std::string onnx_tensor_bytes(const std::string& name, const Shape& shape,
                              const std::vector<float>& values) {
  onnx::TensorProto t;
  t.set_name(name);
  t.set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : shape) t.add_dims(d);
  t.set_raw_data(std::string(reinterpret_cast<const char*>(values.data()),
                             values.size() * sizeof(float)));
  std::string bytes;
  LAMINA_REQUIRE(t.SerializeToString(&bytes), "could not serialize tensor '", name, "'");
  return bytes;
}

OnnxModel write_onnx_test_case(Net& net, const std::string& dir) {
  OnnxModel model = export_onnx(net);
  const std::filesystem::path data = std::filesystem::path(dir) / "test_data_set_0";
  std::filesystem::create_directories(data);
  write_onnx(model, (std::filesystem::path(dir) / "model.onnx").string());
  // The inputs before the forward pass, which may overwrite them (a layer in place).
  const auto write_blobs = [&](const std::vector<std::string>& names, const char* kind) {
    for (size_t i = 0; i < names.size(); ++i) {
      const Tensor& t = net.blob(names[i]);
      write_file_atomically((data / (kind + std::to_string(i) + ".pb")).string(),
                            onnx_tensor_bytes(names[i], t.shape(), t.copy_data_to_host()));
    }
  };
  write_blobs(model.inputs, "input_");
  net.forward();
  write_blobs(model.output_blobs, "output_");
  return model;
}

OnnxModel export_onnx_file(const std::string& model_path, const std::string& weights_path,
                           const std::string& output_path) {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  Net net(read_net_parameter(model_path), TEST, *backend, 1, nullptr, model_path);
  load_weights_file(net, weights_path, WeightsMatch::kRequireAll, "TEST net of " + model_path);
  OnnxModel model = export_onnx(net);
  write_onnx(model, output_path);
  return model;
}

}  // namespace lamina
