// Scale: a per-channel scale, optionally with a bias (Caffe's Scale; Caffe's BatchNorm + Scale
// pairs give batch normalisation its affine part).
//
//   bottom viewed as (outer, channels, inner), scale (channels), bias (channels)
//   top = bottom * scale[c] + bias[c], same shape
// The scale is learned, or given as a second bottom (Caffe's two-bottom form):
//   learned: its shape is the bottom's dims [axis, axis + num_axes) (scale_param, default the
//     channel axis; num_axes -1: every axis from axis on, 0: a scalar); filler constant 1
//     unless given.
//   bottom 1: its shape must be bottom 0's dims [axis, axis + its axes), or it has no axes (a
//     scalar); num_axes and filler are not read.
// With bias_term the bias is learned either way, of the scale's shape (bias_filler, constant
// 0 unless given); parameters: scale then bias, or the bias alone.
// Gradients: dbottom = dtop * scale (=); the scale's gradient is sum dtop * bottom over outer
// and inner (added to the learned scale's, written to bottom 1's); dbias += sum dtop.
// Works in place (Caffe nets often write BatchNorm and Scale in place): the layer then keeps a
// copy of its input, which the scale's gradient needs after the top has overwritten it; not
// when a BatchNorm absorbed it (batch_norm.cpp: one bottom only), which keeps the normalised
// values anyway.
// In a 16-bit precision (one bottom) the bottom, the top, their gradients and that copy are
// 16-bit; the scale, the bias and their gradients stay FP32. The two-bottom form runs in FP32.

#include <memory>

#include "channel_axes.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ScaleLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return 2; }
  std::vector<std::string> parameter_messages() const override { return {"scale_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kChannelAffine}; }
  bool supports_in_place() const override { return true; }
  // In 16 bits with one bottom; with two, FP32 (the scale a blob like the bottom).
  HalfSupport half_support() const override {
    // (no bottom: a chained layer, which the net gives one)
    return param_.bottom_size() <= 1 ? HalfSupport::kHalf : HalfSupport::kNone;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ScaleParameter& p = param_.scale_param();
    const Tensor& x = *bottom[0];
    given_ = bottom.size() == 2;
    if (given_) {
      require_top_not_parameter(where(), bottom, top);
      axes_ = broadcast_axes(where(), "scale_param", p.axis(), x, *bottom[1]);
      if (p.has_num_axes() || p.has_filler())
        warn("scale_param.num_axes and filler describe a learned scale; with the scale as "
             "bottom 1 they are not used (as in Caffe)");
    } else {
      axes_ = channel_axes(where(), "scale_param", p.axis(), p.num_axes(), x);
      FillerParameter ones;
      ones.set_value(1);
      add_param("scale", axes_.shape, p.has_filler() ? p.filler() : ones);
    }
    bias_term_ = p.bias_term();
    if (bias_term_) {
      add_param("bias", axes_.shape, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
    }
    in_place_ = top[0] == bottom[0];
    storage_ = x.dtype();
    if (in_place_) {
      input_ = std::make_unique<Tensor>(backend_, x.shape(), name() + "/input", storage_);
    } else {
      top[0]->reshape(x.shape());
    }
  }

  // The layer before does this one's work (a BatchNorm keeps the normalised values): the copy
  // of the input is not needed.
  void absorbed() override { input_.reset(); }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* scale = scale_of(bottom).data();
    const float* bias = bias_term_ ? params_.back().tensor->data() : nullptr;
    if (is_half(storage_)) {
      const uint16_t* x = bottom[0]->half_data();
      if (in_place_) {
        backend_.copy(sizeof(uint16_t) * input_->count(), x, input_->mutable_half_data());
      }
      backend_.channel_affine(half_format(storage_), axes_.outer, axes_.channels, axes_.inner,
                              x, scale, bias, top[0]->mutable_half_data());
      return;
    }
    if (in_place_) {
      backend_.copy(sizeof(float) * input_->count(), bottom[0]->data(), input_->mutable_data());
    }
    backend_.channel_affine(axes_.outer, axes_.channels, axes_.inner, bottom[0]->data(), scale,
                            bias, top[0]->mutable_data());
  }

  // Bottom 1's gradient first: in place, dx then overwrites dy.
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    const int64_t outer = axes_.outer, channels = axes_.channels, inner = axes_.inner;
    if (given_ && propagate[1]) {
      float* dscale = bottom[1]->mutable_diff();
      backend_.zero(sizeof(float) * channels, dscale);
      backend_.channel_reduce(outer, channels, inner, top[0]->diff(), input(bottom).data(),
                              dscale);
    }
    if (!propagate[0]) return;
    const float* scale = scale_of(bottom).data();
    if (is_half(storage_)) {
      backend_.channel_affine(half_format(storage_), outer, channels, inner, top[0]->half_diff(),
                              scale, nullptr, bottom[0]->mutable_half_diff());
      return;
    }
    backend_.channel_affine(outer, channels, inner, top[0]->diff(), scale, nullptr,
                            bottom[0]->mutable_diff());
  }

  // dscale += sum dy x (learned), dbias += sum dy (per channel, FP32).
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    float* dbias = bias_term_ ? params_.back().tensor->mutable_diff() : nullptr;
    const int64_t outer = axes_.outer, channels = axes_.channels, inner = axes_.inner;
    if (given_) {
      if (dbias != nullptr)
        backend_.channel_reduce(outer, channels, inner, top[0]->diff(), nullptr, dbias);
      return;
    }
    float* dscale = params_[0].tensor->mutable_diff();
    const Tensor& x = input(bottom);
    if (is_half(storage_)) {
      const Half f = half_format(storage_);
      backend_.scale_gradients(f, outer, channels, inner, top[0]->half_diff(), x.half_data(),
                               dscale, dbias);
      return;
    }
    backend_.scale_gradients(outer, channels, inner, top[0]->diff(), x.data(), dscale, dbias);
  }

 private:
  // The scale: bottom 1, or the learned parameter.
  const Tensor& scale_of(const Tensors& bottom) const {
    return given_ ? *bottom[1] : *params_[0].tensor;
  }
  // The bottom as forward saw it.
  const Tensor& input(const Tensors& bottom) const { return in_place_ ? *input_ : *bottom[0]; }

  ChannelAxes axes_{};
  bool given_ = false;  // the scale is bottom 1
  bool bias_term_ = false;
  bool in_place_ = false;
  DType storage_ = DType::kF32;    // of the bottom, the top and their gradients
  std::unique_ptr<Tensor> input_;  // in place only: the bottom as forward saw it
};

}  // namespace

void register_scale_layer() { register_layer<ScaleLayer>("Scale"); }

}  // namespace lamina
