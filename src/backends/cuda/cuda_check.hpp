// Status checks for the CUDA runtime, cuBLAS and kernel launches (cuDNN: cudnn_check.hpp).
//
// Every call goes through one of these macros; a failure throws lamina::Error naming the
// call, the status (name and description) and file:line. Launches are followed by
// LAMINA_CUDA_LAUNCHED, which reports a bad launch configuration at the launch itself;
// errors inside a kernel surface at the next synchronising call (rerun with
// CUDA_LAUNCH_BLOCKING=1 to attribute them to the kernel).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

namespace lamina::cuda_detail {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file,
                                   int line);
// Whether the status is one after which the CUDA context cannot be used again (a kernel
// failed while it ran: an illegal address, an assertion).
bool is_sticky(cudaError_t status);
// For the message of such an error: the kernels of layers defined outside Lamina that were
// launched last, which may be the one that failed (user_kernels.cpp); empty when none were.
std::string user_kernels_note();
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file,
                                     int line);

inline void check_cuda(cudaError_t status, const char* call, const char* file, int line) {
  if (status != cudaSuccess) throw_cuda_error(status, call, file, line);
}

inline void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
  if (status != CUBLAS_STATUS_SUCCESS) throw_cublas_error(status, call, file, line);
}

}  // namespace lamina::cuda_detail

#define LAMINA_CUDA_CHECK(call) \
  ::lamina::cuda_detail::check_cuda((call), #call, __FILE__, __LINE__)
#define LAMINA_CUBLAS_CHECK(call) \
  ::lamina::cuda_detail::check_cublas((call), #call, __FILE__, __LINE__)
// After every kernel launch; kernel is the kernel's name.
#define LAMINA_CUDA_LAUNCHED(kernel)                                                   \
  ::lamina::cuda_detail::check_cuda(cudaGetLastError(), "launch of " #kernel, __FILE__, \
                                    __LINE__)
