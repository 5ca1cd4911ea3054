// Shared by Scale and Bias: a per-channel parameter over the bottom's axes [axis, axis +
// num_axes), Caffe's scale_param/bias_param axis and num_axes: learned (num_axes -1 means
// every axis from `axis` on; 0 means a single scalar), or given as a second bottom.
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

// Caffe's two-bottom form: bottom 1 (b) is the parameter, broadcast over bottom 0 (x) from
// `axis`: b's shape must equal x's dims [axis, axis + b's axes). A b of no axes is a scalar,
// and axis is then not read (Caffe broadcasts it from axis 0, the same values).
inline ChannelAxes broadcast_axes(const std::string& where, const std::string& message,
                                  int axis, const Tensor& x, const Tensor& b) {
  const int axes = x.num_axes();
  int first = 0;
  if (b.num_axes() > 0) {
    LAMINA_REQUIRE(axis >= -axes && axis < axes, where, message, ".axis ", axis,
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    first = axis < 0 ? axis + axes : axis;
  }
  bool fits = first + b.num_axes() <= axes;
  for (int i = 0; fits && i < b.num_axes(); ++i) fits = b.dim(i) == x.dim(first + i);
  LAMINA_REQUIRE(fits, where, "bottom 1 '", b.name(), "' ", b.shape_string(), " must have the "
                 "dims of bottom 0 '", x.name(), "' ", x.shape_string(), " from ", message,
                 ".axis ", axis, " (axis ", first, ") on, or no axes (a scalar)");
  ChannelAxes a;
  a.outer = x.count(0, first);
  a.channels = b.count();
  a.inner = x.count(first + b.num_axes(), axes);
  a.shape = b.shape();
  return a;
}

// The two-bottom form's top cannot be bottom 1 (it would overwrite the parameter it reads).
inline void require_top_not_parameter(const std::string& where, const std::vector<Tensor*>& bottom,
                                      const std::vector<Tensor*>& top) {
  LAMINA_REQUIRE(top[0] != bottom[1], where, "top '", top[0]->name(), "' is bottom 1, the "
                 "parameter the layer reads; give the top its own name (or write it over "
                 "bottom 0)");
}

}  // namespace lamina
