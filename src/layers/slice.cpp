// Slice: cuts its bottom into parts along slice_param.axis (default 1; or the older
// slice_dim, a non-negative axis), one part per top: Concat's inverse.
//
//   bottom (d0, ..., a, ..., dk)  ->  top j (d0, ..., a_j, ..., dk),  sum a_j = a
// slice_point gives the first index of every part after the first (one per top but the
// last, strictly increasing, inside the axis); without it the parts are equal (the axis
// must divide by the number of tops). Viewed as rows: outer = the dims before the axis, and
// top j takes a_j * inner contiguous floats of each of the bottom's outer rows, after those
// of the tops before it. Gradients: each part of dbottom is its top's diff, written with =.
// In a 16-bit precision the bottom, the tops and their gradients are 16-bit (values are
// copied, never rounded).
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class SliceLayer : public Layer {
 public:
  using Layer::Layer;
  int max_tops() const override { return -1; }
  std::vector<std::string> parameter_messages() const override { return {"slice_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kRowCopy}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const SliceParameter& p = param_.slice_param();
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(!(p.has_axis() && p.has_slice_dim()), where(), "slice_param sets both axis "
                   "and slice_dim (its older name); keep one");
    const int axes = x.num_axes();
    const int64_t axis = p.has_slice_dim() ? int64_t(p.slice_dim()) : int64_t(p.axis());
    LAMINA_REQUIRE(axis >= (p.has_slice_dim() ? 0 : -axes) && axis < axes, where(),
                   "slice_param.", p.has_slice_dim() ? "slice_dim " : "axis ", axis,
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    axis_ = int(axis < 0 ? axis + axes : axis);
    const int64_t length = x.dim(axis_);
    const int64_t parts = int64_t(top.size());
    sizes_.clear();
    if (p.slice_point_size() == 0) {
      LAMINA_REQUIRE(length % parts == 0, where(), "bottom '", x.name(), "' ",
                     x.shape_string(), " has ", length, " along axis ", axis_,
                     ", which does not divide into ", parts, " equal parts (one per top); "
                     "give slice_point");
      sizes_.assign(parts, length / parts);
    } else {
      LAMINA_REQUIRE(p.slice_point_size() == parts - 1, where(), "slice_param has ",
                     p.slice_point_size(), " slice_point(s) for ", parts,
                     " tops; give one fewer than the tops");
      int64_t start = 0;
      for (int j = 0; j < p.slice_point_size(); ++j) {
        const int64_t point = p.slice_point(j);
        LAMINA_REQUIRE(j > 0 || point > 0, where(), "slice_point 0 would make the first top "
                       "empty; slice points start above 0");
        LAMINA_REQUIRE(point > start, where(), "slice_point ", point, " is not greater than "
                       "the one before it, ", start, "; slice points must be strictly increasing");
        LAMINA_REQUIRE(point < length, where(), "slice_point ", point, " is not inside axis ",
                       axis_, " of bottom '", x.name(), "' ", x.shape_string(),
                       ", which has ", length, "; every point must be less than ", length);
        sizes_.push_back(point - start);
        start = point;
      }
      sizes_.push_back(length - start);
    }
    outer_ = x.count(0, axis_);
    inner_ = x.count(axis_ + 1, axes);
    for (size_t j = 0; j < top.size(); ++j) {
      Shape shape = x.shape();
      shape[axis_] = sizes_[j];
      top[j]->reshape(shape);
    }
    half_ = is_half(x.dtype());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t bottom_cols = bottom[0]->dim(axis_) * inner_;
    int64_t offset = 0;
    for (size_t j = 0; j < top.size(); ++j) {
      const int64_t cols = sizes_[j] * inner_;
      if (half_) {
        backend_.copy_rows(outer_, cols, bottom[0]->half_data() + offset, bottom_cols,
                           top[j]->mutable_half_data(), cols);
      } else {
        backend_.copy_rows(outer_, cols, bottom[0]->data() + offset, bottom_cols,
                           top[j]->mutable_data(), cols);
      }
      offset += cols;
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t bottom_cols = bottom[0]->dim(axis_) * inner_;
    int64_t offset = 0;
    for (size_t j = 0; j < top.size(); ++j) {
      const int64_t cols = sizes_[j] * inner_;
      if (half_) {
        backend_.copy_rows(outer_, cols, top[j]->half_diff(), cols,
                           bottom[0]->mutable_half_diff() + offset, bottom_cols);
      } else {
        backend_.copy_rows(outer_, cols, top[j]->diff(), cols,
                           bottom[0]->mutable_diff() + offset, bottom_cols);
      }
      offset += cols;
    }
  }

 private:
  int axis_ = 1;
  bool half_ = false;              // values stored in 16 bits
  std::vector<int64_t> sizes_;     // of each part along the axis
  int64_t outer_ = 0, inner_ = 0;  // the dims before and after the axis
};

}  // namespace

void register_slice_layer() { register_layer<SliceLayer>("Slice"); }

}  // namespace lamina
