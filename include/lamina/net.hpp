// Net: layers connected by named blobs, built from a NetParameter for one phase.
//
// Building turns Caffe's input header into an Input layer, drops the layers the net's state
// excludes (net_state.hpp), flattens Sequential containers, resolves implicit chaining (a
// layer without bottoms takes the previous layer's top; a loss or accuracy layer without
// bottoms takes it and "label"; a layer without tops gets a top named after itself),
// inserts Split layers where a blob feeds several layers, infers which layers need backward
// (Caffe's rules, with force_backward and propagate_down), and lays every learnable
// parameter out in one ParamArena (param_arena.hpp). The build's phases are named steps in
// net_builder.cpp; the non-finite diagnosis is in nonfinite.cpp, debug_info's logging in
// net_debug.cpp.
//
// Layers may share a name (Caffe accepts it). Where a name is a key (default parameter
// names "<layer>/<role>", layer states in snapshots, Split names), the net uses the layer's
// key instead: its name for the first layer of that name, "<name>#2", "<name>#3", ... for
// the later ones (layer_key). Messages and `lamina time` show the names.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/layer.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/tensor.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

struct NetPlan;  // the layers while the net is built (net_builder.cpp)

class Net {
 public:
  // phase: the phase of the net's state; its level and stages are param.state's. A phase in
  // param.state is replaced by this one, as Caffe's Net does (logged where they differ): the
  // builder decides the phase.
  // source: the file the parameter came from, for error messages (may be empty).
  // shared_arena: another net's parameter arena (the training net's) that this net's
  // parameters view, matched by name; a test net evaluates exactly the weights being
  // trained. Without it the net builds and fills its own arena.
  Net(const NetParameter& param, Phase phase, Backend& backend, uint64_t seed,
      std::shared_ptr<ParamArena> shared_arena = nullptr, const std::string& source = {});
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  const std::string& name() const { return name_; }
  Phase phase() const { return phase_; }
  // The state the net was built in: its phase, level and stages.
  const NetState& state() const { return state_; }
  Backend& backend() const { return backend_; }

  // Runs every layer; the weighted total loss lands in loss_tensor() (no host copy). With
  // layers running in 16 bits it first refreshes the weights' 16-bit copy
  // (refresh_half_weights), unless the update keeps it (half_copy_kept_by_update).
  void forward();
  // Rounds the FP32 weights into the 16-bit copy that layers running in 16 bits read (one
  // pass over the arena; nothing when no layer does). forward() does it; callers of
  // forward_layer do it first.
  void refresh_half_weights();
  // Training: the solver's update writes the 16-bit copy with the weights
  // (UpdateArgs::half_copy), so forward() no longer refreshes it. Whoever writes the weights
  // otherwise calls refresh_half_weights() (the solver does before each step() and test()).
  void half_copy_kept_by_update() { half_copy_by_update_ = true; }
  // Backward through the layers that need it; parameter gradients accumulate. params_done,
  // when given, is called with each layer's index once its parameter gradients are issued,
  // before the gradients of its inputs (every layer, last to first): the solver's gradient
  // buckets start summing there, beside the rest of the layer's backward.
  void backward(const std::function<void(int)>& params_done = {});
  // Dynamic loss scaling (the solver's, for FP16): backward() starts each loss from its
  // weight times *scale, a float in backend memory read when the pass runs; null: from its
  // weight alone.
  void set_loss_scale(const float* scale);
  // Whether some layer stores its values in FP16 (training it needs loss scaling).
  bool stores_fp16() const;
  // Reads the total loss: copies one float to the host.
  float loss();
  Tensor& loss_tensor() { return *total_; }

  // Whether some layer's tops change shape from pass to pass (Filter): the layers after it
  // are set up again for their bottoms' new shapes before their forward (Layer::reshape).
  bool shapes_vary() const { return shapes_vary_; }

  // Per-layer access, for the timing tool.
  int num_layers() const { return static_cast<int>(layers_.size()); }
  Layer& layer(int i) { return *layers_[i]; }
  void forward_layer(int i);
  // No-op for layers that need no backward; params_done as in backward().
  void backward_layer(int i, const std::function<void(int)>& params_done = {});
  bool layer_needs_backward(int i) const { return needs_backward_[i]; }
  // Whether layer i computes the gradient of its bottom j (Caffe's bottom_need_backward).
  bool bottom_needs_gradient(int i, int j) const { return propagate_[i][j]; }
  // The layer's unique name within the net (see the top of this file).
  const std::string& layer_key(int i) const { return keys_[i]; }
  // Whether layer i's work is done by a layer before it, the one that absorbed it
  // (Layer::absorb): forward_layer and backward_layer skip it.
  bool layer_fused(int i) const { return fused_[i]; }
  // The Math layer i's products run in: its precision (LayerParameter.precision).
  Math layer_math(int i) const { return math_[i]; }
  // How layer i stores its tops: FP32, or BF16 / FP16 when it runs in 16 bits.
  DType layer_storage(int i) const { return storage_[i]; }
  Tensors layer_bottoms(int i) const;
  Tensors layer_tops(int i) const;

  // Layer states (Layer::state) of the layers that keep one, by layer name.
  using LayerStates = std::map<std::string, std::vector<int64_t>>;
  LayerStates layer_states() const;
  // Restores states taken from a net built from the same prototxt. Every stateful layer
  // must be there with as many values as it keeps, and every entry must name one; the
  // layers are restored only when all are valid (an error leaves them as they were).
  // `source` names where the states came from, for messages.
  void set_layer_states(const LayerStates& states, const std::string& source);

  // Data parallel: makes this net worker `rank` of `workers` (Layer::set_worker). A data
  // source that cannot share out its data is an Error naming it.
  void set_worker(int rank, int workers);

  // Captured steps (Layer::prepare_replay, replayed, capture_blocker), over every layer.
  // Whether every layer could prepare the next `passes` forward passes for a replay.
  bool prepare_replay(int64_t passes);
  void replayed(int64_t passes);
  // Why the net's operations cannot be recorded ("layer 'x' (T): reason"), or empty.
  std::string capture_blocker() const;
  // Changes whenever something recorded operations depend on changes: set_layer_states
  // restarts the layers' counters from new positions. A recording of an older generation
  // must not be replayed.
  int64_t generation() const { return generation_; }

  // Diagnosis of a non-finite loss or gradient: runs the net forward layer by layer,
  // checking every top, then backward (after zeroing the parameter gradients), checking
  // every bottom gradient and parameter gradient each layer produces. Returns a description
  // of the first NaN or infinity found ("" when every value is finite). Slow (a host copy
  // per blob); for error paths. It runs an iteration's forward: a data layer advances.
  std::string find_nonfinite();

  bool has_blob(const std::string& name) const;
  Tensor& blob(const std::string& name);  // throws listing the blobs
  std::vector<std::string> blob_names() const;
  // Tops no layer consumes (losses, accuracies, outputs), in order of creation.
  const std::vector<std::string>& output_names() const { return output_names_; }
  // The weight with which a blob counts in the loss (0: it does not).
  float loss_weight(const std::string& blob) const;

  // Caffe's debug_info (net_debug.cpp): after each layer's forward, the mean absolute value
  // of each top's data and of each parameter; after its backward, that of each bottom
  // gradient it computes and of each parameter gradient; after the whole backward pass, the
  // L1 and L2 norms of every parameter and gradient. Read back to the host, layer by layer:
  // a debugging mode. On when NetParameter.debug_info is set, which also keeps every layer
  // apart (no fusion) so that each one's values are its own; set_debug_info turns the
  // logging on and off (the solver's debug_info logs display iterations, as Caffe).
  bool debug_info() const { return debug_info_; }
  void set_debug_info(bool on) { debug_info_ = on; }

  // The parameter arena: this net's own, or the one it shares.
  ParamArena& arena() { return *arena_; }
  const ParamArena& arena() const { return *arena_; }
  const std::shared_ptr<ParamArena>& arena_handle() const { return arena_; }

 private:
  struct LayerIO {
    std::vector<int> bottoms;  // blob indices
    std::vector<int> tops;
    Tensors bottom_tensors;    // the same blobs, as the layer's calls take them
    Tensors top_tensors;
  };
  // The phases of the build (net_builder.cpp), in the order build() runs them.
  void build(const NetParameter& param, uint64_t seed, std::shared_ptr<ParamArena> shared,
             const std::string& source);
  void set_up_layers(NetPlan& plan);
  void collect_losses(const NetPlan& plan);
  void infer_backward(bool force_backward);
  void bind_params(uint64_t seed, std::shared_ptr<ParamArena> shared);
  void fuse_layers();
  void log_precisions(const NetPlan& plan) const;  // which layers run in which precision
  // debug_info's lines (net_debug.cpp).
  void log_forward(int i) const;
  void log_backward(int i) const;
  void log_parameter_norms() const;

  std::string name_;
  Phase phase_;
  NetState state_;
  std::vector<std::string> keys_;  // per layer: layer_key
  bool debug_info_ = false;
  bool fuse_ = true;  // layers may absorb others (off with NetParameter.debug_info)
  Backend& backend_;
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<LayerIO> io_;
  std::vector<bool> needs_backward_;
  std::vector<bool> fused_;  // per layer: absorbed by a layer before it
  std::vector<Math> math_;   // per layer: the Math of its products (its precision)
  std::vector<DType> storage_;  // per layer: how its tops are stored
  bool uses_half_copy_ = false;  // some layer reads the weights' 16-bit copy
  bool half_copy_by_update_ = false;  // half_copy_kept_by_update()
  std::vector<bool> learnable_;  // per layer: some parameter has lr_mult != 0
  // Some layer's tops change shape from pass to pass (Layer::reshapes_each_pass): then
  // forward_layer first reshapes a layer whose bottoms' shapes differ from those it was
  // last set up with (bottom_shapes_, per layer).
  bool shapes_vary_ = false;
  std::vector<std::vector<Shape>> bottom_shapes_;
  void reshape_if_needed(int i);
  std::vector<std::vector<bool>> propagate_;  // per layer, per bottom
  std::vector<std::unique_ptr<Tensor>> blobs_;
  std::map<std::string, int> blob_index_;
  std::vector<bool> blob_needs_grad_;
  std::vector<std::string> output_names_;
  int64_t generation_ = 0;
  std::vector<std::pair<int, float>> loss_blobs_;  // (blob, weight)
  const float* loss_scale_ = nullptr;  // set_loss_scale's
  Buffer loss_weights_;  // with loss_scale_: loss_blobs_'s weights, in backend memory
  Tensor* total_ = nullptr;           // the loss blob when there is one of weight 1, else
  std::unique_ptr<Tensor> loss_sum_;  // the weighted sum of the losses, made each forward

  std::shared_ptr<ParamArena> arena_;
};

}  // namespace lamina
