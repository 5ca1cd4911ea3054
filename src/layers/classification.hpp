// Shared by the layers that take class scores and labels (SoftmaxWithLoss,
// NegativeLogLikelihood, Accuracy).
#pragma once

#include <string>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"
#include "lamina.pb.h"

namespace lamina {

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

inline LossOptions loss_options(const LossParameter& p) {
  LossOptions options;
  options.has_ignore_label = p.has_ignore_label();
  options.ignore_label = p.ignore_label();
  switch (p.normalization()) {
    case LossParameter::FULL: options.normalization = Normalization::kFull; break;
    case LossParameter::VALID: options.normalization = Normalization::kValid; break;
    case LossParameter::BATCH_SIZE: options.normalization = Normalization::kBatchSize; break;
    case LossParameter::NONE: options.normalization = Normalization::kNone; break;
  }
  return options;
}

}  // namespace lamina
