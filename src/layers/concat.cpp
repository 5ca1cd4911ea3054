// Concat: joins its bottoms along concat_param.axis (default 1, the channels; negative counts
// from the end), or along concat_dim (Caffe's older name, a non-negative axis; not both).
//
//   bottom i (d0, ..., a_i, ..., dk)  ->  top (d0, ..., sum a_i, ..., dk)
// Every bottom has the top's dims except along the axis. Viewed as rows: outer = the dims
// before the axis, and bottom i contributes a_i * inner contiguous floats to each of the
// top's outer rows, after those of the bottoms before it.
// Gradients: each bottom's diff is its slice of dtop, written with =. In a 16-bit precision
// the bottoms, the top and their gradients are 16-bit (values are copied, never rounded).
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ConcatLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return -1; }
  std::vector<std::string> parameter_messages() const override { return {"concat_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kRowCopy}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ConcatParameter& p = param_.concat_param();
    const Tensor& first = *bottom[0];
    const int axes = first.num_axes();
    LAMINA_REQUIRE(!(p.has_axis() && p.has_concat_dim()), where(), "concat_param sets both "
                   "axis and concat_dim (its older name); keep one");
    const char* field = p.has_concat_dim() ? "concat_dim" : "axis";
    const int64_t axis = p.has_concat_dim() ? int64_t(p.concat_dim()) : p.axis();
    LAMINA_REQUIRE(axis >= -axes && axis < axes, where(), "concat_param.", field, " ", axis,
                   " is out of range for bottom '", first.name(), "' of shape ",
                   first.shape_string());
    axis_ = int(axis < 0 ? axis + axes : axis);
    Shape shape = first.shape();
    shape[axis_] = 0;
    for (const Tensor* b : bottom) {
      bool same = b->num_axes() == axes;
      for (int d = 0; same && d < axes; ++d) same = d == axis_ || b->dim(d) == first.dim(d);
      LAMINA_REQUIRE(same, where(), "bottoms must have equal shapes except along axis ", axis_,
                     ", but '", first.name(), "' is ", first.shape_string(), " and '", b->name(),
                     "' is ", b->shape_string());
      LAMINA_REQUIRE(b->dtype() == first.dtype(), where(), "bottoms must be stored alike, but '",
                     first.name(), "' is ", dtype_name(first.dtype()), " and '", b->name(),
                     "' is ", dtype_name(b->dtype()));
      shape[axis_] += b->dim(axis_);
    }
    outer_ = first.count(0, axis_);
    inner_ = first.count(axis_ + 1, axes);
    top[0]->reshape(shape);
    half_ = is_half(first.dtype());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t top_cols = top[0]->dim(axis_) * inner_;
    int64_t offset = 0;
    for (const Tensor* b : bottom) {
      const int64_t cols = b->dim(axis_) * inner_;
      if (half_) {
        backend_.copy_rows(outer_, cols, b->half_data(), cols,
                           top[0]->mutable_half_data() + offset, top_cols);
      } else {
        backend_.copy_rows(outer_, cols, b->data(), cols, top[0]->mutable_data() + offset,
                           top_cols);
      }
      offset += cols;
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    const int64_t top_cols = top[0]->dim(axis_) * inner_;
    int64_t offset = 0;
    for (size_t i = 0; i < bottom.size(); ++i) {
      const int64_t cols = bottom[i]->dim(axis_) * inner_;
      if (propagate[i] && half_) {
        backend_.copy_rows(outer_, cols, top[0]->half_diff() + offset, top_cols,
                           bottom[i]->mutable_half_diff(), cols);
      } else if (propagate[i]) {
        backend_.copy_rows(outer_, cols, top[0]->diff() + offset, top_cols,
                           bottom[i]->mutable_diff(), cols);
      }
      offset += cols;
    }
  }

 private:
  int axis_ = 1;
  bool half_ = false;              // values stored in 16 bits
  int64_t outer_ = 0, inner_ = 0;  // the dims before and after the axis
};

}  // namespace

void register_concat_layer() { register_layer<ConcatLayer>("Concat"); }

}  // namespace lamina
