// Caffe's pooling methods as Pooling and SPP run them in FP32: MAX and AVE (pool_forward,
// pool_backward), and STOCHASTIC (Zeiler and Fergus), which depends on the phase:
//   TRAIN  each window takes one of its elements, x_j with probability x_j / sum x (for
//          non-negative x), drawn from the layer's PassRandom (stochastic_pool_forward); the
//          choice is recorded in a mask like max's, and max's backward routes dy to it.
//   TEST   each window gives sum x^2 / sum x, 0 where sum x = 0 (stochastic_pool_test), and
//          its backward is that function's gradient (stochastic_pool_test_backward). Caffe
//          has no such gradient: its TEST backward reuses the last TRAIN pass's choices.
// Caffe's stochastic kernels place their windows as if the pad were 0 (window o starts at
// o stride), and its Pooling refuses a pad with STOCHASTIC ("Padding implemented only for
// average and max pooling"); so do Pooling and SPP here, and the windows are PoolGeometry's.
#pragma once

#include <cstddef>
#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/lamina.pb.h"
#include "pass_random.hpp"

namespace lamina {

enum class PoolKind { kMax, kAverage, kSampled, kWeighted };

// What pooling_param or spp_param (Message) asks for in `phase`.
template <class Message>
PoolKind pool_kind(const Message& p, Phase phase) {
  if (p.pool() == Message::MAX) return PoolKind::kMax;
  if (p.pool() == Message::AVE) return PoolKind::kAverage;
  return phase == TRAIN ? PoolKind::kSampled : PoolKind::kWeighted;
}

// Whether the forward pass records a mask (N, C, OH, OW) of chosen indices for the backward.
inline bool uses_mask(PoolKind kind) {
  return kind == PoolKind::kMax || kind == PoolKind::kSampled;
}

// Where a sampled pooling draws: numbers first .. first + its outputs - 1 of each pass of
// `random`, with the random's counter k.
struct PoolDraws {
  const PassRandom* random = nullptr;
  size_t counter = 0;
  uint64_t first = 0;
};

// y (N, C, OH, OW) from x (N, C, H, W); mask as uses_mask says (else unused).
inline void pool_forward(Backend& backend, PoolKind kind, const PoolGeometry& g,
                         const PoolDraws& draws, const float* x, float* y, int32_t* mask) {
  switch (kind) {
    case PoolKind::kMax: return backend.pool_forward(PoolMethod::kMax, g, x, y, mask);
    case PoolKind::kAverage: return backend.pool_forward(PoolMethod::kAverage, g, x, y, mask);
    case PoolKind::kSampled: {
      const PassRandom& r = *draws.random;
      return backend.stochastic_pool_forward(g, r.seed(), r.offset() + draws.first,
                                             r.per_pass(), r.counter(draws.counter), x, y,
                                             mask);
    }
    case PoolKind::kWeighted: return backend.stochastic_pool_test(g, x, y);
  }
}

// dx (N, C, H, W), written with =, from dy (N, C, OH, OW), the forward's mask and x.
inline void pool_backward(Backend& backend, PoolKind kind, const PoolGeometry& g,
                          const float* x, const float* dy, const int32_t* mask, float* dx) {
  switch (kind) {
    case PoolKind::kAverage: return backend.pool_backward(PoolMethod::kAverage, g, dy, mask, dx);
    case PoolKind::kWeighted: return backend.stochastic_pool_test_backward(g, x, dy, dx);
    case PoolKind::kMax:
    case PoolKind::kSampled: return backend.pool_backward(PoolMethod::kMax, g, dy, mask, dx);
  }
}

}  // namespace lamina
