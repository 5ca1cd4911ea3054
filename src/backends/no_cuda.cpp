// cuda.hpp for a build without the CUDA backend (LAMINA_USE_CUDA=OFF or no toolkit).
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

namespace lamina {

bool cuda_compiled() { return false; }
bool cudnn_compiled() { return false; }
int cuda_device_count() { return 0; }
int cuda_pointer_device(const void* /*p*/) { return -1; }

std::unique_ptr<Backend> make_cuda_backend(int device) {
  fail("GPU ", device, " was requested, but this Lamina was built without CUDA. Train on the "
       "CPU (backend \"cpu\"), or rebuild with the CUDA toolkit installed "
       "(cmake -DLAMINA_USE_CUDA=ON).");
}

std::string cuda_device_query() {
  return "This Lamina was built without CUDA: no GPU devices are available.\n";
}

CudaDiagnostics cuda_diagnostics() { return {}; }

}  // namespace lamina
