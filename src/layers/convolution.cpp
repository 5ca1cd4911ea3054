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
    require_nchw(where(), x);
    LAMINA_REQUIRE(p.axis() == 1 || p.axis() == -3, where(), "convolution_param.axis must be 1 "
                   "(the channels of an NCHW blob), got ", p.axis());
    LAMINA_REQUIRE(p.has_num_output() && p.num_output() > 0, where(),
                   "convolution_param.num_output must be set to a positive number of outputs");
    const auto list = [](const google::protobuf::RepeatedField<uint32_t>& r) {
      return std::vector<int64_t>(r.begin(), r.end());
    };
    const std::string m = "convolution_param";
    const Extent2 kernel = spatial_setting(where(), m, "kernel_size", "kernel",
                                           list(p.kernel_size()), p.has_kernel_h(), p.kernel_h(),
                                           p.has_kernel_w(), p.kernel_w(), 0, true);
    const Extent2 stride = spatial_setting(where(), m, "stride", "stride", list(p.stride()),
                                           p.has_stride_h(), p.stride_h(), p.has_stride_w(),
                                           p.stride_w(), 1, true);
    const Extent2 pad = spatial_setting(where(), m, "pad", "pad", list(p.pad()), p.has_pad_h(),
                                        p.pad_h(), p.has_pad_w(), p.pad_w(), 0, false);
    const Extent2 dilation = spatial_setting(where(), m, "dilation", "", list(p.dilation()),
                                             false, 0, false, 0, 1, false);
    LAMINA_REQUIRE(kernel.h > 0 && kernel.w > 0, where(), "convolution_param.kernel_size (or "
                   "kernel_h and kernel_w) must be given and positive, got ", kernel.h, "x",
                   kernel.w);
    LAMINA_REQUIRE(stride.h > 0 && stride.w > 0, where(), "convolution_param.stride must be "
                   "positive, got ", stride.h, "x", stride.w);
    LAMINA_REQUIRE(dilation.h > 0 && dilation.w > 0, where(), "convolution_param.dilation must "
                   "be positive, got ", dilation.h, "x", dilation.w);

    const int64_t c = x.dim(1), k = p.num_output(), groups = p.group();
    LAMINA_REQUIRE(groups > 0 && c % groups == 0 && k % groups == 0, where(),
                   "convolution_param.group ", groups, " must divide both the ", c,
                   " channels of bottom '", x.name(), "' ", x.shape_string(),
                   " and num_output ", k);

    g_ = ConvGeometry{x.dim(0), c, x.dim(2), x.dim(3), k, kernel.h, kernel.w, stride.h, stride.w,
                      pad.h, pad.w, dilation.h, dilation.w, groups, 0, 0};
    const int64_t extent_h = dilation.h * (kernel.h - 1) + 1;
    const int64_t extent_w = dilation.w * (kernel.w - 1) + 1;
    LAMINA_REQUIRE(g_.h + 2 * pad.h >= extent_h && g_.w + 2 * pad.w >= extent_w, where(),
                   "the ", extent_h, "x", extent_w, " dilated kernel does not fit in bottom '",
                   x.name(), "' ", x.shape_string(), " padded by ", pad.h, "x", pad.w,
                   ": the output would be empty");
    g_.out_h = (g_.h + 2 * pad.h - extent_h) / stride.h + 1;
    g_.out_w = (g_.w + 2 * pad.w - extent_w) / stride.w + 1;

    bias_term_ = p.bias_term();
    add_param("weight", {k, c / groups, kernel.h, kernel.w},
              p.has_weight_filler() ? p.weight_filler() : xavier());
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
  static FillerParameter xavier() {
    FillerParameter filler;
    filler.set_type("xavier");
    return filler;
  }
  const float* bias() const { return bias_term_ ? params_[1].tensor->data() : nullptr; }

  ConvGeometry g_{};
  bool bias_term_ = true;
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
};

}  // namespace

void register_convolution_layer() { register_layer<ConvolutionLayer>("Convolution"); }

}  // namespace lamina
