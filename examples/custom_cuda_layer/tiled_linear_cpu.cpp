// The TiledLinear layer's CPU twin (tiled_linear.hpp): the same three products and the bias
// gradient as the CUDA kernels, for the Native backend, in plain loops. Each loop runs along
// rows in memory, so the compiler vectorises it (the dot products with
// `omp simd reduction`, which lets it add in any order: build with -fopenmp-simd), and
// keeps one row of the output in cache while it streams the other operand.
#include "tiled_linear.hpp"

namespace example {

void tiled_linear_forward_cpu(int64_t n, int64_t c, int64_t k, const float* x, const float* w,
                              const float* b, float* y) {
  // Column j of y is row j of w against every row of x: w's row stays in cache.
  for (int64_t j = 0; j < k; ++j) {
    const float* wj = w + j * c;
    for (int64_t i = 0; i < n; ++i) {
      const float* xi = x + i * c;
      float sum = 0;
#pragma omp simd reduction(+ : sum)
      for (int64_t q = 0; q < c; ++q) sum += xi[q] * wj[q];
      y[i * k + j] = b != nullptr ? sum + b[j] : sum;
    }
  }
}

void tiled_linear_backward_input_cpu(int64_t n, int64_t c, int64_t k, const float* dy,
                                     const float* w, float* dx) {
  // Row i of dx = the rows of w weighted by row i of dy.
  for (int64_t i = 0; i < n; ++i) {
    float* dxi = dx + i * c;
    for (int64_t q = 0; q < c; ++q) dxi[q] = 0;
    for (int64_t j = 0; j < k; ++j) {
      const float g = dy[i * k + j];
      const float* wj = w + j * c;
#pragma omp simd
      for (int64_t q = 0; q < c; ++q) dxi[q] += g * wj[q];
    }
  }
}

void tiled_linear_backward_params_cpu(int64_t n, int64_t c, int64_t k, const float* x,
                                      const float* dy, float* dw, float* db) {
  // Row j of dw += the rows of x weighted by column j of dy: dw's row stays in cache.
  for (int64_t j = 0; j < k; ++j) {
    float* dwj = dw + j * c;
    float bias_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float g = dy[i * k + j];
      bias_sum += g;
      const float* xi = x + i * c;
#pragma omp simd
      for (int64_t q = 0; q < c; ++q) dwj[q] += g * xi[q];
    }
    if (db != nullptr) db[j] += bias_sum;
  }
}

}  // namespace example
