// The split-K FP32 product (split_k_gemm.hpp). D (m, n), column-major with leading
// dimension m, is cut into 32 x 32 tiles and K into parts of 32 or more; a block of 256
// threads computes one part of one tile, 2 x 2 values per thread, its part's slabs of 32
// loaded through shared memory with the next slab's loads in flight. With one part a block
// writes D itself. With more, each block writes its sums to the workspace, and the block
// that arrives last at its tile (an atomic count; the count goes back to zero) adds the
// parts' sums in part order, so the result does not depend on which block came last.
#include <algorithm>

#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/split_k_gemm.hpp"
#include "lamina/relu.hpp"

namespace lamina::cuda_detail {
namespace {

constexpr int kTile = 32, kHalf = 16, kThreads = 256;
constexpr int kRowsPerPass = kThreads / kTile;  // slab rows one pass of the block loads
constexpr int kPerThread = kTile / kRowsPerPass;  // loads per slab of A or B
constexpr int kMaxParts = 16, kChunk = 8;         // parts' sums loaded kChunk at a time

// Offsets fit in int: split_k_gemm_takes refuses operands of 2^30 values or more.
struct SplitK {
  int m, n, k;
  int part_k;  // K values per part, a multiple of kTile
  int parts, tiles_m;
};

// A slab (32 values of K from p0) of op(A) rows i0.. and op(B) columns j0.. into registers.
// Thread t loads values (fast = t % 32, slow = t / 32 + 8 q), fast along the operand's
// stride-1 dimension: A is (m, k) with stride 1 in m untransposed, (k, m) with stride 1 in k
// transposed; B likewise in k and n. Values past the edges are 0.
template <bool kTransA, bool kTransB>
__device__ __forceinline__ void load_slab(const SplitK& g, const float* a, const float* b,
                                          int i0, int j0, int p0, int p_end,
                                          float (&ra)[kPerThread], float (&rb)[kPerThread]) {
  const int fast = threadIdx.x % kTile, slow = threadIdx.x / kTile;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int s = slow + kRowsPerPass * q;
    const int i = i0 + (kTransA ? s : fast), pa = p0 + (kTransA ? fast : s);
    ra[q] = i < g.m && pa < p_end ? __ldg(a + (kTransA ? pa + i * g.k : i + pa * g.m)) : 0.0f;
    const int j = j0 + (kTransB ? fast : s), pb = p0 + (kTransB ? s : fast);
    rb[q] = j < g.n && pb < p_end ? __ldg(b + (kTransB ? j + pb * g.n : pb + j * g.k)) : 0.0f;
  }
}

// Into shared memory as as[p][i] and bs[p][j].
template <bool kTransA, bool kTransB>
__device__ __forceinline__ void store_slab(const float (&ra)[kPerThread],
                                           const float (&rb)[kPerThread],
                                           float (*as)[kTile + 1], float (*bs)[kTile + 1]) {
  const int fast = threadIdx.x % kTile, slow = threadIdx.x / kTile;
#pragma unroll
  for (int q = 0; q < kPerThread; ++q) {
    const int s = slow + kRowsPerPass * q;
    if (kTransA) as[fast][s] = ra[q]; else as[s][fast] = ra[q];
    if (kTransB) bs[s][fast] = rb[q]; else bs[fast][s] = rb[q];
  }
}

template <bool kTransA, bool kTransB>
__global__ void __launch_bounds__(kThreads)
    split_k_gemm_kernel(SplitK g, float alpha, const float* __restrict__ a,
                        const float* __restrict__ b, const float* __restrict__ bias, bool relu,
                        float beta, float* d, float* partial, unsigned* counters) {
  __shared__ float as[kTile][kTile + 1], bs[kTile][kTile + 1];
  __shared__ bool last;
  const int tile = blockIdx.x, part = blockIdx.y;
  const int i0 = tile % g.tiles_m * kTile, j0 = tile / g.tiles_m * kTile;
  const int p_begin = part * g.part_k, p_end = min(g.k, p_begin + g.part_k);
  const int tx = threadIdx.x % kHalf, ty = threadIdx.x / kHalf;
  float acc[2][2] = {{0, 0}, {0, 0}};
  float ra[kPerThread], rb[kPerThread];
  load_slab<kTransA, kTransB>(g, a, b, i0, j0, p_begin, p_end, ra, rb);
  for (int p0 = p_begin; p0 < p_end; p0 += kTile) {
    store_slab<kTransA, kTransB>(ra, rb, as, bs);
    __syncthreads();
    if (p0 + kTile < p_end) load_slab<kTransA, kTransB>(g, a, b, i0, j0, p0 + kTile, p_end, ra, rb);
#pragma unroll 8
    for (int p = 0; p < kTile; ++p) {
      const float a0 = as[p][tx], a1 = as[p][tx + kHalf], b0 = bs[p][ty], b1 = bs[p][ty + kHalf];
      acc[0][0] = fmaf(a0, b0, acc[0][0]);
      acc[1][0] = fmaf(a1, b0, acc[1][0]);
      acc[0][1] = fmaf(a0, b1, acc[0][1]);
      acc[1][1] = fmaf(a1, b1, acc[1][1]);
    }
    __syncthreads();
  }
  if (g.parts > 1) {
    // Result (u, v) of this thread is value threadIdx.x + 256 (2 v + u) of the tile's sums.
    const int tile_values = kTile * kTile;
    float* mine = partial + (part * gridDim.x + tile) * tile_values + threadIdx.x;
#pragma unroll
    for (int u = 0; u < 2; ++u)
#pragma unroll
      for (int v = 0; v < 2; ++v) __stcg(mine + kThreads * (2 * v + u), acc[u][v]);
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(counters + tile, 1u) == unsigned(g.parts - 1);
    __syncthreads();
    if (!last) return;
    __threadfence();
    // The parts' sums kChunk parts at a time, all of a chunk loaded before any is added (a
    // round trip per chunk, not per part), added in part order.
    const float* sums = partial + tile * tile_values + threadIdx.x;
    const int part_stride = gridDim.x * tile_values;
    for (int q0 = 0; q0 < g.parts; q0 += kChunk) {
      float loaded[kChunk][4];
#pragma unroll
      for (int q = 0; q < kChunk; ++q)
#pragma unroll
        for (int r = 0; r < 4; ++r)
          loaded[q][r] = q0 + q < g.parts ? __ldcg(sums + (q0 + q) * part_stride + kThreads * r)
                                          : 0.0f;
#pragma unroll
      for (int q = 0; q < kChunk; ++q) {
        if (q0 + q >= g.parts) break;
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          float& value = acc[r % 2][r / 2];
          value = q0 + q == 0 ? loaded[q][r] : value + loaded[q][r];
        }
      }
    }
    if (threadIdx.x == 0) counters[tile] = 0;
  }
#pragma unroll
  for (int u = 0; u < 2; ++u) {
#pragma unroll
    for (int v = 0; v < 2; ++v) {
      const int i = i0 + tx + kHalf * u, j = j0 + ty + kHalf * v;
      if (i >= g.m || j >= g.n) continue;
      float value = alpha * acc[u][v];
      float* out = d + (i + static_cast<int64_t>(j) * g.m);
      if (beta != 0) value = fmaf(beta, *out, value);
      if (bias != nullptr) value += bias[i];
      if (relu) value = fused_relu_value(value);
      *out = value;
    }
  }
}

bool takes_epilogue(cublasLtEpilogue_t epilogue) {
  return epilogue == CUBLASLT_EPILOGUE_DEFAULT || epilogue == CUBLASLT_EPILOGUE_BIAS ||
         epilogue == CUBLASLT_EPILOGUE_RELU || epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
}

int64_t tiles_of(const LtKey& key) {
  return ((key.m + kTile - 1) / kTile) * ((key.n + kTile - 1) / kTile);
}

// Parts of 32 K values, longer (64, 128, ...) while there would be more than kMaxParts or
// more blocks than about 6 per SM.
SplitK layout(const LtKey& key, int sms) {
  SplitK g{static_cast<int>(key.m), static_cast<int>(key.n), static_cast<int>(key.k), kTile,
           1, static_cast<int>((key.m + kTile - 1) / kTile)};
  const int64_t tiles = tiles_of(key), blocks = 6 * int64_t{std::max(sms, 1)};
  auto parts = [&] { return (key.k + g.part_k - 1) / g.part_k; };
  while (g.part_k < key.k && (parts() > kMaxParts || parts() * tiles > blocks)) g.part_k *= 2;
  g.parts = static_cast<int>(parts());
  return g;
}

}  // namespace

bool split_k_gemm_takes(const LtKey& key, int sms, size_t workspace_bytes) {
  if (key.ab != CUDA_R_32F || key.d != CUDA_R_32F || key.math != Math::kFP32) return false;
  if (!takes_epilogue(key.epilogue) || key.m <= 0 || key.n <= 0 || key.k <= 0) return false;
  // Offsets, and K plus a part or a slab, stay below INT_MAX.
  constexpr int64_t kLimit = int64_t{1} << 30;
  if (key.m * key.k >= kLimit || key.k * key.n >= kLimit || key.m * key.n >= kLimit) return false;
  const int64_t tiles = tiles_of(key);
  if (tiles > kSplitKCounters) return false;
  const SplitK g = layout(key, sms);
  return g.parts == 1 ||
         static_cast<size_t>(g.parts * tiles) * kTile * kTile * sizeof(float) <= workspace_bytes;
}

void split_k_gemm(const LtKey& key, int sms, float alpha, const float* a, const float* b,
                  const float* bias, float beta, float* d, void* workspace, unsigned* counters,
                  cudaStream_t s) {
  const SplitK g = layout(key, sms);
  const bool with_bias =
      key.epilogue == CUBLASLT_EPILOGUE_BIAS || key.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool relu =
      key.epilogue == CUBLASLT_EPILOGUE_RELU || key.epilogue == CUBLASLT_EPILOGUE_RELU_BIAS;
  const dim3 grid(static_cast<unsigned>(tiles_of(key)), static_cast<unsigned>(g.parts));
  auto kernel = key.trans_a ? (key.trans_b ? split_k_gemm_kernel<true, true>
                                           : split_k_gemm_kernel<true, false>)
                            : (key.trans_b ? split_k_gemm_kernel<false, true>
                                           : split_k_gemm_kernel<false, false>);
  kernel<<<grid, kThreads, 0, s>>>(g, alpha, a, b, with_bias ? bias : nullptr, relu, beta, d,
                                   static_cast<float*>(workspace), counters);
  LAMINA_CUDA_LAUNCHED(split_k_gemm_kernel);
}

}  // namespace lamina::cuda_detail
