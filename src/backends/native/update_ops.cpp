// NativeBackend::update: the fused update rules in one pass over the arena (or the part of it
// the layout names), split into equal ranges over the thread pool; the block table
// (backend.hpp's UpdateLayout) says which parameter's lr_mult and decay_mult each 64-float
// block takes. The arithmetic is backend.hpp's, in the CUDA kernel's order. Built with
// -fno-math-errno so that sqrtf vectorises. The weights' 16-bit copy, when given, is
// rounded from each run of updated weights while they are in cache.
#include <glog/logging.h>

#include <algorithm>
#include <cmath>

#include "half_rounding.hpp"
#include "lamina/native_backend.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

using native::parallel_ranges;
using native::round_to_half;

// The scalars of one update call, Adam's bias correction included.
struct UpdateScalars {
  float lr, momentum, momentum2, delta, weight_decay, grad_scale;
  float correction;  // sqrt(1 - b2^t) / (1 - b1^t), from the step state
  Regularization reg;
};

// g' = grad_scale * g + decay * reg(w), reg(w) = w (L2) or sign(w) (L1, sign(0) = 0).
inline float regularized_grad(float grad_scale, float g, float decay, Regularization reg,
                              float w) {
  const float r = reg == Regularization::kL2 ? w : static_cast<float>((w > 0) - (w < 0));
  return grad_scale * g + decay * r;
}

// The rule's step for elements [begin, end) of one segment, whose lr_mult and decay_mult
// give lr and decay. The arithmetic is backend.hpp's, in the CUDA kernel's order.
template <UpdateRule kRule>
void update_run(const UpdateScalars& a, float lr, float decay, int64_t begin, int64_t end,
                float* w, const float* g, float* h, float* h2) {
  const float momentum = a.momentum, momentum2 = a.momentum2, delta = a.delta;
  const float grad_scale = a.grad_scale, correction = a.correction;
  const Regularization reg = a.reg;
#pragma GCC ivdep
  for (int64_t i = begin; i < end; ++i) {
    if constexpr (kRule == UpdateRule::kSGD) {
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      h[i] = momentum * h[i] + lr * gi;
      w[i] -= h[i];
    } else if constexpr (kRule == UpdateRule::kNesterov) {
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      const float h_old = h[i];
      h[i] = momentum * h[i] + lr * gi;
      w[i] -= (1.0f + momentum) * h[i] - momentum * h_old;
    } else if constexpr (kRule == UpdateRule::kAdam) {
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      h[i] = momentum * h[i] + (1.0f - momentum) * gi;
      h2[i] = momentum2 * h2[i] + (1.0f - momentum2) * gi * gi;
      w[i] -= lr * correction * h[i] / (std::sqrt(h2[i]) + delta);
    } else if constexpr (kRule == UpdateRule::kAdamW) {
      const float gi = grad_scale * g[i];
      h[i] = momentum * h[i] + (1.0f - momentum) * gi;
      h2[i] = momentum2 * h2[i] + (1.0f - momentum2) * gi * gi;
      w[i] -= lr * (correction * h[i] / (std::sqrt(h2[i]) + delta) + decay * w[i]);
    } else if constexpr (kRule == UpdateRule::kRMSProp) {
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      h[i] = momentum2 * h[i] + (1.0f - momentum2) * gi * gi;
      w[i] -= lr * gi / (std::sqrt(h[i]) + delta);
    } else if constexpr (kRule == UpdateRule::kAdaGrad) {
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      h[i] += gi * gi;
      w[i] -= lr * gi / (std::sqrt(h[i]) + delta);
    } else {  // kAdaDelta: h the squared gradients' average, h2 the squared steps'
      const float gi = regularized_grad(grad_scale, g[i], decay, reg, w[i]);
      h[i] = momentum * h[i] + (1.0f - momentum) * gi * gi;
      const float step = gi * std::sqrt((h2[i] + delta) / (h[i] + delta));
      h2[i] = momentum * h2[i] + (1.0f - momentum) * step * step;
      w[i] -= lr * step;
    }
  }
}

// Elements [begin, end) of the arena, any range: each run of one segment's elements is found
// through the block table, and the padding after a segment's last element is skipped.
// With copy (UpdateArgs::half_copy), the weights it changed are rounded into it.
template <UpdateRule kRule>
void update_range(const UpdateScalars& a, const UpdateLayout& layout, int64_t begin,
                  int64_t end, float* w, const float* g, float* h, float* h2, uint16_t* copy,
                  Half format) {
  for (int64_t i = begin; i < end;) {
    const int64_t block_end = (i / kArenaBlock + 1) * kArenaBlock;
    const int32_t s = layout.block_segment[i / kArenaBlock];
    if (s < 0) {
      i = block_end;
      continue;
    }
    const ParamSegment& seg = layout.segments[s];
    const int64_t stop = std::min(seg.offset + seg.count, end);
    if (i < stop) {
      update_run<kRule>(a, a.lr * seg.lr_mult, a.weight_decay * seg.decay_mult, i, stop, w, g,
                        h, h2);
      if (copy) round_to_half(format, w + i, stop - i, copy + i);
    }
    // On to the block after the segment's last (every segment starts on a block boundary).
    i = std::max(block_end, (stop + kArenaBlock - 1) / kArenaBlock * kArenaBlock);
  }
}

// One dispatch for the layout's elements, split into equal ranges over the thread pool.
template <UpdateRule kRule>
void update_arena(const UpdateScalars& a, const UpdateLayout& layout, float* w, const float* g,
                  float* h, float* h2, uint16_t* copy, Half format) {
  parallel_ranges(layout.n, [&](int64_t begin, int64_t end) {
    update_range<kRule>(a, layout, layout.first + begin, layout.first + end, w, g, h, h2, copy,
                        format);
  });
}

}  // namespace

// weights, grads, history, history2: the arena's arrays, of which the elements layout.first
// to layout.first + layout.n change; step and the layout's tables in host memory.
void NativeBackend::update(const UpdateArgs& args, const StepState* step,
                           const UpdateLayout& layout, float* weights, const float* grads,
                           float* history, float* history2) {
  const bool two_arrays = args.rule == UpdateRule::kAdam || args.rule == UpdateRule::kAdamW ||
                          args.rule == UpdateRule::kAdaDelta;
  CHECK(!two_arrays || history2 != nullptr) << "Adam/AdamW/AdaDelta need history2";
  CHECK(layout.n % kArenaBlock == 0 && layout.first % kArenaBlock == 0)
      << "an update of " << layout.n << " floats from " << layout.first;
  if (step->skip) return;  // loss scaling found the gradients not finite: nothing changes
  const UpdateScalars a{step->lr,         args.momentum,    args.momentum2,
                        args.delta,       args.weight_decay, step->grad_scale,
                        step->correction, args.regularization};
  void (*arena)(const UpdateScalars&, const UpdateLayout&, float*, const float*, float*,
                float*, uint16_t*, Half) = nullptr;
  switch (args.rule) {
    case UpdateRule::kSGD: arena = update_arena<UpdateRule::kSGD>; break;
    case UpdateRule::kNesterov: arena = update_arena<UpdateRule::kNesterov>; break;
    case UpdateRule::kAdam: arena = update_arena<UpdateRule::kAdam>; break;
    case UpdateRule::kAdamW: arena = update_arena<UpdateRule::kAdamW>; break;
    case UpdateRule::kRMSProp: arena = update_arena<UpdateRule::kRMSProp>; break;
    case UpdateRule::kAdaGrad: arena = update_arena<UpdateRule::kAdaGrad>; break;
    case UpdateRule::kAdaDelta: arena = update_arena<UpdateRule::kAdaDelta>; break;
  }
  arena(a, layout, weights, grads, history, history2, args.half_copy, args.half_format);
}

void NativeBackend::advance_step(const StepSchedule& schedule, StepState* state) {
  advance_step_values(schedule, *state);
}

}  // namespace lamina
