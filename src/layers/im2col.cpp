// Im2col: Caffe's layer that lays out each image's convolution patches as channels.
//
//   bottom (N, C, H, W)  ->  top (N, C KH KW, OH, OW)
// Top channel (c, ki, kj) at (oh, ow) holds the bottom pixel (oh stride_h - pad_h +
// ki dilation_h, ow stride_w - pad_w + kj dilation_w) of channel c, 0 in the padding; OH and
// OW as Convolution's. convolution_param's kernel, stride, pad and dilation are read as
// Convolution reads them; num_output, group, bias_term and the fillers mean nothing here and
// are ignored, as Caffe ignores them. The bottom gradient (written with =) sums the top
// gradient of every entry read from each pixel (col2im).
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

class Im2colLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"convolution_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kIm2col}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    require_nchw(where(), x);
    const ConvWindow win = conv_window(where(), param_.convolution_param());
    g_ = window_geometry(where(), x, win, x.dim(1), 1);
    top[0]->reshape({g_.n, g_.c * g_.kh * g_.kw, g_.out_h, g_.out_w});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.im2col(g_, bottom[0]->data(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (propagate[0]) backend_.col2im(g_, top[0]->diff(), bottom[0]->mutable_diff());
  }

 private:
  ConvGeometry g_{};
};

}  // namespace

void register_im2col_layer() { register_layer<Im2colLayer>("Im2col"); }

}  // namespace lamina
