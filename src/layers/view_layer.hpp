// A layer whose top is a view of its bottom with another shape (Flatten, Reshape): the top
// shares the bottom's data and diff, so forward and backward move no data.
#pragma once

#include "lamina/layer.hpp"

namespace lamina {

class ViewLayer : public Layer {
 public:
  using Layer::Layer;
  HalfSupport half_support() const override { return HalfSupport::kFollows; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    top[0]->reshape(view_shape(*bottom[0]));
    top[0]->share_data(*bottom[0]);
    top[0]->share_diff(*bottom[0]);
  }
  void forward(const Tensors&, const Tensors&) override {}
  void backward_input(const Tensors&, const std::vector<bool>&, const Tensors&) override {}

 protected:
  // The top's shape (same count), checking the layer's parameters against the bottom x.
  virtual Shape view_shape(const Tensor& x) const = 0;
};

}  // namespace lamina
