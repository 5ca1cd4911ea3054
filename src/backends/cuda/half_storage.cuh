// How kernels and library calls read and write arrays stored in FP32 or in 16 bits
// (backend.hpp, "16-bit storage").
//
// A kernel written once for both is templated on a storage type S: it loads an S::Stored
// value as the float it holds (S::load, exact), computes in FP32, and stores a float result
// with S::store, which for the 16-bit formats rounds it once, to nearest with ties to even,
// with rounding.hpp's conversions: the Native backend's bits, NaN and overflow included.
#pragma once

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

struct Bf16Storage {
  using Stored = uint16_t;
  __device__ static float load(uint16_t h) { return bf16_to_float(h); }
  __device__ static uint16_t store(float v) { return float_to_bf16(v); }
};

struct Fp16Storage {
  using Stored = uint16_t;
  __device__ static float load(uint16_t h) { return fp16_to_float(h); }
  __device__ static uint16_t store(float v) { return float_to_fp16(v); }
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
