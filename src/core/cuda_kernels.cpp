// The parts of cuda_kernels.hpp that are the same in every build: a layer with CUDA kernels
// only refusing other backends, and LAMINA_CHECK_KERNELS. The rest is the CUDA backend's
// (src/backends/cuda/user_kernels.cpp) or, without CUDA, no_cuda_kernels.cpp.
#include <cstdlib>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/cuda.hpp"
#include "lamina/cuda_kernels.hpp"
#include "lamina/layer.hpp"

namespace lamina::cuda {

void require_cuda(const Layer& layer) {
  if (is_cuda(layer.backend())) return;
  fail("layer '", layer.name(), "' (", layer.type(), ") has CUDA kernels and no CPU "
       "implementation, so it runs only on a CUDA backend, and this net runs on ",
       layer.backend().name(), ". ",
       cuda_compiled() ? "Train on a GPU (solver_mode: GPU, or lamina train --gpu 0)."
                       : "This Lamina was built without CUDA: rebuild it with the CUDA "
                         "toolkit installed (cmake -DLAMINA_USE_CUDA=ON) and train on a GPU.");
}

bool kernel_checks() {
  static const bool on = [] {
    const char* value = std::getenv("LAMINA_CHECK_KERNELS");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return on;
}

}  // namespace lamina::cuda
