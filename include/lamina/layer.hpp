// Layer: one step of a net, written once against the Backend.
//
// Life cycle, driven by the Net: the constructor reads the LayerParameter; setup() checks the
// bottom shapes, declares parameters with add_param() and shapes the tops; the net then binds
// every parameter to its place in the arena and fills it; forward()/backward_*() run each
// iteration. Conventions: forward writes tops with =; backward_input writes bottom diffs with =
// (the net inserts Split layers so a blob has one consumer); backward_params accumulates
// parameter gradients with += (shared parameters, iter_size), the net zeroes them once (a
// layer may write with = where Param::diff_zeroed says the gradient holds zeros).
// The net calls backward_params before backward_input, so an in-place layer's parameter
// gradient still sees the top diff that backward_input then overwrites.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/tensor.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// What a layer is built with: the backend it runs on, the phase, and its own seed.
struct LayerContext {
  Backend& backend;
  Phase phase;
  uint64_t seed;
  bool builtin = false;  // one of Lamina's own types (LayerRegistry::create sets it)
};

// A learnable parameter as a layer declares it.
struct Param {
  std::unique_ptr<Tensor> tensor;  // bound to the arena by the net
  FillerParameter filler;
  // Set by the net: another layer uses this parameter too (param { name }), so its gradient
  // is a sum that other layers' operations add to, which must then stay on the main lane
  // (Backend::to_side_lane).
  bool shared = false;
  // Set by the net for one backward pass (Net::backward, cleared when it ends): the gradient
  // was zeroed (ParamArena::zero_diff) and nothing has added to it since, and no other layer
  // uses the parameter, so backward_params may write the gradient with = instead of adding
  // to zeros (a product with beta 0 does not read it: the Linear's weight gradient). False
  // outside such a pass (layer by layer calls, the gradient checker).
  bool diff_zeroed = false;
};

// Whether any of params is shared with another layer.
inline bool any_shared(const std::vector<Param>& params) {
  for (const Param& p : params)
    if (p.shared) return true;
  return false;
}

class Layer {
 public:
  Layer(const LayerParameter& param, const LayerContext& context);
  virtual ~Layer() = default;
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;

  const LayerParameter& param() const { return param_; }
  const std::string& name() const { return param_.name(); }
  const std::string& type() const { return param_.type(); }
  Backend& backend() const { return backend_; }
  Phase phase() const { return phase_; }

  // How many bottoms and tops the layer takes; -1 means no upper bound.
  virtual int min_bottoms() const { return 1; }
  virtual int max_bottoms() const { return 1; }
  virtual int min_tops() const { return 1; }
  virtual int max_tops() const { return 1; }
  // Loss layers: top 0 gets loss_weight 1 unless the prototxt says otherwise.
  virtual bool is_loss() const { return false; }
  // The LayerParameter messages this layer reads ("inner_product_param", ...). The net
  // rejects any other *_param set on the layer, so no setting is silently ignored. Layers
  // defined outside Lamina read custom_param, the default.
  virtual std::vector<std::string> parameter_messages() const { return {"custom_param"}; }
  // The optional backend operations the layer uses; the net checks them when it is built.
  virtual std::vector<Operation> operations() const { return {}; }
  // Whether bottom i takes gradients at all (labels do not).
  virtual bool accepts_gradient(int /*bottom_index*/) const { return true; }

  // 16 bits (precision BF16 or FP16; docs/precision.md): how the layer stores its values
  // when its precision is a 16-bit one. The net decides each blob's storage (Tensor::dtype)
  // before setup, converting between layers where a consumer needs another; setup sees it.
  enum class HalfSupport {
    kNone,     // computes in FP32: the net gives it FP32 bottoms and tops (softmax, losses,
               // and every layer not written for 16 bits, custom ones included)
    kHalf,     // reads and writes its bottoms, tops and their gradients in 16 bits, and its
               // parameters as FP32 or as their 16-bit copies (Tensor::half_copy: a
               // product's weights); parameter gradients stay FP32
    kFollows,  // stores its tops like its first bottom: views of it (Flatten, Reshape), or
               // Split, whose tops share its data and have gradients of their own
    kConverts,  // takes its bottom in any storage; its top is stored as its precision says
                // (Convert, which the net inserts between layers that store differently)
  };
  virtual HalfSupport half_support() const { return HalfSupport::kNone; }

  // In place: a top that is also one of the bottoms (`bottom: "x" top: "x"`). A layer whose
  // forward and backward are correct when they read and write the same tensor says so; the
  // net refuses in-place use of every other layer (check_in_place, below).
  virtual bool supports_in_place() const { return false; }
  // What the backward pass reads of the values forward wrote to the tops. A later in-place
  // layer overwrites them before that backward runs, so the net refuses it unless it keeps
  // what is read (keeps_positive_in_place).
  enum class TopUse {
    kNothing,   // most layers (BatchNorm and Scale keep their own copies of what they need)
    kPositive,  // only which values are > 0 (ReLU)
    kValues,    // the values (Sigmoid, TanH, Softmax)
  };
  virtual TopUse backward_reads_top() const { return TopUse::kNothing; }
  // In place: whether every value whose gradient the layer passes back is > 0 after forward
  // exactly where it was > 0 before (ReLU; Dropout, whose dropped values get no gradient).
  virtual bool keeps_positive_in_place() const { return false; }

  // Fusion, when the net is built: `next` reads this layer's only top, right after it, and
  // runs in place on it or is its only reader. A layer that can do next's work within its
  // own forward and backward (a Linear the ReLU after it: the bias and the activation in the
  // product's epilogue; a BatchNorm the Scale after it) says so by returning true, and from
  // then on does it; the net no longer runs next, and calls this layer's backward_params
  // where next has learnable parameters (their gradients are then this layer's to compute).
  // After a layer accepted one, the net offers it the layer after that too, if in place on
  // the same top (a BatchNorm's Scale, then a ReLU); a layer refuses what it cannot add.
  // Called after both are set up; the net then calls next's absorbed().
  virtual bool absorb(const Layer& /*next*/) { return false; }
  // This layer was absorbed: it may free what only its own forward and backward used.
  virtual void absorbed() {}

  virtual void setup(const Tensors& bottom, const Tensors& top) = 0;

  // Shapes that change from pass to pass (Caffe reshapes every layer before each forward).
  // A layer whose top shapes depend on its bottoms' values (Filter: as many rows as its
  // selector keeps) returns true and reshapes its tops in forward(). The net then calls
  // reshape() on each later layer whose bottoms no longer have the shapes it was set up
  // with, before that layer's forward. Such a net is not fused (absorb) and not captured.
  virtual bool reshapes_each_pass() const { return false; }
  // Runs setup() again for the bottoms' new shapes. add_param then hands back the
  // parameters of the first setup, in the same order; a parameter whose shape would change
  // is an Error naming the layer (its shape depends on the batch, which varies). So setup()
  // must be safe to run again: it recomputes what depends on shapes, keeps what does not
  // (a random layer's draws go on; a file read once stays read: reshaping() says which).
  void reshape(const Tensors& bottom, const Tensors& top);
  virtual void forward(const Tensors& bottom, const Tensors& top) = 0;
  // Gradient w.r.t. the inputs, for each bottom i with propagate[i].
  virtual void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                              const Tensors& bottom) = 0;
  // Gradient w.r.t. the parameters, accumulated into their diffs. Only here: a data-parallel
  // job starts summing a layer's parameter gradients over the workers when this returns,
  // beside its backward_input (gradient_buckets.hpp).
  virtual void backward_params(const Tensors& /*top*/, const Tensors& /*bottom*/) {}

  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }

  // State beyond the parameters that the layer's future outputs depend on: a data layer's
  // epoch and cursor, a random layer's counter. Solver snapshots save it and resuming
  // restores it, so a resumed run draws the same batches and masks as an uninterrupted one.
  // Most layers have none (the default: empty). A layer with state returns the same number
  // of values every time; set_state receives what state() returned (perhaps in another
  // process, on another backend) and must validate it completely before changing anything,
  // throwing lamina::Error naming the layer when it cannot apply it.
  virtual std::vector<int64_t> state() const { return {}; }
  virtual void set_state(const std::vector<int64_t>& state);

  // Data parallel (docs/distributed.md): the net is worker `rank` of `workers`, each with
  // its own copy of it. A layer whose outputs must differ between workers takes its share
  // here (a data layer its rows of every batch of the whole job, Dropout its own random
  // numbers) and returns true. The default: true for layers that compute from their bottoms,
  // false for data sources (layers without bottoms), which would give every worker the
  // same data.
  virtual bool set_worker(int rank, int workers);
  // Captured steps (CUDA graphs). The solver may record a training step's operations once
  // and replay them, without calling forward() again. A layer whose forward does host work
  // besides launching operations does it in these two instead; operations whose arguments
  // change from pass to pass cannot be replayed: such values live in backend memory
  // (PassCounter, pass_counter.hpp).
  // Before `passes` forward passes are replayed: the host work they need done first (a data
  // layer uploads a new epoch's order). Returns false when that cannot be done ahead for so
  // many passes, and the caller runs them through forward() instead.
  virtual bool prepare_replay(int64_t /*passes*/) { return true; }
  // After `passes` forward passes were replayed: the host bookkeeping forward() would have
  // done (the position a snapshot records).
  virtual void replayed(int64_t /*passes*/) {}
  // Why the layer's operations cannot be recorded and replayed, empty when they can, or
  // nullopt when the layer does not say. The default: empty for Lamina's own layers, nullopt
  // for layers defined elsewhere, which opt in by returning an empty string once every
  // per-pass value lives in backend memory. A layer that reads results on the host, or
  // passes arguments that change between passes, gives its reason. With any layer not
  // empty, the solver runs every step directly and logs why.
  virtual std::optional<std::string> capture_blocker() const;

 protected:
  // Declares a parameter (only in setup); role is e.g. "weight" or "bias".
  Tensor& add_param(const std::string& role, const Shape& shape, const FillerParameter& filler);
  // "layer 'ip1' (Linear): " for error messages.
  std::string where() const;
  // Whether setup() runs again, from reshape(): what it needs to do once (a file read) is
  // done already.
  bool reshaping() const { return reshaping_param_ >= 0; }
  // Logs a warning starting with where(), once: not again when setup() runs from reshape().
  void warn(const std::string& message) const;

  // custom_param { entry { key: "k" value: "v" } }: parameters of layers defined outside
  // Lamina. Unknown keys are errors (require_custom_keys), as are values that do not parse.
  void require_custom_keys(const std::vector<std::string>& known) const;
  bool has_custom(const std::string& key) const;
  std::string custom_string(const std::string& key, const std::string& fallback) const;
  double custom_number(const std::string& key, double fallback) const;

  LayerParameter param_;
  Backend& backend_;
  Phase phase_;
  uint64_t seed_;
  bool builtin_;
  std::vector<Param> params_;

 private:
  // During reshape(): the next parameter add_param hands back (-1 outside reshape).
  int reshaping_param_ = -1;
};

// A layer set up earlier in the net, with its tops (check_in_place).
struct EarlierLayer {
  const Layer* layer;
  Tensors tops;
};

// Whether some top of a layer is also one of its bottoms.
bool works_in_place(const Tensors& bottom, const Tensors& top);

// Refuses, before setup, in-place use of a layer (a top that is also a bottom) whose result
// would be wrong; `earlier` lists the layers set up before it, in order. Throws an Error
// starting "layer 'name' (type): " when the layer does not support in place, when the blob's
// values are shared with another blob (a Flatten, Reshape or Split output: the write would
// change that one too), or when an earlier layer's backward pass reads the values the layer
// would overwrite (backward_reads_top). The fix is always to give the top its own name.
void check_in_place(const Layer& layer, const Tensors& bottom, const Tensors& top,
                    const std::vector<EarlierLayer>& earlier);

}  // namespace lamina
