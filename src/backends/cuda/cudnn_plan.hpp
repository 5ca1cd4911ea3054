// cuDNN convolution plans: descriptor owners, the algorithm chosen for each direction, the
// plan of one geometry and the device's plans. cudnn.cpp makes and runs plans; cudnn_search.cpp
// chooses their algorithms. Included only in builds with cuDNN (LAMINA_WITH_CUDNN).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cuda/cuda_context.hpp"
#include "backends/cuda/cudnn_check.hpp"
#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

// Owner of a cuDNN descriptor, made by Create and destroyed by Destroy.
template <class Handle, cudnnStatus_t (*Create)(Handle*), cudnnStatus_t (*Destroy)(Handle)>
class Descriptor {
 public:
  Descriptor() { LAMINA_CUDNN_CHECK(Create(&d_)); }
  ~Descriptor() { Destroy(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  Handle get() const { return d_; }

 private:
  Handle d_ = nullptr;
};

using TensorDescriptor = Descriptor<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor,
                                    cudnnDestroyTensorDescriptor>;
using FilterDescriptor = Descriptor<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor,
                                    cudnnDestroyFilterDescriptor>;
using ConvolutionDescriptor =
    Descriptor<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
               cudnnDestroyConvolutionDescriptor>;

// The cuDNN math types a float convolution in a Math may run in. FP32: FMA math only, off
// tensor cores. TF32: the descriptor allows tensor cores (tensor-op math) while algorithms
// are timed, and the fastest of cuDNN's tensor-op and default-math results is taken: TF32
// allows tensor cores without forcing them, so a small convolution keeps its fast FMA-like
// kernels. Before cuDNN 8 (no TF32): default math, FP32.
inline cudnnMathType_t cudnn_math(Math math) {
#if CUDNN_VERSION >= 8000
  return math == Math::kTF32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
#else
  (void)math;
  return CUDNN_DEFAULT_MATH;
#endif
}
// The math type of a Math's algorithms that do not run in tensor-op math: FMA for FP32
// (the only one), cuDNN's default math for TF32.
inline cudnnMathType_t plain_math(Math math) {
  return math == Math::kTF32 ? CUDNN_DEFAULT_MATH : cudnn_math(math);
}
// Whether an algorithm of math type `type` runs in `math`.
inline bool runs_in(cudnnMathType_t type, Math math) {
  return type == cudnn_math(math) || type == plain_math(math);
}

// Largest workspace one convolution algorithm may ask for; also at most a quarter of the
// device memory free when the geometry is planned.
constexpr size_t kMaxAlgorithmWorkspace = size_t{1} << 30;

// One direction's chosen algorithm; algo < 0: none, run by im2col + cuBLAS. Its math type is
// set on the plan's descriptor before each call.
struct Choice {
  int algo = -1;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;  // bytes
  bool deterministic = true;
};

// Descriptors and chosen algorithms of one ConvGeometry.
// Without descriptors (sizes past cuDNN's ints) every direction runs by im2col.
struct ConvPlan {
  std::unique_ptr<TensorDescriptor> x, y;
  std::unique_ptr<FilterDescriptor> w;
  std::unique_ptr<ConvolutionDescriptor> conv;
  Choice forward, backward_data, backward_filter;
};

// A geometry's 16 sizes, then its Math (a convolution is planned once per geometry and math).
using GeometryKey = std::array<int64_t, 17>;

inline GeometryKey key_of(const ConvGeometry& g, Math math) {
  return {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
          g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w, static_cast<int64_t>(math)};
}

// One direction's algorithm and math type as a solver state keeps it.
struct Algorithm {
  int algo;
  cudnnMathType_t math;
  bool operator==(const Algorithm& o) const { return algo == o.algo && math == o.math; }
};
// The three directions', in the order forward, backward-data, backward-filter.
using ConvAlgorithms = std::array<Algorithm, 3>;

inline ConvAlgorithms algorithms_of(const ConvPlan& plan) {
  return {Algorithm{plan.forward.algo, plan.forward.math},
          Algorithm{plan.backward_data.algo, plan.backward_data.math},
          Algorithm{plan.backward_filter.algo, plan.backward_filter.math}};
}

// Every plan made on the device, by geometry. Never destroyed, like the context that holds
// it: destroying descriptors during static destruction would race the runtime's teardown.
struct ConvPlans {
  std::map<GeometryKey, std::unique_ptr<ConvPlan>> by_geometry;
  // Algorithms to take for a geometry instead of timing them (a resumed run's, from its
  // solver state: reuse_conv_choices).
  std::map<GeometryKey, ConvAlgorithms> remembered;
};


// "x (8, 3, 32, 32), weight (16, 3, 3, 3), stride 1x1, ... -> y (8, 16, 32, 32)" (cudnn.cpp)
std::string describe(const ConvGeometry& g);

// Sets the plan's descriptors for g in math and chooses its three algorithms: `remembered`
// where it is given and cuDNN accepts it for g, otherwise the fastest deterministic ones of
// that math by timing (cudnn_search.cpp). Algorithms may ask for at most `limit` bytes of
// workspace.
void search(CudaContext& context, size_t limit, const ConvGeometry& g, Math math,
            ConvPlan& plan, const ConvAlgorithms* remembered);

}  // namespace lamina::cuda_detail
