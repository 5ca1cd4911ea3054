// Lamina's own FP32 product for small shapes (split_k_gemm.cu), one candidate beside
// cuBLASLt's in an FP32 plan (lt_matmul.cu): D = act(alpha op(A) op(B) + beta D + bias), in
// LtKey's column-major terms, in one kernel launch. At the MNIST nets' sizes a product is a
// few microseconds of latency, not of arithmetic: cuBLAS's kernels for them take 4-9 us in
// a replayed graph, most of it a split-K pass and its separate reduction. This kernel cuts K
// into parts that run as one wave of small blocks, and the last block of each tile adds the
// parts' sums in a fixed order (the same bits every run) and applies the epilogue.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "backends/cuda/lt_matmul.hpp"

namespace lamina::cuda_detail {

// Tile counters each lane keeps for the kernel (zero between calls; the last block of a tile
// puts its counter back): the most tiles one product may have.
constexpr int64_t kSplitKCounters = 16384;
// The version of the kernel's layout (tiles, parts, blocks per SM): a solver state's choice of
// it stands only for the same layout and SM count, which give the same bits.
constexpr uint64_t kSplitKLayout = 1;

// Whether the kernel computes the product of key: FP32 operands and math, an epilogue of
// nothing, a bias, a ReLU or both, operands of fewer than 2^30 values, and few enough tiles
// and partial sums for the counters and the workspace. sms: the SMs it lays its blocks out for.
bool split_k_gemm_takes(const LtKey& key, int sms, size_t workspace_bytes);

// Launches it on s; workspace (as large as split_k_gemm_takes was told) holds the parts'
// sums, counters the tiles' arrival counts (kSplitKCounters, zero). bias (key.m values) is
// read when the epilogue has one.
void split_k_gemm(const LtKey& key, int sms, float alpha, const float* a, const float* b,
                  const float* bias, float beta, float* d, void* workspace, unsigned* counters,
                  cudaStream_t s);

}  // namespace lamina::cuda_detail
