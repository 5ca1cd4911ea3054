// Scale: a learnable per-channel scale, optionally with a bias (Caffe's Scale with one bottom;
// Caffe's BatchNorm + Scale pairs give batch normalisation its affine part).
//
//   bottom viewed as (outer, channels, inner), scale (channels), bias (channels)
//   top = bottom * scale[c] + bias[c], same shape
// The scale's shape is the bottom's dims [axis, axis + num_axes) (scale_param, default the
// channel axis). Fillers: scale constant 1, bias constant 0 unless given.
// Gradients: dbottom = dtop * scale (=); dscale += sum dtop * bottom; dbias += sum dtop.
// Works in place (Caffe nets often write BatchNorm and Scale in place): the layer then keeps a
// copy of its input, which dscale needs after the top has overwritten it.
#include <memory>

#include "channel_axes.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ScaleLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return 2; }  // so the second bottom gets its own error
  std::vector<std::string> parameter_messages() const override { return {"scale_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kChannelAffine}; }
  bool supports_in_place() const override { return true; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    require_one_bottom(where(), "scale", bottom);
    const ScaleParameter& p = param_.scale_param();
    const Tensor& x = *bottom[0];
    axes_ = channel_axes(where(), "scale_param", p.axis(), p.num_axes(), x);
    FillerParameter ones;
    ones.set_value(1);
    add_param("scale", axes_.shape, p.has_filler() ? p.filler() : ones);
    bias_term_ = p.bias_term();
    if (bias_term_) {
      add_param("bias", axes_.shape, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
    }
    in_place_ = top[0] == bottom[0];
    if (in_place_) {
      input_ = std::make_unique<Tensor>(backend_, x.shape(), name() + "/input");
    } else {
      top[0]->reshape(x.shape());
    }
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    if (in_place_) {
      backend_.copy(sizeof(float) * input_->count(), bottom[0]->data(), input_->mutable_data());
    }
    backend_.channel_affine(axes_.outer, axes_.channels, axes_.inner, bottom[0]->data(),
                            params_[0].tensor->data(),
                            bias_term_ ? params_[1].tensor->data() : nullptr,
                            top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.channel_affine(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(),
                            params_[0].tensor->data(), nullptr, bottom[0]->mutable_diff());
  }

  void backward_params(const Tensors& top, const Tensors& bottom) override {
    const float* x = in_place_ ? input_->data() : bottom[0]->data();
    backend_.channel_reduce(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(), x,
                            params_[0].tensor->mutable_diff());
    if (bias_term_) {
      backend_.channel_reduce(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(), nullptr,
                              params_[1].tensor->mutable_diff());
    }
  }

 private:
  ChannelAxes axes_{};
  bool bias_term_ = false;
  bool in_place_ = false;
  std::unique_ptr<Tensor> input_;  // in place only: the bottom as forward saw it
};

}  // namespace

void register_scale_layer() { register_layer<ScaleLayer>("Scale"); }

}  // namespace lamina
