// PReLU: a ReLU whose negative slope is learnt, per channel or one for all (Caffe's PReLU).
//
//   bottom (N, C, ...) viewed as (N, C, inner), at least 2 axes; slope (C), or (1) with
//   prelu_param.channel_shared (Caffe's is a scalar of no axes; the value is the same)
//   top = x > 0 ? x : slope[c] x, same shape
// Gradients: dbottom = dtop (x > 0 ? 1 : slope[c]) (=); dslope[c] += the sum of dtop x over
// the x <= 0 of channel c (of every channel when shared), in a fixed order on every backend.
// The slope's filler is prelu_param.filler, by default constant 0.25.
// Works in place: the layer then keeps a copy of its input, which both gradients need after
// the top has overwritten it.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class PReLULayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"prelu_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kPointwise}; }
  bool supports_in_place() const override { return true; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const PReLUParameter& p = param_.prelu_param();
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(x.num_axes() >= 2, where(), "bottom '", x.name(), "' must have at least 2 "
                   "axes (N, C, ...), got shape ", x.shape_string());
    const int64_t channels = x.dim(1);
    shared_ = p.channel_shared();
    // As (outer, channels, inner) for the operations: one channel of everything when shared.
    outer_ = x.dim(0);
    channels_ = shared_ ? 1 : channels;
    inner_ = x.count(2, x.num_axes()) * (shared_ ? channels : 1);
    FillerParameter quarter;
    quarter.set_type("constant");
    quarter.set_value(0.25f);
    add_param("slope", Shape{channels_}, p.has_filler() ? p.filler() : quarter);
    in_place_ = top[0] == bottom[0];
    if (in_place_) {
      input_.reserve(backend_, sizeof(float) * x.count());
    } else {
      top[0]->reshape(x.shape());
    }
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    if (in_place_) backend_.copy(sizeof(float) * x.count(), x.data(), input_.as<float>());
    backend_.prelu_forward(outer_, channels_, inner_, x.data(), params_[0].tensor->data(),
                           top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.prelu_backward(outer_, channels_, inner_, input(bottom), top[0]->diff(),
                            params_[0].tensor->data(), bottom[0]->mutable_diff(), nullptr);
  }

  void backward_params(const Tensors& top, const Tensors& bottom) override {
    Tensor& slope = *params_[0].tensor;
    backend_.prelu_backward(outer_, channels_, inner_, input(bottom), top[0]->diff(),
                            slope.data(), nullptr, slope.mutable_diff());
  }

 private:
  // x as forward saw it.
  const float* input(const Tensors& bottom) const {
    return in_place_ ? input_.as<float>() : bottom[0]->data();
  }

  bool shared_ = false;
  bool in_place_ = false;
  int64_t outer_ = 0, channels_ = 0, inner_ = 0;
  Buffer input_;  // in place only: the bottom as forward saw it (its count, floats)
};

}  // namespace

void register_prelu_layer() { register_layer<PReLULayer>("PReLU"); }

}  // namespace lamina
