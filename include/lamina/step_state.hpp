// The solver's per-iteration values, kept in backend memory and advanced there, so that a
// training step is the same sequence of operations with the same arguments every iteration
// (and can be captured and replayed as one CUDA graph).
//
//   StepState     in backend memory: the iteration, and the learning rate, Adam's bias
//                 correction and the gradient scale (1/iter_size times the clipping factor,
//                 over the loss scale) the next update uses; grad_sumsq is where the
//                 clipping norm is summed; FP16's dynamic loss scale and its counters.
//   StepSchedule  the constants that advance it: the learning-rate schedule, iter_size, the
//                 clipping threshold, Adam's betas, loss scaling's growth interval, and
//                 where the iteration's loss is kept (the loss ring and running sum).
//                 Passed by value; it never changes.
//
// advance_step_values is the one implementation of an advance: the Native backend calls it
// on the host, the CUDA backend in a one-thread kernel, and lr_policy.cpp's learning_rate
// evaluates the same schedule_rate for display and tests.
#pragma once

#include <cmath>
#include <cstdint>

#include "lamina/host_device.hpp"
#include "lamina/rounding.hpp"

namespace lamina {

enum class LrPolicy { kFixed, kStep, kMultistep, kExp, kInv, kPoly, kSigmoid, kCosine };

// A learning-rate policy and its fields (lr_policy.hpp says what each policy computes).
// stepvalues points to num_stepvalues ascending iterations, in the memory of whoever evaluates
// the schedule (host memory for the host, backend memory for a backend).
struct LrSchedule {
  LrPolicy policy = LrPolicy::kFixed;
  double base_lr = 0, gamma = 0, power = 0, stepsize = 1, max_iter = 1;
  int num_stepvalues = 0;
  const int32_t* stepvalues = nullptr;
};

// The rate at iteration iter (0 is the first), in double.
LAMINA_HOST_DEVICE inline double schedule_rate(const LrSchedule& s, int64_t iter) {
  const double it = double(iter);
  switch (s.policy) {
    case LrPolicy::kFixed: return s.base_lr;
    case LrPolicy::kStep: return s.base_lr * ::pow(s.gamma, ::floor(it / s.stepsize));
    case LrPolicy::kMultistep: {
      int passed = 0;
      while (passed < s.num_stepvalues && iter >= s.stepvalues[passed]) ++passed;
      return s.base_lr * ::pow(s.gamma, double(passed));
    }
    case LrPolicy::kExp: return s.base_lr * ::pow(s.gamma, it);
    case LrPolicy::kInv: return s.base_lr * ::pow(1.0 + s.gamma * it, -s.power);
    case LrPolicy::kPoly:
      return s.base_lr * ::pow(1.0 - (it < s.max_iter ? it / s.max_iter : 1.0), s.power);
    case LrPolicy::kSigmoid: return s.base_lr / (1.0 + ::exp(-s.gamma * (it - s.stepsize)));
    case LrPolicy::kCosine:
      return s.base_lr * 0.5 *
             (1.0 + ::cos(3.14159265358979323846 * (it < s.max_iter ? it / s.max_iter : 1.0)));
  }
  return s.base_lr;
}

// Adam's bias correction sqrt(1 - b2^t) / (1 - b1^t) for update t (1-based), in double.
LAMINA_HOST_DEVICE inline float adam_correction(float b1, float b2, int64_t t) {
  return static_cast<float>(::sqrt(1.0 - ::pow(double(b2), double(t))) /
                            (1.0 - ::pow(double(b1), double(t))));
}

struct StepState {
  int64_t iter = 0;        // the iteration whose update comes next (0-based)
  float lr = 0;            // the schedule's rate at iter (before lr_mult)
  float correction = 0;    // Adam's bias correction for the next update; 0 for other rules
  float grad_scale = 1;    // 1/iter_size times the clipping factor, over loss_scale
  float grad_sumsq = 0;    // the gradients' sum of squares, when clipping or loss scaling
  // Dynamic loss scaling (FP16; docs/precision.md). The backward pass starts from the loss
  // gradient times loss_scale. An iteration whose scaled gradients are not finite (their
  // sum of squares is not) is skipped: skip is set, the update changes nothing, the scale
  // halves. After growth_interval finite iterations in a row it doubles.
  float loss_scale = 1;
  int32_t good_steps = 0;  // finite iterations since the scale last changed
  int32_t skip = 0;        // the next update is skipped: 1, or 2 when it ran at the smallest scale
  int64_t skipped = 0;     // iterations skipped so far
};

struct StepSchedule {
  LrSchedule lr;
  // The loss bookkeeping, in the evaluator's memory (loss null: none): the iteration's loss
  // goes to ring[iter % ring_len] and is added to *loss_sum.
  const float* loss = nullptr;
  float* ring = nullptr;
  int64_t ring_len = 1;
  float* loss_sum = nullptr;
  float iter_scale = 1;    // 1 / iter_size
  float clip = 0;          // clip_gradients; <= 0: no clipping (grad_sumsq is not read)
  bool adam = false;       // compute the bias correction from beta1 and beta2
  float beta1 = 0, beta2 = 0;
  // Dynamic loss scaling: > 0 turns it on (grad_sumsq is read), with the scale doubled
  // after this many finite iterations in a row.
  int32_t growth_interval = 0;
};

// Whether x is neither infinite nor NaN (its exponent bits are not all ones), alike on the
// host and in kernels.
LAMINA_HOST_DEVICE inline bool is_finite_value(float x) {
  return (float_bits(x) & 0x7f800000u) != 0x7f800000u;
}

// The smallest loss scale, 2^-24: halving stops there (the update's 1/scale stays finite).
// An iteration skipped that ran at this scale (skip 2) has gradients that are not finite at
// any scale: the solver reports it as a divergence (Solver::check_loss_scale).
constexpr float kSmallestLossScale = 1.0f / (1 << 24);

// The advance of the loss scale after an iteration: halved (and the iteration skipped) when
// its gradients are not finite, down to kSmallestLossScale; doubled after growth_interval
// finite ones in a row, unless that would overflow.
LAMINA_HOST_DEVICE inline void advance_loss_scale(int32_t growth_interval, bool finite,
                                                  StepState& state) {
  state.skip = finite ? 0 : (state.loss_scale <= kSmallestLossScale ? 2 : 1);
  if (!finite) {
    state.loss_scale = state.loss_scale * 0.5f < kSmallestLossScale ? kSmallestLossScale
                                                                    : state.loss_scale * 0.5f;
    state.good_steps = 0;
    state.skipped += 1;
    return;
  }
  if (++state.good_steps < growth_interval) return;
  state.good_steps = 0;
  if (is_finite_value(state.loss_scale * 2.0f)) state.loss_scale *= 2.0f;
}

// Records the iteration's loss, sets the values of the update for state.iter, then advances
// state.iter by one.
LAMINA_HOST_DEVICE inline void advance_step_values(const StepSchedule& s, StepState& state) {
  if (s.loss != nullptr) {
    const float loss = *s.loss;
    s.ring[state.iter % s.ring_len] = loss;
    *s.loss_sum += loss;
  }
  state.lr = static_cast<float>(schedule_rate(s.lr, state.iter));
  // Adam counts the updates made: skipped iterations are not (t = iter + 1 - skipped).
  state.correction =
      s.adam ? adam_correction(s.beta1, s.beta2, state.iter + 1 - state.skipped) : 0.0f;
  const bool scaling = s.growth_interval > 0;
  // The gradients are of the loss times loss_scale: the update divides it out.
  float scale = scaling ? s.iter_scale / state.loss_scale : s.iter_scale;
  if (s.clip > 0) {
    // The global L2 norm of the averaged gradient; above clip, the gradient is scaled to it.
    const float norm = ::sqrtf(state.grad_sumsq) * scale;
    if (norm > s.clip) scale *= s.clip / norm;
  }
  state.grad_scale = scale;
  if (scaling) advance_loss_scale(s.growth_interval, is_finite_value(state.grad_sumsq), state);
  state.iter += 1;
}

}  // namespace lamina
