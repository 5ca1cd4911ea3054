// Captured steps on the CUDA backend: Backend::capture records the operations launched on the
// context's main stream, and on the side lane's and the collective lane's streams forked from
// it and joined back (the graph's branches), into a CUDA graph (stream capture), instantiates
// it once, and launch() replays it with one cudaGraphLaunch. The capture is thread-local:
// other threads' CUDA calls go on as usual. While it runs, the context refuses operations
// that cannot be recorded (cuda_context.hpp), so a step that copies, synchronises or
// allocates inside fails to capture with an Error naming the operation, and nothing it
// launched has run.
#include <glog/logging.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

class CudaGraph final : public CapturedOps {
 public:
  CudaGraph(CudaContext& context, cudaGraphExec_t exec, int64_t nodes)
      : context_(context), exec_(exec), nodes_(nodes),
        workspace_moves_(context.workspace_moves()) {}
  ~CudaGraph() override {
    if (cudaGraphExecDestroy(exec_) != cudaSuccess) cudaGetLastError();
  }
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void launch() override {
    context_.require_main_lane("launching a captured step");
    LAMINA_REQUIRE(valid(), "a captured step was launched after the workspace it uses moved; "
                   "capture it again (CapturedOps::valid)");
    context_.make_current();
    LAMINA_CUDA_CHECK(cudaGraphLaunch(exec_, context_.stream()));
  }
  int64_t operations() const override { return nodes_; }
  bool valid() const override { return context_.workspace_moves() == workspace_moves_; }

 private:
  CudaContext& context_;
  cudaGraphExec_t exec_;
  int64_t nodes_;
  int64_t workspace_moves_;  // the context's when captured
};

}  // namespace

void CudaBackend::begin_capture() {
  context_.require_main_lane("capture()");
  LAMINA_REQUIRE(!context_.side_lane_open(), "capture() was called while the side lane is "
                 "open (Backend::open_side_lane): open it inside the captured operations");
  on_device();
  const cudaStream_t s = context_.stream();
  LAMINA_REQUIRE(!context_.capturing(), "capture() was called inside another capture");
  LAMINA_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  context_.set_capturing(true);
}

std::unique_ptr<CapturedOps> CudaBackend::end_capture(bool keep) {
  // The side lane's and the collective lane's work has merged into the main stream: the
  // outermost SideLaneScope joined the one and the solver's update (or its gradient sum)
  // the other, also when the operations threw (work left unjoined fails the capture).
  context_.to_main_lane();
  context_.set_capturing(false);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(context_.stream(), &graph);
  if (!keep || ended != cudaSuccess) {
    cudaGetLastError();
    if (graph) cudaGraphDestroy(graph);
    if (!keep) return nullptr;
    fail("the operations could not be captured into a CUDA graph: cudaStreamEndCapture "
         "returned ", cudaGetErrorName(ended), " (", cudaGetErrorString(ended), "); an "
         "operation inside waited for the device or used another stream");
  }
  size_t nodes = 0;
  cudaGraphExec_t exec = nullptr;
  cudaError_t status = cudaGraphGetNodes(graph, nullptr, &nodes);
  if (status == cudaSuccess) status = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  LAMINA_CUDA_CHECK(status);
  return std::make_unique<CudaGraph>(context_, exec, static_cast<int64_t>(nodes));
}

}  // namespace lamina::cuda_detail
