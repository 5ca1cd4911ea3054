// The fused solver update: one launch per call over the whole parameter arena.
//
// weights, grads, history, history2 (n) are the arenas; segments (num_segments) lives in
// device memory and is read by the kernel, so a step uploads nothing: the scalars (lr,
// momentum, ...) travel as kernel arguments. Every thread walks every segment with a
// grid-stride loop (segments are few; the loop touches only their elements, so alignment
// padding between them is left as it is). The formulas are backend.hpp's, written in the
// same order as the Native backend's so results agree to float rounding.
#include <cmath>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

// UpdateArgs as the kernel needs it, plus Adam's bias correction computed once on the host.
struct UpdateScalars {
  float lr;
  float momentum;
  float momentum2;
  float delta;
  float weight_decay;
  float grad_scale;
  float correction;  // sqrt(1 - b2^t) / (1 - b1^t)
  bool l1;
};

template <UpdateRule kRule>
__global__ void update_kernel(UpdateScalars a, const ParamSegment* segments, int num_segments,
                              float* w, const float* g, float* h, float* h2) {
  const int64_t first = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  const int64_t stride = int64_t{blockDim.x} * gridDim.x;
  for (int s = 0; s < num_segments; ++s) {
    const ParamSegment seg = segments[s];
    const float lr = a.lr * seg.lr_mult;
    const float decay = a.weight_decay * seg.decay_mult;
    const int64_t end = seg.offset + seg.count;
    for (int64_t i = seg.offset + first; i < end; i += stride) {
      const float wi = w[i];
      float gi;
      if constexpr (kRule == UpdateRule::kAdamW) {
        gi = a.grad_scale * g[i];
      } else {
        // g' = grad_scale g + decay reg(w), reg(w) = w (L2) or sign(w) (L1, sign(0) = 0)
        const float reg = a.l1 ? static_cast<float>((wi > 0) - (wi < 0)) : wi;
        gi = a.grad_scale * g[i] + decay * reg;
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
        w[i] = wi - lr * a.correction * m / (sqrtf(v) + a.delta);
      } else if constexpr (kRule == UpdateRule::kAdamW) {
        const float m = a.momentum * h[i] + (1.0f - a.momentum) * gi;
        const float v = a.momentum2 * h2[i] + (1.0f - a.momentum2) * gi * gi;
        h[i] = m;
        h2[i] = v;
        w[i] = wi - lr * (a.correction * m / (sqrtf(v) + a.delta) + decay * wi);
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
}

template <UpdateRule kRule>
void launch_update(unsigned grid, cudaStream_t stream, const UpdateScalars& scalars,
                   const ParamSegment* segments, int num_segments, float* w, const float* g,
                   float* h, float* h2) {
  update_kernel<kRule><<<grid, kBlock, 0, stream>>>(scalars, segments, num_segments, w, g, h,
                                                     h2);
  LAMINA_CUDA_LAUNCHED(update_kernel);
}

}  // namespace

void CudaBackend::update(const UpdateArgs& args, int64_t n, const ParamSegment* segments,
                         int num_segments, float* weights, const float* grads, float* history,
                         float* history2) {
  const cudaStream_t s = on_device();
  if (n <= 0 || num_segments <= 0) return;
  const bool adam = args.rule == UpdateRule::kAdam || args.rule == UpdateRule::kAdamW;
  LAMINA_REQUIRE(!adam || history2 != nullptr, "CudaBackend::update: Adam and AdamW need ",
                 "history2 (the second-moment arena)");
  UpdateScalars scalars{};
  scalars.lr = args.lr;
  scalars.momentum = args.momentum;
  scalars.momentum2 = args.momentum2;
  scalars.delta = args.delta;
  scalars.weight_decay = args.weight_decay;
  scalars.grad_scale = args.grad_scale;
  scalars.l1 = args.regularization == Regularization::kL1;
  // In double, once per call, exactly as the Native backend computes it.
  scalars.correction =
      adam ? static_cast<float>(
                 std::sqrt(1.0 - std::pow(double(args.momentum2), double(args.step))) /
                 (1.0 - std::pow(double(args.momentum), double(args.step))))
           : 0.0f;
  const unsigned grid = elementwise_grid(n);
  switch (args.rule) {
    case UpdateRule::kSGD:
      launch_update<UpdateRule::kSGD>(grid, s, scalars, segments, num_segments, weights, grads,
                                      history, history2);
      break;
    case UpdateRule::kNesterov:
      launch_update<UpdateRule::kNesterov>(grid, s, scalars, segments, num_segments, weights,
                                           grads, history, history2);
      break;
    case UpdateRule::kAdam:
      launch_update<UpdateRule::kAdam>(grid, s, scalars, segments, num_segments, weights, grads,
                                       history, history2);
      break;
    case UpdateRule::kAdamW:
      launch_update<UpdateRule::kAdamW>(grid, s, scalars, segments, num_segments, weights,
                                        grads, history, history2);
      break;
    case UpdateRule::kRMSProp:
      launch_update<UpdateRule::kRMSProp>(grid, s, scalars, segments, num_segments, weights,
                                          grads, history, history2);
      break;
    case UpdateRule::kAdaGrad:
      launch_update<UpdateRule::kAdaGrad>(grid, s, scalars, segments, num_segments, weights,
                                          grads, history, history2);
      break;
  }
}

}  // namespace lamina::cuda_detail
