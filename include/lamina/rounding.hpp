// Rounding FP32 values to the narrower formats the products of a lower precision read
// (backend.hpp's Math): bit operations, the same on every host.
#pragma once

#include <cstdint>
#include <cstring>

namespace lamina {

// x rounded to TF32 (FP32's sign and 8 exponent bits, the top 10 of its 23 mantissa bits),
// to nearest with ties to even, kept in a float whose 13 low mantissa bits are 0. Subnormals
// round the same way; a value past TF32's largest becomes infinity; infinities and NaNs
// (payload kept) pass unchanged.
inline float round_to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;  // infinity or NaN
  const uint32_t lowest_kept = (bits >> 13) & 1u;
  bits += 0x0fffu + lowest_kept;  // carries into the kept bits past half, or at half if odd
  bits &= ~uint32_t{0x1fff};
  float rounded;
  std::memcpy(&rounded, &bits, sizeof(rounded));
  return rounded;
}

}  // namespace lamina
