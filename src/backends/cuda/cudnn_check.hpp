// Status check for cuDNN calls; include only from cudnn.cpp, the one file that includes
// cudnn.h.
#pragma once

#include <cudnn.h>

namespace lamina::cuda_detail {

[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call, const char* file,
                                    int line);

inline void check_cudnn(cudnnStatus_t status, const char* call, const char* file, int line) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn_error(status, call, file, line);
}

}  // namespace lamina::cuda_detail

#define LAMINA_CUDNN_CHECK(call) \
  ::lamina::cuda_detail::check_cudnn((call), #call, __FILE__, __LINE__)
