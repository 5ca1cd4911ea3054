// LRN: Caffe's local response normalisation, lrn_param, bottom (N, C, H, W) -> top (same).
//
// ACROSS_CHANNELS (default): y = x (k + alpha / size * (the sum of x^2 over the local_size
// channels centred on each, clipped at the ends))^-beta, through the lrn operations; the
// scale (N, C, H, W) is kept for the backward pass, which also reads the top.
// WITHIN_CHANNEL, as Caffe composes it: y = x (1 + alpha * avg)^-beta, avg the average of
// x^2 over the local_size x local_size window centred on each pixel (zero padding,
// (local_size - 1) / 2 each side, always divided by local_size^2). Caffe adds 1 there, not
// k, and alpha is not divided by the size (the average already divides): k is unused. It
// runs as an across-channel LRN of the pixels' windows: im2col lays each window out along
// a channel axis of local_size^2 entries (N, C local_size^2, H, W), whose middle entry is the
// pixel itself; the lrn operation with size local_size^2, k 1 and this alpha gives that
// entry exactly y (its window covers the whole patch), and the others are discarded. The
// backward pass gives the middle entries' dy to lrn_backward and sums the column gradient
// back with col2im. The column arrays take local_size^2 times the bottom's memory each, so
// the batch runs in chunks of images (kChunkFloats floats per array); with one chunk the
// forward's arrays serve the backward pass, with several it computes them again.
// local_size must be odd (Caffe's requirement); engine is accepted as a hint. FP32.
#include <glog/logging.h>

#include <algorithm>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

constexpr int64_t kChunkFloats = int64_t{1} << 22;  // 16 MiB per column array

class LrnLayer : public Layer {
 public:
  // The region is known from the start: the net asks operations() before setup.
  LrnLayer(const LayerParameter& param, const LayerContext& context)
      : Layer(param, context),
        within_(param.lrn_param().norm_region() == LRNParameter::WITHIN_CHANNEL) {}

  std::vector<std::string> parameter_messages() const override { return {"lrn_param"}; }
  std::vector<Operation> operations() const override {
    if (!within_) return {Operation::kLrn};
    return {Operation::kLrn, Operation::kIm2col, Operation::kRowCopy};
  }
  TopUse backward_reads_top() const override {
    return within_ ? TopUse::kNothing : TopUse::kValues;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const LRNParameter& p = param_.lrn_param();
    const Tensor& x = *bottom[0];
    require_nchw(where(), x);
    LAMINA_REQUIRE(p.local_size() % 2 == 1, where(), "lrn_param.local_size must be odd "
                   "(Caffe's LRN centres the window on each element), got ", p.local_size());
    const int64_t size = p.local_size();
    n_ = x.dim(0), c_ = x.dim(1), plane_ = x.dim(2) * x.dim(3);
    top[0]->reshape(x.shape());
    if (!within_) {
      args_ = LrnArgs{size, p.alpha(), p.beta(), p.k()};
      scale_ = Buffer(backend_, sizeof(float) * x.count());
      return;
    }
    args_ = LrnArgs{size * size, p.alpha(), p.beta(), 1.0f};
    if (p.has_k())
      LOG(WARNING) << where() << "lrn_param.k is not used by WITHIN_CHANNEL, which adds 1 "
                   << "(as in Caffe)";
    const int64_t pad = (size - 1) / 2;
    g_ = ConvGeometry{0, c_, x.dim(2), x.dim(3), c_, size, size, 1, 1, pad, pad, 1, 1, 1,
                      x.dim(2), x.dim(3)};
    const int64_t per_image = c_ * args_.size * plane_;
    chunk_ = std::clamp<int64_t>(kChunkFloats / std::max<int64_t>(per_image, 1), 1,
                                 std::max<int64_t>(n_, 1));
    for (Buffer* b : {&col_, &scale_, &col_y_, &col_dy_, &col_dx_})
      *b = Buffer(backend_, sizeof(float) * chunk_ * per_image);
    // Only the middle entries of col_dy_ are ever written: the others stay 0.
    backend_.zero(col_dy_.bytes(), col_dy_.get());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    if (!within_) {
      backend_.lrn_forward(n_, c_, plane_, args_, x, scale_.as<float>(), y);
      return;
    }
    for (int64_t n0 = 0; n0 < n_; n0 += chunk_) {
      const int64_t images = std::min(chunk_, n_ - n0);
      within_columns(images, x + n0 * c_ * plane_);
      // The middle entry of each pixel's window: row (image, channel) of y.
      backend_.copy_rows(images * c_, plane_, col_y_.as<float>() + middle() * plane_,
                         args_.size * plane_, y + n0 * c_ * plane_, plane_);
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* dy = top[0]->diff();
    float* dx = bottom[0]->mutable_diff();
    if (!within_) {
      backend_.lrn_backward(n_, c_, plane_, args_, bottom[0]->data(), top[0]->data(),
                            scale_.as<float>(), dy, dx);
      return;
    }
    for (int64_t n0 = 0; n0 < n_; n0 += chunk_) {
      const int64_t images = std::min(chunk_, n_ - n0);
      if (chunk_ < n_) within_columns(images, bottom[0]->data() + n0 * c_ * plane_);
      backend_.copy_rows(images * c_, plane_, dy + n0 * c_ * plane_, plane_,
                         col_dy_.as<float>() + middle() * plane_, args_.size * plane_);
      backend_.lrn_backward(images * c_, args_.size, plane_, args_, col_.as<float>(),
                            col_y_.as<float>(), scale_.as<float>(), col_dy_.as<float>(),
                            col_dx_.as<float>());
      backend_.col2im(chunk_geometry(images), col_dx_.as<float>(), dx + n0 * c_ * plane_);
    }
  }

 private:
  // The window entry of the pixel itself: the middle one of local_size^2.
  int64_t middle() const { return (args_.size - 1) / 2; }
  ConvGeometry chunk_geometry(int64_t images) const {
    ConvGeometry g = g_;
    g.n = images;
    return g;
  }
  // col_ = the windows of x (images, C, H, W); col_y_ and scale_ = their across-channel LRN.
  void within_columns(int64_t images, const float* x) {
    backend_.im2col(chunk_geometry(images), x, col_.as<float>());
    backend_.lrn_forward(images * c_, args_.size, plane_, args_, col_.as<float>(),
                         scale_.as<float>(), col_y_.as<float>());
  }

  bool within_;
  LrnArgs args_;
  int64_t n_ = 0, c_ = 0, plane_ = 0;
  Buffer scale_;  // across: (N, C, H, W); within: (chunk, C local_size^2, H, W)
  // WITHIN_CHANNEL: the windows (im2col), their LRN output, its gradient (zero but for the
  // middle entries) and the windows' gradient, each (chunk, C local_size^2, H, W).
  ConvGeometry g_{};  // local_size x local_size, stride 1, pad (local_size - 1) / 2; n unset
  int64_t chunk_ = 1;  // images per chunk
  Buffer col_, col_y_, col_dy_, col_dx_;
};

}  // namespace

void register_lrn_layer() { register_layer<LrnLayer>("LRN"); }

}  // namespace lamina
