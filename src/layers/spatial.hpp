// Shared by the spatial layers (Convolution, Deconvolution, Im2col, Pooling, SPP, LRN):
// Caffe's two spellings of a 2-D setting, the 4-D bottom check, a convolution_param's window
// and Caffe's pooled output size.
//
// A setting such as the kernel is written either as `kernel_size` (one value for both
// dimensions, or two for (h, w)) or as `kernel_h` and `kernel_w`. Giving both spellings, or
// a count other than one or two, is an error naming the fields; nothing is silently ignored.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"
#include "lamina/lamina.pb.h"

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

// The window of a convolution_param (Convolution, Deconvolution, Im2col), checked: kernel
// given and positive, stride and dilation positive (defaults stride 1, pad 0, dilation 1),
// axis 1.
struct ConvWindow {
  Extent2 kernel, stride, pad, dilation;
  // The dilated kernel's extent: dilation (kernel - 1) + 1.
  Extent2 extent() const {
    return {dilation.h * (kernel.h - 1) + 1, dilation.w * (kernel.w - 1) + 1};
  }
};

inline ConvWindow conv_window(const std::string& where, const ConvolutionParameter& p) {
  LAMINA_REQUIRE(p.axis() == 1 || p.axis() == -3, where, "convolution_param.axis must be 1 "
                 "(the channels of an NCHW blob), got ", p.axis());
  const auto list = [](const google::protobuf::RepeatedField<uint32_t>& r) {
    return std::vector<int64_t>(r.begin(), r.end());
  };
  const std::string m = "convolution_param";
  ConvWindow win;
  win.kernel = spatial_setting(where, m, "kernel_size", "kernel", list(p.kernel_size()),
                               p.has_kernel_h(), p.kernel_h(), p.has_kernel_w(), p.kernel_w(),
                               0, true);
  win.stride = spatial_setting(where, m, "stride", "stride", list(p.stride()), p.has_stride_h(),
                               p.stride_h(), p.has_stride_w(), p.stride_w(), 1, true);
  win.pad = spatial_setting(where, m, "pad", "pad", list(p.pad()), p.has_pad_h(), p.pad_h(),
                            p.has_pad_w(), p.pad_w(), 0, false);
  win.dilation = spatial_setting(where, m, "dilation", "", list(p.dilation()), false, 0, false,
                                 0, 1, false);
  LAMINA_REQUIRE(win.kernel.h > 0 && win.kernel.w > 0, where, "convolution_param.kernel_size "
                 "(or kernel_h and kernel_w) must be given and positive, got ", win.kernel.h,
                 "x", win.kernel.w);
  LAMINA_REQUIRE(win.stride.h > 0 && win.stride.w > 0, where, "convolution_param.stride must "
                 "be positive, got ", win.stride.h, "x", win.stride.w);
  LAMINA_REQUIRE(win.dilation.h > 0 && win.dilation.w > 0, where, "convolution_param.dilation "
                 "must be positive, got ", win.dilation.h, "x", win.dilation.w);
  return win;
}

// What Convolution and Deconvolution read of a convolution_param over x (N, C, H, W),
// checked: the window, num_output (required, positive) and group (dividing it and C).
struct ConvSettings {
  ConvWindow win;
  int64_t k, groups;
};

inline ConvSettings conv_settings(const std::string& where, const ConvolutionParameter& p,
                                  const Tensor& x) {
  require_nchw(where, x);
  const ConvWindow win = conv_window(where, p);
  LAMINA_REQUIRE(p.has_num_output() && p.num_output() > 0, where,
                 "convolution_param.num_output must be set to a positive number of outputs");
  const int64_t c = x.dim(1), k = p.num_output(), groups = p.group();
  LAMINA_REQUIRE(groups > 0 && c % groups == 0 && k % groups == 0, where,
                 "convolution_param.group ", groups, " must divide both the ", c,
                 " channels of bottom '", x.name(), "' ", x.shape_string(), " and num_output ",
                 k);
  return {win, k, groups};
}

// The default weight filler of Convolution and Deconvolution.
inline FillerParameter xavier_filler() {
  FillerParameter filler;
  filler.set_type("xavier");
  return filler;
}

// The geometry of the window sliding over x (N, C, H, W), with k outputs in `groups`:
// out = (in + 2 pad - extent) / stride + 1. Throws when the dilated kernel does not fit in
// the padded bottom (the output would be empty).
inline ConvGeometry window_geometry(const std::string& where, const Tensor& x,
                                    const ConvWindow& win, int64_t k, int64_t groups) {
  const Extent2 extent = win.extent();
  ConvGeometry g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), k, win.kernel.h, win.kernel.w,
                 win.stride.h, win.stride.w, win.pad.h, win.pad.w, win.dilation.h,
                 win.dilation.w, groups, 0, 0};
  LAMINA_REQUIRE(g.h + 2 * win.pad.h >= extent.h && g.w + 2 * win.pad.w >= extent.w, where,
                 "the ", extent.h, "x", extent.w, " dilated kernel does not fit in bottom '",
                 x.name(), "' ", x.shape_string(), " padded by ", win.pad.h, "x", win.pad.w,
                 ": the output would be empty");
  g.out_h = (g.h + 2 * win.pad.h - extent.h) / win.stride.h + 1;
  g.out_w = (g.w + 2 * win.pad.w - extent.w) / win.stride.w + 1;
  return g;
}

// Caffe's pooled size of one axis, rounded up (ceil) or down, without a last window that
// would start inside the bottom padding ((out - 1) stride >= in + pad: out - 1); 0 when the
// kernel does not fit.
inline int64_t pooled_size(int64_t in, int64_t kernel, int64_t stride, int64_t pad, bool ceil) {
  const int64_t span = in + 2 * pad - kernel;
  if (span < 0) return 0;
  int64_t out = (ceil ? (span + stride - 1) / stride : span / stride) + 1;
  if (pad > 0 && (out - 1) * stride >= in + pad) --out;
  return out;
}

}  // namespace lamina
