// Rounding FP32 values to the narrower formats of the lower precisions (backend.hpp's Math
// and Half): bit operations, one implementation for the host and CUDA kernels, so every
// backend rounds alike, bit for bit. Every rounding is to nearest with ties to even.
#pragma once

#include <cstdint>
#include <cstring>

#include "lamina/host_device.hpp"

namespace lamina {

LAMINA_HOST_DEVICE inline uint32_t float_bits(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  return bits;
}

LAMINA_HOST_DEVICE inline float bits_float(uint32_t bits) {
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// x rounded to TF32 (FP32's sign and 8 exponent bits, the top 10 of its 23 mantissa bits),
// kept in a float whose 13 low mantissa bits are 0. Subnormals round the same way; a value
// past TF32's largest becomes infinity; infinities and NaNs (payload kept) pass unchanged.
LAMINA_HOST_DEVICE inline float round_to_tf32(float x) {
  uint32_t bits = float_bits(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // infinity or NaN
  const uint32_t lowest_kept = (bits >> 13) & 1u;
  bits += 0x0fffu + lowest_kept;  // carries into the kept bits past half, or at half if odd
  return bits_float(bits & ~uint32_t{0x1fff});
}

// BF16: FP32's sign and 8 exponent bits and the top 7 of its mantissa bits, the upper half
// of a float's bits. Subnormals round like normals; a value past BF16's largest becomes
// infinity; a NaN becomes the quiet NaN 0x7fc0 with its sign.
LAMINA_HOST_DEVICE inline uint16_t float_to_bf16(float x) {
  uint32_t bits = float_bits(x);
  if ((bits & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((bits >> 16) & 0x8000u) | 0x7fc0u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

LAMINA_HOST_DEVICE inline float bf16_to_float(uint16_t h) { return bits_float(uint32_t{h} << 16); }

// FP16 (IEEE binary16: 5 exponent bits, bias 15, 10 mantissa bits): values from 65520 up
// (where 65504, the largest, and infinity tie) become infinity; below 2^-14 (the smallest
// normal) values round to multiples of 2^-24 (subnormals, or 2^-14 itself from just below
// it), 2^-25 and below to zero; a NaN becomes the quiet NaN 0x7e00 with its sign.
LAMINA_HOST_DEVICE inline uint16_t float_to_fp16(float x) {
  const uint32_t bits = float_bits(x);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  uint32_t a = bits & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (a >= 0x38800000u) {  // >= 2^-14: normal; drop 13 mantissa bits, exponent 127 -> 15
    a += 0x0fffu + ((a >> 13) & 1u);
    return static_cast<uint16_t>(sign | ((a - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) return static_cast<uint16_t>(sign);  // <= 2^-25: zero (2^-25 ties to 0)
  // A subnormal: the result is x 2^24 rounded, = m 2^(e - 126) for the significand m.
  const uint32_t e = a >> 23;                        // 102..112
  const uint32_t m = (a & 0x7fffffu) | 0x800000u;    // 24 bits
  const uint32_t shift = 126 - e;                    // 14..24
  uint32_t q = m >> shift;
  const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
  if (rest > half || (rest == half && (q & 1u))) ++q;  // may carry into the smallest normal
  return static_cast<uint16_t>(sign | q);
}

// The FP16 value exactly as a float (a NaN keeps its sign and payload).
LAMINA_HOST_DEVICE inline float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t{h & 0x8000u} << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return bits_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent != 0) return bits_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  // Zero or a subnormal: mantissa 2^-24, exact in a float.
  const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-08f;  // 2^-24
  return sign ? -magnitude : magnitude;
}

}  // namespace lamina
