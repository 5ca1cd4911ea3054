// A class axis, as Caffe's softmax_param.axis, accuracy_param.axis and
// infogain_loss_param.axis name it (Softmax, LogSoftmax, SoftmaxWithLoss, Accuracy,
// InfogainLoss): the bottom is viewed as (outer, C, inner), C its dim at the axis, and each
// of the outer * inner positions is one independent distribution over C (so (N, C, H, W)
// with axis 1 is a softmax over C at each (n, h, w)); labels hold one class per position,
// in (outer, inner) order.
//
// The row operations (softmax_forward, the losses) take (rows, C). Where inner == 1 the
// bottom already is that; otherwise ClassRows transposes it into a (outer inner, C) tensor
// the layer owns, and the results back.
#pragma once

#include <memory>
#include <string>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

struct ClassAxis {
  int64_t outer = 0, classes = 0, inner = 0;
  int64_t rows() const { return outer * inner; }  // positions: one distribution each
};

// setting names the axis in errors ("softmax_param.axis"); negative counts from the end.
inline ClassAxis class_axis(const std::string& where, const char* setting, int axis,
                            const Tensor& x) {
  const int axes = x.num_axes();
  LAMINA_REQUIRE(axis >= -axes && axis < axes, where, setting, " ", axis,
                 " is out of range for bottom '", x.name(), "' of shape ", x.shape_string(),
                 " (", axes, " axes: use 0..", axes - 1, ", or -1 for the last)");
  const int first = axis < 0 ? axis + axes : axis;
  return {x.count(0, first), x.dim(first), x.count(first + 1, axes)};
}

// Checks that labels hold one class index per position of scores; where names the layer.
inline void check_position_labels(const std::string& where, const Tensor& scores,
                                  const ClassAxis& axis, const Tensor& labels) {
  LAMINA_REQUIRE(labels.count() == axis.rows(), where, "expected one label per position of "
                 "scores '", scores.name(), "' ", scores.shape_string(), " around its class "
                 "axis of ", axis.classes, " (", axis.outer, " x ", axis.inner, " = ",
                 axis.rows(), " labels), but labels '", labels.name(), "' have shape ",
                 labels.shape_string());
}

// The (rows, C) view of (outer, C, inner) arrays: the arrays themselves where inner == 1,
// else transposed copies in the data (values) and diff (gradients) of a tensor it owns.
class ClassRows {
 public:
  // Positions after the axis need the backend's transpose (kTensorOps), checked here rather
  // than in the layer's operations(), so that a backend without it still runs (N, C).
  void setup(Backend& backend, const ClassAxis& axis, const std::string& where,
             const std::string& name) {
    backend_ = &backend;
    axis_ = axis;
    const Shape shape{axis.rows(), axis.classes};
    LAMINA_REQUIRE(axis.inner == 1 || backend.supports(Operation::kTensorOps), where,
                   "a class axis with positions after it (", axis.inner, ") needs ",
                   operation_name(Operation::kTensorOps), ", which the ", backend.name(),
                   " backend does not implement");
    if (axis.inner == 1) {
      rows_.reset();
    } else if (rows_) {
      rows_->reshape(shape);
    } else {
      rows_ = std::make_unique<Tensor>(backend, shape, name);
    }
  }
  bool transposed() const { return rows_ != nullptr; }
  // The copy (rows, C), where transposed: its data keeps values the layer's backward pass
  // reads again (the probabilities of a loss).
  Tensor& copy() { return *rows_; }

  // Values x (outer, C, inner) as rows: x itself, or x transposed into the copy.
  const float* values(const float* x) {
    if (!rows_) return x;
    to_rows(x, rows_->mutable_data());
    return rows_->data();
  }
  // Gradients dy (outer, C, inner) as rows: dy itself, or dy transposed into the copy's diff.
  const float* grads(const float* dy) {
    if (!rows_) return dy;
    to_rows(dy, rows_->mutable_diff());
    return rows_->diff();
  }
  // Where an operation writes rows that belong at x: x itself, or the copy; after the
  // operation, put_values(x) moves them to x (nothing to do where x itself was written).
  float* values_out(float* x) { return rows_ ? rows_->mutable_data() : x; }
  void put_values(float* x) {
    if (rows_) from_rows(rows_->data(), x);
  }
  float* grads_out(float* dx) { return rows_ ? rows_->mutable_diff() : dx; }
  void put_grads(float* dx) {
    if (rows_) from_rows(rows_->diff(), dx);
  }

 private:
  // (outer, C, inner) -> (outer, inner, C) = (rows, C), and back.
  void to_rows(const float* x, float* rows) {
    backend_->transpose(axis_.outer, axis_.classes, axis_.inner, x, rows);
  }
  void from_rows(const float* rows, float* x) {
    backend_->transpose(axis_.outer, axis_.inner, axis_.classes, rows, x);
  }

  Backend* backend_ = nullptr;
  ClassAxis axis_;
  std::unique_ptr<Tensor> rows_;  // (outer inner, C) where inner > 1
};

// A loss over a class axis (SoftmaxWithLoss, InfogainLoss): ClassRows for its scores and
// their gradient, and its probabilities kept as rows from the forward pass for the backward
// pass: in the transposed copy, else in top 1 where the layer has one (shaped like the
// scores here), else in an array of their own.
class LossRows : public ClassRows {
 public:
  void setup(Backend& backend, const ClassAxis& axis, const std::string& where,
             const std::string& name, const Tensor& scores, const Tensors& top) {
    ClassRows::setup(backend, axis, where, name);
    if (top.size() > 1) top[1]->reshape(scores.shape());
    owns_ = top.size() == 1 && !transposed();
    if (owns_) own_.reserve(backend, sizeof(float) * scores.count());
  }
  // Where the forward pass writes the probabilities (rows, C), and where backward reads them.
  float* probabilities_out(const Tensors& top) {
    if (transposed()) return copy().mutable_data();
    return owns_ ? own_.as<float>() : top[1]->mutable_data();
  }
  const float* probabilities(const Tensors& top) {
    if (transposed()) return copy().data();
    return owns_ ? own_.as<float>() : top[1]->data();
  }
  // After the forward pass wrote probabilities_out(top): top 1 gets them in the scores'
  // layout.
  void put_probabilities(const Tensors& top) {
    if (transposed() && top.size() > 1) put_values(top[1]->mutable_data());
  }

 private:
  bool owns_ = false;  // neither transposed nor given top 1
  Buffer own_;         // where owns_: the probabilities (rows, C)
};

}  // namespace lamina
