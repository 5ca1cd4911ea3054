// Shared by Scale and Bias: a per-channel parameter over the bottom's axes [axis, axis +
// num_axes), Caffe's scale_param/bias_param axis and num_axes. num_axes -1 means every axis
// from `axis` on; 0 means a single scalar.
//   bottom (outer, channels, inner): outer = the dims before axis, channels = the
//   parameter's count, inner = the dims after it.
#pragma once

#include <string>
#include <vector>

#include "lamina/tensor.hpp"

namespace lamina {

struct ChannelAxes {
  int64_t outer, channels, inner;
  Shape shape;  // the parameter's shape: the bottom's dims [axis, axis + num_axes)
};

// message names the settings in errors ("scale_param").
inline ChannelAxes channel_axes(const std::string& where, const std::string& message, int axis,
                                int num_axes, const Tensor& x) {
  const int axes = x.num_axes();
  LAMINA_REQUIRE(axis >= -axes && axis < axes, where, message, ".axis ", axis,
                 " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
  const int first = axis < 0 ? axis + axes : axis;
  LAMINA_REQUIRE(num_axes >= -1 && (num_axes == -1 || first + num_axes <= axes), where, message,
                 ".num_axes ", num_axes, " from axis ", first, " does not fit bottom '", x.name(),
                 "' of shape ", x.shape_string(), " (use -1 for every remaining axis)");
  const int end = num_axes == -1 ? axes : first + num_axes;
  ChannelAxes a;
  a.outer = x.count(0, first);
  a.channels = x.count(first, end);
  a.inner = x.count(end, axes);
  a.shape.assign(x.shape().begin() + first, x.shape().begin() + end);
  return a;
}

// Caffe's Scale and Bias also take the parameter as a second bottom; Lamina learns it.
inline void require_one_bottom(const std::string& where, const std::string& message,
                               const std::vector<Tensor*>& bottom) {
  LAMINA_REQUIRE(bottom.size() == 1, where, "takes one bottom; Caffe's two-bottom form (the ",
                 message, " given as a second bottom '", bottom.back()->name(), "' ",
                 bottom.back()->shape_string(), ") is not supported: drop the second bottom and "
                 "the layer learns the parameter");
}

}  // namespace lamina
