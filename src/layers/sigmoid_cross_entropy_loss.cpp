// SigmoidCrossEntropyLoss (Caffe 1.0): the cross-entropy of sigmoid(scores) and targets.
//
// bottom 0: scores x (N, ...). bottom 1: targets t in [0, 1], as many as the scores (any
//           shape with that count); they take no gradient (Caffe refuses to propagate to them).
// top 0:    the loss, a scalar (shape ()), = -sum [t ln s + (1 - t) ln(1 - s)] / norm with
//           s = sigmoid(x), computed stably (backend.hpp).
// loss_param: ignore_label (targets whose integer part equals it count for nothing and get
// no gradient), normalization: FULL divides by the targets, VALID by those not ignored,
// BATCH_SIZE by N, NONE by 1. Where normalization is not set, Caffe's older normalize (true:
// VALID, false: BATCH_SIZE), and where neither is, BATCH_SIZE: Caffe 1.0's default for this
// layer, unlike the other losses' VALID.
// dx = (sigmoid(x) - t) * dloss / norm, 0 at ignored targets.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class SigmoidCrossEntropyLossLayer : public LabelledLoss {
 public:
  using LabelledLoss::LabelledLoss;
  std::vector<std::string> parameter_messages() const override { return {"loss_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kCaffeLosses}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    const Tensor& t = *bottom[1];
    LAMINA_REQUIRE(x.num_axes() >= 1, where(), "scores '", x.name(),
                   "' need a batch axis (N, ...), got shape ", x.shape_string());
    LAMINA_REQUIRE(x.count() == t.count(), where(), "scores '", x.name(), "' ",
                   x.shape_string(), " and targets '", t.name(), "' ", t.shape_string(),
                   " must hold the same number of values (one target per score)");
    count_ = x.count();
    options_ = loss_options(param_.loss_param(), LossParameter::BATCH_SIZE);
    options_.batch = x.dim(0);
    top[0]->reshape({});
    norm_.reserve(backend_, sizeof(float));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.sigmoid_cross_entropy_forward(count_, bottom[0]->data(), bottom[1]->data(),
                                           options_, top[0]->mutable_data(),
                                           norm_.as<float>());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.sigmoid_cross_entropy_backward(count_, bottom[0]->data(), bottom[1]->data(),
                                            options_, norm_.as<float>(), top[0]->diff(),
                                            bottom[0]->mutable_diff());
  }

 private:
  int64_t count_ = 0;  // scores and targets
  LossOptions options_;
  Buffer norm_;  // (1) float: the loss's divisor
};

}  // namespace

void register_sigmoid_cross_entropy_loss_layer() {
  register_layer<SigmoidCrossEntropyLossLayer>("SigmoidCrossEntropyLoss");
}

}  // namespace lamina
