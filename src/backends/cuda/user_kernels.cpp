// cuda_kernels.hpp on the CUDA backend: the stream, device and workspace of a CudaBackend for
// the kernels of layers defined outside Lamina, and the check that follows their launches.
//
// A launch that fails is reported at once, naming the layer. An error a kernel makes while it
// runs reaches the host at the next call that waits for the device; with
// LAMINA_CHECK_KERNELS=1 that call is made right after each checked launch (and before the
// layer's first, in stream()). Without it, the kernels checked last are remembered (a few,
// each once) so that the error's message names them (user_kernels_note, which
// throw_cuda_error adds to the message of an error that leaves the device unusable).
#include <algorithm>
#include <array>
#include <cstdio>
#include <mutex>
#include <sstream>
#include <string>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda_kernels.hpp"
#include "lamina/layer.hpp"

namespace lamina {
namespace cuda_detail {
namespace {

// The CudaBackend behind backend, or an Error naming it and the call.
CudaBackend& cuda_backend(Backend& backend, const char* call) {
  auto* cuda = dynamic_cast<CudaBackend*>(&backend);
  LAMINA_REQUIRE(cuda != nullptr, "lamina::cuda::", call, "(): backend ", backend.name(),
                 " is not a CUDA backend, so it has no stream, device or workspace; a layer "
                 "with kernels of its own asks lamina::cuda::is_cuda() and runs its CPU "
                 "implementation on other backends, or refuses them in setup with "
                 "lamina::cuda::require_cuda()");
  return *cuda;
}

// "layer 'tl1' (TiledLinear)"
std::string label(const Layer& layer) {
  return "layer '" + layer.name() + "' (" + layer.type() + ")";
}

// The kernels launched last, most recent last, each once. add() runs at every checked launch,
// inside the training step: it compares pointers and, for a launch not among the kept ones,
// formats into fixed buffers; it never allocates.
class RecentKernels {
 public:
  void add(const Layer& layer, const char* kernel) {
    std::lock_guard<std::mutex> lock(mutex_);
    size_t found = count_;
    // The layer's name too: a later layer may be built at a destroyed one's address.
    for (size_t i = 0; i < count_ && found == count_; ++i)
      if (entries_[i].layer == &layer && entries_[i].kernel == kernel &&
          layer.name() == entries_[i].name)
        found = i;
    if (found == count_) {
      if (count_ == kKept) found = 0;  // the oldest goes
      else found = count_++;
      Entry& e = entries_[found];
      e.layer = &layer;
      e.kernel = kernel;
      std::snprintf(e.name, sizeof e.name, "%s", layer.name().c_str());
      std::snprintf(e.text, sizeof e.text, "layer '%s' (%s): %s", layer.name().c_str(),
                    layer.type().c_str(), kernel);
    }
    std::rotate(entries_.begin() + static_cast<std::ptrdiff_t>(found),
                entries_.begin() + static_cast<std::ptrdiff_t>(found) + 1,
                entries_.begin() + static_cast<std::ptrdiff_t>(count_));  // to the back
  }
  std::string list() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::string out;
    for (size_t i = 0; i < count_; ++i) out += (out.empty() ? "" : "; ") + std::string(entries_[i].text);
    return out;
  }

 private:
  static constexpr size_t kKept = 4;
  struct Entry {
    const Layer* layer = nullptr;
    const char* kernel = nullptr;
    char name[128] = {};
    char text[256] = {};
  };
  mutable std::mutex mutex_;
  std::array<Entry, kKept> entries_;
  size_t count_ = 0;
};

RecentKernels& recent_kernels() {
  static RecentKernels* const recent = new RecentKernels;  // used until the process exits
  return *recent;
}

}  // namespace

std::string user_kernels_note() {
  const std::string list = recent_kernels().list();
  if (list.empty()) return {};
  return " Kernels of layers defined outside Lamina ran before it (the last ones: " + list +
         "); if one of them failed, rerun with LAMINA_CHECK_KERNELS=1 to have it reported "
         "at its launch with its layer.";
}

}  // namespace cuda_detail

namespace cuda {

using cuda_detail::CudaBackend;
using cuda_detail::cuda_backend;

bool is_cuda(const Backend& backend) {
  return dynamic_cast<const CudaBackend*>(&backend) != nullptr;
}

int device(const Backend& backend) {
  return cuda_backend(const_cast<Backend&>(backend), "device").context().device();
}

Stream stream(Backend& backend) {
  cuda_detail::CudaContext& context = cuda_backend(backend, "stream").context();
  context.make_current();
  if (kernel_checks() && !context.capturing()) {
    const cudaError_t status = cudaDeviceSynchronize();
    if (status != cudaSuccess)
      cuda_detail::throw_cuda_error(status, "an operation before the caller's kernels "
                                    "(LAMINA_CHECK_KERNELS=1 waited for it)", __FILE__,
                                    __LINE__);
  }
  return context.lane_stream();
}

void* workspace(Backend& backend, size_t bytes) {
  cuda_detail::CudaContext& context = cuda_backend(backend, "workspace").context();
  context.make_current();
  return context.workspace(bytes);
}

void check_launch(const Layer& layer, int status, const char* kernel, const char* file,
                  int line) {
  auto error = static_cast<cudaError_t>(status);
  if (error == cudaSuccess) {
    cuda_detail::recent_kernels().add(layer, kernel);
    if (!kernel_checks() || cuda_backend(layer.backend(), "check_launch").context().capturing())
      return;
    error = cudaDeviceSynchronize();
    if (error == cudaSuccess) return;
    fail(cuda_detail::label(layer), ": its kernel ", kernel, " (launched at ", file, ":", line,
         ") failed while it ran: ", cudaGetErrorName(error), " (", cudaGetErrorString(error),
         "), found by LAMINA_CHECK_KERNELS=1. ",
         cuda_detail::is_sticky(error)
             ? "The GPU context is unusable; fix the kernel and restart the process."
             : "");
  }
  cudaGetLastError();  // a launch error is not sticky: keep it from failing the next check
  if (cuda_detail::is_sticky(error)) {
    // The device failed before this launch: an earlier kernel, of this layer or another.
    fail(cuda_detail::label(layer), ": the launch of its kernel ", kernel, " at ", file, ":",
         line, " found the GPU failed: ", cudaGetErrorName(error), " (",
         cudaGetErrorString(error), "), from a kernel that ran before it; the GPU context is "
         "unusable, restart the process.", cuda_detail::user_kernels_note());
  }
  std::ostringstream gpu;
  if (is_cuda(layer.backend())) {
    const cudaDeviceProp& p = cuda_backend(layer.backend(), "check_launch").context().properties();
    gpu << " (compute capability " << p.major << "." << p.minor << ")";
  }
  fail(cuda_detail::label(layer), ": its kernel ", kernel, " failed to launch at ", file, ":",
       line, ": ", cudaGetErrorName(error), " (", cudaGetErrorString(error), "); check the "
       "launch configuration (grid and block sizes, at most 1024 threads per block, the "
       "shared memory asked for) and that the kernel was compiled for this GPU", gpu.str());
}

}  // namespace cuda
}  // namespace lamina
