// EuclideanLoss: loss = sum((a - b)^2) / (2 N), N = dim 0 of a.
//
// bottoms a and b hold the same number of elements (shapes may differ, e.g. (N, 1) and (N)).
// top 0 is a scalar (shape ()). Both bottoms take gradients: da = dloss / N * (a - b),
// db = -da. diff_ keeps a - b from the forward pass for the backward pass.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class EuclideanLossLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {}; }

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  bool is_loss() const override { return true; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& a = *bottom[0];
    const Tensor& b = *bottom[1];
    LAMINA_REQUIRE(a.num_axes() >= 1, where(), "bottom '", a.name(),
                   "' needs a batch axis (N, ...), got shape ", a.shape_string());
    LAMINA_REQUIRE(a.count() == b.count(), where(), "bottoms '", a.name(), "' ",
                   a.shape_string(), " and '", b.name(), "' ", b.shape_string(),
                   " must hold the same number of elements");
    rows_ = a.dim(0);
    cols_ = rows_ > 0 ? a.count() / rows_ : 0;
    diff_.reserve(backend_, sizeof(float) * a.count());
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.euclidean_loss_forward(rows_, cols_, bottom[0]->data(), bottom[1]->data(),
                                    diff_.as<float>(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    for (int i = 0; i < 2; ++i) {
      if (!propagate[i]) continue;
      backend_.euclidean_loss_backward(rows_, cols_, i == 0 ? 1.0f : -1.0f, diff_.as<float>(),
                                       top[0]->diff(), bottom[i]->mutable_diff());
    }
  }

 private:
  int64_t rows_ = 0, cols_ = 0;   // (N, C)
  Buffer diff_;                   // a - b, a's count of floats
};

}  // namespace

void register_euclidean_loss_layer() { register_layer<EuclideanLossLayer>("EuclideanLoss"); }

}  // namespace lamina
