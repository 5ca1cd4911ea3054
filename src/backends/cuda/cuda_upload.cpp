// CudaBackend's pinned host memory and uploads (Backend::allocate_pinned, upload,
// make_fence): page-locked memory, cudaMemcpyAsync on the main stream, and a fence that is a
// CUDA event recorded after the uploads. A data layer's prefetch threads wait on the fence
// before they write a batch buffer again, so the training step itself never waits.
#include <glog/logging.h>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace cuda_detail {
namespace {

class EventFence final : public UploadFence {
 public:
  explicit EventFence(CudaContext& context) : context_(context) {
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

  void record() override {
    context_.require_not_capturing("recording an upload fence");
    LAMINA_CUDA_CHECK(cudaEventRecord(event_, context_.stream()));
  }
  // From a prefetch thread: the event belongs to the context's device.
  void wait() override {
    LAMINA_CUDA_CHECK(cudaSetDevice(context_.device()));
    LAMINA_CUDA_CHECK(cudaEventSynchronize(event_));
  }

 private:
  CudaContext& context_;
  cudaEvent_t event_ = nullptr;
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

void CudaBackend::upload(size_t bytes, const void* pinned_src, void* dst) {
  context_.require_main_lane("an upload from the host");
  const cudaStream_t s = on_device();
  context_.require_not_capturing("an upload from the host");
  if (bytes == 0) return;
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(dst, pinned_src, bytes, cudaMemcpyHostToDevice, s));
}

std::unique_ptr<UploadFence> CudaBackend::make_fence() {
  return std::make_unique<EventFence>(context_);
}

}  // namespace cuda_detail
}  // namespace lamina
