// ArgMax: the indices (or values) of the top_k largest entries, as Caffe's ArgMax gives
// them: largest first, equal values the larger index first. Indices are written as floats.
//
// Without argmax_param.axis, over all axes after the first, x viewed as (N, D):
//   top (N, 1, top_k, 1, ...)   the indices (as many axes as x, at least 3)
//   top (N, 2, top_k, 1, ...)   with out_max_val: the indices, then the values
// With axis a: top = x's shape with top_k along a, holding the indices, or with out_max_val
// the values alone.
// No gradient: ArgMax is a function of comparisons (Caffe has no backward for it either).
#include <algorithm>
#include <string>
#include <vector>

#include "indexed_rows.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {


class ArgMaxLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"argmax_param"}; }
  std::vector<Operation> operations() const override {
    return {Operation::kTensorOps, Operation::kRowCopy};
  }
  bool accepts_gradient(int) const override { return false; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ArgMaxParameter& p = param_.argmax_param();
    const Tensor& x = *bottom[0];
    const int axes = x.num_axes();
    top_k_ = p.top_k();
    out_max_val_ = p.out_max_val();
    has_axis_ = p.has_axis();
    LAMINA_REQUIRE(top_k_ >= 1, where(), "argmax_param.top_k must be at least 1");
    LAMINA_REQUIRE(axes >= 1, where(), "bottom '", x.name(), "' has no axes");
    Shape shape;
    if (has_axis_) {
      LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "argmax_param.axis ",
                     p.axis(), " is out of range for bottom '", x.name(), "' of shape ",
                     x.shape_string());
      const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
      outer_ = x.count(0, axis);
      channels_ = x.dim(axis);
      inner_ = x.count(axis + 1, axes);
      shape = x.shape();
      shape[axis] = top_k_;
    } else {
      outer_ = x.dim(0);
      channels_ = x.count(1, axes);
      inner_ = 1;
      shape.assign(std::max(axes, 3), 1);
      shape[0] = x.dim(0);
      shape[1] = out_max_val_ ? 2 : 1;
      shape[2] = top_k_;
    }
    LAMINA_REQUIRE(top_k_ <= channels_, where(), "argmax_param.top_k ", top_k_, " is larger "
                   "than the ", channels_, " values it chooses from (bottom '", x.name(), "' ",
                   x.shape_string(), has_axis_ ? " along the axis" : " after the first axis",
                   ")");
    LAMINA_REQUIRE(channels_ <= kExactIndices, where(), "bottom '", x.name(), "' has ",
                   channels_, " values to choose from; indices are written as floats, exact "
                   "up to ", kExactIndices);
    top[0]->reshape(shape);
    if (both()) {  // the op's two outputs, interleaved into the top row by row
      index_.reserve(backend_, sizeof(float) * outer_ * top_k_);
      value_.reserve(backend_, sizeof(float) * outer_ * top_k_);
    }
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    if (!both()) {
      backend_.argmax(outer_, channels_, inner_, top_k_, x, out_max_val_ ? nullptr : y,
                      out_max_val_ ? y : nullptr);
      return;
    }
    backend_.argmax(outer_, channels_, inner_, top_k_, x, index_.as<float>(),
                    value_.as<float>());
    backend_.copy_rows(outer_, top_k_, index_.as<float>(), top_k_, y, 2 * top_k_);
    backend_.copy_rows(outer_, top_k_, value_.as<float>(), top_k_, y + top_k_, 2 * top_k_);
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

 private:
  bool both() const { return out_max_val_ && !has_axis_; }  // indices and values

  int64_t top_k_ = 1;
  bool out_max_val_ = false, has_axis_ = false;
  int64_t outer_ = 0, channels_ = 0, inner_ = 0;  // x as (outer, channels, inner)
  Buffer index_, value_;  // (N, top_k) floats, where the top holds both
};

}  // namespace

void register_argmax_layer() { register_layer<ArgMaxLayer>("ArgMax"); }

}  // namespace lamina
