// InfogainLoss (Caffe 1.0): cross-entropy weighted by an "information gain" matrix H.
//
// bottom 0: scores, viewed as (outer, C, inner) around infogain_loss_param.axis (default 1;
//           class_rows.hpp). As in Caffe 1.0 (not the older layer, which took
//           probabilities) the layer takes the softmax of the scores itself.
// bottom 1: labels, outer * inner class indices stored as floats; no gradient.
// bottom 2: optional, H: C x C values read row-major, any shape (Caffe checks the count); no
// gradient.
//           Without it, H is read at setup from infogain_loss_param.source, a BlobProto file
//           (Caffe's .binaryproto; shape or the legacy num/channels/height/width, data or
//           double_data).
// top 0:    the loss, a scalar (shape ()), = -sum over positions of sum_j H[label, j]
//           ln(max(prob_j, 1e-20)) / norm.
// top 1:    optional, the probabilities (the scores' shape).
// loss_param: ignore_label, normalization as SoftmaxWithLoss's (FULL and VALID count
// positions, BATCH_SIZE divides by outer). Caffe 1.0 refuses the older `normalize` here, and
// so does Lamina.
// dscores = (prob sum_k H[label, k] - H[label, :]) * dloss / norm, 0 at ignored positions.
#include <string>
#include <vector>

#include "lamina/blob_proto.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/class_rows.hpp"
#include "layers/classification.hpp"

namespace lamina {
namespace {

// Whether an array of this shape holds C x C values, read row-major as H (C, C): Caffe 1.0
// checks only the count, so (C, C), (1, 1, C, C) and (C C) all load.
bool holds_square(const Shape& shape, int64_t classes) {
  return shape_count(shape) == classes * classes;
}

// H from a BlobProto file: its shape and values. Errors name the file and what is wrong.
BlobFile read_matrix(const std::string& path, int64_t classes) {
  // C x C doubles and the message's few fields: anything larger is not this matrix.
  BlobFile m = read_blob_proto(path, "infogain matrix file (infogain_loss_param.source)",
                               classes * classes * int64_t(sizeof(double)) + 1024);
  const int64_t stored = int64_t(m.values.size());
  LAMINA_REQUIRE(stored == shape_count(m.shape), m.prefix, "holds ", stored,
                 " values, but its shape ", shape_string(m.shape), " has ",
                 shape_count(m.shape));
  return m;
}

class InfogainLossLayer : public LabelledLoss {
 public:
  using LabelledLoss::LabelledLoss;
  std::vector<std::string> parameter_messages() const override {
    return {"loss_param", "infogain_loss_param"};
  }
  std::vector<Operation> operations() const override { return {Operation::kCaffeLosses}; }
  // With a second top, the backward pass may read the probabilities back from it: a later
  // layer must not overwrite them in place.
  TopUse backward_reads_top() const override {
    return param_.top_size() > 1 ? TopUse::kValues : TopUse::kNothing;
  }

  int max_bottoms() const override { return 3; }
  int max_tops() const override { return 2; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& scores = *bottom[0];
    const InfogainLossParameter& p = param_.infogain_loss_param();
    axis_ = class_axis(where(), "infogain_loss_param.axis", p.axis(), scores);
    check_position_labels(where(), scores, axis_, *bottom[1]);
    LAMINA_REQUIRE(!param_.loss_param().has_normalize(), where(), "loss_param.normalize is "
                   "Caffe's older form, which InfogainLoss refuses (as Caffe 1.0 does): use "
                   "loss_param.normalization (VALID for normalize: true)");
    options_ = loss_options(param_.loss_param());
    options_.batch = axis_.outer;
    setup_matrix(bottom);
    rows_.setup(backend_, axis_, where(), name() + "/prob", scores, top);
    top[0]->reshape({});
    norm_.reserve(backend_, sizeof(float));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    float* prob = rows_.probabilities_out(top);
    backend_.softmax_forward(axis_.rows(), axis_.classes, false,
                             rows_.values(bottom[0]->data()), prob);
    backend_.infogain_loss_forward(axis_.rows(), axis_.classes, prob, bottom[1]->data(),
                                   matrix(bottom), options_, top[0]->mutable_data(),
                                   norm_.as<float>());
    rows_.put_probabilities(top);
  }

  // The probabilities in top 1 are an output only: their diff is not propagated.
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    float* dx = bottom[0]->mutable_diff();
    backend_.infogain_loss_backward(axis_.rows(), axis_.classes,
                                    rows_.probabilities(top), bottom[1]->data(),
                                    matrix(bottom), options_, norm_.as<float>(), top[0]->diff(),
                                    rows_.grads_out(dx));
    rows_.put_grads(dx);
  }

 private:
  // H from bottom 2, or from the source file into h_.
  void setup_matrix(const Tensors& bottom) {
    const std::string& source = param_.infogain_loss_param().source();
    const int64_t c = axis_.classes;
    if (bottom.size() > 2) {
      const Tensor& h = *bottom[2];
      LAMINA_REQUIRE(source.empty(), where(), "H comes from bottom '", h.name(),
                     "', so infogain_loss_param.source '", source, "' would be unused: "
                     "remove one of them");
      LAMINA_REQUIRE(holds_square(h.shape(), c), where(), "H (bottom '", h.name(),
                     "') must hold ", c, " x ", c, " values for the ", c,
                     " classes of scores ", bottom[0]->shape_string(), ", got ",
                     h.shape_string());
      h_ = Buffer();
      return;
    }
    if (reshaping() && h_.bytes() == sizeof(float) * c * c) return;  // read already
    LAMINA_REQUIRE(!source.empty(), where(), "needs the infogain matrix H (", c, ", ", c,
                   "): set infogain_loss_param.source to a BlobProto file holding it, or give "
                   "it as a third bottom");
    BlobFile m;
    try {
      m = read_matrix(source, c);
    } catch (const Error& e) {
      fail(where(), e.what());
    }
    LAMINA_REQUIRE(holds_square(m.shape, c), where(), "H in infogain_loss_param.source '",
                   source, "' must hold ", c, " x ", c, " values for the ", c,
                   " classes of scores ", bottom[0]->shape_string(), ", got ",
                   shape_string(m.shape));
    h_ = Buffer(backend_, sizeof(float) * m.values.size());  // c * c (holds_square)
    backend_.copy_from_host(h_.bytes(), m.values.data(), h_.get());
  }

  const float* matrix(const Tensors& bottom) const {
    return bottom.size() > 2 ? bottom[2]->data() : h_.as<float>();
  }

  ClassAxis axis_;  // (outer, C, inner)
  LossRows rows_;  // the scores, their gradient and the probabilities as rows
  LossOptions options_;
  Buffer h_;     // (C, C) floats read from the source file; empty with bottom 2
  Buffer norm_;  // (1) float: the loss's divisor
};

}  // namespace

void register_infogain_loss_layer() { register_layer<InfogainLossLayer>("InfogainLoss"); }

}  // namespace lamina
