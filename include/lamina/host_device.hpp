// LAMINA_HOST_DEVICE marks a function that both the host and CUDA kernels call (one
// implementation for both backends); outside nvcc it is empty.
#pragma once

#if defined(__CUDACC__)
#define LAMINA_HOST_DEVICE __host__ __device__
#else
#define LAMINA_HOST_DEVICE
#endif
