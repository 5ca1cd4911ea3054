// The CUDA backend, behind an interface that exists in every build: a build without CUDA
// reports zero devices, and asking it for a GPU is an Error that says how to train on the CPU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "lamina/backend.hpp"

namespace lamina {

bool cuda_compiled();       // built with LAMINA_USE_CUDA
bool cudnn_compiled();      // the CUDA backend was built with cuDNN
int cuda_device_count();    // 0 when not compiled or no device/driver
// The backend for a device. All backends of one device share that device's process-wide
// context (stream, cuBLAS and cuDNN handles, workspace), created once on first use.
// Throws Error when the device does not exist, naming what was found.
std::unique_ptr<Backend> make_cuda_backend(int device);
// The device whose memory p points into (cudaMalloc'd or managed memory), or -1 for host
// memory (registered or not) and addresses CUDA does not know; -1 in builds without CUDA.
int cuda_pointer_device(const void* p);
// A readable report of every device, as `lamina device_query` prints it.
std::string cuda_device_query();

// What the process has created so far, summed over devices. A training run creates one
// context per device it uses, with two streams (the main and the side lane) and a cuBLAS
// handle for each (and a cuDNN handle for each, lazily, when a layer first needs cuDNN),
// however many backends, layers and iterations it runs.
struct CudaDiagnostics {
  int64_t contexts_created = 0;      // CudaContext objects (one per device, on the primary
                                     // context the CUDA runtime keeps for that device)
  int64_t streams_created = 0;
  int64_t blas_handles_created = 0;
  int64_t dnn_handles_created = 0;
  int64_t workspace_bytes = 0;       // device scratch memory held by all contexts
  int64_t staging_bytes = 0;         // pinned host memory used to stage copy_from_host
  int64_t conv_algorithm_searches = 0;  // convolution geometries whose cuDNN algorithms were
                                        // chosen: once per geometry and device, at its
                                        // first convolution call
};
CudaDiagnostics cuda_diagnostics();

}  // namespace lamina
