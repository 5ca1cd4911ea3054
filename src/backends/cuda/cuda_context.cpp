// CudaContext (see cuda_context.hpp), the status checks of cuda_check.hpp and the process-wide
// counters behind cuda_diagnostics().
#include "backends/cuda/cuda_context.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/split_k_gemm.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

namespace lamina {
namespace cuda_detail {
namespace {

std::atomic<int64_t> g_contexts{0};
std::atomic<int64_t> g_streams{0};
std::atomic<int64_t> g_blas_handles{0};
std::atomic<int64_t> g_dnn_handles{0};
std::atomic<int64_t> g_workspace_bytes{0};
std::atomic<int64_t> g_staging_bytes{0};
std::atomic<int64_t> g_conv_algorithm_searches{0};

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

// Errors after which the CUDA context cannot be used again.
bool is_sticky(cudaError_t status) {
  switch (status) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  cudaGetLastError();  // a recoverable error must not resurface at the next launch check
  std::ostringstream hint;
  if (is_sticky(status)) {
    hint << " A kernel failed and the GPU context is unusable; restart the process. Rerun "
            "with CUDA_LAUNCH_BLOCKING=1 to report the failing kernel at its launch.";
    hint << user_kernels_note();
  } else if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) {
    hint << " Check the driver with nvidia-smi, or train on the CPU (backend \"cpu\").";
  }
  fail("CUDA error: ", call, " returned ", cudaGetErrorName(status), " (",
       cudaGetErrorString(status), ") at ", file, ":", line, ".", hint.str());
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  // A kernel that failed earlier (an illegal address) makes cuBLAS's next call fail so.
  fail("cuBLAS error: ", call, " returned ", cublasGetStatusName(status), " (",
       cublasGetStatusString(status), ") at ", file, ":", line, ".",
       status == CUBLAS_STATUS_EXECUTION_FAILED ? user_kernels_note() : std::string());
}

CudaContext& CudaContext::get(int device) {
  // Never destroyed: destroying cuBLAS/cuDNN handles and streams during static destruction
  // races the CUDA runtime's own teardown. The driver releases everything at exit.
  static std::mutex* const mutex = new std::mutex;
  static std::vector<CudaContext*>* const contexts = new std::vector<CudaContext*>;
  CHECK_GE(device, 0);
  std::lock_guard<std::mutex> lock(*mutex);
  if (contexts->size() <= static_cast<size_t>(device)) contexts->resize(device + 1, nullptr);
  CudaContext*& context = (*contexts)[device];
  if (context == nullptr) context = new CudaContext(device);
  return *context;
}

CudaContext::CudaContext(int device) : device_(device) {
  try {
    LAMINA_CUDA_CHECK(cudaSetDevice(device));
    LAMINA_CUDA_CHECK(cudaFree(nullptr));  // initialises the device's primary context
    LAMINA_CUDA_CHECK(cudaGetDeviceProperties(&properties_, device));
    for (Lane& lane : lanes_) create_lane(lane);
    LAMINA_CUDA_CHECK(cudaStreamCreateWithFlags(&collective_, cudaStreamNonBlocking));
    ++g_streams;
    for (cudaEvent_t* event : {&main_done_, &side_done_, &collective_done_})
      LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(event, cudaEventDisableTiming));
    for (StagingSlot& slot : staging_) {
      LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
    }
  } catch (...) {
    release();
    throw;
  }
  ++g_contexts;
}

cudaStream_t CudaContext::upload_stream() {
  std::call_once(upload_once_, [this] {
    make_current();
    LAMINA_CUDA_CHECK(cudaStreamCreateWithFlags(&upload_, cudaStreamNonBlocking));
    ++g_streams;
    LAMINA_CUDA_CHECK(cudaEventCreateWithFlags(&upload_done_, cudaEventDisableTiming));
  });
  return upload_;
}

void CudaContext::create_lane(Lane& lane) {
  LAMINA_CUDA_CHECK(cudaStreamCreateWithFlags(&lane.stream, cudaStreamNonBlocking));
  ++g_streams;
  LAMINA_CUBLAS_CHECK(cublasCreate(&lane.blas));
  ++g_blas_handles;
  LAMINA_CUBLAS_CHECK(cublasSetStream(lane.blas, lane.stream));
  LAMINA_CUBLAS_CHECK(cublasSetMathMode(lane.blas, CUBLAS_DEFAULT_MATH));
  LAMINA_CUBLAS_CHECK(cublasSetPointerMode(lane.blas, CUBLAS_POINTER_MODE_HOST));
  LAMINA_CUBLAS_CHECK(cublasSetAtomicsMode(lane.blas, CUBLAS_ATOMICS_NOT_ALLOWED));
  lane.blas_workspace = allocate(kBlasWorkspaceBytes, "cuBLAS's workspace");
  g_workspace_bytes += static_cast<int64_t>(kBlasWorkspaceBytes);
  LAMINA_CUBLAS_CHECK(cublasSetWorkspace(lane.blas, lane.blas_workspace, kBlasWorkspaceBytes));
  const size_t counter_bytes = sizeof(unsigned) * kSplitKCounters;
  lane.split_k_counters =
      static_cast<unsigned*>(allocate(counter_bytes, "the split-K product's tile counters"));
  LAMINA_CUDA_CHECK(cudaMemsetAsync(lane.split_k_counters, 0, counter_bytes, lane.stream));
}

void CudaContext::release() noexcept {
  for (StagingSlot& slot : staging_) {
    if (slot.copied) cudaEventDestroy(slot.copied);
    slot.copied = nullptr;
  }
  for (cudaEvent_t* event : {&main_done_, &side_done_, &collective_done_, &upload_done_}) {
    if (*event) cudaEventDestroy(*event);
    *event = nullptr;
  }
  for (cudaStream_t* stream : {&collective_, &upload_}) {
    if (*stream) cudaStreamDestroy(*stream);
    *stream = nullptr;
  }
  for (Lane& lane : lanes_) {  // a constructor that failed has made no cuDNN handle yet
    if (lane.blas) cublasDestroy(lane.blas);
    if (lane.blas_workspace) cudaFree(lane.blas_workspace);
    if (lane.split_k_counters) cudaFree(lane.split_k_counters);
    if (lane.stream) cudaStreamDestroy(lane.stream);
    lane = Lane();
  }
  cudaGetLastError();
}

cudnnContext* CudaContext::dnn() {
  std::call_once(dnn_once_, [this] {
    make_current();
    for (Lane& lane : lanes_) {
      lane.dnn = create_dnn_handle(lane.stream);
      ++g_dnn_handles;
    }
  });
  return lane().dnn;
}

void CudaContext::make_current() const {
  int current = -1;
  LAMINA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device_) LAMINA_CUDA_CHECK(cudaSetDevice(device_));
}

void* CudaContext::allocate(size_t bytes, const char* purpose) const {
  require_not_capturing("an allocation");
  if (bytes == 0) return nullptr;
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaSuccess) return p;
  cudaGetLastError();  // out of memory is recoverable: keep it from failing the next launch
  if (status != cudaErrorMemoryAllocation) throw_cuda_error(status, "cudaMalloc", __FILE__, __LINE__);
  size_t free_bytes = 0, total_bytes = 0;
  const bool known = cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess;
  cudaGetLastError();
  std::ostringstream available;
  if (known) {
    available << free_bytes << " bytes (" << free_bytes / kMiB << " MiB) of "
              << total_bytes / kMiB << " MiB are free";
  } else {
    available << "the free memory could not be queried";
  }
  fail("CUDA out of memory on GPU ", device_, " (", properties_.name, "): cudaMalloc of ",
       bytes, " bytes (", bytes / kMiB, " MiB) for ", purpose,
       " failed with cudaErrorMemoryAllocation; ", available.str(),
       ". Reduce the batch size or the model, or stop other processes on the GPU "
       "(nvidia-smi lists them).");
}

void* CudaContext::workspace(size_t bytes) { return grow_workspace(lane(), bytes); }

void CudaContext::reserve_workspaces(size_t main_bytes, size_t side_bytes) {
  grow_workspace(lanes_[0], main_bytes);
  grow_workspace(lanes_[1], side_bytes);
}

void* CudaContext::grow_workspace(Lane& lane, size_t bytes) {
  if (bytes <= lane.workspace_bytes) return lane.workspace;
  require_not_capturing("growing the workspace");
  const size_t grown = std::max({bytes, 2 * lane.workspace_bytes, size_t{1} << 20});
  if (lane.workspace) {
    // Kernels queued earlier on the lane may still use the old buffer.
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(lane.stream));
    LAMINA_CUDA_CHECK(cudaFree(lane.workspace));
    g_workspace_bytes -= static_cast<int64_t>(lane.workspace_bytes);
    lane.workspace = nullptr;
    lane.workspace_bytes = 0;
  }
  lane.workspace = allocate(grown, "the CUDA backend's workspace");
  lane.workspace_bytes = grown;
  ++workspace_moves_;
  g_workspace_bytes += static_cast<int64_t>(grown);
  return lane.workspace;
}

void CudaContext::require_not_capturing(const char* what) const {
  LAMINA_REQUIRE(!capturing_, what, " cannot be part of a captured step: it waits for the "
                 "device, copies between host and device, or allocates; do it before or "
                 "after the step, or keep the value in device memory");
}

void CudaContext::upload(size_t bytes, const void* host_src, void* dst) {
  require_not_capturing("a copy from the host");
  if (bytes == 0) return;
  if (bytes > kMaxStagedBytes) {
    // Large copies (a whole data set, a snapshot) are rare: copy and wait, so host_src may
    // be freed on return whether it is pageable or pinned.
    LAMINA_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream()));
    LAMINA_CUDA_CHECK(cudaStreamSynchronize(stream()));
    return;
  }
  StagingSlot& slot = staging_[next_slot_];
  next_slot_ = (next_slot_ + 1) % kStagingSlots;
  if (slot.pending) {
    // The device may still be reading this slot for an earlier copy (normally long done:
    // kStagingSlots - 1 other copies were queued after it).
    LAMINA_CUDA_CHECK(cudaEventSynchronize(slot.copied));
    slot.pending = false;
  }
  if (slot.capacity < bytes) {
    const size_t capacity = std::min(kMaxStagedBytes, std::max(bytes, size_t{64} << 10) * 2);
    if (slot.host) {
      LAMINA_CUDA_CHECK(cudaFreeHost(slot.host));
      g_staging_bytes -= static_cast<int64_t>(slot.capacity);
      slot.host = nullptr;
      slot.capacity = 0;
    }
    LAMINA_CUDA_CHECK(cudaHostAlloc(&slot.host, capacity, cudaHostAllocDefault));
    slot.capacity = capacity;
    g_staging_bytes += static_cast<int64_t>(capacity);
  }
  std::memcpy(slot.host, host_src, bytes);
  LAMINA_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, stream()));
  LAMINA_CUDA_CHECK(cudaEventRecord(slot.copied, stream()));
  slot.pending = true;
}

void count_conv_algorithm_search() { ++g_conv_algorithm_searches; }

}  // namespace cuda_detail

CudaDiagnostics cuda_diagnostics() {
  using namespace cuda_detail;
  CudaDiagnostics d;
  d.contexts_created = g_contexts.load();
  d.streams_created = g_streams.load();
  d.blas_handles_created = g_blas_handles.load();
  d.dnn_handles_created = g_dnn_handles.load();
  d.workspace_bytes = g_workspace_bytes.load();
  d.staging_bytes = g_staging_bytes.load();
  d.conv_algorithm_searches = g_conv_algorithm_searches.load();
  return d;
}

}  // namespace lamina
