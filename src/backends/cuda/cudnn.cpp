// Everything cuDNN: the one translation unit that includes cudnn.h. It makes the context's
// cuDNN handle, reports cuDNN's version and errors, and runs the CUDA backend's convolutions.
// The CUDA backend's conv_* are written once, at the end: each asks cuDNN to run its
// direction (dnn_*) and runs im2col + cuBLAS where cuDNN has no algorithm for it. Builds
// without cuDNN (LAMINA_WITH_CUDNN undefined) have no handle, and their dnn_* have none.
//
// Convolution uses cuDNN's legacy convolution API, as every cuDNN 9.x release has it
// (deprecated in favour of the graph API but present and stable throughout 9.x; cuDNN 8 has
// it too): tensor, filter and convolution descriptors, cudnnGetConvolution*Algorithm_v7 and
// cudnnFindConvolution*AlgorithmEx to choose (cudnn_search.cpp) and cudnnConvolutionForward /
// BackwardData / BackwardFilter to run. In BF16 and FP16 a direction may instead run a plan
// of cuDNN's graph API (cudnn_graph.hpp) where one was timed faster.
//
// A plan per ConvGeometry and ConvMode (cudnn_plan.hpp), kept in the device's CudaContext (so every
// backend and net on the device shares it), holds the descriptors and, for each direction,
// the chosen algorithm and its workspace size. It is made at the geometry's first
// convolution call, whichever direction that is: all three algorithms are chosen then (one
// search, counted in cuda_diagnostics().conv_algorithm_searches; the fastest deterministic
// ones by timing, or those a resumed run's solver state names) and the context's shared
// workspace grows to the largest of their workspaces. Later calls look the plan up and run.
// A geometry past cuDNN's 32-bit sizes runs by im2col + cuBLAS (conv_kernels.cu), which is
// also the whole convolution in builds without cuDNN.
//
// y and dx are written (cuDNN's beta = 0), dweight accumulates (beta = 1). The bias is added
// by channel_affine and its gradient accumulated by channel_reduce (blocks per channel,
// in double), as deterministic as the rest.
//
// In 16 bits (Backend's conv_* with a Half) x, weight, y and their gradients are BF16 or
// FP16 and the convolution computes in FP32 (cuDNN's "pseudo" 16-bit configurations) on
// tensor cores where cuDNN finds that fastest, planned separately from the float modes
// (ConvMode). cuDNN writes the filter gradient in the data's type, so it goes into the
// lane's workspace (beta = 0) and is then added to the FP32 dweight (add_half). A direction
// without a cuDNN algorithm widens its operands and runs the float im2col (conv_kernels.cu).
#include <glog/logging.h>

#include <algorithm>
#include <array>
#include <climits>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "backends/cuda/conv_mode.hpp"
#include "backends/cuda/alignment.hpp"
#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

#if defined(LAMINA_WITH_CUDNN)
#include "backends/cuda/cudnn_plan.hpp"
#endif

namespace lamina::cuda_detail {

// "x (8, 3, 32, 32), weight (16, 3, 3, 3), stride 1x1, pad 1x1, dilation 1x1, groups 1 ->
// y (8, 16, 32, 32)"
std::string describe(const ConvGeometry& g) {
  std::ostringstream out;
  out << "x (" << g.n << ", " << g.c << ", " << g.h << ", " << g.w << "), weight (" << g.k
      << ", " << (g.groups > 0 ? g.c / g.groups : 0) << ", " << g.kh << ", " << g.kw
      << "), stride " << g.stride_h << "x" << g.stride_w << ", pad " << g.pad_h << "x" << g.pad_w
      << ", dilation " << g.dilation_h << "x" << g.dilation_w << ", groups " << g.groups
      << " -> y (" << g.n << ", " << g.k << ", " << g.out_h << ", " << g.out_w << ")";
  return out.str();
}

namespace {

int64_t conv_out_size(int64_t in, int64_t pad, int64_t dilation, int64_t kernel,
                      int64_t stride) {
  return (in + 2 * pad - (dilation * (kernel - 1) + 1)) / stride + 1;
}

// The layers build geometries; a bad one is a broken internal invariant.
void check_geometry(const ConvGeometry& g) {
  CHECK(g.n >= 0 && g.c > 0 && g.h > 0 && g.w > 0 && g.k > 0 && g.kh > 0 && g.kw > 0 &&
        g.stride_h > 0 && g.stride_w > 0 && g.pad_h >= 0 && g.pad_w >= 0 &&
        g.dilation_h > 0 && g.dilation_w > 0 && g.groups > 0 && g.c % g.groups == 0 &&
        g.k % g.groups == 0 && g.out_h > 0 && g.out_w > 0)
      << "bad convolution geometry: " << describe(g);
  CHECK(g.out_h == conv_out_size(g.h, g.pad_h, g.dilation_h, g.kh, g.stride_h) &&
        g.out_w == conv_out_size(g.w, g.pad_w, g.dilation_w, g.kw, g.stride_w))
      << "convolution output size does not follow from the input: " << describe(g);
}

}  // namespace

#if defined(LAMINA_WITH_CUDNN)

// ---------------------------------------------------------------------------------------
// The handle, errors and version
// ---------------------------------------------------------------------------------------

void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file, int line) {
  std::ostringstream hint;
  if (status == CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH) {
    hint << " The cuDNN library found at run time (" << cudnnGetVersion()
         << ") does not match the one Lamina was built with (" << CUDNN_VERSION
         << "); fix LD_LIBRARY_PATH or rebuild.";
  }
  fail("cuDNN error: ", call, " returned ", cudnnGetErrorString(status), " (", int(status),
       ") at ", file, ":", line, ".", hint.str());
}

cudnnContext* create_dnn_handle(cudaStream_t stream) {
  cudnnHandle_t handle = nullptr;
  LAMINA_CUDNN_CHECK(cudnnCreate(&handle));
  const cudnnStatus_t bound = cudnnSetStream(handle, stream);
  if (bound != CUDNN_STATUS_SUCCESS) {
    cudnnDestroy(handle);
    LAMINA_CUDNN_CHECK(bound);
  }
  return handle;
}

std::string dnn_version_string() {
  auto dotted = [](size_t v) {
    std::ostringstream out;
    out << v / 10000 << "." << (v / 100) % 100 << "." << v % 100;
    return out.str();
  };
  return dotted(cudnnGetVersion()) + " (built against " + dotted(CUDNN_VERSION) + ")";
}

// ---------------------------------------------------------------------------------------
// Convolution
// ---------------------------------------------------------------------------------------

ConvPlans& CudaContext::conv_plans() {
  std::call_once(conv_plans_once_, [this] { conv_plans_ = new ConvPlans; });
  return *conv_plans_;
}

cudnnStatus_t run_choice(cudnnHandle_t handle, const ConvPlan& plan, ConvDirection direction,
                         const Choice& c, void* x, void* w, void* y, void* workspace,
                         float beta) {
  if (c.graph) return c.graph->execute(handle, x, w, y, workspace);  // the plan's own beta
  const cudnnStatus_t math = cudnnSetConvolutionMathType(plan.conv->get(), c.math);
  if (math != CUDNN_STATUS_SUCCESS) return math;
  const float one = 1.0f;
  switch (direction) {
    case ConvDirection::kForward:
      return cudnnConvolutionForward(handle, &one, plan.x->get(), x, plan.w->get(), w,
                                     plan.conv->get(),
                                     static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), workspace,
                                     c.workspace, &beta, plan.y->get(), y);
    case ConvDirection::kBackwardData:
      return cudnnConvolutionBackwardData(
          handle, &one, plan.w->get(), w, plan.y->get(), y, plan.conv->get(),
          static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), workspace, c.workspace, &beta,
          plan.x->get(), x);
    case ConvDirection::kBackwardFilter:
      return cudnnConvolutionBackwardFilter(
          handle, &one, plan.x->get(), x, plan.y->get(), y, plan.conv->get(),
          static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), workspace, c.workspace, &beta,
          plan.w->get(), w);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

namespace {

// Whether every size cuDNN's legacy API takes as an int, element counts included, fits.
bool fits_cudnn(const ConvGeometry& g) {
  const int64_t sizes[] = {
      g.n, g.c, g.h, g.w, g.k, g.kh, g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w,
      g.dilation_h, g.dilation_w, g.groups, g.out_h, g.out_w,
      g.input_count(), g.output_count(), g.weight_count(),
  };
  return std::all_of(std::begin(sizes), std::end(sizes),
                     [](int64_t v) { return v <= int64_t{INT_MAX}; });
}

// Where a 16-bit filter gradient goes in its lane's workspace: after the algorithm's own
// workspace, at a 256-byte boundary.
size_t filter_gradient_offset(const Choice& backward_filter) {
  return (backward_filter.workspace + 255) / 256 * 256;
}

// The plan of g in mode, made (and its algorithms chosen) on the first call for both.
const ConvPlan& plan_for(CudaContext& context, const ConvGeometry& g, ConvMode mode) {
  auto& plans = context.conv_plans().by_geometry;
  const GeometryKey key = key_of(g, mode);
  const auto found = plans.find(key);
  if (found != plans.end()) return *found->second;

  context.require_not_capturing("choosing a convolution's algorithms");
  auto plan = std::make_unique<ConvPlan>();
  if (fits_cudnn(g)) {
    size_t free_bytes = 0, total_bytes = 0;
    LAMINA_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t limit =
        std::max(context.workspace_bytes(), std::min(free_bytes / 4, kMaxAlgorithmWorkspace));
    const auto remembered = context.conv_plans().remembered.find(key);
    search(context, limit, g, mode, *plan,
           remembered == context.conv_plans().remembered.end() ? nullptr : &remembered->second);
    count_conv_algorithm_search();
    // One workspace per lane for the whole net, grown here, once, to what this geometry
    // needs, so that no call of a step grows it. The filter gradient runs on the side lane
    // (Convolution::backward_params), or on the main lane where its parameters are shared;
    // in 16 bits cuDNN writes it into the lane's workspace, after the algorithm's.
    const size_t filter_bytes =
        element_bytes(mode) == 4 ? plan->backward_filter.workspace
                                 : filter_gradient_offset(plan->backward_filter) +
                                       element_bytes(mode) * g.weight_count();
    context.reserve_workspaces(
        std::max({plan->forward.workspace, plan->backward_data.workspace, filter_bytes}),
        filter_bytes);
    auto name = [](const Choice& c) {
      return c.graph ? "graph plan " + std::to_string(c.graph_index) : std::to_string(c.algo);
    };
    VLOG(1) << mode_name(mode) << " convolution " << describe(g) << ": forward algorithm "
            << name(plan->forward) << ", backward-data " << name(plan->backward_data)
            << ", backward-filter " << name(plan->backward_filter) << ", workspaces "
            << plan->forward.workspace << ", " << plan->backward_data.workspace << " and "
            << plan->backward_filter.workspace << " bytes";
  } else {
    LOG(WARNING) << "convolution " << describe(g) << " exceeds cuDNN's 32-bit sizes; "
                 << "using im2col + cuBLAS";
  }
  return *plans.emplace(key, std::move(plan)).first->second;
}

// Whether every pointer is as aligned as a graph plan's tensors say (16 bytes,
// cudnn_graph.cpp): a layer's blobs and parameters are; a view at an odd offset runs by
// im2col instead.
bool graph_aligned(std::initializer_list<const void*> pointers) {
  return alignment_of(pointers) >= 16;
}

// The context's workspace for a direction's algorithm (null when it needs none).
void* workspace_for(CudaContext& context, const Choice& choice) {
  return choice.workspace > 0 ? context.workspace(choice.workspace) : nullptr;
}

// cuDNN's convolutions of g in mode: each runs its direction and returns true, or returns
// false having done nothing where cuDNN has no algorithm for it (the caller runs im2col).

// y = conv(x, weight), written.
bool dnn_forward(CudaContext& context, const ConvGeometry& g, ConvMode mode, const void* x,
                 const void* weight, void* y) {
  const ConvPlan& plan = plan_for(context, g, mode);
  const Choice& c = plan.forward;
  if (!c.in_cudnn() || (c.graph && !graph_aligned({x, weight, y}))) return false;
  LAMINA_CUDNN_CHECK(run_choice(context.dnn(), plan, ConvDirection::kForward, c,
                                const_cast<void*>(x), const_cast<void*>(weight), y,
                                workspace_for(context, c), 0.0f));
  return true;
}

// dx = the gradient w.r.t. x, written.
bool dnn_backward_data(CudaContext& context, const ConvGeometry& g, ConvMode mode,
                       const void* weight, const void* dy, void* dx) {
  const ConvPlan& plan = plan_for(context, g, mode);
  const Choice& c = plan.backward_data;
  if (!c.in_cudnn() || (c.graph && !graph_aligned({weight, dy, dx}))) return false;
  LAMINA_CUDNN_CHECK(run_choice(context.dnn(), plan, ConvDirection::kBackwardData, c, dx,
                                const_cast<void*>(weight), const_cast<void*>(dy),
                                workspace_for(context, c), 0.0f));
  return true;
}

// The gradient w.r.t. the weight in the mode's type: a float mode adds it to dweight (beta
// 1); a 16-bit one writes it (beta 0) into the lane's workspace after the algorithm's, and
// *half_gradient points at it.
bool dnn_backward_filter(CudaContext& context, const ConvGeometry& g, ConvMode mode,
                         const void* x, const void* dy, float* dweight,
                         const uint16_t** half_gradient) {
  const ConvPlan& plan = plan_for(context, g, mode);
  const Choice& c = plan.backward_filter;
  if (!c.in_cudnn() || (c.graph && !graph_aligned({x, dy}))) return false;
  const bool half = element_bytes(mode) == 2;
  const size_t offset = filter_gradient_offset(c);
  char* workspace = static_cast<char*>(
      context.workspace(half ? offset + sizeof(uint16_t) * g.weight_count() : c.workspace));
  void* gradient = half ? static_cast<void*>(workspace + offset) : dweight;
  if (half) *half_gradient = static_cast<const uint16_t*>(gradient);
  LAMINA_CUDNN_CHECK(run_choice(context.dnn(), plan, ConvDirection::kBackwardFilter, c,
                                const_cast<void*>(x), gradient, const_cast<void*>(dy),
                                workspace, half ? 0.0f : 1.0f));
  return true;
}

}  // namespace

#else  // !LAMINA_WITH_CUDNN: every convolution by im2col + cuBLAS.

cudnnContext* create_dnn_handle(cudaStream_t) {
  fail("this Lamina was built without cuDNN, which this layer needs; install cuDNN and "
       "rebuild (cmake -DLAMINA_USE_CUDNN=ON), or train on the CPU (backend \"cpu\").");
}

std::string dnn_version_string() { return "not built with cuDNN"; }

struct ConvPlans {};

ConvPlans& CudaContext::conv_plans() {
  std::call_once(conv_plans_once_, [this] { conv_plans_ = new ConvPlans; });
  return *conv_plans_;
}

namespace {

// No cuDNN: every direction runs by im2col.
bool dnn_forward(CudaContext&, const ConvGeometry&, ConvMode, const void*, const void*, void*) {
  return false;
}
bool dnn_backward_data(CudaContext&, const ConvGeometry&, ConvMode, const void*, const void*,
                       void*) {
  return false;
}
bool dnn_backward_filter(CudaContext&, const ConvGeometry&, ConvMode, const void*, const void*,
                         float*, const uint16_t**) {
  return false;
}

}  // namespace

#endif

// ---------------------------------------------------------------------------------------
// The convolutions: cuDNN where it has an algorithm, im2col + cuBLAS otherwise
// ---------------------------------------------------------------------------------------

void CudaBackend::conv_forward(const ConvGeometry& g, const float* x, const float* weight,
                               const float* bias, float* y) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  if (!dnn_forward(context_, g, conv_mode(math()), x, weight, y))
    im2col_conv_forward(g, x, weight, y);
  if (bias != nullptr) channel_affine(g.n, g.k, g.out_h * g.out_w, y, nullptr, bias, y);
}

void CudaBackend::conv_backward_data(const ConvGeometry& g, const float* weight,
                                     const float* dy, float* dx) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  if (!dnn_backward_data(context_, g, conv_mode(math()), weight, dy, dx))
    im2col_conv_backward_data(g, weight, dy, dx);
}

void CudaBackend::conv_backward_filter(const ConvGeometry& g, const float* x, const float* dy,
                                       float* dweight, float* dbias) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  if (!dnn_backward_filter(context_, g, conv_mode(math()), x, dy, dweight, nullptr))
    im2col_conv_backward_filter(g, x, dy, dweight);
  if (dbias != nullptr) channel_reduce(g.n, g.k, g.out_h * g.out_w, dy, nullptr, dbias);
}

void CudaBackend::conv_forward(Half format, const ConvGeometry& g, const uint16_t* x,
                               const uint16_t* weight, const float* bias, uint16_t* y) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  if (!dnn_forward(context_, g, conv_mode(format), x, weight, y))
    im2col_conv_forward(format, g, x, weight, y);
  if (bias != nullptr) channel_affine(format, g.n, g.k, g.out_h * g.out_w, y, nullptr, bias, y);
}

void CudaBackend::conv_backward_data(Half format, const ConvGeometry& g, const uint16_t* weight,
                                     const uint16_t* dy, uint16_t* dx) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  if (!dnn_backward_data(context_, g, conv_mode(format), weight, dy, dx))
    im2col_conv_backward_data(format, g, weight, dy, dx);
}

// cuDNN's 16-bit weight gradient, in the workspace, is added to the FP32 dweight.
void CudaBackend::conv_backward_filter(Half format, const ConvGeometry& g, const uint16_t* x,
                                       const uint16_t* dy, float* dweight, float* dbias) {
  on_device();
  check_geometry(g);
  if (g.n == 0) return;
  const uint16_t* gradient = nullptr;
  if (dnn_backward_filter(context_, g, conv_mode(format), x, dy, dweight, &gradient))
    add_half(format, g.weight_count(), gradient, dweight);
  else
    im2col_conv_backward_filter(format, g, x, dy, dweight);
  if (dbias != nullptr) channel_reduce(format, g.n, g.k, g.out_h * g.out_w, dy, nullptr, dbias);
}

}  // namespace lamina::cuda_detail

namespace lamina {

#if defined(LAMINA_WITH_CUDNN)
bool cudnn_compiled() { return true; }
#else
bool cudnn_compiled() { return false; }
#endif

}  // namespace lamina
