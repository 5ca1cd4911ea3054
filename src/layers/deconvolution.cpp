// Deconvolution: Caffe's transposed convolution, convolution_param, NCHW.
//
//   bottom (N, C, H, W), weight (C, K / group, KH, KW), bias (K)  ->  top (N, K, OH, OW)
//   OH = stride_h (H - 1) + dilation_h (KH - 1) + 1 - 2 pad_h, OW likewise.
// The settings are Convolution's (kernel, stride, pad, dilation, group, num_output = K,
// bias_term, fillers: weight xavier, bias constant 0 by default). It is the convolution
// from the top's shape to the bottom's run backwards: with g that convolution (input
// (N, K, OH, OW), C outputs, the same weight), forward = conv_backward_data(g) plus the bias
// per channel, the bottom gradient = conv_forward(g) of dtop, the weight gradient =
// conv_backward_filter(g) with the top gradient as its input and the bottom as its output
// gradient, the bias gradient = the sums of dtop per channel. Products in math() (TF32
// where the layer's precision says). Gradients: dbottom written with =; dweight and dbias
// accumulate with +=.
// In a 16-bit precision the bottom, the top and their gradients are 16-bit and the
// convolutions read the weight's 16-bit copy, as Convolution's do; the bias is added to the
// rounded product and the sum rounded again (as Convolution's conv_forward rounds).
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

class DeconvolutionLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"convolution_param"}; }
  std::vector<Operation> operations() const override {
    return {Operation::kConvolution, Operation::kChannelAffine};
  }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ConvolutionParameter& p = param_.convolution_param();
    const Tensor& x = *bottom[0];
    const auto [win, k, groups] = conv_settings(where(), p, x);
    const int64_t c = x.dim(1);
    const Extent2 extent = win.extent();
    const int64_t out_h = win.stride.h * (x.dim(2) - 1) + extent.h - 2 * win.pad.h;
    const int64_t out_w = win.stride.w * (x.dim(3) - 1) + extent.w - 2 * win.pad.w;
    LAMINA_REQUIRE(out_h > 0 && out_w > 0, where(), "the output of bottom '", x.name(), "' ",
                   x.shape_string(), " would be ", out_h, "x", out_w, " (stride (in - 1) + ",
                   "dilated kernel ", extent.h, "x", extent.w, " - 2 pad ", win.pad.h, "x",
                   win.pad.w, "): reduce convolution_param.pad");
    // The convolution from the top (N, K, OH, OW) to the bottom (N, C, H, W).
    g_ = ConvGeometry{x.dim(0),     k,              out_h,          out_w,   c,
                      win.kernel.h, win.kernel.w,   win.stride.h,   win.stride.w,
                      win.pad.h,    win.pad.w,      win.dilation.h, win.dilation.w,
                      groups,       x.dim(2),       x.dim(3)};

    bias_term_ = p.bias_term();
    add_param("weight", {c, k / groups, g_.kh, g_.kw},
              p.has_weight_filler() ? p.weight_filler() : xavier_filler());
    if (bias_term_) {
      add_param("bias", {k}, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
    }
    top[0]->reshape({g_.n, k, out_h, out_w});
    storage_ = x.dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t plane = g_.h * g_.w;
    if (is_half(storage_)) {
      const Half format = half_format(storage_);
      uint16_t* y = top[0]->mutable_half_data();
      backend_.conv_backward_data(format, g_, params_[0].tensor->half_copy(),
                                  bottom[0]->half_data(), y);
      if (bias_term_) backend_.channel_affine(format, g_.n, g_.c, plane, y, nullptr, bias(), y);
      return;
    }
    float* y = top[0]->mutable_data();
    backend_.conv_backward_data(g_, params_[0].tensor->data(), bottom[0]->data(), y);
    if (bias_term_) backend_.channel_affine(g_.n, g_.c, plane, y, nullptr, bias(), y);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    if (is_half(storage_)) {
      backend_.conv_forward(half_format(storage_), g_, top[0]->half_diff(),
                            params_[0].tensor->half_copy(), nullptr,
                            bottom[0]->mutable_half_diff());
      return;
    }
    backend_.conv_forward(g_, top[0]->diff(), params_[0].tensor->data(), nullptr,
                          bottom[0]->mutable_diff());
  }

  // Beside the input gradient, on the side lane (Backend::to_side_lane), unless a parameter
  // is shared with another layer.
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    SideLane lane(backend_, !any_shared(params_));
    float* dweight = params_[0].tensor->mutable_diff();
    float* dbias = bias_term_ ? params_[1].tensor->mutable_diff() : nullptr;
    const int64_t plane = g_.h * g_.w;
    if (is_half(storage_)) {
      const Half format = half_format(storage_);
      backend_.conv_backward_filter(format, g_, top[0]->half_diff(), bottom[0]->half_data(),
                                    dweight, nullptr);
      if (dbias) backend_.channel_reduce(format, g_.n, g_.c, plane, top[0]->half_diff(),
                                         nullptr, dbias);
      return;
    }
    backend_.conv_backward_filter(g_, top[0]->diff(), bottom[0]->data(), dweight, nullptr);
    if (dbias) backend_.channel_reduce(g_.n, g_.c, plane, top[0]->diff(), nullptr, dbias);
  }

 private:
  const float* bias() const { return bias_term_ ? params_[1].tensor->data() : nullptr; }

  ConvGeometry g_{};  // the convolution from the top's shape to the bottom's
  bool bias_term_ = true;
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
};

}  // namespace

void register_deconvolution_layer() { register_layer<DeconvolutionLayer>("Deconvolution"); }

}  // namespace lamina
