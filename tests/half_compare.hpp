// Comparing the CUDA backend's 16-bit results with the Native backend's (tier-2 tests of
// 16-bit storage): values and bits of the formats, ulps, the FP32 sums' bound, the checks, and
// the fixture that skips without a GPU that supports the format.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/rounding.hpp"
#include "test_util.hpp"

namespace lamina::testing {

using Bits = std::vector<uint16_t>;
using Halves = Array<uint16_t>;

inline const char* format_name(Half f) { return f == Half::kBF16 ? "BF16" : "FP16"; }
inline int mantissa_bits(Half f) { return f == Half::kBF16 ? 7 : 10; }

inline float value_of(Half f, uint16_t h) {
  return f == Half::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
}
inline uint16_t bits_of(Half f, float x) {
  return f == Half::kBF16 ? float_to_bf16(x) : float_to_fp16(x);
}

inline std::vector<float> values(Half f, const Bits& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = value_of(f, h[i]);
  return v;
}

inline Bits to_bits(Half f, const std::vector<float>& x) {
  Bits h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = bits_of(f, x[i]);
  return h;
}

// x, and each of v, rounded to the format (as its exact value).
inline float round_to(Half f, float x) { return value_of(f, bits_of(f, x)); }
inline std::vector<float> rounded(Half f, const std::vector<float>& v) {
  return values(f, to_bits(f, v));
}

// n random values in [lo, hi), rounded to the format.
inline Bits random_bits(Half f, int64_t n, uint64_t seed, float lo = -1, float hi = 1) {
  return to_bits(f, random_values(n, seed, lo, hi));
}

inline std::vector<float> absolute(std::vector<float> v) {
  for (float& x : v) x = std::abs(x);
  return v;
}

// The spacing of the format's values (one ulp) at magnitude |x|.
inline double ulp(Half f, double x) {
  int e = 0;
  std::frexp(x, &e);  // |x| = m 2^e, m in [0.5, 1)
  const int min_exponent = f == Half::kBF16 ? -126 : -14;
  return std::ldexp(1.0, std::max(e - 1, min_exponent) - mantissa_bits(f));
}

// How many values of the format lie between a and b: their places in the ordered sequence of
// sign-magnitude values, with +0 and -0 at the same place.
inline int64_t ulps_apart(uint16_t a, uint16_t b) {
  auto place = [](uint16_t h) { return h & 0x8000u ? -int64_t(h & 0x7fffu) : int64_t(h); };
  return std::abs(place(a) - place(b));
}

// How far apart two FP32 sums of `terms` terms added in different orders can be, given the
// sum of |terms|: each is within terms 2^-23 sum_abs of the exact sum (an FP32 ulp per
// addition, which allows for tensor cores' truncating additions as well as rounding ones).
inline double fp32_bound(int64_t terms, double sum_abs) {
  return 2.0 * double(terms) * std::ldexp(1.0, -23) * sum_abs + 1e-30;
}

inline std::vector<double> fp32_bounds(int64_t terms, const std::vector<float>& sum_abs) {
  std::vector<double> b(sum_abs.size());
  for (size_t i = 0; i < b.size(); ++i) b[i] = fp32_bound(terms, sum_abs[i]);
  return b;
}

// CUDA's 16-bit results against Native's: within an ulp, or (bound non-empty) within
// bound[i] plus an ulp where a sum cancelled; at least 99% the same values.
inline void expect_half_close(Half f, const Bits& cuda, const Bits& native,
                              const std::vector<double>& bound = {}) {
  ASSERT_EQ(cuda.size(), native.size());
  int64_t same = 0, wrong = 0;
  for (size_t i = 0; i < cuda.size(); ++i) {
    const int64_t apart = ulps_apart(cuda[i], native[i]);
    if (apart == 0) {
      ++same;
      continue;
    }
    const double c = value_of(f, cuda[i]), n = value_of(f, native[i]);
    const bool ok = apart <= 1 || (!bound.empty() &&
                                   std::abs(c - n) <= bound[i] + ulp(f, std::max(std::abs(c),
                                                                                 std::abs(n))));
    if (!ok && wrong++ < 5) {
      ADD_FAILURE() << "[" << i << "] CUDA " << c << " (0x" << std::hex << cuda[i] << "), Native "
                    << n << " (0x" << native[i] << std::dec << "): " << apart << " ulps apart"
                    << (bound.empty() ? std::string() : ", bound " + std::to_string(bound[i]));
    }
  }
  EXPECT_EQ(wrong, 0) << "16-bit results more than an ulp apart, of " << cuda.size();
  EXPECT_GE(double(same), 0.99 * double(cuda.size()))
      << "only " << same << " of " << cuda.size() << " " << format_name(f) << " results agree";
}

// The same values (+0 and -0 alike), bit for bit otherwise.
inline void expect_same_values(Half f, const Bits& cuda, const Bits& native) {
  ASSERT_EQ(cuda.size(), native.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < cuda.size(); ++i) {
    if (ulps_apart(cuda[i], native[i]) != 0 && wrong++ < 5) {
      ADD_FAILURE() << "[" << i << "] CUDA " << value_of(f, cuda[i]) << " (0x" << std::hex
                    << cuda[i] << "), Native " << value_of(f, native[i]) << " (0x" << native[i]
                    << std::dec << ")";
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << cuda.size();
}

inline void expect_floats_close(const std::vector<float>& cuda,
                                const std::vector<float>& native,
                                const std::vector<double>& bound) {
  ASSERT_EQ(cuda.size(), native.size());
  int64_t wrong = 0;
  for (size_t i = 0; i < cuda.size(); ++i) {
    if (!(std::abs(double(cuda[i]) - native[i]) <= bound[i]) && wrong++ < 5) {
      ADD_FAILURE() << "[" << i << "] CUDA " << cuda[i] << ", Native " << native[i] << ", bound "
                    << bound[i];
    }
  }
  EXPECT_EQ(wrong, 0) << "of " << cuda.size();
}

class CudaHalfTest : public ::testing::TestWithParam<Half> {
 protected:
  void SetUp() override {
    if (!cuda_compiled()) GTEST_SKIP() << "built without CUDA";
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present";
    cuda_ = make_cuda_backend(0);
    if (!cuda_->supports_half(GetParam()))
      GTEST_SKIP() << "this GPU has no " << format_name(GetParam()) << " tensor cores";
  }
  Half format() const { return GetParam(); }

  std::unique_ptr<Backend> cuda_;
  NativeBackend native_;
};

}  // namespace lamina::testing
