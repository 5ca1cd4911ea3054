// Reshape: gives the bottom a new shape with the same count (reshape_param), as Caffe's.
//
// The bottom's axes [axis, axis + num_axes) are replaced by reshape_param.shape (num_axes -1:
// every axis from `axis` on); the axes before and after are kept. A negative axis counts
// from the end, with -1 the position after the last axis: on a bottom of 4 axes, axis -1 is
// 4 and axis -2 is 3 (Caffe's convention, different from other layers' axis). In the shape,
// 0 copies the bottom's dim at the same position (axis + i) and -1 is inferred from the
// count (at most one). E.g. (2, 3, 8) with axis 2, num_axes 1 and shape (2, -1) gives
// (2, 3, 2, 4); with axis 1, num_axes 0 and shape (1) it gives (2, 1, 3, 8).
// The top shares the bottom's data and diff, so forward and backward move no data.
#include "lamina/registry.hpp"
#include "layers/view_layer.hpp"

namespace lamina {
namespace {

class ReshapeLayer : public ViewLayer {
 public:
  using ViewLayer::ViewLayer;
  std::vector<std::string> parameter_messages() const override { return {"reshape_param"}; }

 protected:
  Shape view_shape(const Tensor& x) const override {
    const ReshapeParameter& p = param_.reshape_param();
    const Shape requested(p.shape().dim().begin(), p.shape().dim().end());
    const int axes = x.num_axes();
    const int start = p.axis() >= 0 ? p.axis() : axes + p.axis() + 1;
    LAMINA_REQUIRE(start >= 0 && start <= axes, where(), "reshape_param.axis ", p.axis(),
                   " is out of range for bottom '", x.name(), "' ", x.shape_string(),
                   " (0 to ", axes, ", or -1 to ", -axes - 1, " from the end)");
    LAMINA_REQUIRE(p.num_axes() >= -1, where(), "reshape_param.num_axes must be >= 0, or -1 "
                   "for every axis from axis on; got ", p.num_axes());
    const int end = p.num_axes() == -1 ? axes : start + p.num_axes();
    LAMINA_REQUIRE(end <= axes, where(), "reshape_param axis ", p.axis(), " and num_axes ",
                   p.num_axes(), " reach past the ", axes, " axes of bottom '", x.name(), "' ",
                   x.shape_string());

    Shape shape = requested;
    int inferred = -1;
    int64_t known = x.count(0, start) * x.count(end, axes);
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
      if (shape[i] == 0) {
        LAMINA_REQUIRE(start + i < axes, where(), "reshape_param.shape ",
                       shape_string(requested), " copies dim ", start + i, " (a 0) but bottom '",
                       x.name(), "' ", x.shape_string(), " has only ", axes, " axes");
        shape[i] = x.dim(start + i);
      } else if (shape[i] == -1) {
        LAMINA_REQUIRE(inferred < 0, where(), "reshape_param.shape ", shape_string(requested),
                       " has more than one -1");
        inferred = i;
        continue;
      } else {
        LAMINA_REQUIRE(shape[i] > 0, where(), "reshape_param.shape ", shape_string(requested),
                       " has dim ", shape[i], "; use a positive size, 0 (copy) or -1 (infer)");
      }
      LAMINA_REQUIRE(shape[i] == 0 || known <= kMaxElements / shape[i], where(),
                     "reshape_param.shape ", shape_string(requested), " has too many elements");
      known *= shape[i];
    }
    if (inferred >= 0) {
      LAMINA_REQUIRE(known > 0 && x.count() % known == 0, where(), "cannot infer the -1 in ",
                     "reshape_param.shape ", shape_string(requested), ": bottom '", x.name(),
                     "' ", x.shape_string(), " has ", x.count(), " elements, not a multiple of ",
                     known);
      shape[inferred] = x.count() / known;
    }
    shape.insert(shape.begin(), x.shape().begin(), x.shape().begin() + start);
    shape.insert(shape.end(), x.shape().begin() + end, x.shape().end());
    LAMINA_REQUIRE(shape_count(shape) == x.count(), where(), "reshape_param.shape ",
                   shape_string(requested), " gives ", shape_string(shape), " with ",
                   shape_count(shape), " elements, but bottom '", x.name(), "' ",
                   x.shape_string(), " has ", x.count());
    return shape;
  }
};

}  // namespace

void register_reshape_layer() { register_layer<ReshapeLayer>("Reshape"); }

}  // namespace lamina
