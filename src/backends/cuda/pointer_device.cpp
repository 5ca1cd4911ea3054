// cuda_pointer_device (cuda.hpp): which GPU's memory an address is in, as the CUDA runtime's
// pointer attributes say. The inference API checks device inputs with it.
#include <cuda_runtime.h>

#include "lamina/cuda.hpp"

namespace lamina {

int cuda_pointer_device(const void* p) {
  if (p == nullptr || cuda_device_count() == 0) return -1;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // an address the runtime does not know is not device memory
    return -1;
  }
  const bool on_device =
      attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
  return on_device ? attributes.device : -1;
}

}  // namespace lamina
