// lamina.Net: a net built from a prototxt on a device, run forward and backward on NumPy
// inputs, with its blobs and parameters (blobs.cpp) and its weights files.
#include <algorithm>
#include <map>
#include <optional>
#include <vector>

#include <pybind11/stl.h>

#include "arrays.hpp"
#include "handles.hpp"
#include "lamina/caffe_weights.hpp"
#include "lamina/io.hpp"
#include "lamina/net_state.hpp"
#include "lamina/weights_file.hpp"

namespace lamina::python {

namespace {

Phase phase_named(const std::string& phase) {
  if (phase == "train") return TRAIN;
  if (phase == "test") return TEST;
  throw py::value_error("phase must be 'train' or 'test'; got '" + phase + "'");
}

WeightsMatch match_named(const std::string& match) {
  if (match == "all") return WeightsMatch::kRequireAll;
  if (match == "exact") return WeightsMatch::kExact;
  if (match == "fine_tune") return WeightsMatch::kFineTune;
  throw py::value_error("match must be 'all' (every parameter of the net in the file), "
                        "'exact' (and nothing else in it) or 'fine_tune' (parameters absent "
                        "from the file keep their fillers); got '" + match + "'");
}

// input_shapes: the shape each named top of the net's Input layers takes instead of the one
// its prototxt gives (a batch size, an image size). Caffe's input header becomes its Input
// layer first, as the net builder would make it.
void set_input_shapes(NetParameter& param, const std::map<std::string, Shape>& shapes,
                      const std::string& source) {
  if (shapes.empty()) return;
  if (std::optional<LayerParameter> header = input_header_layer(param, source)) {
    param.clear_input();
    param.clear_input_shape();
    param.clear_input_dim();
    param.add_layer()->Swap(&*header);
    auto* layers = param.mutable_layer();
    std::rotate(layers->rbegin(), layers->rbegin() + 1, layers->rend());
  }
  std::map<std::string, Shape> todo = shapes;
  std::vector<std::string> inputs;
  for (LayerParameter& layer : *param.mutable_layer()) {
    if (layer.type() != "Input") continue;
    InputParameter& input = *layer.mutable_input_param();
    // One shape per top from here on (a single shape may serve every top).
    while (input.shape_size() > 0 && input.shape_size() < layer.top_size())
      *input.add_shape() = input.shape(0);
    for (int t = 0; t < layer.top_size(); ++t) {
      inputs.push_back(layer.top(t));
      auto it = todo.find(layer.top(t));
      if (it == todo.end()) continue;
      BlobShape* shape = t < input.shape_size() ? input.mutable_shape(t) : input.add_shape();
      shape->clear_dim();
      for (int64_t d : it->second) shape->add_dim(d);
      todo.erase(it);
    }
  }
  if (!todo.empty()) {
    throw py::value_error(
        "input_shapes names '" + todo.begin()->first + "', which is not a top of an Input " +
        "layer of " + source + "; its Input tops: " + some_names(inputs, inputs.size()));
  }
}

NetRef build_net(NetParameter param, const std::string& source, std::optional<std::string> weights,
                 const std::string& phase, const std::string& device,
                 const std::vector<std::string>& stages, std::optional<int> level,
                 const std::map<std::string, Shape>& input_shapes, uint64_t seed) {
  const Phase net_phase = phase_named(phase);
  for (const std::string& stage : stages) param.mutable_state()->add_stage(stage);
  if (level) param.mutable_state()->set_level(*level);
  set_input_shapes(param, input_shapes, source);
  auto handle = std::make_shared<NetHandle>();
  handle->backend = backend_for(device);
  handle->device = device_string(*handle->backend);
  py::gil_scoped_release unlocked;
  handle->owned = std::make_unique<Net>(param, net_phase, *handle->backend, seed, nullptr, source);
  handle->net = handle->owned.get();
  if (weights) load_weights_file(*handle->net, *weights, WeightsMatch::kRequireAll);
  return handle;
}

py::dict outputs_of(Net& net) {
  py::dict outputs;
  for (const std::string& name : net.output_names()) {
    Tensor& t = net.blob(name);
    std::vector<float> values;
    {
      py::gil_scoped_release unlocked;
      values = t.copy_data_to_host();
    }
    outputs[py::str(name)] = copy_of(values, t.shape(), true);
  }
  return outputs;
}

py::dict forward(const NetRef& n, const py::kwargs& inputs) {
  Net& net = *n->net;
  for (const auto& [key, value] : inputs) {
    const std::string name = key.cast<std::string>();
    Tensor& blob = net.blob(name);
    const std::vector<float> values = values_for(value, blob.shape(), "input '" + name + "'");
    py::gil_scoped_release unlocked;
    blob.copy_data_from_host(values);
  }
  {
    py::gil_scoped_release unlocked;
    // A solver's net leaves its 16-bit weights to the update; here Python may have written
    // the weights since (nothing is done when no layer runs in 16 bits).
    if (!n->owned) net.refresh_half_weights();
    net.forward();
  }
  return outputs_of(net);
}

void backward(const NetRef& n) {
  Net& net = *n->net;
  py::gil_scoped_release unlocked;
  // Gradients add to what the parameters' diffs hold, which Python may have written.
  net.arena().gradients_written();
  net.backward();
}

py::dict load(const NetRef& n, const std::string& path, const std::string& match,
              bool allow_unmatched) {
  const WeightsMatch how = match_named(match);
  WeightsLoadReport report;
  {
    py::gil_scoped_release unlocked;
    report = load_weights_file(*n->net, path, how, "net '" + n->net->name() + "'",
                               allow_unmatched, ", or give allow_unmatched=True");
  }
  py::dict result;
  result["loaded"] = report.loaded;
  result["kept_filler"] = report.kept_filler;
  result["ignored"] = report.ignored;
  return result;
}

void save(const NetRef& n, const std::string& path) {
  const bool caffe = path.size() >= 11 && path.compare(path.size() - 11, 11, ".caffemodel") == 0;
  py::gil_scoped_release unlocked;
  if (caffe) {
    save_caffemodel(*n->net, path);
  } else {
    save_weights(*n->net, path);
  }
}

std::vector<std::string> input_names(Net& net) {
  std::vector<std::string> names;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i).type() != "Input") continue;
    for (Tensor* top : net.layer_tops(i)) names.push_back(top->name());
  }
  return names;
}

}  // namespace

py::object solver_net(std::shared_ptr<Backend> backend, Net& net, py::object solver) {
  auto handle = std::make_shared<NetHandle>();
  handle->backend = std::move(backend);
  handle->device = device_string(*handle->backend);
  handle->net = &net;
  handle->owner = std::move(solver);
  return py::cast(handle);
}

void add_net(py::module_& m) {
  py::class_<NetHandle, NetRef>(m, "Net", "A net built from a prototxt, on one device.")
      .def(py::init([](const std::string& model, std::optional<std::string> weights,
                       const std::string& phase, const std::string& device,
                       const std::vector<std::string>& stages, std::optional<int> level,
                       const std::map<std::string, Shape>& input_shapes, uint64_t seed) {
             NetParameter param;
             {
               py::gil_scoped_release unlocked;
               param = read_net_parameter(model);
             }
             return build_net(std::move(param), model, weights, phase, device, stages, level,
                              input_shapes, seed);
           }),
           py::arg("model"), py::arg("weights") = py::none(), py::kw_only(),
           py::arg("phase") = "test", py::arg("device") = "cpu",
           py::arg("stages") = std::vector<std::string>{}, py::arg("level") = py::none(),
           py::arg("input_shapes") = std::map<std::string, Shape>{}, py::arg("seed") = 1,
           "Builds the net of prototxt file `model` in `phase` ('train' or 'test') on "
           "`device` ('cpu', 'cuda:N'), with the file's state plus `stages` and `level`; "
           "`weights` (a Lamina or Caffe weights file) must hold every parameter. "
           "input_shapes: {top of an Input layer: shape} replacing the prototxt's. seed: the "
           "fillers' and data layers' seed.")
      .def_static(
          "from_text",
          [](const std::string& text, std::optional<std::string> weights, const std::string& phase,
             const std::string& device, const std::vector<std::string>& stages,
             std::optional<int> level, const std::map<std::string, Shape>& input_shapes,
             uint64_t seed) {
            return build_net(parse_net_parameter(text, "<text>"), "<text>", weights, phase,
                             device, stages, level, input_shapes, seed);
          },
          py::arg("text"), py::arg("weights") = py::none(), py::kw_only(),
          py::arg("phase") = "test", py::arg("device") = "cpu",
          py::arg("stages") = std::vector<std::string>{}, py::arg("level") = py::none(),
          py::arg("input_shapes") = std::map<std::string, Shape>{}, py::arg("seed") = 1,
          "Net(...) from prototxt text instead of a file.")
      .def_property_readonly("name", [](const NetRef& n) { return n->net->name(); })
      .def_property_readonly("phase",
                             [](const NetRef& n) { return n->net->phase() == TRAIN ? "train" : "test"; })
      .def_property_readonly("device", [](const NetRef& n) { return n->device; })
      .def_property_readonly("blobs", [](const NetRef& n) {
        py::dict blobs;
        for (const std::string& name : n->net->blob_names())
          blobs[py::str(name)] = BlobRef{n, &n->net->blob(name)};
        return blobs;
      }, "{name: Blob}, in the order the layers make them")
      .def_property_readonly("params", [](const NetRef& n) {
        py::dict params;
        for (const ParamInfo& info : n->net->arena().table())
          params[py::str(info.name)] = ParamRef{n, &info};
        return params;
      }, "{name: Param}, in the arena's order")
      .def("blob", [](const NetRef& n, const std::string& name) {
        return BlobRef{n, &n->net->blob(name)};
      }, py::arg("name"), "The blob `name`; a lamina.Error listing the blobs when there is none.")
      .def_property_readonly("inputs", [](const NetRef& n) { return input_names(*n->net); },
                             "The tops of the net's Input layers")
      .def_property_readonly("outputs", [](const NetRef& n) { return n->net->output_names(); },
                             "The tops no layer consumes (losses, accuracies, predictions)")
      .def_property_readonly("layer_names", [](const NetRef& n) {
        std::vector<std::string> names;
        for (int i = 0; i < n->net->num_layers(); ++i) names.push_back(n->net->layer(i).name());
        return names;
      })
      .def_property_readonly("layer_types", [](const NetRef& n) {
        std::vector<std::string> types;
        for (int i = 0; i < n->net->num_layers(); ++i) types.push_back(n->net->layer(i).type());
        return types;
      })
      .def("forward", &forward,
           "forward(**inputs): copies each input (name=array, the blob's shape) into its "
           "blob, runs every layer and returns {output: array} (copies).")
      .def("backward", &backward,
           "Backward from the losses: writes the blobs' diffs and adds the parameters' "
           "gradients to their diffs (clear_param_diffs() zeroes them).")
      .def("clear_param_diffs", [](const NetRef& n) {
        py::gil_scoped_release unlocked;
        n->net->arena().zero_diff();
      })
      .def_property_readonly("loss", [](const NetRef& n) {
        py::gil_scoped_release unlocked;
        return n->net->loss();
      }, "The weighted total loss of the last forward pass")
      .def("load", &load, py::arg("path"), py::arg("match") = "all",
           py::arg("allow_unmatched") = false,
           "Loads a Lamina (.lamina) or Caffe (.caffemodel) weights file; match: 'all', "
           "'exact' or 'fine_tune'. Returns {'loaded', 'kept_filler', 'ignored'}: names.")
      .def("save", &save, py::arg("path"),
           "Writes the weights: a Caffe model when path ends in .caffemodel, else Lamina's "
           "format (atomically).")
      .def("__repr__", [](const NetRef& n) {
        return "<lamina.Net '" + n->net->name() + "' on " + n->device + ">";
      });
}

}  // namespace lamina::python
