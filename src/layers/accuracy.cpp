// Accuracy: the fraction of positions whose label is among the top_k scores.
//
// bottom 0: scores, viewed as (outer, C, inner) around accuracy_param.axis (default 1, as
//           Caffe: (N, C, H, W) scores each (n, h, w); class_rows.hpp).
// bottom 1: outer * inner labels (class indices as floats). top 0: a scalar (shape ()).
// accuracy_param: top_k (1..C), ignore_label (positions not counted, neither right nor in
// the divisor; 0 when every position is ignored), axis. As in Caffe 1.0, a position is
// correct when fewer than top_k other classes score at least the label's score: a tie
// counts against the label. No gradients.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/class_rows.hpp"

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
    const AccuracyParameter& p = param_.accuracy_param();
    axis_ = class_axis(where(), "accuracy_param.axis", p.axis(), scores);
    check_position_labels(where(), scores, axis_, *bottom[1]);
    LAMINA_REQUIRE(p.top_k() >= 1 && p.top_k() <= axis_.classes, where(),
                   "accuracy_param.top_k = ", p.top_k(), " must be between 1 and the number "
                   "of classes, ", axis_.classes, " for scores ", scores.shape_string());
    top_k_ = static_cast<int>(p.top_k());
    options_.has_ignore_label = p.has_ignore_label();
    options_.ignore_label = p.ignore_label();
    rows_.setup(backend_, axis_, where(), name() + "/rows");
    top[0]->reshape({});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.accuracy(axis_.rows(), axis_.classes, top_k_, rows_.values(bottom[0]->data()),
                      bottom[1]->data(), options_, top[0]->mutable_data());
  }

  void backward_input(const Tensors&, const std::vector<bool>&, const Tensors&) override {}

 private:
  ClassAxis axis_;  // (outer, C, inner)
  ClassRows rows_;
  int top_k_ = 1;
  LossOptions options_;  // only the ignore label is used
};

}  // namespace

void register_accuracy_layer() { register_layer<AccuracyLayer>("Accuracy"); }

}  // namespace lamina
