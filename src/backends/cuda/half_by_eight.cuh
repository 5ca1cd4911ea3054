// Elementwise kernels over 16-bit arrays eight values at a time: each group of eight is one
// 16-byte load per input and one 16-byte store, where two-byte loads ran at about half the
// memory's speed. For arrays whose addresses are all 16-byte aligned (alignment.hpp).
#pragma once

#include <cstdint>
#include <utility>

#include "backends/cuda/alignment.hpp"
#include "backends/cuda/kernel_util.cuh"

namespace lamina::cuda_detail {

template <class F, size_t N, size_t... I>
__device__ __forceinline__ uint16_t apply_to_lane(const F& f, const uint4 (&groups)[N], int k,
                                                  std::index_sequence<I...>) {
  return f(reinterpret_cast<const uint16_t*>(&groups[I])[k]...);
}

// out[j] = f(in[j]...) for j < n: n / 8 groups of eight (a grid-stride loop), then the last
// n % 8 values one by one. Each thread loads a whole group before it stores it, so out may
// be one of the inputs.
template <class F, class... In>
__device__ __forceinline__ void by_eight(int64_t n, const F& f, uint16_t* out, const In*... in) {
  const int64_t groups = n / 8;
  LAMINA_GRID_STRIDE_LOOP(g, groups) {
    const uint4 loaded[] = {reinterpret_cast<const uint4*>(in)[g]...};
    uint4 result;
    uint16_t* values = reinterpret_cast<uint16_t*>(&result);
#pragma unroll
    for (int k = 0; k < 8; ++k)
      values[k] = apply_to_lane(f, loaded, k, std::index_sequence_for<In...>{});
    reinterpret_cast<uint4*>(out)[g] = result;
  }
  LAMINA_GRID_STRIDE_LOOP(i, n - groups * 8) {
    const int64_t j = groups * 8 + i;
    out[j] = f(in[j]...);
  }
}

// Blocks for by_eight over n values.
inline unsigned by_eight_grid(int64_t n) { return elementwise_grid((n + 7) / 8); }

}  // namespace lamina::cuda_detail
