// cuDNN's graph API for one convolution (cudnn_graph.hpp): descriptors made and finalized
// here, execution plans kept by cudnn_search.cpp's choices.
#if defined(LAMINA_WITH_CUDNN)

#include "backends/cuda/cudnn_graph.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cudnn_check.hpp"
#include "backends/cuda/cudnn_plan.hpp"
#include "backends/cuda/device_timer.hpp"

namespace lamina::cuda_detail {
namespace {

// Owner of one backend descriptor.
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type) {
    LAMINA_CUDNN_CHECK(cudnnBackendCreateDescriptor(type, &d_));
  }
  ~BackendDescriptor() {
    if (d_) cudnnBackendDestroyDescriptor(d_);
  }
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  cudnnBackendDescriptor_t release() { return std::exchange(d_, nullptr); }

  template <class T>
  BackendDescriptor& set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type,
               const T* values, int64_t count = 1) {
    LAMINA_CUDNN_CHECK(cudnnBackendSetAttribute(d_, name, type, count, values));
    return *this;
  }
  BackendDescriptor& set(cudnnBackendAttributeName_t name, const BackendDescriptor& other) {
    const cudnnBackendDescriptor_t d = other.get();
    return set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, &d);
  }
  BackendDescriptor& finalize() {
    LAMINA_CUDNN_CHECK(cudnnBackendFinalize(d_));
    return *this;
  }

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
};

constexpr int64_t kX = 1, kW = 2, kY = 3;  // the tensors' unique ids

// A packed NCHW tensor of dims (n, c, h, w).
void tensor(BackendDescriptor& t, int64_t id, cudnnDataType_t type, std::array<int64_t, 4> dims) {
  const std::array<int64_t, 4> strides = {dims[1] * dims[2] * dims[3], dims[2] * dims[3],
                                          dims[3], 1};
  const int64_t alignment = 16;
  t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type)
      .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4)
      .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &id)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment)
      .finalize();
}

// A direction's operation and the attributes of its tensors (x or dx, w or dw, y or dy),
// convolution and scales, in ConvDirection's order.
struct OpAttributes {
  cudnnBackendDescriptorType_t type;
  cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
};
constexpr OpAttributes kOps[] = {
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
    {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
     CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
};

// The global index of config's engine when it is deterministic, keeps the mode's precision
// and compiles nothing at run time; -1 otherwise.
int64_t acceptable_engine(const BackendDescriptor& config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t e = engine.get();
  int64_t count = 0, index = -1;
  if (cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count, &e) !=
          CUDNN_STATUS_SUCCESS ||
      cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &count,
                               &index) != CUDNN_STATUS_SUCCESS)
    return -1;
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               notes.size(), &count, notes.data()) != CUDNN_STATUS_SUCCESS)
    return -1;
  for (int64_t i = 0; i < count; ++i) {
    if (notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC ||
        notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
        notes[i] == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION)
      return -1;
  }
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviors{};
  if (cudnnBackendGetAttribute(e, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               behaviors.size(), &count, behaviors.data()) !=
      CUDNN_STATUS_SUCCESS)
    return -1;
  for (int64_t i = 0; i < count; ++i)
    if (behaviors[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) return -1;
  return index;
}

}  // namespace

GraphPlan::~GraphPlan() {
  for (auto& [pointers, pack] : packs_) cudnnBackendDestroyDescriptor(pack);
  cudnnBackendDestroyDescriptor(plan_);
}

void GraphPlan::run(cudnnHandle_t handle, void* x, void* w, void* y, void* workspace) {
  LAMINA_CUDNN_CHECK(execute(handle, x, w, y, workspace));
}

cudnnStatus_t GraphPlan::execute(cudnnHandle_t handle, void* x, void* w, void* y,
                                 void* workspace) {
  const std::array<void*, 4> pointers = {x, w, y, workspace};
  auto found = packs_.find(pointers);
  if (found == packs_.end()) {
    BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    const int64_t ids[] = {kX, kW, kY};
    void* data[] = {x, w, y};
    pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, ids, 3)
        .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, data, 3)
        .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace)
        .finalize();
    found = packs_.emplace(pointers, pack.release()).first;
  }
  return cudnnBackendExecute(handle, plan_, found->second);
}

std::vector<std::shared_ptr<GraphPlan>> graph_plans(cudnnHandle_t handle, const ConvGeometry& g,
                                                    ConvMode mode, ConvDirection direction,
                                                    size_t limit) {
  std::vector<std::shared_ptr<GraphPlan>> plans;
  // FP32 keeps the legacy API's FMA math (the graph API's engines may run FP32 on TF32
  // tensor cores). LAMINA_CUDNN_GRAPH=0 keeps every mode on the legacy algorithms.
  if (mode == ConvMode::kFP32) return plans;
  if (const char* env = std::getenv("LAMINA_CUDNN_GRAPH"); env && std::string(env) == "0")
    return plans;
  const cudnnDataType_t type = cudnn_data_type(mode);
  BackendDescriptor x(CUDNN_BACKEND_TENSOR_DESCRIPTOR), w(CUDNN_BACKEND_TENSOR_DESCRIPTOR),
      y(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  tensor(x, kX, type, {g.n, g.c, g.h, g.w});
  tensor(w, kW, type, {g.k, g.c / g.groups, g.kh, g.kw});
  tensor(y, kY, type, {g.n, g.k, g.out_h, g.out_w});

  BackendDescriptor conv(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t conv_mode = CUDNN_CROSS_CORRELATION;
  const int64_t dims = 2;
  const int64_t dilations[] = {g.dilation_h, g.dilation_w};
  const int64_t strides[] = {g.stride_h, g.stride_w};
  const int64_t pads[] = {g.pad_h, g.pad_w};  // the same at both ends, as the legacy API's
  conv.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &conv_mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &dims)
      .set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations, 2)
      .set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides, 2)
      .set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, pads, 2)
      .set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, pads, 2)
      .finalize();

  // TF32's filter gradient adds to the FP32 one (beta 1); a 16-bit one is written to the
  // workspace and added by a kernel; the other directions write their results.
  const bool accumulate =
      direction == ConvDirection::kBackwardFilter && element_bytes(mode) == sizeof(float);
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const OpAttributes& names = kOps[static_cast<int>(direction)];
  BackendDescriptor op(names.type);
  op.set(names.x, x)
      .set(names.w, w)
      .set(names.y, y)
      .set(names.conv, conv)
      .set(names.alpha, CUDNN_TYPE_FLOAT, &alpha)
      .set(names.beta, CUDNN_TYPE_FLOAT, &beta)
      .finalize();

  auto graph = std::make_shared<BackendDescriptor>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, op)
      .set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle);
  if (cudnnBackendFinalize(graph->get()) != CUDNN_STATUS_SUCCESS) return plans;

  BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t heur_mode = CUDNN_HEUR_MODE_A;
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, *graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &heur_mode);
  if (cudnnBackendFinalize(heuristics.get()) != CUDNN_STATUS_SUCCESS) return plans;
  int64_t count = 0;
  LAMINA_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                              nullptr));
  std::vector<std::shared_ptr<BackendDescriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(std::make_shared<BackendDescriptor>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  LAMINA_CUDNN_CHECK(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                              CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &count,
                                              raw.data()));
  for (int64_t i = 0; i < count && static_cast<int>(plans.size()) < kMaxGraphPlans; ++i) {
    const int64_t engine = acceptable_engine(*configs[i]);
    if (engine < 0) continue;
    BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle)
        .set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, *configs[i]);
    if (cudnnBackendFinalize(plan.get()) != CUDNN_STATUS_SUCCESS) continue;
    int64_t workspace = 0, returned = 0;
    if (cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                 CUDNN_TYPE_INT64, 1, &returned, &workspace) !=
            CUDNN_STATUS_SUCCESS ||
        workspace < 0 || static_cast<size_t>(workspace) > limit)
      continue;
    // The plan keeps its engine configuration and the operation graph alive.
    auto sources = std::make_shared<std::pair<std::shared_ptr<BackendDescriptor>,
                                              std::shared_ptr<BackendDescriptor>>>(graph,
                                                                                   configs[i]);
    plans.push_back(std::make_shared<GraphPlan>(plan.release(), static_cast<size_t>(workspace),
                                                engine, std::move(sources)));
  }
  return plans;
}

std::pair<int, float> fastest_graph_plan(cudnnHandle_t handle,
                                         const std::vector<std::shared_ptr<GraphPlan>>& plans,
                                         void* x, void* w, void* y) {
  if (plans.empty()) return {-1, 0.0f};
  size_t bytes = 0;
  for (const auto& plan : plans) bytes = std::max(bytes, plan->workspace());
  ScratchMemory workspace(bytes);
  if (bytes > 0 && workspace.get() == nullptr) return {-1, 0.0f};
  cudaStream_t stream = nullptr;
  LAMINA_CUDNN_CHECK(cudnnGetStream(handle, &stream));
  int best = -1;
  float best_ms = 0;
  for (size_t i = 0; i < plans.size(); ++i) {
    // A plan that fails to run (an engine's limit cuDNN did not check when finalizing it) is
    // left out.
    const float ms = mean_ms(stream, 3, [&] {
      return plans[i]->execute(handle, x, w, y, workspace.get()) == CUDNN_STATUS_SUCCESS;
    });
    if (ms < 0) continue;
    VLOG(2) << "  cuDNN graph engine configuration " << i << ": " << ms << " ms, workspace "
            << plans[i]->workspace() << " bytes";
    if (best < 0 || ms < best_ms) {
      best = static_cast<int>(i);
      best_ms = ms;
    }
  }
  return {best, best_ms};
}

uint64_t fingerprint(const std::vector<std::shared_ptr<GraphPlan>>& plans) {
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const auto& plan : plans) {
    for (const uint64_t word : {static_cast<uint64_t>(plan->engine()),
                                static_cast<uint64_t>(plan->workspace())}) {
      for (int byte = 0; byte < 8; ++byte) {
        hash ^= (word >> (8 * byte)) & 0xff;
        hash *= 1099511628211ull;
      }
    }
  }
  return hash;
}

}  // namespace lamina::cuda_detail

#endif  // LAMINA_WITH_CUDNN
