// Inference from C++: a deploy net and its trained weights loaded once (Model), run by as many
// net instances as there are concurrent requests (Predictor), each viewing the model's
// weights without a copy of them.
//
//   lamina::Model model("models/mnist/lenet_deploy.prototxt", "lenet_iter_10000.lamina");
//   lamina::Predictor predictor(model, 8);          // a batch of 8 images
//   predictor.set_input("data", pixels);            // (8, 1, 28, 28) floats in host memory
//   predictor.forward();
//   std::vector<float> prob = predictor.output("prob");  // (8, 10)
//
// The deploy net is built in its TEST phase. Its inputs are the tops of its Input layers
// (or of Caffe's input header), its outputs the tops no layer reads (Net::output_names);
// blobs inside the net are not outputs: a fused layer may have written over them
// (docs/design.md, Fusion). Values are float32, row-major, in the blobs' shapes.
//
// Where it runs: a backend spec (backend_factory.hpp), "cpu" or "cuda:N", given to the Model.
// The weights live in that backend's memory, and every predictor of the model runs there,
// with a backend of its own on that device.
//
// Thread safety:
//   - A Predictor is used by one thread at a time. Different predictors (of one model or of
//     several) may be used from different threads at once, and give the results they give
//     when used one after another, bit for bit.
//       * On the CPU they run side by side: each has its own backend and blobs. The Native
//         backend's parallel loops share one thread pool, which runs one loop at a time.
//       * On a GPU, every call that reaches the device (constructing or destroying a
//         predictor or a model, set_input, set_input_device, forward, output, and the
//         model's weight calls) holds that device's lock: they run one at a time per device,
//         since a device's context (its streams, cuBLAS and cuDNN handles, workspaces)
//         serves one host thread at a time. Predictors on different devices run side by
//         side. Other Lamina work on the device (a Solver training on another thread) does
//         not take the lock and must not run beside the predictors.
//   - Model: its const members, and constructing predictors from it, may be called from any
//     number of threads at once. Changing its weights (set_parameter, load_weights) may not
//     overlap a predictor's forward() or construction: the caller makes sure no predictor of
//     the model runs meanwhile. Predictors see the new weights at their next forward().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/lamina.pb.h"
#include "lamina/param_arena.hpp"

namespace lamina {

class Net;
namespace inference_detail {
struct ModelState;  // the weights and what predictors are built from (inference_model.hpp)
}

// A deploy net's description and its trained weights, held once in the backend's memory.
class Model {
 public:
  // deploy: the net prototxt (every layer's parameters, an Input layer for each input).
  // weights: a Lamina weights file (.lamina, lamina train's snapshots) or a Caffe model
  //   (.caffemodel), as weights_file.hpp reads them. Every parameter of the net must be in
  //   it with its shape (entries the net lacks, such as a training net's loss, are ignored);
  //   a file that lacks one, or trained for another net, is an Error naming both sides.
  // device: "cpu" or "cuda:N" (backend_factory.hpp).
  Model(const std::string& deploy, const std::string& weights, const std::string& device = "cpu");
  // The same for a net parameter built in code; source names it in messages.
  Model(const NetParameter& deploy, const std::string& weights, const std::string& device,
        const std::string& source);
  ~Model();
  Model(Model&&) noexcept;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model& operator=(Model&&) = delete;

  const std::string& device() const;  // "cpu" or "cuda:N"
  const std::string& name() const;    // the net's name
  // The inputs' names and shapes as the deploy file gives them (its batch size).
  const std::vector<std::string>& input_names() const;
  const Shape& input_shape(const std::string& input) const;
  const std::vector<std::string>& output_names() const;

  // The weights: one entry per parameter (name "<layer>/<role>", shape, offset), and the
  // arena that holds them, which every predictor of the model views.
  const std::vector<ParamInfo>& parameters() const;
  const ParamArena& arena() const;
  // One parameter's values (a copy to the host).
  std::vector<float> parameter(const std::string& name) const;
  // Changing the weights (not while a predictor of the model runs: see the top of this file).
  void set_parameter(const std::string& name, const std::vector<float>& values);
  void load_weights(const std::string& weights);

 private:
  friend class Predictor;
  std::shared_ptr<inference_detail::ModelState> state_;
};

// One instance of a model's net: its own blobs and backend, the model's weights. A predictor
// keeps the weights alive; it may outlive the Model object it was made from.
class Predictor {
 public:
  // batch: the first dimension of every input (and so of the outputs); 0 keeps the deploy
  // file's. Negative is an Error.
  explicit Predictor(const Model& model, int64_t batch = 0);
  ~Predictor();
  Predictor(Predictor&&) noexcept;
  Predictor(const Predictor&) = delete;
  Predictor& operator=(const Predictor&) = delete;
  Predictor& operator=(Predictor&&) = delete;

  int64_t batch_size() const;
  const std::vector<std::string>& input_names() const;
  const std::vector<std::string>& output_names() const;
  Shape input_shape(const std::string& input) const;
  Shape output_shape(const std::string& output) const;  // valid after construction

  // Fills an input with count values from host memory; count must be the input's size.
  void set_input(const std::string& input, const float* values, int64_t count);
  void set_input(const std::string& input, const std::vector<float>& values);
  // Fills an input from device memory of the predictor's GPU, by a copy on the device. The
  // values must be ready when it is called (written by work the caller has waited for), and
  // may change once it returns (the copy is done). Its first and last value must be in that
  // GPU's memory (cudaMalloc'd or managed); a host pointer, another GPU's pointer, or any
  // call on a CPU predictor is an Error.
  void set_input_device(const std::string& input, const float* device_values, int64_t count);

  // Runs the net on the inputs as last set (an input never set holds zeros).
  void forward();

  // An output's values after forward(), copied to the host.
  std::vector<float> output(const std::string& output) const;
  // The same into values, which has room for exactly count values (the output's size).
  void output(const std::string& output, float* values, int64_t count) const;

  // set_input(the only input), forward(), output(the only output); an Error when the net
  // has more than one of either.
  std::vector<float> predict(const std::vector<float>& input);

  // The net underneath (its blobs, layers and arena), for what this class does not cover.
  Net& net();
  const Net& net() const;

 private:
  std::shared_ptr<inference_detail::ModelState> model_;
  struct Instance;
  std::unique_ptr<Instance> instance_;
};

}  // namespace lamina
