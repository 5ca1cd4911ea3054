// The batched transpose kernel's launcher (transpose_kernels.cu), for the CUDA files that
// transpose on their own (the TF32 gemm's operands) as well as CudaBackend::transpose.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace lamina::cuda_detail {

// y (outer, cols, rows) = each x (outer, rows, cols) transposed, on stream s. Out of place.
void launch_transpose(cudaStream_t s, int64_t outer, int64_t rows, int64_t cols,
                      const float* x, float* y);

}  // namespace lamina::cuda_detail
