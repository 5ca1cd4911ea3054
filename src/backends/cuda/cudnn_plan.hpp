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

// Float convolutions in full FP32 precision. Before cuDNN 8 (no TF32) that was the default.
#if CUDNN_VERSION >= 8000
constexpr cudnnMathType_t kMathType = CUDNN_FMA_MATH;
#else
constexpr cudnnMathType_t kMathType = CUDNN_DEFAULT_MATH;
#endif

// Largest workspace one convolution algorithm may ask for; also at most a quarter of the
// device memory free when the geometry is planned.
constexpr size_t kMaxAlgorithmWorkspace = size_t{1} << 30;

// One direction's chosen algorithm; algo < 0: none, run by im2col + cuBLAS.
struct Choice {
  int algo = -1;
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

using GeometryKey = std::array<int64_t, 16>;

inline GeometryKey key_of(const ConvGeometry& g) {
  return {g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
          g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w};
}

// The three directions' algorithms, in the order forward, backward-data, backward-filter.
using ConvAlgorithms = std::array<int, 3>;

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

// Sets the plan's descriptors for g and chooses its three algorithms: `remembered` where it
// is given and cuDNN accepts it for g, otherwise the fastest deterministic ones by timing
// (cudnn_search.cpp). Algorithms may ask for at most `limit` bytes of workspace.
void search(CudaContext& context, size_t limit, const ConvGeometry& g, ConvPlan& plan,
            const ConvAlgorithms* remembered);

}  // namespace lamina::cuda_detail
