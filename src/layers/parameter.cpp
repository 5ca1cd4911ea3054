// Parameter: a learnable blob as a layer's top (Caffe's Parameter), for nets that feed a
// parameter into layers that take it as a bottom.
//
//   no bottoms  ->  top of parameter_param.shape = the parameter's values
// The parameter starts at zero, as in Caffe (it is meant to be trained or loaded from a
// snapshot). Forward copies it into the top; backward adds the top's gradient to its
// gradient (Caffe shares the blob instead).
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ParameterLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  std::vector<std::string> parameter_messages() const override { return {"parameter_param"}; }
  // Not a data source: every worker of a data-parallel job holds the same parameter.
  bool set_worker(int /*rank*/, int /*workers*/) override { return true; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const ParameterParameter& p = param_.parameter_param();
    LAMINA_REQUIRE(p.has_shape(), where(), "parameter_param.shape is required: the "
                   "parameter's shape, e.g. shape { dim: 10 dim: 3 }");
    const Shape shape(p.shape().dim().begin(), p.shape().dim().end());
    for (int64_t d : shape) {
      LAMINA_REQUIRE(d > 0, where(), "parameter_param.shape ", shape_string(shape),
                     " has a dimension <= 0");
    }
    add_param("value", shape, FillerParameter());
    top[0]->reshape(shape);
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    backend_.copy(sizeof(float) * top[0]->count(), params_[0].tensor->data(),
                  top[0]->mutable_data());
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  void backward_params(const Tensors& top, const Tensors& /*bottom*/) override {
    SideLane lane(backend_, !any_shared(params_));
    backend_.axpy(top[0]->count(), 1.0f, top[0]->diff(), params_[0].tensor->mutable_diff());
  }
};

}  // namespace

void register_parameter_layer() { register_layer<ParameterLayer>("Parameter"); }

}  // namespace lamina
