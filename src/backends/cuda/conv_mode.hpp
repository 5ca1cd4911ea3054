// What a CUDA convolution stores and computes in (ConvMode): the key, beside its geometry, of
// its cuDNN plan (cudnn_plan.hpp). Free of cuDNN's headers, so that cudnn.cpp's convolutions
// are written once for builds with and without cuDNN.
#pragma once

#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

// FP32 or TF32 on floats (Math), or BF16 or FP16 storage accumulating in FP32 (Half).
enum class ConvMode { kFP32, kTF32, kBF16, kFP16 };

inline ConvMode conv_mode(Math math) {
  return math == Math::kTF32 ? ConvMode::kTF32 : ConvMode::kFP32;
}
inline ConvMode conv_mode(Half format) {
  return format == Half::kBF16 ? ConvMode::kBF16 : ConvMode::kFP16;
}

// "FP32", "TF32", "BF16", "FP16".
inline const char* mode_name(ConvMode mode) {
  constexpr const char* kNames[] = {"FP32", "TF32", "BF16", "FP16"};
  return kNames[static_cast<int>(mode)];
}

}  // namespace lamina::cuda_detail
