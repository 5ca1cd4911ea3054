// Model (inference.hpp): the deploy net read once, its weights loaded into one arena in the
// backend's memory; the device locks and the batch override the predictors use.
//
// The arena is made by building the deploy net once (at the file's batch) and loading the
// weights file into it; the net then goes and the arena stays. Loading weights again builds
// a net that views the arena, so the same loader (weights_file.hpp) fills it in place.
#include <glog/logging.h>

#include <algorithm>
#include <map>

#include "inference_model.hpp"
#include "lamina/inference.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/weights_file.hpp"

namespace lamina {
namespace inference_detail {

std::unique_lock<std::mutex> device_lock(const BackendSpec& spec) {
  if (spec.kind == BackendSpec::Kind::kCpu) return {};
  static std::mutex table_mutex;
  static std::map<int, std::mutex> locks;  // by device; a map's nodes never move
  std::mutex* mutex;
  {
    std::lock_guard<std::mutex> table(table_mutex);
    mutex = &locks[spec.device];
  }
  return std::unique_lock<std::mutex>(*mutex);
}

namespace {

// Sets a shape's first dimension, its batch; `what` names the shape in messages.
void set_first_dim(BlobShape& shape, int64_t batch, const std::string& what) {
  LAMINA_REQUIRE(shape.dim_size() > 0, what, " has no dimensions, so it has no batch "
                 "dimension to set to ", batch, "; give it a shape (N, ...) in the deploy file");
  shape.set_dim(0, batch);
}

void set_input_layers_batch(google::protobuf::RepeatedPtrField<LayerParameter>& layers,
                            int64_t batch, const std::string& source) {
  for (LayerParameter& layer : layers) {
    set_input_layers_batch(*layer.mutable_layer(), batch, source);  // Sequential's children
    if (layer.type() != "Input") continue;
    for (BlobShape& shape : *layer.mutable_input_param()->mutable_shape())
      set_first_dim(shape, batch, source + ": a shape of Input layer '" + layer.name() + "'");
  }
}

}  // namespace

NetParameter with_batch(const NetParameter& deploy, int64_t batch, const std::string& source) {
  CHECK_GT(batch, 0);
  NetParameter out = deploy;
  set_input_layers_batch(*out.mutable_layer(), batch, source);
  for (BlobShape& shape : *out.mutable_input_shape())
    set_first_dim(shape, batch, source + ": the net header's input_shape");
  for (int i = 0; i + 3 < out.input_dim_size(); i += 4) out.set_input_dim(i, batch);
  return out;
}

ModelState::~ModelState() {
  std::unique_lock<std::mutex> lock = device_lock(spec);
  arena.reset();
  backend.reset();
}

namespace {

std::string net_label(const ModelState& m) { return "deploy net '" + m.name + "'"; }

// Loads the weights file into the model's arena, through a net that views it.
void load_into_arena(ModelState& m, const std::string& weights) {
  LAMINA_REQUIRE(!weights.empty(), "no weights file given for ", net_label(m), " (", m.source,
                 "): give the trained weights, a .lamina file lamina train wrote or a "
                 ".caffemodel");
  Net net(m.deploy, TEST, *m.backend, 0, m.arena, m.source);
  const WeightsLoadReport report =
      load_weights_file(net, weights, WeightsMatch::kRequireAll, net_label(m));
  m.arena->refresh_half_copy();  // layers running in 16 bits read this copy
  LOG(INFO) << m.source << ": " << report.loaded.size() << " parameters loaded from " << weights
            << (report.ignored.empty() ? "" : ", " + std::to_string(report.ignored.size()) +
                                                  " entries of the file not in the net");
}

}  // namespace
}  // namespace inference_detail

using inference_detail::ModelState;

Model::Model(const std::string& deploy, const std::string& weights, const std::string& device)
    : Model(read_net_parameter(deploy), weights, device, deploy) {}

Model::Model(const NetParameter& deploy, const std::string& weights, const std::string& device,
             const std::string& source)
    : state_(std::make_shared<ModelState>()) {
  ModelState& m = *state_;
  m.spec = parse_backend_spec(device);
  m.device = m.spec.str();
  m.deploy = deploy;
  m.source = source;
  m.name = deploy.name();
  std::unique_lock<std::mutex> lock = inference_detail::device_lock(m.spec);
  m.backend = make_backend(m.spec);
  {
    // The net that makes the arena (fillers' values, replaced by the file's below).
    Net net(m.deploy, TEST, *m.backend, 0, nullptr, m.source);
    m.arena = net.arena_handle();
    for (int i = 0; i < net.num_layers(); ++i) {
      if (net.layer(i).type() != "Input") continue;
      for (const Tensor* top : net.layer_tops(i)) {
        m.inputs.push_back(top->name());
        m.input_shapes.push_back(top->shape());
      }
    }
    m.outputs = net.output_names();
  }
  LAMINA_REQUIRE(!m.inputs.empty(), source, ": the ", inference_detail::net_label(m),
                 " has no Input layer; a deploy net takes its inputs from one (layer { name: "
                 "\"data\" type: \"Input\" top: \"data\" input_param { shape { dim: 1 ... } } "
                 "}), not from a data layer");
  inference_detail::load_into_arena(m, weights);
}

Model::~Model() = default;
Model::Model(Model&&) noexcept = default;

const std::string& Model::device() const { return state_->device; }
const std::string& Model::name() const { return state_->name; }
const std::vector<std::string>& Model::input_names() const { return state_->inputs; }
const std::vector<std::string>& Model::output_names() const { return state_->outputs; }

const Shape& Model::input_shape(const std::string& input) const {
  const auto& names = state_->inputs;
  const auto found = std::find(names.begin(), names.end(), input);
  LAMINA_REQUIRE(found != names.end(), "model '", name(), "' has no input '", input,
                 "'; its inputs are ", some_names(names, names.size()));
  return state_->input_shapes[found - names.begin()];
}

const std::vector<ParamInfo>& Model::parameters() const { return state_->arena->table(); }
const ParamArena& Model::arena() const { return *state_->arena; }

namespace {

const ParamInfo& find_parameter(const ModelState& m, const std::string& name) {
  const ParamInfo* info = m.arena->find(name);
  if (info) return *info;
  std::vector<std::string> names;
  for (const ParamInfo& p : m.arena->table()) names.push_back(p.name);
  fail("model '", m.name, "' has no parameter '", name, "'; its parameters are ",
       some_names(names, names.size()));
}

}  // namespace

std::vector<float> Model::parameter(const std::string& name) const {
  const ParamInfo& info = find_parameter(*state_, name);
  std::vector<float> values(info.count);
  std::unique_lock<std::mutex> lock = inference_detail::device_lock(state_->spec);
  state_->backend->copy_to_host(sizeof(float) * values.size(), state_->arena->data() + info.offset,
                                values.data());
  return values;
}

void Model::set_parameter(const std::string& name, const std::vector<float>& values) {
  const ParamInfo& info = find_parameter(*state_, name);
  LAMINA_REQUIRE(int64_t(values.size()) == info.count, "model '", this->name(), "': parameter '",
                 name, "' has shape ", shape_string(info.shape), " (", info.count,
                 " values), got ", values.size(), " values");
  std::unique_lock<std::mutex> lock = inference_detail::device_lock(state_->spec);
  state_->backend->copy_from_host(sizeof(float) * values.size(), values.data(),
                                  state_->arena->data() + info.offset);
  state_->arena->refresh_half_copy();
}

void Model::load_weights(const std::string& weights) {
  std::unique_lock<std::mutex> lock = inference_detail::device_lock(state_->spec);
  inference_detail::load_into_arena(*state_, weights);
}

}  // namespace lamina
