// CudaBackend's pinned host memory and upload lanes (Backend::allocate_pinned,
// make_upload_lane): page-locked memory; a lane uploads on the context's upload stream, so
// its copies overlap the main stream's kernels, ordered against them by events (marks,
// join), with fences that are events recorded after its uploads. A data layer's prefetch
// threads wait on a fence before they write a batch buffer again, so the training step
// itself never waits.
#include <glog/logging.h>

#include <vector>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace cuda_detail {
namespace {

// A CUDA event recorded on the upload stream after its uploads.
class EventFence final : public UploadFence {
 public:
  EventFence(CudaContext& context, cudaStream_t stream) : context_(context), stream_(stream) {
    context_.make_current();
    LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~EventFence() override {
    if (cudaSetDevice(context_.device()) == cudaSuccess) {
      cudaEventSynchronize(event_);  // a pending upload still reads its source
      cudaEventDestroy(event_);
    }
    cudaGetLastError();  // at process exit the runtime may be gone: nothing to report
  }
  EventFence(const EventFence&) = delete;
  EventFence& operator=(const EventFence&) = delete;

  void record() override { LAMINA_CUDA_CHECK(cudaEventRecord(event_, stream_)); }
  // From a prefetch thread: the event belongs to the context's device.
  void wait() override {
    LAMINA_CUDA_CHECK(cudaSetDevice(context_.device()));
    LAMINA_CUDA_CHECK(cudaEventSynchronize(event_));
  }

 private:
  CudaContext& context_;
  cudaStream_t stream_;
  cudaEvent_t event_ = nullptr;
};

// Uploads on the context's upload stream (one per device, shared by every lane); marks are
// events of the lane's own, recorded on the main stream, which the upload stream waits for;
// join() makes the main stream wait for the upload stream.
class StreamLane final : public UploadLane {
 public:
  StreamLane(CudaContext& context, int marks) : context_(context) {
    context_.upload_stream();  // made now, with the layer, if this is the device's first lane
    context_.make_current();
    marks_.resize(size_t(marks));
    for (Mark& m : marks_)
      LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&m.event, cudaEventDisableTiming));
  }
  ~StreamLane() override {
    // A wait already issued on a mark keeps its state; the events may go.
    if (cudaSetDevice(context_.device()) == cudaSuccess)
      for (Mark& m : marks_) cudaEventDestroy(m.event);
    cudaGetLastError();  // at process exit the runtime may be gone: nothing to report
  }
  StreamLane(const StreamLane&) = delete;
  StreamLane& operator=(const StreamLane&) = delete;

  void mark(int m) override {
    require(m);
    context_.require_main_lane("an upload mark");
    context_.require_not_capturing("an upload mark");
    LAMINA_CUDA_CHECK(cudaEventRecord(marks_[size_t(m)].event, context_.stream()));
    marks_[size_t(m)].recorded = true;
  }
  void wait_for(int m) override {
    require(m);
    if (marks_[size_t(m)].recorded)
      LAMINA_CUDA_CHECK(
          cudaStreamWaitEvent(context_.upload_stream(), marks_[size_t(m)].event, 0));
  }
  void upload(size_t bytes, const void* pinned_src, void* dst) override {
    context_.require_not_capturing("an upload from the host");
    if (bytes == 0) return;
    context_.make_current();
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice,
                                      context_.upload_stream()));
  }
  void join() override {
    context_.require_main_lane("joining the uploads");
    context_.require_not_capturing("joining the uploads");
    context_.join_upload_lane();
  }
  std::unique_ptr<UploadFence> make_fence() override {
    return std::make_unique<EventFence>(context_, context_.upload_stream());
  }

 private:
  struct Mark {
    cudaEvent_t event = nullptr;
    bool recorded = false;
  };
  void require(int m) const {
    LAMINA_REQUIRE(m >= 0 && m < int(marks_.size()), "upload mark ", m, " of a lane with ",
                   marks_.size());
  }

  CudaContext& context_;
  std::vector<Mark> marks_;
};

}  // namespace

void* CudaBackend::allocate_pinned(size_t bytes) {
  if (bytes == 0) return nullptr;
  require_host_memory(bytes, "page-locked host buffers for uploads");
  context_.make_current();
  void* p = nullptr;
  LAMINA_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void CudaBackend::deallocate_pinned(void* p) noexcept {
  if (p == nullptr) return;
  const cudaError_t status = cudaFreeHost(p);
  if (status != cudaSuccess) {
    cudaGetLastError();
    if (status != cudaErrorCudartUnloading) {
      LOG(ERROR) << "CudaBackend::deallocate_pinned: freeing page-locked memory failed with "
                 << cudaGetErrorName(status) << " (" << cudaGetErrorString(status) << ")";
    }
  }
}

std::unique_ptr<UploadLane> CudaBackend::make_upload_lane(int marks) {
  return std::make_unique<StreamLane>(context_, marks);
}

}  // namespace cuda_detail
}  // namespace lamina
