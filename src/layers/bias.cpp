// Bias: a per-channel bias (Caffe's Bias).
//
//   bottom viewed as (outer, channels, inner), bias (channels)
//   top = bottom + bias[c], same shape
// The bias is learned, or given as a second bottom (Caffe's two-bottom form):
//   learned: its shape is the bottom's dims [axis, axis + num_axes) (bias_param, default the
//     channel axis; num_axes -1: every axis from axis on, 0: a scalar); filler constant 0
//     unless given.
//   bottom 1: its shape must be bottom 0's dims [axis, axis + its axes), or it has no axes (a
//     scalar); num_axes and filler are not read.
// Gradients: dbottom = dtop (=); the bias's gradient is the sum of dtop over outer and inner
// (added to the learned bias's, written to bottom 1's). Works in place.
// In a 16-bit precision (one bottom) the bottom, the top and their gradients are 16-bit (y
// rounded once); the bias and its gradient stay FP32. The two-bottom form runs in FP32.

#include "channel_axes.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class BiasLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return 2; }
  std::vector<std::string> parameter_messages() const override { return {"bias_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kChannelAffine}; }
  bool supports_in_place() const override { return true; }
  // In 16 bits with one bottom; with two, FP32 (the bias a blob like the bottom).
  HalfSupport half_support() const override {
    // (no bottom: a chained layer, which the net gives one)
    return param_.bottom_size() <= 1 ? HalfSupport::kHalf : HalfSupport::kNone;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const BiasParameter& p = param_.bias_param();
    given_ = bottom.size() == 2;
    if (given_) {
      require_top_not_parameter(where(), bottom, top);
      axes_ = broadcast_axes(where(), "bias_param", p.axis(), *bottom[0], *bottom[1]);
      if (p.has_num_axes() || p.has_filler())
        warn("bias_param.num_axes and filler describe a learned bias; with the bias as "
             "bottom 1 they are not used (as in Caffe)");
    } else {
      axes_ = channel_axes(where(), "bias_param", p.axis(), p.num_axes(), *bottom[0]);
      add_param("bias", axes_.shape, p.has_filler() ? p.filler() : FillerParameter());
    }
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
    storage_ = bottom[0]->dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* bias = (given_ ? *bottom[1] : *params_[0].tensor).data();
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
    if (given_ && propagate[1]) {
      float* dbias = bottom[1]->mutable_diff();
      backend_.zero(sizeof(float) * axes_.channels, dbias);
      backend_.channel_reduce(axes_.outer, axes_.channels, axes_.inner, top[0]->diff(), nullptr,
                              dbias);
    }
    if (!propagate[0] || top[0] == bottom[0]) return;
    const size_t bytes = dtype_size(storage_) * top[0]->count();
    if (is_half(storage_)) {
      backend_.copy(bytes, top[0]->half_diff(), bottom[0]->mutable_half_diff());
    } else {
      backend_.copy(bytes, top[0]->diff(), bottom[0]->mutable_diff());
    }
  }

  void backward_params(const Tensors& top, const Tensors& /*bottom*/) override {
    if (given_) return;  // no parameter
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
  bool given_ = false;           // the bias is bottom 1
  DType storage_ = DType::kF32;  // of the bottom, the top and their gradients
};

}  // namespace

void register_bias_layer() { register_layer<BiasLayer>("Bias"); }

}  // namespace lamina
