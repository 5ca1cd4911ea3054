// Custom CUDA kernels in user layers: what a layer's own kernels need from Lamina.
//
// A layer defined outside Lamina may launch kernels of its own instead of (or beside) Backend
// operations. On a CUDA backend its tensors' data() and diff() are device pointers of the
// backend's device; its kernels go to the stream Lamina's own operations use now (stream(),
// which is the side lane's inside a SideLane: parameter gradients beside the input
// gradients), with scratch memory from the backend's workspace (workspace()), and every
// launch is followed by LAMINA_KERNEL_LAUNCHED, which turns a failed launch into a
// lamina::Error naming the layer and the kernel. On any other backend the layer runs its CPU
// implementation, or refuses in setup with require_cuda(). docs/custom_layers.md gives the
// rules; examples/custom_cuda_layer/ is a complete layer.
//
//   void forward(const Tensors& bottom, const Tensors& top) override {
//     if (!lamina::cuda::is_cuda(backend_)) return forward_cpu(bottom, top);
//     cudaStream_t s = lamina::cuda::stream(backend_);
//     my_kernel<<<blocks, threads, 0, s>>>(bottom[0]->data(), top[0]->mutable_data(), n);
//     LAMINA_KERNEL_LAUNCHED(*this, my_kernel);
//   }
//
// This header exists in every build and needs no CUDA header: in a build without CUDA,
// is_cuda() is false and the rest throws an Error saying so. LAMINA_KERNEL_LAUNCHED calls
// cudaGetLastError() where it is written (in the layer's own .cu file, with its CUDA runtime).
//
// Errors a kernel makes while it runs (an illegal address) reach the host later, at the next
// call that waits for the device, and leave the device unusable. With the environment
// variable LAMINA_CHECK_KERNELS=1 every LAMINA_KERNEL_LAUNCHED waits for its kernel (and
// stream() for the operations before it), so such an error is reported at the kernel, naming
// its layer; training steps are then not captured as CUDA graphs. Without it, the error that
// reports the failure names the layers whose kernels ran last.
#pragma once

#include <cstddef>

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace lamina {

class Backend;
class Layer;

namespace cuda {

using Stream = CUstream_st*;  // the same type as cudaStream_t

// Whether backend is one of Lamina's CUDA backends: then a tensor's data() and diff() are
// pointers into that device's memory.
bool is_cuda(const Backend& backend);

// The device (0, 1, ...) of a CUDA backend. Throws an Error naming the backend otherwise.
int device(const Backend& backend);

// The stream the backend's operations go to now: the device's main stream, or its side
// lane's between to_side_lane and to_main_lane (a SideLane in backward_params). A layer
// asks for it in each forward and backward call, never keeps it. Makes the backend's device
// current on the calling thread. Throws an Error naming the backend when it is not a CUDA
// backend. With LAMINA_CHECK_KERNELS=1 it first waits for the operations issued before
// (outside a capture), so that an error of theirs is not blamed on the caller's kernels.
Stream stream(Backend& backend);

// At least bytes of device scratch memory of the current lane (as stream()), valid for the
// kernels the caller launches next on stream(backend), until the next Backend operation
// (which may use it too). It grows, never shrinks; growing cannot happen inside a captured
// step, so a layer asks for the same size at every pass (the first pass, which is not
// captured, grows it). Throws like stream().
void* workspace(Backend& backend, size_t bytes);

// Throws an Error naming the layer when it does not run on a CUDA backend: for a layer with
// CUDA kernels only and no CPU implementation, called in its setup().
void require_cuda(const Layer& layer);

// LAMINA_KERNEL_LAUNCHED's check: status is what cudaGetLastError() returned right after
// the layer launched `kernel` (a cudaError_t as int). A failed launch (a bad configuration,
// too much shared memory, no kernel image for this GPU) throws an Error naming the layer,
// the kernel, the status and file:line. With LAMINA_CHECK_KERNELS=1, outside a capture, it
// then waits for the kernel and reports an error it made while running the same way.
void check_launch(const Layer& layer, int status, const char* kernel, const char* file,
                  int line);

// Whether LAMINA_CHECK_KERNELS=1 is set (read once).
bool kernel_checks();

}  // namespace cuda
}  // namespace lamina

// After every launch of a layer's own kernel: LAMINA_KERNEL_LAUNCHED(*this, my_kernel).
#define LAMINA_KERNEL_LAUNCHED(layer, kernel)                                                   \
  ::lamina::cuda::check_launch((layer), static_cast<int>(cudaGetLastError()), #kernel, __FILE__, \
                               __LINE__)
