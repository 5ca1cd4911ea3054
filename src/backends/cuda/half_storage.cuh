// How kernels and library calls read and write arrays stored in FP32 or in 16 bits
// (backend.hpp, "16-bit storage").
//
// A kernel written once for both is templated on a storage type S: it loads an S::Stored
// value as the float it holds (S::load, exact), computes in FP32, and stores a float result
// with S::store, which for the 16-bit formats rounds it once, to nearest with ties to even,
// giving rounding.hpp's bits (the Native backend's), NaN and overflow included.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <library_types.h>

#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/rounding.hpp"

namespace lamina::cuda_detail {

struct Fp32Storage {
  using Stored = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};

// Stores round by the hardware's conversions (cvt.rn.bf16.f32, cvt.rn.f16.f32: to nearest
// even, subnormals and overflow as rounding.hpp's), a few instructions where the bit
// operations take several (BF16) or dozens (FP16); NaNs go through rounding.hpp, whose quiet
// NaN and payload the hardware does not give. FP16 loads likewise; a BF16 load is a shift.
// CudaHalf.ConversionsGiveNativesBits holds them to the Native backend's bits.
struct Bf16Storage {
  using Stored = uint16_t;
  __device__ static float load(uint16_t h) { return bf16_to_float(h); }
  __device__ static uint16_t store(float v) {
    if (isnan(v)) return float_to_bf16(v);
    return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
};

struct Fp16Storage {
  using Stored = uint16_t;
  __device__ static float load(uint16_t h) {
    if ((h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0) return fp16_to_float(h);  // NaN
    return __half2float(__ushort_as_half(h));
  }
  __device__ static uint16_t store(float v) {
    if (isnan(v)) return float_to_fp16(v);
    return __half_as_ushort(__float2half_rn(v));
  }
};

// Calls launch(Bf16Storage{}) or launch(Fp16Storage{}), the storage of `format`: a generic
// lambda that launches its kernel for decltype(storage).
template <class Launch>
void with_half_storage(Half format, Launch&& launch) {
  if (format == Half::kBF16) {
    launch(Bf16Storage{});
  } else {
    launch(Fp16Storage{});
  }
}

// The cuBLAS / cuBLASLt type of values stored in `format`.
inline cudaDataType_t half_data_type(Half format) {
  return format == Half::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
}

}  // namespace lamina::cuda_detail
