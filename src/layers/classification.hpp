// Shared by the layers that take class scores and labels (SoftmaxWithLoss,
// NegativeLogLikelihood, Accuracy, and Caffe's losses).
#pragma once

#include <string>

#include "lamina/backend.hpp"
#include "lamina/layer.hpp"
#include "lamina/tensor.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// The frame of a loss of scores and labels (or targets): two bottoms, the loss as top 0,
// no gradient to the labels.
class LabelledLoss : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  bool is_loss() const override { return true; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index == 0; }
};

// scores (N, C...) viewed as (rows = N, cols = the count after N).
struct ScoreShape {
  int64_t rows;
  int64_t cols;
};

// Checks that labels hold one class index per row of scores; where names the layer.
inline ScoreShape check_scores_and_labels(const std::string& where, const char* what,
                                          const Tensor& scores, const Tensor& labels) {
  LAMINA_REQUIRE(scores.num_axes() >= 1, where, what, " '", scores.name(),
                 "' need a batch axis (N, C...), got shape ", scores.shape_string());
  const ScoreShape s{scores.dim(0), scores.count(1, scores.num_axes())};
  LAMINA_REQUIRE(labels.count() == s.rows, where, "expected one label per row of ", what, " '",
                 scores.name(), "' ", scores.shape_string(), " (", s.rows,
                 " labels), but labels '", labels.name(), "' have shape ",
                 labels.shape_string());
  return s;
}

// loss_param as LossOptions: ignore_label, and the normalization, or where it is not set
// Caffe's older `normalize` (true: VALID, false: BATCH_SIZE), or else `unset` (VALID for
// most losses; Caffe 1.0's SigmoidCrossEntropyLoss takes BATCH_SIZE). The caller sets
// options.batch where BATCH_SIZE divides by less than the rows.
inline LossOptions loss_options(const LossParameter& p,
                                LossParameter::NormalizationMode unset = LossParameter::VALID) {
  LossOptions options;
  options.has_ignore_label = p.has_ignore_label();
  options.ignore_label = p.ignore_label();
  LossParameter::NormalizationMode mode = unset;
  if (p.has_normalization()) {
    mode = p.normalization();
  } else if (p.has_normalize()) {
    mode = p.normalize() ? LossParameter::VALID : LossParameter::BATCH_SIZE;
  }
  switch (mode) {
    case LossParameter::FULL: options.normalization = Normalization::kFull; break;
    case LossParameter::VALID: options.normalization = Normalization::kValid; break;
    case LossParameter::BATCH_SIZE: options.normalization = Normalization::kBatchSize; break;
    case LossParameter::NONE: options.normalization = Normalization::kNone; break;
  }
  return options;
}

}  // namespace lamina
