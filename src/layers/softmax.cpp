// Softmax and LogSoftmax over each row: rows = dim 0 (N), cols = the count of the other dims.
//
// top has the bottom's shape. Backward uses only the top (works in place):
//   Softmax:    dx = y * (dy - sum_j dy_j y_j)
//   LogSoftmax: dx = dy - exp(y) * sum_j dy_j
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

template <bool kLog>
class SoftmaxLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {}; }
  bool supports_in_place() const override { return true; }
  TopUse backward_reads_top() const override { return TopUse::kValues; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(x.num_axes() >= 1, where(), "bottom '", x.name(),
                   "' needs at least one axis (N, ...), got shape ", x.shape_string());
    rows_ = x.dim(0);
    cols_ = x.count(1, x.num_axes());
    if (top[0] != bottom[0]) top[0]->reshape(x.shape());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.softmax_forward(rows_, cols_, kLog, bottom[0]->data(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.softmax_backward(rows_, cols_, kLog, top[0]->data(), top[0]->diff(),
                              bottom[0]->mutable_diff());
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
};

}  // namespace

void register_softmax_layers() {
  register_layer<SoftmaxLayer<false>>("Softmax");
  register_layer<SoftmaxLayer<true>>("LogSoftmax");
}

}  // namespace lamina
