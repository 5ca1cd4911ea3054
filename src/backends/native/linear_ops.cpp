// NativeBackend's fused Linear operations: the product by OpenBLAS, then the bias and the
// ReLU in one pass over the output (one more pass than the product itself, not three); the
// backward's ReLU derivative and bias gradient in one pass over the gradient.
#include <algorithm>

#include "lamina/native_backend.hpp"
#include "lamina/relu.hpp"
#include "parallel.hpp"

namespace lamina {

using native::parallel_ranges;
using native::parallel_rows;

void NativeBackend::linear_forward(int64_t rows, int64_t n, int64_t k, const float* x,
                                   const float* w, const float* bias, bool relu, float* y) {
  gemm(Transpose::kNo, Transpose::kYes, rows, n, k, 1.0f, x, w, 0.0f, y);
  if (bias == nullptr && !relu) return;
  parallel_rows(rows, n, [=](int64_t r) {
    float* yr = y + r * n;
    if (bias != nullptr) {
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) yr[j] += bias[j];
    }
    if (relu) {
#pragma GCC ivdep
      for (int64_t j = 0; j < n; ++j) yr[j] = relu_value(yr[j], 0.0f);
    }
  });
}

// Column ranges per thread, so that each column's sum runs over the rows in order, on one
// thread: the same bits however many threads there are.
void NativeBackend::linear_bias_backward(int64_t rows, int64_t n, const float* y,
                                         const float* dy, float* dz, float* db) {
  if (rows == 0 || n == 0) return;
  auto columns = [=](int64_t begin, int64_t end) {
    for (int64_t r = 0; r < rows; ++r) {
      const float* dyr = dy + r * n;
      if (y != nullptr) {
        const float* yr = y + r * n;
        float* dzr = dz + r * n;
#pragma GCC ivdep
        for (int64_t j = begin; j < end; ++j) dzr[j] = relu_backward_value(yr[j], dyr[j], 0.0f);
        dyr = dzr;
      }
      if (db != nullptr) {
#pragma GCC ivdep
        for (int64_t j = begin; j < end; ++j) db[j] += dyr[j];
      }
    }
  };
  parallel_ranges(n, columns, rows * n);
}

}  // namespace lamina
