// SoftmaxWithLoss: softmax over each row of the scores followed by cross-entropy.
//
// bottom 0: scores (N, C...), viewed as (N, C) with C = the count of the dims after N.
// bottom 1: labels, N class indices stored as floats (any shape with N elements).
// top 0:    the loss, a scalar (shape ()), = -sum_n log prob[n, label_n] / norm.
// top 1:    optional, the probabilities (N, C...).
// loss_param: ignore_label (rows with that label count for nothing), normalization (FULL,
// VALID, BATCH_SIZE, NONE). The normaliser stays on the device in norm_; backward reads the
// loss weight from top 0's diff (set by the net), so nothing is read back to the host.
#include <memory>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class SoftmaxWithLossLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"loss_param"}; }

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  int max_tops() const override { return 2; }
  bool is_loss() const override { return true; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index == 0; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& scores = *bottom[0];
    const ScoreShape shape = check_scores_and_labels(where(), "scores", scores, *bottom[1]);
    rows_ = shape.rows;
    cols_ = shape.cols;
    options_ = loss_options(param_.loss_param());

    top[0]->reshape({});
    if (top.size() > 1) {
      top[1]->reshape(scores.shape());
    } else {
      prob_ = std::make_unique<Tensor>(backend_, scores.shape(), name() + "/prob");
    }
    norm_ = std::make_unique<Tensor>(backend_, Shape{1}, name() + "/norm");
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.softmax_cross_entropy_forward(rows_, cols_, bottom[0]->data(), bottom[1]->data(),
                                           options_, prob(top).mutable_data(),
                                           top[0]->mutable_data(), norm_->mutable_data());
  }

  // The probabilities in top 1 are an output only: their diff is not propagated.
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.softmax_cross_entropy_backward(rows_, cols_, prob(top).data(), bottom[1]->data(),
                                            options_, norm_->data(), top[0]->diff(),
                                            bottom[0]->mutable_diff());
  }

 private:
  Tensor& prob(const Tensors& top) { return top.size() > 1 ? *top[1] : *prob_; }

  int64_t rows_ = 0, cols_ = 0;  // (N, C)
  LossOptions options_;
  std::unique_ptr<Tensor> prob_;  // (N, C...) when there is no top 1
  std::unique_ptr<Tensor> norm_;  // (1) the loss's divisor
};

}  // namespace

void register_softmax_loss_layer() { register_layer<SoftmaxWithLossLayer>("SoftmaxWithLoss"); }

}  // namespace lamina
