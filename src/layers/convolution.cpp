// Convolution: 2-D, NCHW, Caffe's convolution_param.
//
//   bottom (N, C, H, W), weight (K, C / group, KH, KW), bias (K)  ->  top (N, K, OH, OW)
//   OH = (H + 2 pad_h - (dilation_h (KH - 1) + 1)) / stride_h + 1, OW likewise.
// kernel_size, stride, pad and dilation take one value for both dimensions or two (h, w);
// kernel_h/_w, stride_h/_w and pad_h/_w are the other spelling (not both). Defaults: stride
// 1, pad 0, dilation 1; weight filler xavier, bias filler constant 0. Input channels and
// outputs are split into `group` independent convolutions.
// Gradients: dbottom written with =; dweight and dbias accumulate with +=.
// In a 16-bit precision the bottom, the top and their gradients are 16-bit and the
// convolutions read the weight's 16-bit copy; the parameters and their gradients stay FP32
// (Backend::conv_* with a Half says where results are rounded).
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

class ConvolutionLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"convolution_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kConvolution}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ConvolutionParameter& p = param_.convolution_param();
    const Tensor& x = *bottom[0];
    const auto [win, k, groups] = conv_settings(where(), p, x);
    const int64_t c = x.dim(1);
    g_ = window_geometry(where(), x, win, k, groups);

    bias_term_ = p.bias_term();
    add_param("weight", {k, c / groups, g_.kh, g_.kw},
              p.has_weight_filler() ? p.weight_filler() : xavier_filler());
    if (bias_term_) {
      add_param("bias", {k}, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
    }
    top[0]->reshape({g_.n, k, g_.out_h, g_.out_w});
    storage_ = x.dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    if (is_half(storage_)) {
      backend_.conv_forward(half_format(storage_), g_, bottom[0]->half_data(),
                            params_[0].tensor->half_copy(), bias(), top[0]->mutable_half_data());
      return;
    }
    backend_.conv_forward(g_, bottom[0]->data(), params_[0].tensor->data(), bias(),
                          top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    if (is_half(storage_)) {
      backend_.conv_backward_data(half_format(storage_), g_, params_[0].tensor->half_copy(),
                                  top[0]->half_diff(), bottom[0]->mutable_half_diff());
      return;
    }
    backend_.conv_backward_data(g_, params_[0].tensor->data(), top[0]->diff(),
                                bottom[0]->mutable_diff());
  }

  // Beside the input gradient, on the side lane (Backend::to_side_lane), unless a parameter
  // is shared with another layer.
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    SideLane lane(backend_, !any_shared(params_));
    float* dbias = bias_term_ ? params_[1].tensor->mutable_diff() : nullptr;
    if (is_half(storage_)) {
      backend_.conv_backward_filter(half_format(storage_), g_, bottom[0]->half_data(),
                                    top[0]->half_diff(), params_[0].tensor->mutable_diff(),
                                    dbias);
      return;
    }
    backend_.conv_backward_filter(g_, bottom[0]->data(), top[0]->diff(),
                                  params_[0].tensor->mutable_diff(), dbias);
  }

 private:
  const float* bias() const { return bias_term_ ? params_[1].tensor->data() : nullptr; }

  ConvGeometry g_{};
  bool bias_term_ = true;
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
};

}  // namespace

void register_convolution_layer() { register_layer<ConvolutionLayer>("Convolution"); }

}  // namespace lamina
