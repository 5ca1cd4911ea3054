// The fused solver update: one launch per call, one pass over the parameter arena (or the
// part of it the layout names: elements layout.first to layout.first + layout.n).
//
// weights, grads, history, history2 are the arenas; the layout's segment and block
// tables and the step state (lr, Adam's bias correction, the gradient scale, whether loss
// scaling skips this update) live in device memory and are read by the kernel, so its
// arguments are the same every iteration and a step uploads nothing; the rule's constants
// (momentum, ...) travel as kernel arguments. With UpdateArgs::half_copy the kernel also
// writes the weights' 16-bit copy from the weights it has in registers (2 bytes more per
// float instead of a pass that reads the weights again).
// advance_step is a one-thread kernel that runs step_state.hpp's advance_step_values there.
// A grid-stride loop over groups of four floats for SGD and Nesterov (float4 loads and
// stores), one float per thread for the other rules and for arrays not 16-byte aligned: a
// group starting at element `first` finds its segment through block_segment[first /
// kArenaBlock] (a warp's groups share at most two blocks, so the lookups are broadcasts),
// and elements past the segment's end (padding) keep their values. The cost
// does not grow with the number of parameters. The formulas are backend.hpp's, written in
// the same order as the Native backend's so results agree to float rounding.
#include <glog/logging.h>

#include <cstdint>
#include <type_traits>

#include "backends/cuda/alignment.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/half_storage.cuh"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

// UpdateArgs as the kernel needs it.
struct UpdateConstants {
  float momentum;
  float momentum2;
  float delta;
  float weight_decay;
  bool l1;
};

// One element's update (backend.hpp's formulas, in the Native backend's order, so results
// agree to float rounding): w, h, h2 updated in place from the gradient g.
template <UpdateRule kRule>
__device__ __forceinline__ void update_element(const UpdateConstants& a, float lr, float decay,
                                               float grad_scale, float correction, float& w,
                                               float g, float& h, float& h2) {
  const float wi = w;
  float gi;
  if constexpr (kRule == UpdateRule::kAdamW) {
    gi = grad_scale * g;
  } else {
    // g' = grad_scale g + decay reg(w), reg(w) = w (L2) or sign(w) (L1, sign(0) = 0)
    const float reg = a.l1 ? static_cast<float>((wi > 0) - (wi < 0)) : wi;
    gi = grad_scale * g + decay * reg;
  }
  if constexpr (kRule == UpdateRule::kSGD) {
    h = a.momentum * h + lr * gi;
    w = wi - h;
  } else if constexpr (kRule == UpdateRule::kNesterov) {
    const float h_old = h;
    h = a.momentum * h_old + lr * gi;
    w = wi - ((1.0f + a.momentum) * h - a.momentum * h_old);
  } else if constexpr (kRule == UpdateRule::kAdam) {
    h = a.momentum * h + (1.0f - a.momentum) * gi;
    h2 = a.momentum2 * h2 + (1.0f - a.momentum2) * gi * gi;
    w = wi - lr * correction * h / (sqrtf(h2) + a.delta);
  } else if constexpr (kRule == UpdateRule::kAdamW) {
    h = a.momentum * h + (1.0f - a.momentum) * gi;
    h2 = a.momentum2 * h2 + (1.0f - a.momentum2) * gi * gi;
    w = wi - lr * (correction * h / (sqrtf(h2) + a.delta) + decay * wi);
  } else if constexpr (kRule == UpdateRule::kRMSProp) {
    h = a.momentum2 * h + (1.0f - a.momentum2) * gi * gi;
    w = wi - lr * gi / (sqrtf(h) + a.delta);
  } else if constexpr (kRule == UpdateRule::kAdaGrad) {
    h = h + gi * gi;
    w = wi - lr * gi / (sqrtf(h) + a.delta);
  } else {  // kAdaDelta: h the squared gradients' average, h2 the squared steps'
    h = a.momentum * h + (1.0f - a.momentum) * gi * gi;
    const float step = gi * sqrtf((h2 + a.delta) / (h + a.delta));
    h2 = a.momentum * h2 + (1.0f - a.momentum) * step * step;
    w = wi - lr * step;
  }
}

// kWidth consecutive floats as one load or store (kWidth 4: float4, 16-byte aligned).
template <int kWidth> struct Vector;
template <> struct Vector<1> { using Type = float; };
template <> struct Vector<4> { using Type = float4; };

template <int kWidth>
__device__ __forceinline__ void load(const float* p, int64_t v, float (&out)[kWidth]) {
  using Type = typename Vector<kWidth>::Type;
  const Type t = reinterpret_cast<const Type*>(p)[v];
  const float* f = reinterpret_cast<const float*>(&t);
#pragma unroll
  for (int j = 0; j < kWidth; ++j) out[j] = f[j];
}

template <int kWidth>
__device__ __forceinline__ void store(float* p, int64_t v, const float (&in)[kWidth]) {
  typename Vector<kWidth>::Type t;
  float* f = reinterpret_cast<float*>(&t);
#pragma unroll
  for (int j = 0; j < kWidth; ++j) f[j] = in[j];
  reinterpret_cast<typename Vector<kWidth>::Type*>(p)[v] = t;
}

// Each thread updates kWidth consecutive floats at a time, which lie in one kArenaBlock (64
// is a multiple of the width): one segment lookup for all of them. Elements past the
// segment's end (padding) are stored back as they were loaded. At most 32 registers, so
// that an SM holds its full 2048 threads: the update is memory-bound and needs every load in
// flight (Adam at 33 registers ran at 75% occupancy, 14% slower).
// Copy is NoCopy, or the storage (half_storage.cuh) of the weights' 16-bit copy, which is
// written from the updated weights (padding included, unchanged).
struct NoCopy {};

template <class Copy, int kWidth>
__device__ __forceinline__ void store_copy(uint16_t* copy, int64_t v, const float (&w)[kWidth]) {
  if constexpr (kWidth == 4) {
    ushort4 t;
    t.x = Copy::store(w[0]);
    t.y = Copy::store(w[1]);
    t.z = Copy::store(w[2]);
    t.w = Copy::store(w[3]);
    reinterpret_cast<ushort4*>(copy)[v] = t;
  } else {
    copy[v] = Copy::store(w[0]);
  }
}

template <UpdateRule kRule, int kWidth, class Copy>
__global__ void __launch_bounds__(kBlock, 2048 / kBlock)
    update_kernel(UpdateConstants a, const StepState* __restrict__ step, int64_t begin,
                  int64_t n, const ParamSegment* __restrict__ segments,
                  const int32_t* __restrict__ block_segment, float* w, const float* g, float* h,
                  float* h2, uint16_t* copy) {
  constexpr bool kTwoHistories = kRule == UpdateRule::kAdam || kRule == UpdateRule::kAdamW ||
                                 kRule == UpdateRule::kAdaDelta;
  if (step->skip) return;  // loss scaling found the gradients not finite: nothing changes
  const float step_lr = step->lr, grad_scale = step->grad_scale, correction = step->correction;
  LAMINA_GRID_STRIDE_LOOP(i, n / kWidth) {
    const int64_t first = begin + i * kWidth;  // in the arena
    const int64_t v = first / kWidth;          // begin is a multiple of kArenaBlock
    const int32_t s = block_segment[first / kArenaBlock];
    if (s < 0) continue;  // a block of padding only
    const ParamSegment seg = segments[s];
    const int64_t end = seg.offset + seg.count;
    if (first >= end) continue;  // the padding after the segment's last element
    const float lr = step_lr * seg.lr_mult;
    const float decay = a.weight_decay * seg.decay_mult;
    float wv[kWidth], gv[kWidth], hv[kWidth], h2v[kWidth];
    load<kWidth>(w, v, wv);
    load<kWidth>(g, v, gv);
    load<kWidth>(h, v, hv);
    if constexpr (kTwoHistories) load<kWidth>(h2, v, h2v);
#pragma unroll
    for (int j = 0; j < kWidth; ++j) {
      if (first + j < end)
        update_element<kRule>(a, lr, decay, grad_scale, correction, wv[j], gv[j], hv[j], h2v[j]);
    }
    store<kWidth>(w, v, wv);
    if constexpr (!std::is_same_v<Copy, NoCopy>) store_copy<Copy, kWidth>(copy, v, wv);
    store<kWidth>(h, v, hv);
    if constexpr (kTwoHistories) store<kWidth>(h2, v, h2v);
  }
}

template <UpdateRule kRule, class Copy>
void launch_update(cudaStream_t stream, const UpdateConstants& constants, const StepState* step,
                   const UpdateLayout& layout, float* w, const float* g, float* h, float* h2,
                   uint16_t* copy) {
  // float4 loads where the arrays allow them (the arena always does), for SGD and Nesterov
  // only, whose kernels then stay within their 32 registers: the others (Adam's two moments,
  // the square roots) spill at width 4 and ran 2% slower than one float per thread (Adam on
  // an H200: 0.227 against 0.222 ms for 25.6M floats), so they have no four-float kernel.
  if constexpr (kRule == UpdateRule::kSGD || kRule == UpdateRule::kNesterov) {
    if (layout.n % 4 == 0 && alignment_of({w, g, h}) >= 16 && alignment_of({copy}) >= 8) {
      update_kernel<kRule, 4, Copy><<<elementwise_grid(layout.n / 4), kBlock, 0, stream>>>(
          constants, step, layout.first, layout.n, layout.segments, layout.block_segment, w, g,
          h, h2, copy);
      LAMINA_CUDA_LAUNCHED(update_kernel);
      return;
    }
  }
  update_kernel<kRule, 1, Copy><<<elementwise_grid(layout.n), kBlock, 0, stream>>>(
      constants, step, layout.first, layout.n, layout.segments, layout.block_segment, w, g,
      h, h2, copy);
  LAMINA_CUDA_LAUNCHED(update_kernel);
}

// Calls f(std::integral_constant<UpdateRule, rule>{}): the rule as a template argument.
template <class F>
void with_rule(UpdateRule rule, F&& f) {
  using R = UpdateRule;
  switch (rule) {
    case R::kSGD: return f(std::integral_constant<R, R::kSGD>{});
    case R::kNesterov: return f(std::integral_constant<R, R::kNesterov>{});
    case R::kAdam: return f(std::integral_constant<R, R::kAdam>{});
    case R::kAdamW: return f(std::integral_constant<R, R::kAdamW>{});
    case R::kRMSProp: return f(std::integral_constant<R, R::kRMSProp>{});
    case R::kAdaGrad: return f(std::integral_constant<R, R::kAdaGrad>{});
    case R::kAdaDelta: return f(std::integral_constant<R, R::kAdaDelta>{});
  }
  LOG(FATAL) << "update rule " << static_cast<int>(rule) << " has no kernel";
}

__global__ void advance_step_kernel(StepSchedule schedule, StepState* state) {
  advance_step_values(schedule, *state);
}

}  // namespace

void CudaBackend::update(const UpdateArgs& args, const StepState* step,
                         const UpdateLayout& layout, float* weights, const float* grads,
                         float* history, float* history2) {
  const cudaStream_t s = on_device();
  if (layout.n <= 0 || layout.num_segments <= 0) return;
  LAMINA_REQUIRE(layout.n % kArenaBlock == 0 && layout.first % kArenaBlock == 0,
                 "CudaBackend::update: an update of ", layout.n, " floats from ", layout.first,
                 " is not on ", kArenaBlock, "-float blocks of the arena");
  const bool two_arrays = args.rule == UpdateRule::kAdam || args.rule == UpdateRule::kAdamW ||
                          args.rule == UpdateRule::kAdaDelta;
  LAMINA_REQUIRE(!two_arrays || history2 != nullptr, "CudaBackend::update: Adam, AdamW and ",
                 "AdaDelta need history2 (the optimizer's second state array)");
  const UpdateConstants constants{args.momentum, args.momentum2, args.delta, args.weight_decay,
                                  args.regularization == Regularization::kL1};
  with_rule(args.rule, [&](auto rule) {
    constexpr UpdateRule kRule = decltype(rule)::value;
    if (args.half_copy == nullptr) {
      launch_update<kRule, NoCopy>(s, constants, step, layout, weights, grads, history,
                                   history2, nullptr);
    } else {
      with_half_storage(args.half_format, [&](auto copy) {
        launch_update<kRule, decltype(copy)>(s, constants, step, layout, weights, grads,
                                             history, history2, args.half_copy);
      });
    }
  });
}

void CudaBackend::advance_step(const StepSchedule& schedule, StepState* state) {
  advance_step_kernel<<<1, 1, 0, on_device()>>>(schedule, state);
  LAMINA_CUDA_LAUNCHED(advance_step_kernel);
}

}  // namespace lamina::cuda_detail
