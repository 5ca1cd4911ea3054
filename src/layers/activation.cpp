// Elementwise activations: ReLU (leaky with relu_param.negative_slope), Sigmoid, TanH.
//
// top = f(bottom), same shape. The backward pass computes f' from the top, so the layers work
// in place (top == bottom): dbottom = dtop * f'(top), written with =. In a 16-bit precision
// they read and write 16-bit values, computing in FP32.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

template <Activation F>
class ActivationLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override {
    // Sigmoid's and TanH's messages hold only Caffe's engine, a hint Lamina accepts.
    if (F == Activation::kReLU) return {"relu_param"};
    if (F == Activation::kSigmoid) return {"sigmoid_param"};
    return {"tanh_param"};
  }
  bool supports_in_place() const override { return true; }
  // ReLU's f' is whether y > 0 (the slope is >= 0); Sigmoid's and TanH's are functions of y.
  TopUse backward_reads_top() const override {
    return F == Activation::kReLU ? TopUse::kPositive : TopUse::kValues;
  }
  bool keeps_positive_in_place() const override { return F == Activation::kReLU; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    if (F == Activation::kReLU) {
      negative_slope_ = param_.relu_param().negative_slope();
      // f' is recovered from the sign of the output, which a negative slope would flip.
      LAMINA_REQUIRE(negative_slope_ >= 0, where(), "relu_param.negative_slope must be >= 0, got ",
                     negative_slope_);
    }
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
    storage_ = bottom[0]->dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t n = bottom[0]->count();
    if (is_half(storage_)) {
      backend_.activation_forward(half_format(storage_), F, n, negative_slope_,
                                  bottom[0]->half_data(), top[0]->mutable_half_data());
    } else {
      backend_.activation_forward(F, n, negative_slope_, bottom[0]->data(),
                                  top[0]->mutable_data());
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t n = top[0]->count();
    if (is_half(storage_)) {
      backend_.activation_backward(half_format(storage_), F, n, negative_slope_,
                                   top[0]->half_data(), top[0]->half_diff(),
                                   bottom[0]->mutable_half_diff());
    } else {
      backend_.activation_backward(F, n, negative_slope_, top[0]->data(), top[0]->diff(),
                                   bottom[0]->mutable_diff());
    }
  }

 private:
  float negative_slope_ = 0;
  DType storage_ = DType::kF32;  // the blobs' (the net chose it)
};

}  // namespace

void register_activation_layers() {
  register_layer<ActivationLayer<Activation::kReLU>>("ReLU");
  register_layer<ActivationLayer<Activation::kSigmoid>>("Sigmoid");
  register_layer<ActivationLayer<Activation::kTanH>>("TanH");
}

}  // namespace lamina
