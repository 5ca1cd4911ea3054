// 16-bit storage formats (rounding.hpp, Backend::to_half / from_half) on the CPU: FP32 to BF16
// and FP16 bit for bit against independent references (round to nearest, ties to even, by
// double arithmetic and a table of every FP16 value), NaN, infinities, overflow and
// subnormals included; decoding exact for all 65,536 patterns; the Native backend's
// operations equal to the functions. tests/test_cuda_precision.cpp holds the CUDA backend to
// the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "lamina/native_backend.hpp"
#include "lamina/rounding.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::reference_round;

uint16_t reference_bf16(float x) {
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7fc0;
  if (std::isinf(x)) return sign | 0x7f80;
  bool overflow = false;
  const double v = reference_round(x, 7, -126, std::ldexp(1.0, 128), &overflow);
  if (overflow) return sign | 0x7f80;
  const float f = std::copysign(static_cast<float>(v), x);  // exact: at most 8 significant bits
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  EXPECT_EQ(bits & 0xffffu, 0u);
  return static_cast<uint16_t>(bits >> 16);
}

// Every FP16 pattern's value, decoded from the IEEE definition.
double fp16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  const double magnitude = exponent == 0 ? std::ldexp(double(mantissa), -24)
                                         : std::ldexp(double(1024 + mantissa), exponent - 25);
  return (h & 0x8000) ? -magnitude : magnitude;
}

uint16_t reference_fp16(float x) {
  static const std::map<double, uint16_t> finite = [] {
    std::map<double, uint16_t> m;
    for (uint32_t h = 0; h < 0x10000; ++h)
      if (((h >> 10) & 0x1f) != 0x1f && h != 0x8000) m[fp16_value(uint16_t(h))] = uint16_t(h);
    return m;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (std::isnan(x)) return sign | 0x7e00;
  if (std::isinf(x)) return sign | 0x7c00;
  bool overflow = false;
  const double v = reference_round(x, 10, -14, 65536.0, &overflow);
  if (overflow) return sign | 0x7c00;
  if (v == 0) return sign;
  return finite.at(v);
}

// Patterns to convert: every 4099th of the 2^32 (every exponent, both signs, NaNs,
// subnormals); every 16-bit tail under ten high halves: BF16's ties and their neighbours at
// each, FP16's at the normal ones, and FP16's overflow edge, smallest subnormals and the
// carry from the largest subnormal into the smallest normal (0x387f...); then random ones.
std::vector<uint32_t> patterns() {
  std::vector<uint32_t> out;
  for (uint64_t b = 0; b <= 0xffffffffu; b += 4099) out.push_back(uint32_t(b));
  for (uint32_t high : {0x00000000u, 0x33000000u, 0x33800000u, 0x38000000u, 0x387f0000u,
                        0x38800000u, 0x3f800000u, 0x477f0000u, 0x7f7f0000u, 0xb3000000u,
                        0xc77f0000u})
    for (uint32_t low = 0; low < (1u << 16); ++low) out.push_back(high | low);
  std::mt19937 gen(11);
  for (int i = 0; i < 1000000; ++i) out.push_back(uint32_t(gen()));
  return out;
}

float as_float(uint32_t b) {
  float x;
  std::memcpy(&x, &b, sizeof(x));
  return x;
}

TEST(HalfRounding, Bf16MatchesTheReferenceBitForBit) {
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80) << "a tie goes to even 1";
  EXPECT_EQ(float_to_bf16(3.4e38f), 0x7f80) << "past BF16's largest: infinity";
  EXPECT_EQ(float_to_bf16(as_float(0xffc00001u)), 0xffc0) << "NaN: quiet, with its sign";
  for (uint32_t b : patterns()) {
    const float x = as_float(b);
    ASSERT_EQ(float_to_bf16(x), reference_bf16(x)) << std::hex << "x bits 0x" << b;
  }
}

TEST(HalfRounding, Fp16MatchesTheReferenceBitForBit) {
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff) << "the largest";
  EXPECT_EQ(float_to_fp16(65519.996f), 0x7bff) << "below the tie";
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00) << "the tie with infinity";
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -24)), 0x0001) << "the smallest subnormal";
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000) << "half of it ties to zero";
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -24)), 0x0002) << "a subnormal tie goes to even";
  EXPECT_EQ(float_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_fp16(as_float(0x7f800001u)), 0x7e00) << "NaN: quiet";
  for (uint32_t b : patterns()) {
    const float x = as_float(b);
    ASSERT_EQ(float_to_fp16(x), reference_fp16(x)) << std::hex << "x bits 0x" << b;
  }
}

TEST(HalfRounding, DecodingIsExactAndRoundTrips) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const uint16_t bits = uint16_t(h);
    const float bf = bf16_to_float(bits), fp = fp16_to_float(bits);
    const bool bf_nan = (h & 0x7f80) == 0x7f80 && (h & 0x7f);
    const bool fp_nan = (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
    if (bf_nan) {
      ASSERT_TRUE(std::isnan(bf)) << h;
    } else {
      // The value from the definition: sign, 8 exponent bits (bias 127), 7 mantissa bits.
      const int e = (h >> 7) & 0xff, m = h & 0x7f;
      const double magnitude = e == 0xff ? INFINITY
                               : e == 0  ? std::ldexp(double(m), -133)
                                         : std::ldexp(double(128 + m), e - 134);
      ASSERT_EQ(double(bf), (h & 0x8000) ? -magnitude : magnitude) << std::hex << h;
      ASSERT_EQ(float_to_bf16(bf), bits) << std::hex << h;
    }
    if (fp_nan) {
      ASSERT_TRUE(std::isnan(fp)) << h;
      ASSERT_EQ(std::signbit(fp), (h & 0x8000) != 0) << h;
    } else {
      if ((h & 0x7c00) == 0x7c00) {
        ASSERT_TRUE(std::isinf(fp)) << std::hex << h;
      } else {
        ASSERT_EQ(double(fp), fp16_value(bits)) << std::hex << h;
      }
      ASSERT_EQ(float_to_fp16(fp), bits) << std::hex << h;
      ASSERT_EQ(std::signbit(fp), (h & 0x8000) != 0) << h;
    }
  }
}

TEST(HalfRounding, NativeBackendRunsTheSameConversions) {
  NativeBackend native;  // about 3.4M values: the conversions run on its thread pool
  std::vector<float> x;
  for (uint32_t b : patterns()) x.push_back(as_float(b));
  const int64_t n = int64_t(x.size());
  for (Half format : {Half::kBF16, Half::kFP16}) {
    std::vector<uint16_t> h(n);
    std::vector<float> back(n);
    native.to_half(format, n, x.data(), h.data());
    native.from_half(format, n, h.data(), back.data());
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t want = format == Half::kBF16 ? float_to_bf16(x[i]) : float_to_fp16(x[i]);
      ASSERT_EQ(h[i], want) << i;
      const float value = format == Half::kBF16 ? bf16_to_float(want) : fp16_to_float(want);
      ASSERT_EQ(std::memcmp(&back[i], &value, sizeof(float)), 0) << i;
    }
  }
}

}  // namespace
}  // namespace lamina
