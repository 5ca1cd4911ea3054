// The device side of a PassCounter (pass_counter.hpp) for the kernels that read one and
// advance it (data_kernels.cu: dropout, a data layer's batch; pooling_kernels.cu: stochastic
// pooling): every block reads counter->passes, and the last block to finish adds one.
#pragma once

#include "lamina/pass_counter.hpp"

namespace lamina::cuda_detail {

// Called by every thread once it has read counter->passes for the last time: the last block
// to get here adds one to passes. A block counts itself only after all its threads have read
// (__syncthreads), and the last of gridDim.x blocks comes after every block has counted, so
// no thread of this launch reads the new value; the next launch on the stream does.
__device__ inline void finish_pass(PassCounter* counter) {
  __syncthreads();
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(&counter->blocks_done, 1u) + 1 == gridDim.x) {
    counter->blocks_done = 0;
    counter->passes += 1;
  }
}

}  // namespace lamina::cuda_detail
