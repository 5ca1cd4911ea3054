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

#include "backends/cuda/conv_mode.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "backends/cuda/cudnn_check.hpp"
#include "backends/cuda/cudnn_graph.hpp"
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

// The type of the mode's stored values, and its size in bytes. The convolution descriptor
// computes in FP32 in every mode (with 16-bit data: cuDNN's "pseudo" 16-bit configurations).
inline cudnnDataType_t cudnn_data_type(ConvMode mode) {
  switch (mode) {
    case ConvMode::kBF16: return CUDNN_DATA_BFLOAT16;
    case ConvMode::kFP16: return CUDNN_DATA_HALF;
    default: return CUDNN_DATA_FLOAT;
  }
}
inline size_t element_bytes(ConvMode mode) {
  return mode == ConvMode::kBF16 || mode == ConvMode::kFP16 ? 2 : 4;
}

// The cuDNN math types a convolution in a mode may run in. FP32: FMA math only, off tensor
// cores. TF32, BF16 and FP16: the descriptor allows tensor cores (tensor-op math) while
// algorithms are timed, and the fastest of cuDNN's tensor-op and default-math results is
// taken: a small convolution keeps its fast FMA-like kernels. Before cuDNN 8 (no TF32):
// default math.
inline cudnnMathType_t cudnn_math(ConvMode mode) {
#if CUDNN_VERSION >= 8000
  return mode == ConvMode::kFP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH;
#else
  return mode == ConvMode::kFP32 ? CUDNN_DEFAULT_MATH : CUDNN_TENSOR_OP_MATH;
#endif
}
// The math type of a mode's algorithms that do not run in tensor-op math: FMA for FP32
// (the only one), cuDNN's default math for the others.
inline cudnnMathType_t plain_math(ConvMode mode) {
  return mode == ConvMode::kFP32 ? cudnn_math(mode) : CUDNN_DEFAULT_MATH;
}
// Whether an algorithm of math type `type` runs in `mode`.
inline bool runs_in(cudnnMathType_t type, ConvMode mode) {
  return type == cudnn_math(mode) || type == plain_math(mode);
}

// Largest workspace one convolution algorithm may ask for; also at most a quarter of the
// device memory free when the geometry is planned.
constexpr size_t kMaxAlgorithmWorkspace = size_t{1} << 30;

// One direction's chosen algorithm: a legacy algorithm (algo, its math type set on the plan's
// descriptor before each call), or a graph API plan (graph, the graph_index-th of
// graph_plans'); neither: run by im2col + cuBLAS.
struct Choice {
  int algo = -1;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;  // bytes
  bool deterministic = true;
  std::shared_ptr<GraphPlan> graph;
  int graph_index = -1;
  uint64_t graph_list = 0;  // the fingerprint of the list graph_index counts in
  bool in_cudnn() const { return graph != nullptr || algo >= 0; }
};

// Descriptors and chosen algorithms of one ConvGeometry in one ConvMode.
// Without descriptors (sizes past cuDNN's ints) every direction runs by im2col.
struct ConvPlan {
  std::unique_ptr<TensorDescriptor> x, y;
  std::unique_ptr<FilterDescriptor> w;
  std::unique_ptr<ConvolutionDescriptor> conv;
  Choice forward, backward_data, backward_filter;
};

// A geometry's 16 sizes, then its ConvMode.
using GeometryKey = std::array<int64_t, 17>;

inline GeometryKey key_of(const ConvGeometry& g, ConvMode mode) {
  return {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
          g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w, static_cast<int64_t>(mode)};
}

// One direction's algorithm and math type as a solver state keeps it, or its graph API plan
// (graph >= 0: the index among graph_plans').
struct Algorithm {
  int algo;
  cudnnMathType_t math;
  int graph = -1;
  uint64_t graph_list = 0;  // the fingerprint of graph_plans' list (cudnn_graph.hpp)
  // -1 (im2col) is the same whatever math type it was written with.
  bool operator==(const Algorithm& o) const {
    if (graph >= 0 || o.graph >= 0) return graph == o.graph && graph_list == o.graph_list;
    return algo == o.algo && (algo == -1 || math == o.math);
  }
};
// The three directions', in the order forward, backward-data, backward-filter.
using ConvAlgorithms = std::array<Algorithm, 3>;

inline ConvAlgorithms algorithms_of(const ConvPlan& plan) {
  auto of = [](const Choice& c) {
    return Algorithm{c.algo, c.math, c.graph_index, c.graph_list};
  };
  return {of(plan.forward), of(plan.backward_data), of(plan.backward_filter)};
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

// Runs direction's choice c of plan on handle's stream (cudnn.cpp): x (dx), w (dw), y (dy) as
// the direction reads and writes them, the written array scaled by beta first (0:
// overwritten; a graph plan writes with beta 0 only), with workspace of c.workspace bytes.
cudnnStatus_t run_choice(cudnnHandle_t handle, const ConvPlan& plan, ConvDirection direction,
                         const Choice& c, void* x, void* w, void* y, void* workspace,
                         float beta);

// Sets the plan's descriptors for g in mode and chooses its three algorithms: `remembered`
// where it is given and cuDNN accepts it for g, otherwise the fastest deterministic ones of
// that mode by timing (cudnn_search.cpp). Algorithms may ask for at most `limit` bytes of
// workspace.
void search(CudaContext& context, size_t limit, const ConvGeometry& g, ConvMode mode,
            ConvPlan& plan, const ConvAlgorithms* remembered);

}  // namespace lamina::cuda_detail
