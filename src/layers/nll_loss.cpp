// NegativeLogLikelihood: the loss of log-probabilities (a LogSoftmax's output).
//
// bottom 0: log-probabilities (N, C), or (N, C, 1, ...) (axes of 1 after C). More is an
//           error: (N, C, H, W) could mean N rows of C H W classes or a class axis with
//           positions after it (SoftmaxWithLoss's axis), and NegativeLogLikelihood has no axis.
// bottom 1: labels, N class indices stored as floats (any shape with N elements).
// top 0:    the loss, a scalar (shape ()), = -sum_n logp[n, label_n] / norm.
// loss_param as in SoftmaxWithLoss. dlogp[n, c] = -dloss / norm where c = label_n, else 0.

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class NllLossLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"loss_param"}; }

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  bool is_loss() const override { return true; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index == 0; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& logp = *bottom[0];
    LAMINA_REQUIRE(logp.num_axes() <= 2 || logp.count(2, logp.num_axes()) == 1, where(),
                   "log-probabilities '", logp.name(), "' ", logp.shape_string(), " have ",
                   logp.num_axes(), " axes, but NegativeLogLikelihood takes (N, C) with one "
                   "label per row; Flatten them first to make every value after N a class, or, "
                   "for classes along an axis with positions after it (one label per "
                   "position), use SoftmaxWithLoss with softmax_param.axis on the scores");
    const ScoreShape shape =
        check_scores_and_labels(where(), "log-probabilities", logp, *bottom[1]);
    rows_ = shape.rows;
    cols_ = shape.cols;
    options_ = loss_options(param_.loss_param());
    top[0]->reshape({});
    norm_.reserve(backend_, sizeof(float));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.nll_loss_forward(rows_, cols_, bottom[0]->data(), bottom[1]->data(), options_,
                              top[0]->mutable_data(), norm_.as<float>());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.nll_loss_backward(rows_, cols_, bottom[1]->data(), options_, norm_.as<float>(),
                               top[0]->diff(), bottom[0]->mutable_diff());
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
  LossOptions options_;
  Buffer norm_;  // (1) float: the loss's divisor
};

}  // namespace

void register_nll_loss_layer() { register_layer<NllLossLayer>("NegativeLogLikelihood"); }

}  // namespace lamina
