// Flatten: merges the dims axis..end_axis (inclusive) of the bottom into one, as Caffe's.
//
// (N, C, H, W) with axis 1, end_axis -1 -> (N, C*H*W). Negative axes count from the end (-1
// is the last axis). As in Caffe, end_axis may be one less than axis: the merged range is
// empty and an axis of 1 is inserted at `axis` ((N, C) with axis 1, end_axis 0 -> (N, 1, C)).
// The top shares the bottom's data and diff, so forward and backward move no data.
#include "lamina/registry.hpp"
#include "layers/view_layer.hpp"

namespace lamina {
namespace {

class FlattenLayer : public ViewLayer {
 public:
  using ViewLayer::ViewLayer;
  std::vector<std::string> parameter_messages() const override { return {"flatten_param"}; }

 protected:
  Shape view_shape(const Tensor& x) const override {
    const FlattenParameter& p = param_.flatten_param();
    const int axes = x.num_axes();
    const auto in_range = [axes](int axis) { return axis >= -axes && axis < axes; };
    LAMINA_REQUIRE(in_range(p.axis()) && in_range(p.end_axis()), where(), "flatten_param axis ",
                   p.axis(), " and end_axis ", p.end_axis(), " must lie within the ", axes,
                   " axes of bottom '", x.name(), "' ", x.shape_string());
    const int start = p.axis() < 0 ? p.axis() + axes : p.axis();
    const int end = p.end_axis() < 0 ? p.end_axis() + axes : p.end_axis();
    LAMINA_REQUIRE(start <= end + 1, where(), "flatten_param axis ", p.axis(), " (axis ", start,
                   ") lies more than one axis after end_axis ", p.end_axis(), " (axis ", end,
                   ") of bottom '", x.name(), "' ", x.shape_string());

    Shape shape(x.shape().begin(), x.shape().begin() + start);
    shape.push_back(x.count(start, end + 1));
    shape.insert(shape.end(), x.shape().begin() + end + 1, x.shape().end());
    return shape;
  }
};

}  // namespace

void register_flatten_layer() { register_layer<FlattenLayer>("Flatten"); }

}  // namespace lamina
