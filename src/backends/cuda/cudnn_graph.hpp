// Convolutions through cuDNN's graph (backend) API: one convolution operation per graph, the
// engine configurations cuDNN's heuristics offer for it, kept when they are deterministic and
// compute in the mode's precision, finalized as execution plans. cuDNN's legacy algorithms
// (cudnnConvolutionForward and the rest) reach only its older kernels: on an H200 its best
// BF16 forward of a 64 -> 64 channel 3x3 convolution over 256 images of 32 x 32 took 0.276
// ms, against 0.120 ms for the engines PyTorch runs through this API. cudnn_search.cpp times
// both kinds and keeps the faster. Included only in builds with cuDNN (LAMINA_WITH_CUDNN).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backends/cuda/conv_mode.hpp"
#include "lamina/backend.hpp"

namespace lamina::cuda_detail {

enum class ConvDirection { kForward, kBackwardData, kBackwardFilter };

// One finalized execution plan and what running it needs. It holds the descriptors it was
// made from (its engine configuration and operation graph), which outlive it.
class GraphPlan {
 public:
  GraphPlan(cudnnBackendDescriptor_t plan, size_t workspace, int64_t engine,
            std::shared_ptr<void> sources)
      : plan_(plan), workspace_(workspace), engine_(engine), sources_(std::move(sources)) {}
  ~GraphPlan();
  GraphPlan(const GraphPlan&) = delete;
  GraphPlan& operator=(const GraphPlan&) = delete;

  size_t workspace() const { return workspace_; }
  int64_t engine() const { return engine_; }  // cuDNN's global index of its engine
  // Runs the direction's convolution on handle's stream: x (dx), w (dw), y (dy) as the
  // direction reads and writes them, workspace of workspace() bytes. Results are written
  // (beta 0), but TF32's filter gradient is added to dw (beta 1).
  // The variant pack of each set of pointers is made once and kept, so a replayed step
  // creates nothing.
  void run(cudnnHandle_t handle, void* x, void* w, void* y, void* workspace);
  // The same, returning cuDNN's status instead of throwing (timing).
  cudnnStatus_t execute(cudnnHandle_t handle, void* x, void* w, void* y, void* workspace);

 private:
  cudnnBackendDescriptor_t plan_;
  size_t workspace_;
  int64_t engine_;
  std::shared_ptr<void> sources_;
  std::map<std::array<void*, 4>, cudnnBackendDescriptor_t> packs_;
};

// The deterministic execution plans cuDNN's heuristics (mode A) rank for one direction of g
// in mode (TF32, BF16 or FP16; none for FP32, which keeps the legacy algorithms), in their
// order, at most kMaxGraphPlans, that need at most limit bytes of workspace, neither reduce
// in less than FP32 nor convert their inputs down, and compile nothing at run time. Empty
// when cuDNN offers none, or when the environment variable LAMINA_CUDNN_GRAPH is 0.
constexpr int kMaxGraphPlans = 16;
std::vector<std::shared_ptr<GraphPlan>> graph_plans(cudnnHandle_t handle, const ConvGeometry& g,
                                                    ConvMode mode, ConvDirection direction,
                                                    size_t limit);

// The index of the fastest of plans running on x, w and y (arrays of the geometry's sizes,
// their values unimportant) and its time in milliseconds: one run each to warm up, then the
// mean of a few, with a workspace of their largest size allocated for the timing. -1 when
// there are none, or no memory for the workspace.
std::pair<int, float> fastest_graph_plan(cudnnHandle_t handle,
                                         const std::vector<std::shared_ptr<GraphPlan>>& plans,
                                         void* x, void* w, void* y);

// A fingerprint of a list of plans (their engines and workspaces): a solver state's index
// into one list names the same plan only in a list with the same fingerprint.
uint64_t fingerprint(const std::vector<std::shared_ptr<GraphPlan>>& plans);

}  // namespace lamina::cuda_detail
