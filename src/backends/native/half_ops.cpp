// The Native backend's 16-bit operations (backend.hpp, "16-bit storage"): each widens its
// 16-bit operands to floats (exactly), runs the FP32 operation, and rounds every 16-bit
// result once, to nearest even, with rounding.hpp's conversions, as the CUDA backend rounds.
// The floats live in per-thread staging arrays (NativeBackend::staging).
#include <vector>

#include "lamina/native_backend.hpp"
#include "parallel.hpp"

namespace lamina {

namespace {

template <class T, int kSlots>
T* staging_array(int slot, int64_t n) {
  thread_local std::vector<T> arrays[kSlots];
  std::vector<T>& a = arrays[slot];
  if (a.size() < size_t(n)) a.resize(size_t(n));
  return a.data();
}

}  // namespace

float* NativeBackend::staging(int slot, int64_t n) { return staging_array<float, 5>(slot, n); }

uint16_t* NativeBackend::half_staging(int slot, int64_t n) {
  return staging_array<uint16_t, 2>(slot, n);
}

bool NativeBackend::supports_half(Half) const { return true; }

const float* NativeBackend::widen(Half format, int64_t n, const uint16_t* x, int slot) {
  if (x == nullptr) return nullptr;
  float* y = staging(slot, n);
  from_half(format, n, x, y);
  return y;
}

void NativeBackend::gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const uint16_t* a, const uint16_t* b,
                         float beta, float* c) {
  gemm(trans_a, trans_b, m, n, k, alpha, widen(format, m * k, a, 0), widen(format, k * n, b, 1),
       beta, c);
}

void NativeBackend::gemm(Half format, Transpose trans_a, Transpose trans_b, int64_t m, int64_t n,
                         int64_t k, float alpha, const uint16_t* a, const uint16_t* b,
                         float beta, uint16_t* c) {
  float* wide = beta == 0 ? staging(2, m * n) : const_cast<float*>(widen(format, m * n, c, 2));
  gemm(format, trans_a, trans_b, m, n, k, alpha, a, b, beta, wide);
  to_half(format, m * n, wide, c);
}

void NativeBackend::linear_forward(Half format, int64_t rows, int64_t n, int64_t k,
                                   const uint16_t* x, const uint16_t* w, const float* bias,
                                   bool relu, uint16_t* y) {
  float* wide = staging(2, rows * n);
  linear_forward(rows, n, k, widen(format, rows * k, x, 0), widen(format, n * k, w, 1), bias,
                 relu, wide);
  to_half(format, rows * n, wide, y);
}

void NativeBackend::linear_bias_backward(Half format, int64_t rows, int64_t n, const uint16_t* y,
                                         const uint16_t* dy, uint16_t* dz, float* db) {
  const float* wide_dy = widen(format, rows * n, dy, 1);
  float* wide_dz = y == nullptr ? nullptr : staging(2, rows * n);
  linear_bias_backward(rows, n, widen(format, rows * n, y, 0), wide_dy, wide_dz, db);
  if (wide_dz != nullptr) to_half(format, rows * n, wide_dz, dz);
}

void NativeBackend::activation_forward(Half format, Activation f, int64_t n,
                                       float negative_slope, const uint16_t* x, uint16_t* y) {
  float* wide = const_cast<float*>(widen(format, n, x, 0));
  activation_forward(f, n, negative_slope, wide, wide);
  to_half(format, n, wide, y);
}

void NativeBackend::activation_backward(Half format, Activation f, int64_t n,
                                        float negative_slope, const uint16_t* y,
                                        const uint16_t* dy, uint16_t* dx) {
  float* wide = staging(2, n);
  activation_backward(f, n, negative_slope, widen(format, n, y, 0), widen(format, n, dy, 1),
                      wide);
  to_half(format, n, wide, dx);
}

// y = alpha x + beta y as the CUDA kernel computes it: each product and the sum rounded in
// FP32 (no fused multiply-add: -ffp-contract=off, CMakeLists.txt), a zero coefficient not
// reading its operand.
void NativeBackend::axpby(Half format, int64_t n, float alpha, const uint16_t* x, float beta,
                          uint16_t* y) {
  const float* wide_x = alpha != 0 ? widen(format, n, x, 0) : nullptr;
  float* wide_y = beta != 0 ? const_cast<float*>(widen(format, n, y, 1)) : staging(1, n);
  native::parallel_ranges(n, [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float ax = alpha != 0 ? alpha * wide_x[i] : 0.0f;
      const float by = beta != 0 ? beta * wide_y[i] : 0.0f;
      wide_y[i] = beta == 0 ? ax : (alpha == 0 ? by : ax + by);  // -0 stays -0
    }
  });
  to_half(format, n, wide_y, y);
}

void NativeBackend::mul(Half format, int64_t n, const uint16_t* a, const float* b,
                        uint16_t* y) {
  float* wide = const_cast<float*>(widen(format, n, a, 0));
  mul(n, wide, b, wide);
  to_half(format, n, wide, y);
}

void NativeBackend::dropout_forward(Half format, int64_t n, float ratio, uint64_t seed,
                                    uint64_t offset, PassCounter* counter, const uint16_t* x,
                                    float* mask, uint16_t* y) {
  float* wide = const_cast<float*>(widen(format, n, x, 0));
  dropout_forward(n, ratio, seed, offset, counter, wide, mask, wide);
  to_half(format, n, wide, y);
}

void NativeBackend::mul(Half format, int64_t n, const uint16_t* a, const uint16_t* b,
                        uint16_t* y) {
  float* wide = staging(2, n);
  mul(n, widen(format, n, a, 0), widen(format, n, b, 1), wide);
  to_half(format, n, wide, y);
}

}  // namespace lamina
