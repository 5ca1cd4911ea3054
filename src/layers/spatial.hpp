// Shared by Convolution and Pooling: Caffe's two spellings of a 2-D setting, and the 4-D
// bottom check.
//
// A setting such as the kernel is written either as `kernel_size` (one value for both
// dimensions, or two for (h, w)) or as `kernel_h` and `kernel_w`. Giving both spellings, or
// a count other than one or two, is an error naming the fields; nothing is silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/tensor.hpp"

namespace lamina {

struct Extent2 {
  int64_t h, w;
};

// message: "convolution_param"; field: the one-or-two-values spelling ("kernel_size");
// base: the prefix of the _h/_w spelling ("kernel"), empty when there is none (dilation).
// values: what the prototxt gave for `field` (empty when not given). A missing _h or _w
// partner is an error when both_required, else it takes `fallback` (Caffe's pad_h alone).
inline Extent2 spatial_setting(const std::string& where, const std::string& message,
                               const std::string& field, const std::string& base,
                               const std::vector<int64_t>& values, bool has_h, int64_t h,
                               bool has_w, int64_t w, int64_t fallback, bool both_required) {
  const std::string name = message + "." + field;
  LAMINA_REQUIRE(values.size() <= 2, where, name, " takes one value (both dimensions) or two "
                 "(h, w), got ", values.size());
  if (has_h || has_w) {
    LAMINA_REQUIRE(values.empty(), where, "give ", name, " or ", message, ".", base, "_h/",
                   base, "_w, not both");
    LAMINA_REQUIRE(!both_required || (has_h && has_w), where, "give both ", message, ".", base,
                   "_h and ", message, ".", base, "_w (or ", name, ")");
    return {has_h ? h : fallback, has_w ? w : fallback};
  }
  if (values.empty()) return {fallback, fallback};
  return {values[0], values.back()};
}

// Throws unless x is (N, C, H, W).
inline void require_nchw(const std::string& where, const Tensor& x) {
  LAMINA_REQUIRE(x.num_axes() == 4, where, "expects a 4-D bottom (N, C, H, W), but '", x.name(),
                 "' has shape ", x.shape_string());
}

}  // namespace lamina
