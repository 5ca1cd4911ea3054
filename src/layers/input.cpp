// Input: tops whose values are fed from C++ (Tensor::copy_data_from_host) between forwards.
//
//   layer { name: "data" type: "Input" top: "data" top: "label"
//           input_param { shape { dim: 64 dim: 1 dim: 28 dim: 28 } shape { dim: 64 } } }
//
// One shape per top; a single shape serves every top (as in Caffe). Forward and backward do
// nothing: the layer only gives the fed tensors their shapes.
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class InputLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"input_param"}; }

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 1; }
  int max_tops() const override { return -1; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const InputParameter& p = param_.input_param();
    const int num_shapes = p.shape_size();
    const int num_tops = static_cast<int>(top.size());
    LAMINA_REQUIRE(num_shapes == num_tops || num_shapes == 1, where(), "input_param has ",
                   num_shapes, " shape(s) for ", num_tops,
                   " top(s); give one shape per top, or a single shape for all of them");
    for (int i = 0; i < num_tops; ++i) {
      const BlobShape& blob = p.shape(num_shapes == 1 ? 0 : i);
      Shape shape(blob.dim().begin(), blob.dim().end());
      for (int64_t d : shape) {
        LAMINA_REQUIRE(d > 0, where(), "input_param shape ", shape_string(shape), " for top '",
                       top[i]->name(), "' has a dimension <= 0");
      }
      top[i]->reshape(shape);
    }
  }

  void forward(const Tensors& /*bottom*/, const Tensors& /*top*/) override {}
  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}
};

}  // namespace

void register_input_layer() { register_layer<InputLayer>("Input"); }

}  // namespace lamina
