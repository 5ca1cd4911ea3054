// The fused solver update: one launch per call, one pass over the whole parameter arena.
//
// weights, grads, history, history2 (layout.n) are the arenas; the layout's segment and block
// tables and the step state (lr, Adam's bias correction, the gradient scale) live in device
// memory and are read by the kernel, so its arguments are the same every iteration and a
// step uploads nothing; the rule's constants (momentum, ...) travel as kernel arguments.
// advance_step is a one-thread kernel that runs step_state.hpp's advance_step_values there.
// One thread per element (grid-stride
// loop): element i finds its segment through block_segment[i / kArenaBlock] (a warp's 32
// elements share one block, so the lookups are broadcasts), and elements past the segment's
// end (padding) are left as they are. The cost does not grow with the number of parameters.
// The formulas are backend.hpp's, written in the same order as the Native backend's so
// results agree to float rounding.
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
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

// At most 32 registers, so that an SM holds its full 2048 threads: the update is memory-bound
// and needs every load in flight (Adam at 33 registers ran at 75% occupancy, 14% slower).
template <UpdateRule kRule>
__global__ void __launch_bounds__(kBlock, 2048 / kBlock) update_kernel(UpdateConstants a, const StepState* __restrict__ step, int64_t n,
                              const ParamSegment* __restrict__ segments,
                              const int32_t* __restrict__ block_segment, float* w,
                              const float* g, float* h, float* h2) {
  const float step_lr = step->lr, grad_scale = step->grad_scale, correction = step->correction;
  LAMINA_GRID_STRIDE_LOOP(i, n) {
    const int32_t s = block_segment[i / kArenaBlock];
    if (s < 0) continue;  // a block of padding only
    const ParamSegment seg = segments[s];
    if (i >= seg.offset + seg.count) continue;  // the padding after the segment's last element
    const float lr = step_lr * seg.lr_mult;
    const float decay = a.weight_decay * seg.decay_mult;
    const float wi = w[i];
    float gi;
    if constexpr (kRule == UpdateRule::kAdamW) {
      gi = grad_scale * g[i];
    } else {
      // g' = grad_scale g + decay reg(w), reg(w) = w (L2) or sign(w) (L1, sign(0) = 0)
      const float reg = a.l1 ? static_cast<float>((wi > 0) - (wi < 0)) : wi;
      gi = grad_scale * g[i] + decay * reg;
    }
    if constexpr (kRule == UpdateRule::kSGD) {
      const float hi = a.momentum * h[i] + lr * gi;
      h[i] = hi;
      w[i] = wi - hi;
    } else if constexpr (kRule == UpdateRule::kNesterov) {
      const float h_old = h[i];
      const float hi = a.momentum * h_old + lr * gi;
      h[i] = hi;
      w[i] = wi - ((1.0f + a.momentum) * hi - a.momentum * h_old);
    } else if constexpr (kRule == UpdateRule::kAdam) {
      const float m = a.momentum * h[i] + (1.0f - a.momentum) * gi;
      const float v = a.momentum2 * h2[i] + (1.0f - a.momentum2) * gi * gi;
      h[i] = m;
      h2[i] = v;
      w[i] = wi - lr * correction * m / (sqrtf(v) + a.delta);
    } else if constexpr (kRule == UpdateRule::kAdamW) {
      const float m = a.momentum * h[i] + (1.0f - a.momentum) * gi;
      const float v = a.momentum2 * h2[i] + (1.0f - a.momentum2) * gi * gi;
      h[i] = m;
      h2[i] = v;
      w[i] = wi - lr * (correction * m / (sqrtf(v) + a.delta) + decay * wi);
    } else if constexpr (kRule == UpdateRule::kRMSProp) {
      const float hi = a.momentum2 * h[i] + (1.0f - a.momentum2) * gi * gi;
      h[i] = hi;
      w[i] = wi - lr * gi / (sqrtf(hi) + a.delta);
    } else {  // kAdaGrad
      const float hi = h[i] + gi * gi;
      h[i] = hi;
      w[i] = wi - lr * gi / (sqrtf(hi) + a.delta);
    }
  }
}

template <UpdateRule kRule>
void launch_update(cudaStream_t stream, const UpdateConstants& constants, const StepState* step,
                   const UpdateLayout& layout, float* w, const float* g, float* h, float* h2) {
  update_kernel<kRule><<<elementwise_grid(layout.n), kBlock, 0, stream>>>(
      constants, step, layout.n, layout.segments, layout.block_segment, w, g, h, h2);
  LAMINA_CUDA_LAUNCHED(update_kernel);
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
  const bool adam = args.rule == UpdateRule::kAdam || args.rule == UpdateRule::kAdamW;
  LAMINA_REQUIRE(!adam || history2 != nullptr, "CudaBackend::update: Adam and AdamW need ",
                 "history2 (the second-moment arena)");
  const UpdateConstants constants{args.momentum, args.momentum2, args.delta, args.weight_decay,
                                  args.regularization == Regularization::kL1};
  void (*launch)(cudaStream_t, const UpdateConstants&, const StepState*, const UpdateLayout&,
                 float*, const float*, float*, float*) = nullptr;
  switch (args.rule) {
    case UpdateRule::kSGD: launch = launch_update<UpdateRule::kSGD>; break;
    case UpdateRule::kNesterov: launch = launch_update<UpdateRule::kNesterov>; break;
    case UpdateRule::kAdam: launch = launch_update<UpdateRule::kAdam>; break;
    case UpdateRule::kAdamW: launch = launch_update<UpdateRule::kAdamW>; break;
    case UpdateRule::kRMSProp: launch = launch_update<UpdateRule::kRMSProp>; break;
    case UpdateRule::kAdaGrad: launch = launch_update<UpdateRule::kAdaGrad>; break;
  }
  launch(s, constants, step, layout, weights, grads, history, history2);
}

void CudaBackend::advance_step(const StepSchedule& schedule, StepState* state) {
  advance_step_kernel<<<1, 1, 0, on_device()>>>(schedule, state);
  LAMINA_CUDA_LAUNCHED(advance_step_kernel);
}

}  // namespace lamina::cuda_detail
