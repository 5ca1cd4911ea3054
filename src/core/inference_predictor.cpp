// Predictor (inference.hpp): a net of the model's deploy file, built on a backend of its own
// at the predictor's batch, whose parameters view the model's arena (Net's shared_arena), so
// predictors hold blobs of their own and no copy of the weights.
//
// Predictors never write the shared arena: the model keeps the weights' 16-bit copy (for
// layers running in 16 bits) up to date whenever it writes the weights, so a predictor's
// forward does not round them again (Net::half_copy_kept_by_update), and the nets are built
// in their TEST phase, in which no layer writes its parameters.
#include <algorithm>

#include "inference_model.hpp"
#include "lamina/cuda.hpp"
#include "lamina/inference.hpp"
#include "lamina/net.hpp"
#include "lamina/weights_file.hpp"

namespace lamina {

using inference_detail::device_lock;

struct Predictor::Instance {
  int64_t batch = 0;
  std::unique_ptr<Backend> backend;  // declared before the net, which refers to it
  std::unique_ptr<Net> net;
};

Predictor::Predictor(const Model& model, int64_t batch)
    : model_(model.state_), instance_(std::make_unique<Instance>()) {
  const inference_detail::ModelState& m = *model_;
  LAMINA_REQUIRE(batch >= 0, "Predictor for model '", m.name, "': batch size ", batch,
                 " is negative; give a batch size > 0, or 0 for the deploy file's (",
                 m.input_shapes[0].empty() ? 0 : m.input_shapes[0][0], ")");
  const NetParameter param = batch > 0 ? inference_detail::with_batch(m.deploy, batch, m.source)
                                       : m.deploy;
  std::unique_lock<std::mutex> lock = device_lock(m.spec);
  instance_->backend = make_backend(m.spec);
  instance_->net = std::make_unique<Net>(param, TEST, *instance_->backend, 0, m.arena, m.source);
  instance_->net->half_copy_kept_by_update();  // the model refreshes it (top of this file)
  const Shape& first = instance_->net->blob(m.inputs[0]).shape();
  instance_->batch = first.empty() ? 1 : first[0];
}

Predictor::~Predictor() {
  if (!instance_) return;  // moved from
  std::unique_lock<std::mutex> lock = device_lock(model_->spec);
  instance_.reset();
}

Predictor::Predictor(Predictor&&) noexcept = default;

int64_t Predictor::batch_size() const { return instance_->batch; }
const std::vector<std::string>& Predictor::input_names() const { return model_->inputs; }
const std::vector<std::string>& Predictor::output_names() const { return model_->outputs; }
Net& Predictor::net() { return *instance_->net; }
const Net& Predictor::net() const { return *instance_->net; }

namespace {

// The blob of an input or an output, by name; an Error listing the names of that kind.
Tensor& named_blob(Net& net, const std::vector<std::string>& names, const std::string& name,
                   const char* kind, const std::string& model) {
  LAMINA_REQUIRE(std::find(names.begin(), names.end(), name) != names.end(), "model '", model,
                 "' has no ", kind, " '", name, "'; its ", kind, "s are ",
                 some_names(names, names.size()));
  return net.blob(name);
}

void require_count(const Tensor& blob, int64_t count, const char* kind, const std::string& what) {
  LAMINA_REQUIRE(count == blob.count(), what, ": ", kind, " '", blob.name(), "' has shape ",
                 blob.shape_string(), " (", blob.count(), " values), got ", count,
                 " values; a predictor's batch size is fixed when it is made");
}

}  // namespace

Shape Predictor::input_shape(const std::string& input) const {
  return named_blob(*instance_->net, model_->inputs, input, "input", model_->name).shape();
}

Shape Predictor::output_shape(const std::string& output) const {
  return named_blob(*instance_->net, model_->outputs, output, "output", model_->name).shape();
}

void Predictor::set_input(const std::string& input, const float* values, int64_t count) {
  Tensor& blob = named_blob(*instance_->net, model_->inputs, input, "input", model_->name);
  require_count(blob, count, "input", "set_input");
  std::unique_lock<std::mutex> lock = device_lock(model_->spec);
  if (blob.dtype() == DType::kF32) {
    instance_->backend->copy_from_host(sizeof(float) * count, values, blob.mutable_data());
  } else {
    blob.copy_data_from_host(std::vector<float>(values, values + count));
  }
}

void Predictor::set_input(const std::string& input, const std::vector<float>& values) {
  set_input(input, values.data(), int64_t(values.size()));
}

void Predictor::set_input_device(const std::string& input, const float* device_values,
                                 int64_t count) {
  const inference_detail::ModelState& m = *model_;
  LAMINA_REQUIRE(m.spec.kind == BackendSpec::Kind::kCuda, "set_input_device: model '", m.name,
                 "' runs on the CPU, where inputs are host arrays: call set_input");
  Tensor& blob = named_blob(*instance_->net, m.inputs, input, "input", m.name);
  require_count(blob, count, "input", "set_input_device");
  LAMINA_REQUIRE(blob.dtype() == DType::kF32, "set_input_device: input '", input, "' is stored "
                 "in 16 bits; feed it float32 host values with set_input");
  const float* last = device_values + (count > 0 ? count - 1 : 0);
  for (const float* p : {device_values, last}) {
    const int device = cuda_pointer_device(p);
    LAMINA_REQUIRE(device == m.spec.device, "set_input_device: input '", input, "': ",
                   p == device_values ? "the first" : "the last", " value (", 
                   static_cast<const void*>(p), ") is ",
                   device < 0 ? std::string("not in device memory (a host pointer?)")
                              : "in the memory of GPU " + std::to_string(device),
                   "; this predictor runs on ", m.device, ": give a pointer to ", count,
                   " floats in its memory, or call set_input with host values");
  }
  std::unique_lock<std::mutex> lock = device_lock(m.spec);
  instance_->backend->copy(sizeof(float) * count, device_values, blob.mutable_data());
  instance_->backend->synchronize();  // the caller may change its values once this returns
}

void Predictor::forward() {
  std::unique_lock<std::mutex> lock = device_lock(model_->spec);
  instance_->net->forward();
}

std::vector<float> Predictor::output(const std::string& output) const {
  const Tensor& blob = named_blob(*instance_->net, model_->outputs, output, "output",
                                  model_->name);
  std::unique_lock<std::mutex> lock = device_lock(model_->spec);
  return blob.copy_data_to_host();
}

void Predictor::output(const std::string& output, float* values, int64_t count) const {
  const Tensor& blob = named_blob(*instance_->net, model_->outputs, output, "output",
                                  model_->name);
  require_count(blob, count, "output", "output");
  std::unique_lock<std::mutex> lock = device_lock(model_->spec);
  if (blob.dtype() == DType::kF32) {
    instance_->backend->copy_to_host(sizeof(float) * count, blob.data(), values);
  } else {
    const std::vector<float> host = blob.copy_data_to_host();
    std::copy(host.begin(), host.end(), values);
  }
}

std::vector<float> Predictor::predict(const std::vector<float>& input) {
  const inference_detail::ModelState& m = *model_;
  LAMINA_REQUIRE(m.inputs.size() == 1 && m.outputs.size() == 1, "predict: model '", m.name,
                 "' has ", m.inputs.size(), " inputs (", some_names(m.inputs), ") and ",
                 m.outputs.size(), " outputs (", some_names(m.outputs), "); predict takes one "
                 "of each: call set_input for each input, forward, and output for each output");
  set_input(m.inputs[0], input);
  forward();
  return output(m.outputs[0]);
}

}  // namespace lamina
