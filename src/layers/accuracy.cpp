// Accuracy: the fraction of rows whose label is among the top_k scores.
//
// bottom 0: scores (N, C...), viewed as (N, C). bottom 1: N labels (class indices as floats).
// top 0: a scalar (shape ()). accuracy_param: top_k (1..C), ignore_label (rows not counted).
// A score equal to the label's score does not push the label out of the top k. No gradients.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

class AccuracyLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"accuracy_param"}; }

  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  bool accepts_gradient(int) const override { return false; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& scores = *bottom[0];
    const ScoreShape shape = check_scores_and_labels(where(), "scores", scores, *bottom[1]);
    rows_ = shape.rows;
    cols_ = shape.cols;
    const AccuracyParameter& p = param_.accuracy_param();
    LAMINA_REQUIRE(p.top_k() >= 1 && p.top_k() <= cols_, where(), "accuracy_param.top_k = ",
                   p.top_k(), " must be between 1 and the number of classes, ", cols_,
                   " for scores ", scores.shape_string());
    top_k_ = static_cast<int>(p.top_k());
    options_.has_ignore_label = p.has_ignore_label();
    options_.ignore_label = p.ignore_label();
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.accuracy(rows_, cols_, top_k_, bottom[0]->data(), bottom[1]->data(), options_,
                      top[0]->mutable_data());
  }

  void backward_input(const Tensors&, const std::vector<bool>&, const Tensors&) override {}

 private:
  int64_t rows_ = 0, cols_ = 0;  // (N, C)
  int top_k_ = 1;
  LossOptions options_;  // only the ignore label is used
};

}  // namespace

void register_accuracy_layer() { register_layer<AccuracyLayer>("Accuracy"); }

}  // namespace lamina
