// Running a net: forward, backward, per-layer access, layer states and blobs. The build is
// in net_builder.cpp, the non-finite diagnosis in nonfinite.cpp, debug_info's logging in
// net_debug.cpp; net.hpp has the rules. Layer states are keyed by layer_key.
#include "lamina/net.hpp"

#include <algorithm>

namespace lamina {

void Net::forward_layer(int i) {
  if (fused_[i]) return;
  MathScope math(backend_, math_[i]);
  if (shapes_vary_) reshape_if_needed(i);
  layers_[i]->forward(io_[i].bottom_tensors, io_[i].top_tensors);
  if (debug_info_) log_forward(i);
}

void Net::reshape_if_needed(int i) {
  const Tensors& bottoms = io_[i].bottom_tensors;
  bool same = true;
  for (size_t j = 0; j < bottoms.size() && same; ++j)
    same = bottoms[j]->shape() == bottom_shapes_[i][j];
  if (same) return;
  std::vector<Shape> shapes;
  for (const Tensor* b : bottoms) shapes.push_back(b->shape());
  try {
    layers_[i]->reshape(io_[i].bottom_tensors, io_[i].top_tensors);
  } catch (const Error& e) {
    std::string now;
    for (const Shape& s : shapes) now += (now.empty() ? "" : ", ") + shape_string(s);
    fail(Phase_Name(phase_), " net '", name_, "': reshaping layer '", layers_[i]->name(),
         "' for bottoms ", now, " (a layer before it changes its tops' shapes each pass): ",
         e.what());
  }
  bottom_shapes_[i] = std::move(shapes);
}

void Net::backward_layer(int i, const std::function<void(int)>& params_done) {
  if (!needs_backward_[i] || fused_[i]) {
    if (params_done) params_done(i);
    return;
  }
  const Tensors& bottom = io_[i].bottom_tensors;
  const Tensors& top = io_[i].top_tensors;
  MathScope math(backend_, math_[i]);
  // Parameters first: an in-place layer's backward_input overwrites the top diff. A frozen
  // layer (every parameter at lr_mult 0) computes no parameter gradients: they would cost a
  // gemm and count in the clipping norm, as they do not in Caffe or PyTorch.
  if (learnable_[i]) layers_[i]->backward_params(top, bottom);
  if (params_done) params_done(i);
  if (std::find(propagate_[i].begin(), propagate_[i].end(), true) != propagate_[i].end())
    layers_[i]->backward_input(top, propagate_[i], bottom);
  if (debug_info_) log_backward(i);
}

void Net::refresh_half_weights() {
  if (uses_half_copy_) arena_->refresh_half_copy();
}

void Net::forward() {
  if (!half_copy_by_update_) refresh_half_weights();
  for (int i = 0; i < num_layers(); ++i) forward_layer(i);
  if (!loss_sum_) return;
  float* loss = loss_sum_->mutable_data();
  backend_.zero(sizeof(float), loss);
  for (const auto& l : loss_blobs_) backend_.axpy(1, l.second, blobs_[l.first]->data(), loss);
}

void Net::set_loss_scale(const float* scale) {
  loss_scale_ = scale;
  if (!scale || loss_blobs_.empty()) return;
  std::vector<float> weights;
  for (const auto& l : loss_blobs_) weights.push_back(l.second);
  loss_weights_ = Buffer(backend_, sizeof(float) * weights.size());
  backend_.copy_from_host(loss_weights_.bytes(), weights.data(), loss_weights_.get());
}

bool Net::stores_fp16() const {
  return std::find(storage_.begin(), storage_.end(), DType::kFP16) != storage_.end();
}

void Net::backward(const std::function<void(int)>& params_done) {
  for (size_t k = 0; k < loss_blobs_.size(); ++k) {
    float* diff = blobs_[loss_blobs_[k].first]->mutable_diff();
    if (loss_scale_)
      backend_.mul(1, loss_weights_.as<float>() + k, loss_scale_, diff);
    else
      backend_.fill(1, loss_blobs_[k].second, diff);
  }
  // Gradients zeroed since the last pass may be written with = by their one user, in this
  // pass only.
  auto mark = [this](bool zeroed) {
    for (int i = 0; i < num_layers(); ++i)
      for (Param& p : layers_[i]->params()) p.diff_zeroed = zeroed && !p.shared;
  };
  mark(arena_->take_diff_zeroed());
  try {
    // Layers may compute parameter gradients on the side lane (Backend::open_side_lane); the
    // pass ends with everything joined, so the update and any read see them.
    SideLaneScope lanes(backend_);
    for (int i = num_layers() - 1; i >= 0; --i) backward_layer(i, params_done);
    lanes.close();
    if (debug_info_) log_parameter_norms();
  } catch (...) {
    mark(false);
    throw;
  }
  mark(false);
}

float Net::loss() {
  float value = 0;
  backend_.copy_to_host(sizeof(float), loss_tensor().data(), &value);
  return value;
}

Tensors Net::layer_bottoms(int i) const { return io_[i].bottom_tensors; }

Tensors Net::layer_tops(int i) const { return io_[i].top_tensors; }

Net::LayerStates Net::layer_states() const {
  LayerStates states;
  for (int i = 0; i < num_layers(); ++i) {
    std::vector<int64_t> s = layers_[i]->state();
    if (!s.empty()) states[keys_[i]] = std::move(s);
  }
  return states;
}

void Net::set_layer_states(const LayerStates& states, const std::string& source) {
  const LayerStates before = layer_states();
  for (const auto& entry : states) {
    LAMINA_REQUIRE(before.count(entry.first), source, ": it holds a state for layer '",
                   entry.first, "', which the ", Phase_Name(phase_), " net '", name_,
                   "' has not (or which keeps no state); it was written for a different net");
  }
  for (const auto& entry : before) {
    auto it = states.find(entry.first);
    LAMINA_REQUIRE(it != states.end(), source, ": it holds no state for layer '", entry.first,
                   "' of the ", Phase_Name(phase_), " net '", name_,
                   "'; it was written for a different net");
    LAMINA_REQUIRE(it->second.size() == entry.second.size(), source, ": layer '", entry.first,
                   "' keeps ", entry.second.size(), " state values, the file holds ",
                   it->second.size());
  }
  std::vector<int> done;
  try {
    for (int i = 0; i < num_layers(); ++i) {
      auto it = states.find(keys_[i]);
      if (it == states.end()) continue;
      layers_[i]->set_state(it->second);
      done.push_back(i);
    }
  } catch (const Error& e) {
    for (int i : done) layers_[i]->set_state(before.at(keys_[i]));  // roll back
    ++generation_;
    fail(source, ": ", e.what());
  }
  ++generation_;
}

void Net::set_worker(int rank, int workers) {
  for (auto& layer : layers_) {
    LAMINA_REQUIRE(layer->set_worker(rank, workers), "layer '", layer->name(), "' (",
                   layer->type(), ") of the ", Phase_Name(phase_), " net '", name_,
                   "' produces data but cannot give each of the ", workers, " workers its own "
                   "share, so every worker would train on the same data; data-parallel "
                   "training needs a data layer that shares out its data (MnistData does)");
  }
  ++generation_;
}

bool Net::prepare_replay(int64_t passes) {
  for (auto& layer : layers_)
    if (!layer->prepare_replay(passes)) return false;
  return true;
}

void Net::replayed(int64_t passes) {
  for (auto& layer : layers_) layer->replayed(passes);
  // The replay wrote the blobs without going through their accessors.
  for (auto& blob : blobs_) {
    blob->data_memory().mark_device_written();
    blob->diff_memory().mark_device_written();
  }
}

std::string Net::capture_blocker() const {
  for (const auto& layer : layers_) {
    const std::string where = "layer '" + layer->name() + "' (" + layer->type() + ")";
    const std::optional<std::string> why = layer->capture_blocker();
    if (!why) {
      return where + " does not say whether its operations can be replayed (a layer defined "
             "outside Lamina opts in by returning \"\" from Layer::capture_blocker(); "
             "docs/custom_layers.md)";
    }
    if (!why->empty()) return where + ": " + *why;
  }
  return {};
}

float Net::loss_weight(const std::string& blob) const {
  auto it = blob_index_.find(blob);
  if (it == blob_index_.end()) return 0;
  float weight = 0;
  for (const auto& l : loss_blobs_)
    if (l.first == it->second) weight += l.second;
  return weight;
}

bool Net::has_blob(const std::string& name) const { return blob_index_.count(name) > 0; }

Tensor& Net::blob(const std::string& name) {
  auto it = blob_index_.find(name);
  if (it == blob_index_.end()) {
    std::string known;
    for (const auto& b : blob_index_) known += (known.empty() ? "" : ", ") + b.first;
    fail("net '", name_, "' has no blob '", name, "'; its blobs: ", known);
  }
  return *blobs_[it->second];
}

std::vector<std::string> Net::blob_names() const {
  std::vector<std::string> names;
  for (const auto& b : blobs_) names.push_back(b->name());
  return names;
}

}  // namespace lamina
