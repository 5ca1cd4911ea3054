// ContrastiveLoss (Caffe 1.0): pulls similar pairs together and pushes dissimilar ones at
// least a margin apart.
//
// bottom 0, 1: a and b, the pair's features (N, C), or (N, C, 1, 1) as Caffe writes them
//              (every axis after C must be 1).
// bottom 2:    similarity (N values, e.g. (N, 1, 1, 1)): similar where its integer part is
//              nonzero, as Caffe reads it; no gradient.
// top 0:       the loss, a scalar (shape ()), = sum over pairs of (similar ? d^2 :
//              dissimilar term) / (2 N), d = |a - b|. contrastive_loss_param: margin (default
//              1), legacy_version: false: max(margin - d, 0)^2 (Hadsell et al.); true: Caffe's
//              first form, max(margin - d^2, 0).
// Both a and b take gradients (b's is a's negated); the dissimilar gradient divides by
// d + 1e-4, as Caffe's. diff_ = a - b and dist_sq_ = d^2 are kept from the forward pass.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ContrastiveLossLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override {
    return {"contrastive_loss_param"};
  }
  std::vector<Operation> operations() const override { return {Operation::kCaffeLosses}; }

  int min_bottoms() const override { return 3; }
  int max_bottoms() const override { return 3; }
  bool is_loss() const override { return true; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index < 2; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& a = *bottom[0];
    const Tensor& b = *bottom[1];
    const Tensor& similar = *bottom[2];
    LAMINA_REQUIRE(a.num_axes() >= 2 && a.count(2, a.num_axes()) == 1, where(),
                   "features '", a.name(), "' must be (N, C) or (N, C, 1, 1), got ",
                   a.shape_string());
    LAMINA_REQUIRE(a.shape() == b.shape(), where(), "features '", a.name(), "' ",
                   a.shape_string(), " and '", b.name(), "' ", b.shape_string(),
                   " must have the same shape");
    rows_ = a.dim(0);
    cols_ = a.dim(1);
    LAMINA_REQUIRE(similar.count() == rows_, where(), "expected one similarity per pair (",
                   rows_, " for features ", a.shape_string(), "), but '", similar.name(),
                   "' has shape ", similar.shape_string());
    const ContrastiveLossParameter& p = param_.contrastive_loss_param();
    margin_ = p.margin();
    legacy_ = p.legacy_version();
    diff_.reserve(backend_, sizeof(float) * rows_ * cols_);
    dist_sq_.reserve(backend_, sizeof(float) * rows_);
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.contrastive_loss_forward(rows_, cols_, margin_, legacy_, bottom[0]->data(),
                                      bottom[1]->data(), bottom[2]->data(),
                                      diff_.as<float>(), dist_sq_.as<float>(),
                                      top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    for (int i = 0; i < 2; ++i) {
      if (!propagate[i]) continue;
      backend_.contrastive_loss_backward(rows_, cols_, margin_, legacy_, i == 0 ? 1.0f : -1.0f,
                                         diff_.as<float>(), dist_sq_.as<float>(),
                                         bottom[2]->data(),
                                         top[0]->diff(), bottom[i]->mutable_diff());
    }
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
  float margin_ = 1;
  bool legacy_ = false;
  Buffer diff_;     // (N, C) floats: a - b
  Buffer dist_sq_;  // (N) floats: |a - b|^2
};

}  // namespace

void register_contrastive_loss_layer() {
  register_layer<ContrastiveLossLayer>("ContrastiveLoss");
}

}  // namespace lamina
