// MultinomialLogisticLoss (Caffe 1.0): the negative log-likelihood of probabilities (a
// Softmax's output; SoftmaxWithLoss does both in one, more stably).
//
// bottom 0: probabilities p (N, C...), viewed as (N, C) with C the count after N.
// bottom 1: labels, N class indices stored as floats (any shape with N elements); no gradient.
// top 0:    the loss, a scalar (shape ()), = -sum_n ln(max(p[n, label_n], 1e-20)) / N, the
//           floor keeping a zero probability finite, as Caffe's. No ignore label or
//           normalization (Caffe has none).
// dp[n, label_n] = -dloss / N / max(p[n, label_n], 1e-20), 0 elsewhere.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class MultinomialLogisticLossLayer : public LabelledLoss {
 public:
  using LabelledLoss::LabelledLoss;
  std::vector<std::string> parameter_messages() const override { return {}; }
  std::vector<Operation> operations() const override { return {Operation::kCaffeLosses}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ScoreShape shape =
        check_scores_and_labels(where(), "probabilities", *bottom[0], *bottom[1]);
    rows_ = shape.rows;
    cols_ = shape.cols;
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.multinomial_logistic_loss_forward(rows_, cols_, bottom[0]->data(),
                                               bottom[1]->data(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.multinomial_logistic_loss_backward(rows_, cols_, bottom[0]->data(),
                                                bottom[1]->data(), top[0]->diff(),
                                                bottom[0]->mutable_diff());
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
};

}  // namespace

void register_multinomial_logistic_loss_layer() {
  register_layer<MultinomialLogisticLossLayer>("MultinomialLogisticLoss");
}

}  // namespace lamina
