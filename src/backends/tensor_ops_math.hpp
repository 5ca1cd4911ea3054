// What the tensor operations (kTensorOps, backend.hpp) compute for one output, written once
// for the Native backend's loops (native/tensor_ops.cpp) and the CUDA kernels
// (cuda/tensor_kernels.cu, cuda/reduce_kernels.cu), so that the two give the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/host_device.hpp"

namespace lamina::tensor_ops {

// The row an index (a float whose integer part counts) names among `rows`, or -1 when it
// names none: negative, NaN, or too large.
LAMINA_HOST_DEVICE inline int64_t row_of(float index, int64_t rows) {
  return index >= 0 && double(index) < double(rows) ? static_cast<int64_t>(index) : -1;
}

// reduce_middle's term for one value, in double (a float's square is exact there).
template <ReduceOp Op>
LAMINA_HOST_DEVICE inline double reduce_term(float v) {
  if constexpr (Op == ReduceOp::kAbsSum) return fabs(double(v));
  if constexpr (Op == ReduceOp::kSumSquares) return double(v) * double(v);
  return v;
}

// reduce_middle_backward for one value: g op'(x), g = coeff dy (sign(0) = 0).
LAMINA_HOST_DEVICE inline float reduce_gradient(ReduceOp op, float g, float x) {
  if (op == ReduceOp::kAbsSum) return g * float((x > 0) - (x < 0));
  if (op == ReduceOp::kSumSquares) return g * (2.0f * x);
  return g;
}

// Whether (a at index ia) comes before (b at ib) in ArgMax's order: the larger value first,
// equal values the larger index first (Caffe sorts (value, index) pairs descending).
LAMINA_HOST_DEVICE inline bool ranks_before(float a, int64_t ia, float b, int64_t ib) {
  return a > b || (a == b && ia > ib);
}

// The top_k of x[c * stride], c < channels, in that order: pick j (at index/value
// [j * out_stride], either may be null) is the first among the values after pick j - 1.
LAMINA_HOST_DEVICE inline void top_k(int64_t channels, int64_t stride, int64_t k,
                                     const float* x, int64_t out_stride, float* index,
                                     float* value) {
  float previous = 0;
  int64_t previous_c = -1;
  for (int64_t j = 0; j < k; ++j) {
    float best = 0;
    int64_t best_c = -1;
    for (int64_t c = 0; c < channels; ++c) {
      const float v = x[c * stride];
      if (previous_c >= 0 && !ranks_before(previous, previous_c, v, c)) continue;
      if (best_c < 0 || ranks_before(v, c, best, best_c)) best = v, best_c = c;
    }
    if (index != nullptr) index[j * out_stride] = static_cast<float>(best_c);
    if (value != nullptr) value[j * out_stride] = best;
    previous = best, previous_c = best_c;
  }
}

}  // namespace lamina::tensor_ops
