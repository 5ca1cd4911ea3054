// ONNX export (docs/onnx.md): a built net, with its weights, as a standard ONNX model of
// opset kOnnxOpset, for ONNX Runtime and the other runtimes that read ONNX.
//
// The net is translated layer by layer in its order; each layer becomes one or a few ONNX
// nodes named after it (a layer of several nodes names them "<layer>/<step>"). The graph's
// inputs are the tops of the net's Input layers, its outputs the blobs whose last values no
// later layer reads (Caffe's outputs: a blob an in-place layer writes last is one), each named
// as the blob is; the shapes are the net's, fixed (the batch
// is the one the Input layer gives). The weights go into the model as initializers named
// after the parameters (<layer>/<role>). Before the model is returned it passes ONNX's
// checker (onnx::checker::check_model) and strict shape inference, which must reproduce the
// shape of every blob as the net has it.
//
// Built as the library lamina_onnx (LAMINA_ONNX, on where Debian's libonnx-dev is found);
// the ONNX headers stay inside it.
#pragma once

#include <string>
#include <vector>

#include "lamina/net.hpp"

namespace lamina {

constexpr int kOnnxOpset = 17;

struct OnnxModel {
  std::string bytes;                         // the serialized onnx.ModelProto
  std::vector<std::string> inputs, outputs;  // the graph's inputs and outputs
  // The blobs of the outputs, in order: the outputs' own names, but where a blob an input
  // holds is written in place and is an output (its graph output is then "<blob>/<layer>").
  std::vector<std::string> output_blobs;
  int nodes = 0;
  int64_t weights = 0;  // floats held by initializers
};

// The ONNX model of `net` as it stands: its layers, shapes and current weights (the net's
// phase decides what BatchNorm and Dropout do, as in the net: export a TEST net). A layer
// with no ONNX equivalent (a loss, a data layer, Filter, a custom layer) is an Error naming
// it, its type and what to do; so is a checker or shape-inference failure, which names the
// layer whose node it concerns. `producer` goes into the model's producer_name.
OnnxModel export_onnx(Net& net, const std::string& producer = "lamina");

// The layer types export_onnx translates, sorted.
std::vector<std::string> onnx_exportable_types();

// Writes the model to path atomically (snapshot.hpp's write_file_atomically).
void write_onnx(const OnnxModel& model, const std::string& path);

// A tensor as ONNX's test-data files hold it (a serialized onnx.TensorProto, FP32, named
// `name`): the layout ONNX's backend tests and ONNX Runtime's onnx_test_runner read
// (<case>/model.onnx, <case>/test_data_set_0/input_0.pb, output_0.pb).
std::string onnx_tensor_bytes(const std::string& name, const Shape& shape,
                              const std::vector<float>& values);

// An ONNX test case of `net`, in ONNX's test-data layout: dir/model.onnx, and in
// dir/test_data_set_0 the values the net's input blobs hold now (input_<i>.pb, in the order
// of the graph's inputs) and its outputs after one forward pass, which it runs
// (output_<i>.pb). ONNX Runtime's onnx_test_runner and tests/onnx/onnx_numpy_eval.py read it.
OnnxModel write_onnx_test_case(Net& net, const std::string& dir);

// Builds the TEST net of the deploy prototxt at model_path on the CPU, loads weights_path
// (Lamina's weights or a Caffe model, weights_file.hpp; every parameter must be there),
// exports it and writes output_path. Returns the model.
OnnxModel export_onnx_file(const std::string& model_path, const std::string& weights_path,
                           const std::string& output_path);

}  // namespace lamina
