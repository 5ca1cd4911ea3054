// MVN: mean-variance normalisation of each row (Caffe's MVN), composed of the batch
// normalisation, per-channel and pointwise operations.
//
//   bottom (N, C, ...): rows (N C) of the remaining dims, or with across_channels rows (N) of
//   everything after N; top, same shape
//   normalize_variance (default):  y = (x - mean) / (sqrt(var) + eps)  per row, var biased
//                                  dx = (dy - mean(dy) - y mean(dy y)) / (sqrt(var) + eps)
//   without:                       y = x - mean,  dx = dy - mean(dy)
// These are Caffe's formulas: eps (default 1e-9, >= 0) is added to the standard deviation,
// and the backward pass leaves out eps's effect on the y term, as Caffe's does (the true
// gradient for eps > 0 differs by the factor sqrt(var) / (sqrt(var) + eps) there).
// The row statistics come from channel_moments with one image of `rows` channels (two passes
// in double), so the backward formula is batch_norm_backward's with inv_std = 1 /
// (sqrt(var) + eps). Works in place: forward reads x only for its statistics before writing;
// the backward pass reads the top (normalize_variance) and the top diff.
#include <algorithm>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class MVNLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"mvn_param"}; }
  std::vector<Operation> operations() const override {
    return {Operation::kBatchNorm, Operation::kChannelAffine, Operation::kPointwise};
  }
  bool supports_in_place() const override { return true; }
  TopUse backward_reads_top() const override {
    return param_.mvn_param().normalize_variance() ? TopUse::kValues : TopUse::kNothing;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const MVNParameter& p = param_.mvn_param();
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(p.eps() >= 0, where(), "mvn_param.eps must be >= 0, got ", p.eps());
    eps_ = p.eps();
    normalize_variance_ = p.normalize_variance();
    // Caffe's num and channels: axes missing from a short bottom count as 1.
    const int leading = p.across_channels() ? 1 : 2;
    rows_ = x.count(0, std::min(leading, x.num_axes()));
    dim_ = rows_ == 0 ? 0 : x.count() / rows_;
    for (Buffer* b : {&mean_, &var_, &inv_std_}) b->reserve(backend_, sizeof(float) * rows_);
    if (top[0] != bottom[0]) top[0]->reshape(x.shape());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    if (rows_ * dim_ == 0) return;
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    float* mean = mean_.as<float>();
    float* var = var_.as<float>();
    backend_.channel_moments(1, rows_, dim_, x, mean, var);
    backend_.scal(rows_, -1.0f, mean);
    backend_.channel_affine(1, rows_, dim_, x, nullptr, mean, y);  // x - mean
    if (!normalize_variance_) return;
    // inv_std = (eps + var^0.5)^-1, then y = (x - mean) inv_std.
    backend_.pointwise_forward(Pointwise{PointwiseFn::kPower, 0.5f, 1, 0}, rows_, var, var);
    float* inv_std = inv_std_.as<float>();
    backend_.pointwise_forward(Pointwise{PointwiseFn::kPower, -1, 1, eps_}, rows_, var, inv_std);
    backend_.channel_affine(1, rows_, dim_, y, inv_std, nullptr, y);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0] || rows_ * dim_ == 0) return;
    const float* dy = top[0]->diff();
    float* dx = bottom[0]->mutable_diff();
    if (normalize_variance_) {
      backend_.batch_norm_backward(1, rows_, dim_, top[0]->data(), dy, inv_std_.as<float>(), dx);
      return;
    }
    // dx = dy - mean(dy): the row sums, scaled by -1 / dim, added.
    float* mean = mean_.as<float>();
    backend_.zero(sizeof(float) * rows_, mean);
    backend_.channel_reduce(1, rows_, dim_, dy, nullptr, mean);
    backend_.scal(rows_, -1.0f / static_cast<float>(dim_), mean);
    backend_.channel_affine(1, rows_, dim_, dy, nullptr, mean, dx);
  }

 private:
  float eps_ = 0;
  bool normalize_variance_ = true;
  int64_t rows_ = 0, dim_ = 0;
  Buffer mean_, var_, inv_std_;  // (rows) floats; mean_ holds the negated means
};

}  // namespace

void register_mvn_layer() { register_layer<MVNLayer>("MVN"); }

}  // namespace lamina
