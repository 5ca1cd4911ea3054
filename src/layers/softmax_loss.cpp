// SoftmaxWithLoss: softmax over the class axis of the scores followed by cross-entropy.
//
// bottom 0: scores, viewed as (outer, C, inner) around softmax_param.axis (default 1; Caffe's
//           meaning: (N, C, H, W) is a softmax over C at each (n, h, w); class_rows.hpp).
// bottom 1: labels, outer * inner class indices stored as floats (any shape with that count).
// top 0:    the loss, a scalar (shape ()), = -sum over positions of log prob[label] / norm.
// top 1:    optional, the probabilities (the scores' shape).
// loss_param: ignore_label (positions with that label count for nothing), normalization
// (FULL and VALID count positions, BATCH_SIZE divides by outer, NONE), or Caffe's older
// normalize where normalization is not set. The normaliser stays on the device in norm_;
// backward reads the loss weight from top 0's diff (set by the net), so nothing is read back
// to the host.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/class_rows.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class SoftmaxWithLossLayer : public LabelledLoss {
 public:
  using LabelledLoss::LabelledLoss;
  std::vector<std::string> parameter_messages() const override {
    return {"loss_param", "softmax_param"};
  }
  // With a second top, the backward pass may read the probabilities back from it: a later
  // layer must not overwrite them in place.
  TopUse backward_reads_top() const override {
    return param_.top_size() > 1 ? TopUse::kValues : TopUse::kNothing;
  }

  int max_tops() const override { return 2; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& scores = *bottom[0];
    axis_ = class_axis(where(), "softmax_param.axis", param_.softmax_param().axis(), scores);
    check_position_labels(where(), scores, axis_, *bottom[1]);
    options_ = loss_options(param_.loss_param());
    options_.batch = axis_.outer;
    rows_.setup(backend_, axis_, where(), name() + "/prob", scores, top);
    top[0]->reshape({});
    norm_.reserve(backend_, sizeof(float));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.softmax_cross_entropy_forward(axis_.rows(), axis_.classes,
                                           rows_.values(bottom[0]->data()), bottom[1]->data(),
                                           options_, rows_.probabilities_out(top),
                                           top[0]->mutable_data(), norm_.as<float>());
    rows_.put_probabilities(top);
  }

  // The probabilities in top 1 are an output only: their diff is not propagated.
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    float* dx = bottom[0]->mutable_diff();
    backend_.softmax_cross_entropy_backward(axis_.rows(), axis_.classes,
                                            rows_.probabilities(top), bottom[1]->data(),
                                            options_, norm_.as<float>(), top[0]->diff(),
                                            rows_.grads_out(dx));
    rows_.put_grads(dx);
  }

 private:
  ClassAxis axis_;  // (outer, C, inner)
  LossRows rows_;  // the scores, their gradient and the probabilities as rows
  LossOptions options_;
  Buffer norm_;  // (1) float: the loss's divisor
};

}  // namespace

void register_softmax_loss_layer() { register_layer<SoftmaxWithLossLayer>("SoftmaxWithLoss"); }

}  // namespace lamina
