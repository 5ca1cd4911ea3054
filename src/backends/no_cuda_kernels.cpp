// cuda_kernels.hpp for a build without the CUDA backend: no backend is a CUDA backend, so a
// layer with kernels of its own runs its CPU implementation (or refuses, require_cuda), and
// asking for a stream, a device or a workspace is an Error saying how to get one.
#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda_kernels.hpp"
#include "lamina/layer.hpp"

namespace lamina::cuda {
namespace {

[[noreturn]] void no_cuda(const char* call, const Backend& backend) {
  fail("lamina::cuda::", call, "() was called for backend ", backend.name(), ", but this "
       "Lamina was built without CUDA, so no backend has a stream, device or workspace; a "
       "layer with kernels of its own asks lamina::cuda::is_cuda() and runs its CPU "
       "implementation otherwise");
}

}  // namespace

bool is_cuda(const Backend&) { return false; }
int device(const Backend& backend) { no_cuda("device", backend); }
Stream stream(Backend& backend) { no_cuda("stream", backend); }
void* workspace(Backend& backend, size_t) { no_cuda("workspace", backend); }
void check_launch(const Layer& layer, int, const char*, const char*, int) {
  no_cuda("check_launch", layer.backend());
}

}  // namespace lamina::cuda
