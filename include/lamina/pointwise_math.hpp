// The element-wise functions of Caffe's neuron layers (backend.hpp's Pointwise), written once
// for the Native backend's loops and the CUDA kernels (kPointwise): pointwise_value gives
// y = f(x), pointwise_gradient dx = dy f'(x). Each follows Caffe 1.0's formula step by step
// (its operations in its order, its special cases), in FP32 unless a comment says otherwise;
// products and sums round once each (no fused multiply-add on the device either), so where no
// library function is involved the backends give the same bits.
//
// The gradients read x only, except kExp, whose derivative is its output: where Caffe's
// backward pass reads its top (Power, Swish, ELU), the value is computed again from x, so
// that those layers' tops may be overwritten in place by a later layer.
#pragma once

#include <cmath>
#include <type_traits>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/host_device.hpp"

namespace lamina::pointwise {

// a b and a + b, each rounded once (the device would otherwise fuse them).
LAMINA_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
LAMINA_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

// scale x + shift as Caffe's Power and Log compute it: the product only when scale is not 1,
// the sum only when shift is not 0 (so -0 stays -0).
LAMINA_HOST_DEVICE inline float affine(float x, float scale, float shift) {
  if (scale != 1) x = mul_rn(scale, x);
  if (shift != 0) x = add_rn(x, shift);
  return x;
}

// powf(v, p), with p = 2, 0.5 and -1 as v v, sqrt(v) and 1 / v (their exact roundings, the
// same on every backend; pow's values at -0 and -inf kept).
LAMINA_HOST_DEVICE inline float power_of(float v, float p) {
  if (p == 1) return v;
  if (p == 2) return mul_rn(v, v);
  if (p == -1) return 1.0f / v;
  if (p == 0.5f) return v == -INFINITY ? INFINITY : sqrtf(v) + 0.0f;  // sqrt(-0) is -0
  return powf(v, p);
}

LAMINA_HOST_DEVICE inline float sigmoid(float v) { return 1.0f / (1.0f + expf(-v)); }

constexpr float kBnllLimit = 50;  // Caffe's kBNLL_THRESHOLD: exp(min(x, 50)) in the gradient

// y = f(x) for the function F with the constants of p (backend.hpp's table).
template <PointwiseFn F>
LAMINA_HOST_DEVICE inline float pointwise_value(const Pointwise& p, float x) {
  if constexpr (F == PointwiseFn::kAbsVal) {
    return fabsf(x);
  } else if constexpr (F == PointwiseFn::kBNLL) {
    // In double, as Caffe's 1. makes it: log(1 + exp(-|x|)) + max(x, 0).
    const double v = x;
    return static_cast<float>(x > 0 ? v + log(1.0 + exp(-v)) : log(1.0 + exp(v)));
  } else if constexpr (F == PointwiseFn::kPower) {
    // power a, scale b, shift c; with power or scale 0 the input is not read.
    if (mul_rn(p.a, p.b) == 0) return p.a == 0 ? 1.0f : powf(p.c, p.a);
    return power_of(affine(x, p.b, p.c), p.a);
  } else if constexpr (F == PointwiseFn::kExp) {
    return mul_rn(p.b, expf(mul_rn(p.a, x)));
  } else if constexpr (F == PointwiseFn::kLog) {
    return mul_rn(p.c, logf(affine(x, p.a, p.b)));
  } else if constexpr (F == PointwiseFn::kThreshold) {
    return x > p.a ? 1.0f : 0.0f;
  } else if constexpr (F == PointwiseFn::kClip) {
    // Caffe's max(min, min(x, max)) for numbers; a NaN stays NaN (Caffe's gives min).
    return x < p.a ? p.a : (x > p.b ? p.b : x);
  } else if constexpr (F == PointwiseFn::kSwish) {
    return mul_rn(x, sigmoid(mul_rn(p.a, x)));
  } else {
    static_assert(F == PointwiseFn::kELU);
    return x > 0 ? x : mul_rn(p.a, add_rn(expf(x), -1.0f));
  }
}

// dx = dy f'(x) for F; y (= f(x)) is read by kExp only.
template <PointwiseFn F>
LAMINA_HOST_DEVICE inline float pointwise_gradient(const Pointwise& p, float x, float y,
                                                   float dy) {
  if constexpr (F == PointwiseFn::kAbsVal) {
    return mul_rn(x > 0 ? 1.0f : (x < 0 ? -1.0f : 0.0f), dy);  // sign(0) = 0
  } else if constexpr (F == PointwiseFn::kBNLL) {
    const float e = expf(x > kBnllLimit ? kBnllLimit : x);
    return mul_rn(dy, e) / add_rn(e, 1.0f);
  } else if constexpr (F == PointwiseFn::kPower) {
    // Caffe's cases, with s = power scale: 0 where s is 0 (dy not read), s dy for power 1,
    // s (scale x + shift) dy for power 2, power (y / x) dy without shift, else
    // s (y / (scale x + shift)) dy.
    const float s = mul_rn(p.a, p.b);
    if (s == 0) return 0.0f;
    if (p.a == 1) return mul_rn(s, dy);
    if (p.a == 2) return mul_rn(dy, affine(x, mul_rn(s, p.b), mul_rn(s, p.c)));
    const float v = affine(x, p.b, p.c);
    if (p.c == 0) return mul_rn(dy, mul_rn(p.a, power_of(v, p.a) / x));
    return mul_rn(dy, mul_rn(s, power_of(v, p.a) / v));
  } else if constexpr (F == PointwiseFn::kExp) {
    return mul_rn(mul_rn(y, dy), p.a);  // d/dx b exp(a x) = a y
  } else if constexpr (F == PointwiseFn::kLog) {
    // c a / (scale x + shift); Caffe's scale / ln(base) is a c here, which may differ from it
    // in the last bit.
    return mul_rn(dy, mul_rn(1.0f / affine(x, p.a, p.b), mul_rn(p.a, p.c)));
  } else if constexpr (F == PointwiseFn::kThreshold) {
    return 0.0f;  // a step: 0 wherever it is differentiable (Caffe has no backward)
  } else if constexpr (F == PointwiseFn::kClip) {
    return mul_rn(dy, x >= p.a && x <= p.b ? 1.0f : 0.0f);  // the bounds inclusive
  } else if constexpr (F == PointwiseFn::kSwish) {
    // beta y + sigmoid(beta x) (1 - beta y)
    const float s = sigmoid(mul_rn(p.a, x)), by = mul_rn(p.a, mul_rn(x, s));
    return mul_rn(dy, add_rn(by, mul_rn(s, add_rn(1.0f, -by))));
  } else {
    static_assert(F == PointwiseFn::kELU);
    // alpha + y below 0, y = alpha (exp(x) - 1)
    return x > 0 ? dy : mul_rn(dy, add_rn(pointwise_value<F>(p, x), p.a));
  }
}

// Calls g(std::integral_constant<PointwiseFn, F>{}) for F = fn (on the host), so that each
// backend compiles its loop or kernel once per function, without a switch per element.
template <class G>
void with_function(PointwiseFn fn, G&& g) {
  using Fn = PointwiseFn;
  switch (fn) {
    case Fn::kAbsVal: return g(std::integral_constant<Fn, Fn::kAbsVal>{});
    case Fn::kBNLL: return g(std::integral_constant<Fn, Fn::kBNLL>{});
    case Fn::kPower: return g(std::integral_constant<Fn, Fn::kPower>{});
    case Fn::kExp: return g(std::integral_constant<Fn, Fn::kExp>{});
    case Fn::kLog: return g(std::integral_constant<Fn, Fn::kLog>{});
    case Fn::kThreshold: return g(std::integral_constant<Fn, Fn::kThreshold>{});
    case Fn::kClip: return g(std::integral_constant<Fn, Fn::kClip>{});
    case Fn::kSwish: return g(std::integral_constant<Fn, Fn::kSwish>{});
    case Fn::kELU: return g(std::integral_constant<Fn, Fn::kELU>{});
  }
  fail("pointwise: unknown function ", static_cast<int>(fn));
}

}  // namespace lamina::pointwise
