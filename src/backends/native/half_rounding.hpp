// Rounding a run of floats to a 16-bit format on the calling thread (rounding.hpp's
// conversions): NativeBackend::to_half splits an array among the pool's threads with it, and
// the fused update rounds each run of weights it has just changed into their 16-bit copy.
#pragma once

#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/rounding.hpp"

namespace lamina::native {

// y[i] = x[i] rounded to format, for i in [0, n).
inline void round_to_half(Half format, const float* x, int64_t n, uint16_t* y) {
  if (format == Half::kBF16) {
    for (int64_t i = 0; i < n; ++i) y[i] = float_to_bf16(x[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = float_to_fp16(x[i]);
  }
}

}  // namespace lamina::native
