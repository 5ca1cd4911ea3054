// Caffe's im2col on one channel plane, shared by the Native convolutions (conv_ops.cpp) and
// the im2col operations (im2col_ops.cpp, where these are defined).
//
// The column matrix of one channel is col (kh kw, out_h out_w), leading dimension ld: row
// (ki, kj) holds, at output position (oh, ow), the input pixel (oh stride_h - pad_h +
// ki dilation_h, ow stride_w - pad_w + kj dilation_w), 0 where that falls into the padding.
// Only the geometry's h, w, kh, kw, stride, pad, dilation and out_h, out_w are read.
#pragma once

#include <cstdint>

#include "lamina/backend.hpp"

namespace lamina::native {

// col (kh kw, out_h out_w) with leading dimension ld = the patches of x_plane (h, w).
void im2col_channel(const ConvGeometry& g, const float* x_plane, float* col, int64_t ld);

// The reverse: dx_plane (h, w) += every entry of col at the pixel it was read from, taps in
// (ki, kj) order (the CUDA col2im sums in this order too).
void col2im_channel(const ConvGeometry& g, const float* col, int64_t ld, float* dx_plane);

}  // namespace lamina::native
