// Caffe's im2col and col2im on CUDA (im2col_kernels.cu), shared by the im2col operations
// (backend.hpp, kIm2col) and the convolutions by im2col + cuBLAS (conv_kernels.cu).
//
// Over `planes` consecutive channel planes x (planes, h, w), images one after another (an
// image's c planes, or a batch's n c): col (planes kh kw, out_h out_w) holds in row
// (plane, ki, kj) the input pixel each output position sees through kernel tap (ki, kj), 0 in
// the padding. Only the geometry's h, w, kh, kw, stride, pad, dilation and out_h, out_w are
// read.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

// col = the patches of x, on stream s.
void launch_im2col(cudaStream_t s, const ConvGeometry& g, int64_t planes, const float* x,
                   float* col);
// dx (planes, h, w), written with = : each input element the sum of the col entries read
// from it, gathered by one thread per element in (ki, kj) order, as the Native backend adds
// them (no atomics: bit-identical to it).
void launch_col2im(cudaStream_t s, const ConvGeometry& g, int64_t planes, const float* col,
                   float* dx);

}  // namespace lamina::cuda_detail
