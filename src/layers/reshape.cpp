// Reshape: gives the bottom a new shape with the same count (reshape_param.shape).
//
// In the shape, 0 copies the bottom's dim at the same index and -1 is inferred from the count
// (at most one). The top shares the bottom's data and diff, so forward and backward move no
// data.
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
    const BlobShape& spec = param_.reshape_param().shape();
    const Shape requested(spec.dim().begin(), spec.dim().end());

    Shape shape = requested;
    int inferred = -1;
    int64_t known = 1;
    for (int i = 0; i < static_cast<int>(shape.size()); ++i) {
      if (shape[i] == 0) {
        LAMINA_REQUIRE(i < x.num_axes(), where(), "reshape_param.shape ",
                       shape_string(requested), " copies dim ", i, " (a 0) but bottom '",
                       x.name(), "' ", x.shape_string(), " has only ", x.num_axes(), " axes");
        shape[i] = x.shape()[i];
      } else if (shape[i] == -1) {
        LAMINA_REQUIRE(inferred < 0, where(), "reshape_param.shape ", shape_string(requested),
                       " has more than one -1");
        inferred = i;
        continue;
      } else {
        LAMINA_REQUIRE(shape[i] > 0, where(), "reshape_param.shape ", shape_string(requested),
                       " has dim ", shape[i], "; use a positive size, 0 (copy) or -1 (infer)");
      }
      LAMINA_REQUIRE(known <= kMaxElements / shape[i], where(), "reshape_param.shape ",
                     shape_string(requested), " has too many elements");
      known *= shape[i];
    }
    if (inferred >= 0) {
      LAMINA_REQUIRE(known > 0 && x.count() % known == 0, where(), "cannot infer the -1 in ",
                     "reshape_param.shape ", shape_string(requested), ": bottom '", x.name(),
                     "' ", x.shape_string(), " has ", x.count(), " elements");
      shape[inferred] = x.count() / known;
    }
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
