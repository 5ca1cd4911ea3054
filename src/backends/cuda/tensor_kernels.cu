// Tensor copies on CUDA (kTensorOps; semantics in backend.hpp): box copies (Crop, Tile), and
// rows gathered or scatter-added by index (Embed, BatchReindex). The reductions of the group
// (reduce_middle, argmax) are in reduce_kernels.cu.
//
// Each result is the Native backend's (tensor_ops.cpp), bit for bit. scatter_add_rows adds
// every destination row's sources in order of r with no atomics: the pairs (destination
// row, r) are sorted by row with CUB's radix sort, which is stable (so each row's sources
// stay in order of r), and one thread per (sorted position, column) that starts a row's run
// adds the run's values in order. That is O(rows) work for the sort (a pass per radix digit
// of the row numbers) and O(rows cols) for the adds, parallel over the destination rows
// named and the columns; a row named by many picks is one thread's chain of adds per
// column, as Native's order requires. Its arrays and CUB's temporary storage are the
// context's workspace, which a call grows to what its shape needs: the warm-up pass before
// a step is captured does, and a capture that would grow it fails. Up to kFewRows rows (not
// worth the sort's launches), and past the sort's 32-bit keys, one thread per column adds
// all the rows in order instead. An index that names no row is never used as one:
// gather_rows writes NaN to its row, scatter_add_rows skips it.
#include <cub/device/device_radix_sort.cuh>

#include <array>
#include <cstdint>

#include "backends/cuda/cuda_backend.hpp"
#include "backends/cuda/cuda_check.hpp"
#include "backends/cuda/kernel_util.cuh"
#include "backends/tensor_ops_math.hpp"
#include "lamina/common.hpp"

namespace lamina::cuda_detail {
namespace {

using tensor_ops::row_of;

// One thread per element of the box (n of them): its offsets in src and dst from its digits.
__global__ void copy_block_kernel(BlockCopy box, int64_t n, const float* src, float* dst,
                                  bool accumulate) {
  LAMINA_GRID_STRIDE_LOOP(e, n) {
    int64_t rest = e, s = 0, d = 0;
    for (int a = box.axes - 1; a >= 0; --a) {
      const int64_t i = rest % box.shape[a];
      rest /= box.shape[a];
      s += i * box.src_stride[a];
      d += i * box.dst_stride[a];
    }
    dst[d] = accumulate ? dst[d] + src[s] : src[s];
  }
}

// dst (rows, cols) row r = src row index[r]; NaN where the index names no row.
__global__ void gather_rows_kernel(int64_t rows, int64_t cols, const float* index,
                                   int64_t src_rows, const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(e, rows * cols) {
    const int64_t r = e / cols, j = e - r * cols;
    const int64_t from = row_of(index[r], src_rows);
    dst[e] = from >= 0 ? src[from * cols + j] : __int_as_float(0x7fc00000);
  }
}

// ---- scatter_add_rows ----

// Up to this many source rows, one thread per column adds them all (no sort).
constexpr int64_t kFewRows = 32;
// The sort's keys and positions are 32-bit: up to this many source and destination rows.
constexpr int64_t kMostSorted = INT32_MAX;

// dst (dst_rows, cols) row index[r] += src (rows, cols) row r, one thread per column j
// walking r in order.
__global__ void scatter_add_columns_kernel(int64_t rows, int64_t cols, const float* index,
                                           int64_t dst_rows, const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(j, cols) {
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t to = row_of(index[r], dst_rows);
      if (to >= 0) dst[to * cols + j] += src[r * cols + j];
    }
  }
}

// keys[r] = the row index[r] names, or dst_rows (which sorts last) when it names none;
// positions[r] = r.
__global__ void scatter_keys_kernel(int64_t rows, const float* index, int64_t dst_rows,
                                   uint32_t* keys, uint32_t* positions) {
  LAMINA_GRID_STRIDE_LOOP(r, rows) {
    const int64_t to = row_of(index[r], dst_rows);
    keys[r] = static_cast<uint32_t>(to >= 0 ? to : dst_rows);
    positions[r] = static_cast<uint32_t>(r);
  }
}

// One thread per (sorted position p, column j); the thread of a run's first position adds
// the run's source rows (sources[p'], in increasing r: the sort is stable) to dst row
// sorted_keys[p], in a register; the run of dst_rows (indices that name no row) is skipped.
__global__ void scatter_add_runs_kernel(int64_t rows, int64_t cols, int64_t dst_rows,
                                        const uint32_t* sorted_keys, const uint32_t* sources,
                                        const float* src, float* dst) {
  LAMINA_GRID_STRIDE_LOOP(e, rows * cols) {
    const int64_t p = e / cols, j = e - p * cols;
    const uint32_t to = sorted_keys[p];
    if ((p > 0 && sorted_keys[p - 1] == to) || to == dst_rows) continue;
    float acc = dst[int64_t{to} * cols + j];
    for (int64_t q = p; q < rows && sorted_keys[q] == to; ++q)
      acc += src[int64_t{sources[q]} * cols + j];
    dst[int64_t{to} * cols + j] = acc;
  }
}

// The context's workspace laid out for the sort of `rows` keys below end_bit: four arrays
// of rows entries, then CUB's temporary storage (CUB computes its size on the host when
// given no storage).
struct ScatterArrays {
  uint32_t* keys;         // (rows) scatter_keys_kernel's
  uint32_t* positions;    // (rows) 0 .. rows - 1: the sort's values
  uint32_t* sorted_keys;  // (rows) the keys in increasing order, equal keys in order of r
  uint32_t* sources;      // (rows) the r of each sorted key
  void* temp;
  size_t temp_bytes;
};

ScatterArrays scatter_arrays(CudaContext& context, int rows, int end_bit) {
  size_t temp_bytes = 0;
  const uint32_t* no_keys = nullptr;
  uint32_t* no_out = nullptr;
  LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, no_keys, no_out,
                                                    no_keys, no_out, rows, 0, end_bit));
  const size_t array = sizeof(uint32_t) * rows;
  const std::array<char*, 5> p = context.workspace_pieces<5>({array, array, array, array,
                                                              temp_bytes});
  const auto u32 = [](char* q) { return reinterpret_cast<uint32_t*>(q); };
  return {u32(p[0]), u32(p[1]), u32(p[2]), u32(p[3]), p[4], temp_bytes};
}

}  // namespace

void CudaBackend::copy_block(const BlockCopy& box, const float* src, float* dst,
                             bool accumulate) {
  LAMINA_REQUIRE(box.axes >= 0 && box.axes <= kMaxBlockAxes, "copy_block: ", box.axes,
                 " axes; at most ", kMaxBlockAxes);
  int64_t n = 1;
  for (int a = 0; a < box.axes; ++a) n *= box.shape[a];
  if (n <= 0) return;
  copy_block_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(box, n, src, dst,
                                                                      accumulate);
  LAMINA_CUDA_LAUNCHED(copy_block_kernel);
}

void CudaBackend::gather_rows(int64_t rows, int64_t cols, const float* index, int64_t src_rows,
                              const float* src, float* dst) {
  const int64_t n = rows * cols;
  if (n <= 0) return;
  gather_rows_kernel<<<elementwise_grid(n), kBlock, 0, on_device()>>>(rows, cols, index,
                                                                      src_rows, src, dst);
  LAMINA_CUDA_LAUNCHED(gather_rows_kernel);
}

void CudaBackend::scatter_add_rows(int64_t rows, int64_t cols, const float* index,
                                   int64_t dst_rows, const float* src, float* dst) {
  if (rows <= 0 || cols <= 0 || dst_rows <= 0) return;
  const cudaStream_t s = on_device();
  if (rows <= kFewRows || rows > kMostSorted || dst_rows >= kMostSorted) {
    scatter_add_columns_kernel<<<elementwise_grid(cols), kBlock, 0, s>>>(rows, cols, index,
                                                                          dst_rows, src, dst);
    LAMINA_CUDA_LAUNCHED(scatter_add_columns_kernel);
    return;
  }
  int end_bit = 1;  // the keys, dst_rows included, are below 2^end_bit
  while ((int64_t{1} << end_bit) <= dst_rows) ++end_bit;
  const ScatterArrays a = scatter_arrays(context_, static_cast<int>(rows), end_bit);
  scatter_keys_kernel<<<elementwise_grid(rows), kBlock, 0, s>>>(rows, index, dst_rows, a.keys,
                                                                a.positions);
  LAMINA_CUDA_LAUNCHED(scatter_keys_kernel);
  size_t bytes = a.temp_bytes;
  LAMINA_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(a.temp, bytes, a.keys, a.sorted_keys,
                                                    a.positions, a.sources,
                                                    static_cast<int>(rows), 0, end_bit, s));
  scatter_add_runs_kernel<<<elementwise_grid(rows * cols), kBlock, 0, s>>>(
      rows, cols, dst_rows, a.sorted_keys, a.sources, src, dst);
  LAMINA_CUDA_LAUNCHED(scatter_add_runs_kernel);
}

}  // namespace lamina::cuda_detail
