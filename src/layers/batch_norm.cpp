// BatchNorm: Caffe's batch normalisation, without the affine part (Caffe nets follow it with
// a Scale layer with bias_term: true).
//
//   bottom (N, C, ...) viewed as (N, C, S), S = the product of the dims after C  ->  top, same
//   y = (x - mean[c]) / sqrt(var[c] + eps)
// With batch statistics (use_global_stats false, the default in TRAIN) mean and the biased
// var are the batch's, over N and S, and the gradient flows through them:
//   dx = inv_std (dy - mean_c(dy) - y mean_c(dy y)).
// With the running statistics (use_global_stats true, the default in TEST): dx = dy inv_std.
//
// Running statistics are Caffe's three blobs, stored exactly as Caffe stores them so models
// move between the two unchanged: mean_sum (C), var_sum (C) and factor (1), all starting at
// 0. Every forward with batch statistics updates them (m = N S, Caffe's unbiased variance):
//   factor = maf factor + 1;  mean_sum = maf mean_sum + mean;  var_sum = maf var_sum + m/(m-1) var
// and the running estimates are mean_sum / factor and var_sum / factor (0 while factor is 0).
// The blobs are parameters: they live in the arena, so snapshots keep them and a TEST net that
// shares the TRAIN net's weights reads them. Their lr_mult is forced to 0 as in Caffe (param
// blocks may restate lr_mult: 0; any other value is an error); the solver never moves them.
//
// With the running statistics, batch_norm_inference divides the sums by the factor on the
// device (no read-back).
// Works in place. The normalised output is kept (y_, written in the same pass as the top)
// because a later in-place layer (Scale, ReLU) overwrites the top that the backward pass
// through batch statistics needs.
//
// With batch statistics, BatchNorm absorbs the per-channel Scale after it (Layer::absorb;
// Caffe's BatchNorm + Scale pair), and then an in-place ReLU (negative_slope 0) after that:
// the forward writes y_ and the scaled (and rectified) top in one pass, and the backward
// computes the Scale's gradients (in backward_params, which the net then calls for
// BatchNorm) and its own from one pass over the top's gradient and y_, then dx in another
// (backend.hpp, batch_norm_scale_*; the ReLU's mask comes from its output computed again
// from y_). The results are the layers' bit for bit; the Scale keeps its parameters (names,
// snapshots, solver) and the absorbed layers do no work of their own.
// In a 16-bit precision x, y, y_ and the gradients are 16-bit; the statistics stay FP32.
#include <cmath>
#include <memory>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class BatchNormLayer : public Layer {
 public:
  // Its running statistics live in the arena but would come from each worker's own
  // batches and drift apart between the workers: not supported yet.
  bool set_worker(int /*rank*/, int workers) override {
    LAMINA_REQUIRE(workers == 1, where(), "data-parallel training of nets with BatchNorm is "
                   "not supported yet (each worker's running statistics would drift apart); "
                   "train this net on one device");
    return true;
  }
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"batch_norm_param"}; }
  bool supports_in_place() const override { return true; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }
  std::vector<Operation> operations() const override {
    return {Operation::kBatchNorm, Operation::kChannelAffine};  // kBatchNormScale optional
  }

  // A Scale of one bottom over the channel axis (axis 1, one axis: scale and bias (C)), on a
  // backend that has the fused operations; after it, a ReLU of negative_slope 0 (which the
  // net offers only in place).
  bool absorb(const Layer& next) override {
    const float slope = next.param().relu_param().negative_slope();
    if (scale_ != nullptr && !relu_ && next.type() == "ReLU" && slope == 0 &&
        !std::signbit(slope)) {  // -0 would give -0 where the fused ReLU gives +0
      relu_ = true;
      return true;
    }
    if (global_ || scale_ != nullptr || next.type() != "Scale" ||
        next.param().bottom_size() > 1 || !backend_.supports(Operation::kBatchNormScale))
      return false;
    const ScaleParameter& p = next.param().scale_param();
    const std::vector<Param>& params = next.params();
    if (p.axis() != 1 || p.num_axes() != 1 || params.empty() ||
        params[0].tensor->count() != c_)
      return false;
    scale_ = params[0].tensor.get();
    bias_ = params.size() > 1 ? params[1].tensor.get() : nullptr;
    means_ = std::make_unique<Tensor>(backend_, Shape{2 * c_}, name() + "/backward_means");
    return true;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const BatchNormParameter& p = param_.batch_norm_param();
    const Tensor& x = *bottom[0];
    LAMINA_REQUIRE(x.num_axes() >= 1 && x.count() > 0, where(), "expects a non-empty bottom "
                   "(N, C, ...), but '", x.name(), "' has shape ", x.shape_string());
    global_ = p.has_use_global_stats() ? p.use_global_stats() : phase_ == TEST;
    maf_ = p.moving_average_fraction();
    eps_ = p.eps();
    LAMINA_REQUIRE(maf_ >= 0 && maf_ <= 1, where(), "batch_norm_param.moving_average_fraction "
                   "must be in [0, 1], got ", maf_);
    LAMINA_REQUIRE(eps_ > 0, where(), "batch_norm_param.eps must be positive, got ", eps_);
    for (int k = 0; k < param_.param_size(); ++k)
      LAMINA_REQUIRE(param_.param(k).lr_mult() == 0, where(), "param { lr_mult: ",
                     param_.param(k).lr_mult(), " } (block ", k, ") must be 0: the mean, "
                     "variance and factor are running statistics, not learned parameters");
    while (param_.param_size() < 3) {  // Caffe's fixed lr_mult 0 for the statistics
      ParamSpec* spec = param_.add_param();
      spec->set_lr_mult(0);
      spec->set_decay_mult(0);
    }

    n_ = x.dim(0);
    c_ = x.num_axes() > 1 ? x.dim(1) : 1;
    s_ = x.count() / (n_ * c_);
    add_param("mean", {c_}, FillerParameter());      // constant 0
    add_param("variance", {c_}, FillerParameter());  // constant 0
    add_param("factor", {1}, FillerParameter());     // constant 0
    if (top[0] != bottom[0]) top[0]->reshape(x.shape());

    mean_ = std::make_unique<Tensor>(backend_, Shape{c_}, name() + "/batch_mean");
    var_ = std::make_unique<Tensor>(backend_, Shape{c_}, name() + "/batch_var");
    inv_std_ = std::make_unique<Tensor>(backend_, Shape{c_}, name() + "/inv_std");
    one_ = std::make_unique<Tensor>(backend_, Shape{1}, name() + "/one");
    backend_.fill(1, 1.0f, one_->mutable_data());
    storage_ = x.dtype();
    if (!global_)
      y_ = std::make_unique<Tensor>(backend_, x.shape(), name() + "/normalised", storage_);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    Tensor& y = *top[0];
    const float *mean_sum = params_[0].tensor->data(), *var_sum = params_[1].tensor->data();
    float *mean = mean_->mutable_data(), *var = var_->mutable_data();
    float* inv_std = inv_std_->mutable_data();
    if (global_ && is_half(storage_)) {
      backend_.batch_norm_inference(half_format(storage_), n_, c_, s_, eps_, x.half_data(),
                                    mean_sum, var_sum, params_[2].tensor->data(),
                                    y.mutable_half_data(), mean, inv_std);
    } else if (global_) {
      backend_.batch_norm_inference(n_, c_, s_, eps_, x.data(), mean_sum, var_sum,
                                    params_[2].tensor->data(), y.mutable_data(), mean, inv_std);
    } else if (is_half(storage_)) {
      const Half f = half_format(storage_);
      backend_.channel_moments(f, n_, c_, s_, x.half_data(), mean, var);
      if (scale_ != nullptr) {
        backend_.batch_norm_scale_forward(f, n_, c_, s_, eps_, x.half_data(), mean, var,
                                          scale_->data(), bias_data(), relu_,
                                          y.mutable_half_data(), inv_std,
                                          y_->mutable_half_data());
      } else {
        backend_.batch_norm_forward(f, n_, c_, s_, eps_, x.half_data(), mean, var,
                                    y.mutable_half_data(), inv_std, y_->mutable_half_data());
      }
    } else if (scale_ != nullptr) {
      backend_.channel_moments(n_, c_, s_, x.data(), mean, var);
      backend_.batch_norm_scale_forward(n_, c_, s_, eps_, x.data(), mean, var, scale_->data(),
                                        bias_data(), relu_, y.mutable_data(), inv_std,
                                        y_->mutable_data());
    } else {
      backend_.channel_moments(n_, c_, s_, x.data(), mean, var);
      backend_.batch_norm_forward(n_, c_, s_, eps_, x.data(), mean, var, y.mutable_data(),
                                  inv_std, y_->mutable_data());
    }
    if (global_) return;
    means_ready_ = false;
    // Caffe's running sums; m/(m-1) makes the accumulated variance unbiased.
    const int64_t m = n_ * s_;
    const float unbias = m > 1 ? float(double(m) / double(m - 1)) : 1.0f;
    backend_.axpby(1, 1.0f, one_->data(), maf_, params_[2].tensor->mutable_data());
    backend_.axpby(c_, 1.0f, mean_->data(), maf_, params_[0].tensor->mutable_data());
    backend_.axpby(c_, unbias, var_->data(), maf_, params_[1].tensor->mutable_data());
  }

  // Only with an absorbed Scale (the net calls it when the Scale has learnable parameters):
  // the Scale's gradients, and the means that backward_input then uses.
  void backward_params(const Tensors& top, const Tensors& /*bottom*/) override {
    if (scale_ == nullptr) return;
    scale_sums(*top[0], scale_->mutable_diff(), bias_ ? bias_->mutable_diff() : nullptr);
    means_ready_ = true;
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const Tensor& dy = *top[0];
    Tensor& dx = *bottom[0];
    if (scale_ != nullptr) {
      if (!means_ready_) scale_sums(dy, nullptr, nullptr);
      if (is_half(storage_)) {
        backend_.batch_norm_scale_backward(half_format(storage_), n_, c_, s_, y_->half_data(),
                                           dy.half_diff(), inv_std_->data(), scale_->data(),
                                           bias_data(), relu_, means_->data(),
                                           dx.mutable_half_diff());
      } else {
        backend_.batch_norm_scale_backward(n_, c_, s_, y_->data(), dy.diff(), inv_std_->data(),
                                           scale_->data(), bias_data(), relu_, means_->data(),
                                           dx.mutable_diff());
      }
      means_ready_ = false;
      return;
    }
    if (is_half(storage_)) {
      const Half f = half_format(storage_);
      if (global_) {
        backend_.channel_affine(f, n_, c_, s_, dy.half_diff(), inv_std_->data(), nullptr,
                                dx.mutable_half_diff());
      } else {
        backend_.batch_norm_backward(f, n_, c_, s_, y_->half_data(), dy.half_diff(),
                                     inv_std_->data(), dx.mutable_half_diff());
      }
    } else if (global_) {
      backend_.channel_affine(n_, c_, s_, dy.diff(), inv_std_->data(), nullptr,
                              dx.mutable_diff());
    } else {
      backend_.batch_norm_backward(n_, c_, s_, y_->data(), dy.diff(), inv_std_->data(),
                                   dx.mutable_diff());
    }
  }

 private:
  const float* bias_data() const { return bias_ != nullptr ? bias_->data() : nullptr; }

  // The absorbed Scale's backward sums: means_, and its gradients where dscale is not null.
  void scale_sums(const Tensor& dy, float* dscale, float* dbias) {
    if (is_half(storage_)) {
      backend_.batch_norm_scale_sums(half_format(storage_), n_, c_, s_, y_->half_data(),
                                     dy.half_diff(), scale_->data(), bias_data(), relu_,
                                     means_->mutable_data(), dscale, dbias);
    } else {
      backend_.batch_norm_scale_sums(n_, c_, s_, y_->data(), dy.diff(), scale_->data(),
                                     bias_data(), relu_, means_->mutable_data(), dscale, dbias);
    }
  }

  bool global_ = false;
  DType storage_ = DType::kF32;  // of x, y and their gradients
  float maf_ = 0.999f, eps_ = 1e-5f;
  int64_t n_ = 0, c_ = 0, s_ = 0;
  std::unique_ptr<Tensor> mean_, var_;  // (C) the batch statistics; the running mean in TEST
  std::unique_ptr<Tensor> inv_std_;     // (C) 1 / sqrt(var + eps)
  std::unique_ptr<Tensor> one_;         // (1) 1, the factor's increment
  std::unique_ptr<Tensor> y_;           // batch statistics only: the normalised output
  // An absorbed Scale's parameters (bias_ null without a bias term), and (2C) the backward
  // means, computed with its gradients (means_ready_) or by backward_input.
  Tensor* scale_ = nullptr;
  Tensor* bias_ = nullptr;
  bool relu_ = false;  // an absorbed ReLU after the Scale
  std::unique_ptr<Tensor> means_;
  bool means_ready_ = false;
};

}  // namespace

void register_batch_norm_layer() { register_layer<BatchNormLayer>("BatchNorm"); }

}  // namespace lamina
