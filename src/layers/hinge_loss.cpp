// HingeLoss (Caffe 1.0): the one-vs-all hinge loss of class scores.
//
// bottom 0: scores x (N, C...), viewed as (N, C) with C the count after N.
// bottom 1: labels, N class indices stored as floats (any shape with N elements); no gradient.
// top 0:    the loss, a scalar (shape ()): with d = -1 at the label's class and +1 elsewhere,
//           margin = max(0, 1 + d x) and loss = sum margin^p / N, p = 1 (hinge_loss_param.norm
//           L1, the default) or 2 (L2). No ignore label or normalization (Caffe has none).
// dx = d * (L1: sign(margin), L2: 2 margin) * dloss / N; margin_ keeps the forward's margins.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class HingeLossLayer : public LabelledLoss {
 public:
  using LabelledLoss::LabelledLoss;
  std::vector<std::string> parameter_messages() const override { return {"hinge_loss_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kCaffeLosses}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ScoreShape shape = check_scores_and_labels(where(), "scores", *bottom[0], *bottom[1]);
    rows_ = shape.rows;
    cols_ = shape.cols;
    p_ = param_.hinge_loss_param().norm() == HingeLossParameter::L2 ? 2 : 1;
    margin_.reserve(backend_, sizeof(float) * bottom[0]->count());
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.hinge_loss_forward(rows_, cols_, p_, bottom[0]->data(), bottom[1]->data(),
                                margin_.as<float>(), top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.hinge_loss_backward(rows_, cols_, p_, margin_.as<float>(), bottom[1]->data(),
                                 top[0]->diff(), bottom[0]->mutable_diff());
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
  int p_ = 1;                    // the norm: 1 or 2
  Buffer margin_;                // (N, C...) floats: max(0, 1 + d x)
};

}  // namespace

void register_hinge_loss_layer() { register_layer<HingeLossLayer>("HingeLoss"); }

}  // namespace lamina
