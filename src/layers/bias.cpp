// Bias: a learnable per-channel bias (Caffe's Bias with one bottom).
//
//   bottom viewed as (outer, channels, inner), bias (channels)
//   top = bottom + bias[c], same shape
// The bias's shape is the bottom's dims [axis, axis + num_axes) (bias_param, default the
// channel axis); filler constant 0 unless given.
// Gradients: dbottom = dtop (=); dbias += the sum of dtop over outer and inner. Works in place.
#include "channel_axes.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class BiasLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return 2; }  // so the second bottom gets its own error
  std::vector<std::string> parameter_messages() const override { return {"bias_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kChannelAffine}; }
  bool supports_in_place() const override { return true; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    require_one_bottom(where(), "bias", bottom);
    const BiasParameter& p = param_.bias_param();
    axes_ = channel_axes(where(), "bias_param", p.axis(), p.num_axes(), *bottom[0]);
    add_param("bias", axes_.shape, p.has_filler() ? p.filler() : FillerParameter());
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.channel_affine(axes_.outer, axes_.channels, axes_.inner, bottom[0]->data(), nullptr,
                            params_[0].tensor->data(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0] || top[0] == bottom[0]) return;
    backend_.copy(sizeof(float) * top[0]->count(), top[0]->diff(), bottom[0]->mutable_diff());
  }

  void backward_params(const Tensors& top, const Tensors& /*bottom*/) override {
    backend_.channel_reduce(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(), nullptr,
                            params_[0].tensor->mutable_diff());
  }

 private:
  ChannelAxes axes_{};
};

}  // namespace

void register_bias_layer() { register_layer<BiasLayer>("Bias"); }

}  // namespace lamina
