// The cuDNN handle of a CudaContext, and cuDNN's version for device_query. This is the one
// file (with the cuDNN layers to come) that includes cudnn.h; without LAMINA_WITH_CUDNN it
// only reports that cuDNN is missing.
#include <sstream>
#include <string>

#include "backends/cuda/cuda_context.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

#if defined(LAMINA_WITH_CUDNN)
#include "backends/cuda/cudnn_check.hpp"
#endif

namespace lamina {

#if defined(LAMINA_WITH_CUDNN)

bool cudnn_compiled() { return true; }

namespace cuda_detail {

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

}  // namespace cuda_detail

#else  // !LAMINA_WITH_CUDNN

bool cudnn_compiled() { return false; }

namespace cuda_detail {

cudnnContext* create_dnn_handle(cudaStream_t) {
  fail("this Lamina was built without cuDNN, which this layer needs; install cuDNN and "
       "rebuild (cmake -DLAMINA_USE_CUDNN=ON), or train on the CPU by leaving out --gpu.");
}

std::string dnn_version_string() { return "not built with cuDNN"; }

}  // namespace cuda_detail

#endif

}  // namespace lamina
