// A layer defined outside Lamina's sources: top = scale * bottom^2, elementwise.
//
// It is written once against the Backend, so it runs on the CPU and the GPU, registers itself
// by its prototxt type name, and reads its own parameter from custom_param:
//   layer { name: "sq" type: "Square" custom_param { entry { key: "scale" value: "0.5" } } }
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace example {

class SquareLayer : public lamina::Layer {
 public:
  using Layer::Layer;

  void setup(const lamina::Tensors& bottom, const lamina::Tensors& top) override {
    require_custom_keys({"scale"});
    scale_ = float(custom_number("scale", 1.0));
    LAMINA_REQUIRE(top[0] != bottom[0], where(), "Square cannot run in place: its backward "
                   "pass needs the input");
    top[0]->reshape(bottom[0]->shape());
  }

  // y = scale * x * x
  void forward(const lamina::Tensors& bottom, const lamina::Tensors& top) override {
    const int64_t n = bottom[0]->count();
    backend_.mul(n, bottom[0]->data(), bottom[0]->data(), top[0]->mutable_data());
    backend_.scal(n, scale_, top[0]->mutable_data());
  }

  // dx = 2 * scale * x * dy
  void backward_input(const lamina::Tensors& top, const std::vector<bool>& propagate,
                      const lamina::Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t n = bottom[0]->count();
    backend_.mul(n, bottom[0]->data(), top[0]->diff(), bottom[0]->mutable_diff());
    backend_.scal(n, 2 * scale_, bottom[0]->mutable_diff());
  }

  // Every pass launches the same operations with the same arguments (scale_ is fixed at
  // setup), so a training step can be recorded once and replayed as a CUDA graph.
  std::optional<std::string> capture_blocker() const override { return std::string(); }

 private:
  float scale_ = 1;
};

LAMINA_REGISTER_LAYER(SquareLayer, "Square");

}  // namespace example
