// Softmax and LogSoftmax over softmax_param.axis (default 1, negative counts from the end),
// as Caffe's Softmax: x viewed as (outer, C, inner), one softmax over C at each of the
// outer * inner positions (class_rows.hpp). LogSoftmax, Lamina's own, takes the axis the
// same way. softmax_param.engine is a hint, accepted and ignored (one implementation).
//
// top has the bottom's shape. Backward uses only the top (works in place):
//   Softmax:    dx = y * (dy - sum_j dy_j y_j)
//   LogSoftmax: dx = dy - exp(y) * sum_j dy_j
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/class_rows.hpp"

namespace lamina {
namespace {

template <bool kLog>
class SoftmaxLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"softmax_param"}; }
  bool supports_in_place() const override { return true; }
  TopUse backward_reads_top() const override { return TopUse::kValues; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(x.num_axes() >= 1, where(), "bottom '", x.name(),
                   "' needs at least one axis (N, ...), got shape ", x.shape_string());
    axis_ = class_axis(where(), "softmax_param.axis", param_.softmax_param().axis(), x);
    rows_.setup(backend_, axis_, where(), name() + "/rows");
    if (top[0] != bottom[0]) top[0]->reshape(x.shape());
  }

  // With positions after the axis: x to rows, the softmax in place there, the rows to y
  // (x is read whole before y is written, so in place stays correct).
  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = rows_.values(bottom[0]->data());
    float* y = top[0]->mutable_data();
    backend_.softmax_forward(axis_.rows(), axis_.classes, kLog, x, rows_.values_out(y));
    rows_.put_values(y);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* y = rows_.values(top[0]->data());
    const float* dy = rows_.grads(top[0]->diff());
    float* dx = bottom[0]->mutable_diff();
    backend_.softmax_backward(axis_.rows(), axis_.classes, kLog, y, dy, rows_.grads_out(dx));
    rows_.put_grads(dx);
  }

 private:
  ClassAxis axis_;  // (outer, C, inner)
  ClassRows rows_;
};

}  // namespace

void register_softmax_layers() {
  register_layer<SoftmaxLayer<false>>("Softmax");
  register_layer<SoftmaxLayer<true>>("LogSoftmax");
}

}  // namespace lamina
