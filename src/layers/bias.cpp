// Bias: a learnable per-channel bias (Caffe's Bias with one bottom).
//
//   bottom viewed as (outer, channels, inner), bias (channels)
//   top = bottom + bias[c], same shape
// The bias's shape is the bottom's dims [axis, axis + num_axes) (bias_param, default the
// channel axis); filler constant 0 unless given.
// Gradients: dbottom = dtop (=); dbias += the sum of dtop over outer and inner. Works in place.
// In a 16-bit precision (one bottom) the bottom, the top and their gradients are 16-bit (y
// rounded once); the bias and its gradient stay FP32.
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
  // The two-bottom form (refused in setup) stays FP32 so that its error names the user's blob.
  HalfSupport half_support() const override {
    // (no bottom: a chained layer, which the net gives one)
    return param_.bottom_size() <= 1 ? HalfSupport::kHalf : HalfSupport::kNone;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    require_one_bottom(where(), "bias", bottom);
    const BiasParameter& p = param_.bias_param();
    axes_ = channel_axes(where(), "bias_param", p.axis(), p.num_axes(), *bottom[0]);
    add_param("bias", axes_.shape, p.has_filler() ? p.filler() : FillerParameter());
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
    storage_ = bottom[0]->dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* bias = params_[0].tensor->data();
    if (is_half(storage_)) {
      backend_.channel_affine(half_format(storage_), axes_.outer, axes_.channels, axes_.inner,
                              bottom[0]->half_data(), nullptr, bias, top[0]->mutable_half_data());
      return;
    }
    backend_.channel_affine(axes_.outer, axes_.channels, axes_.inner, bottom[0]->data(), nullptr,
                            bias, top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0] || top[0] == bottom[0]) return;
    const size_t bytes = dtype_size(storage_) * top[0]->count();
    if (is_half(storage_)) {
      backend_.copy(bytes, top[0]->half_diff(), bottom[0]->mutable_half_diff());
    } else {
      backend_.copy(bytes, top[0]->diff(), bottom[0]->mutable_diff());
    }
  }

  void backward_params(const Tensors& top, const Tensors& /*bottom*/) override {
    float* dbias = params_[0].tensor->mutable_diff();
    if (is_half(storage_)) {
      backend_.channel_reduce(half_format(storage_), axes_.outer, axes_.channels, axes_.inner,
                              top[0]->half_diff(), nullptr, dbias);
      return;
    }
    backend_.channel_reduce(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(), nullptr,
                            dbias);
  }

 private:
  ChannelAxes axes_{};
  DType storage_ = DType::kF32;  // of the bottom, the top and their gradients
};

}  // namespace

void register_bias_layer() { register_layer<BiasLayer>("Bias"); }

}  // namespace lamina
