// The Native backend's helpers shared by its source files: parallel loops over the sleeping
// thread pool (thread_pool.hpp), per-thread scratch matrices, and OpenBLAS size checks and
// conventions.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "lamina/common.hpp"
#include "thread_pool.hpp"

namespace lamina::native {

// Below this many elements a loop runs on the calling thread: waking the pool's workers
// costs more than the loop.
constexpr int64_t kParallelMin = int64_t{1} << 15;
// OpenBLAS's level-1 routines take blasint sizes; longer arrays are processed in chunks.
constexpr int64_t kBlasChunk = std::numeric_limits<blasint>::max();

// Runs f(i) for i in [0, n), on all threads when n is large.
template <class F>
void parallel_for(int64_t n, F f) {
  if (n <= kParallelMin) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  ThreadPool::instance().run(n, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) f(i);
  });
}

// Runs f(begin, end) over contiguous ranges of [0, n), on all threads when the work is large:
// `work` elements in all (default n; more when each index stands for a column of rows). For
// loops that must vectorise: write them over the range with `#pragma GCC ivdep` (in-place
// calls alias only element for element, which ivdep allows).
template <class F>
void parallel_ranges(int64_t n, F f, int64_t work = -1) {
  if ((work < 0 ? n : work) <= kParallelMin) return f(int64_t{0}, n);
  ThreadPool::instance().run(n, [&](int64_t begin, int64_t end) { f(begin, end); });
}

// Runs f(r) for every row r of a (rows, cols) array, on all threads when it is large.
template <class F>
void parallel_rows(int64_t rows, int64_t cols, F f) {
  if (rows <= 1 || rows * cols <= kParallelMin) {
    for (int64_t r = 0; r < rows; ++r) f(r);
    return;
  }
  ThreadPool::instance().run(rows, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) f(r);
  });
}

// Calls f(start, length) over [0, n) in pieces a blasint can hold.
template <class F>
void in_blas_chunks(int64_t n, F f) {
  for (int64_t start = 0; start < n; start += kBlasChunk) {
    f(start, static_cast<blasint>(std::min(kBlasChunk, n - start)));
  }
}

// A per-thread scratch matrix of at least n floats, one per slot: its contents stay until the
// slot's next use on this thread (the pool's workers only write rows of a matrix the calling
// thread asked for). The slots in use at the same time are distinct.
enum class Scratch { kColumns, kGathered, kOperandA, kOperandB, kCount };
inline float* scratch(Scratch slot, int64_t n) {
  thread_local std::vector<float> buffers[static_cast<int>(Scratch::kCount)];
  std::vector<float>& b = buffers[static_cast<int>(slot)];
  if (static_cast<int64_t>(b.size()) < n) b.resize(n);
  return b.data();
}

// y = beta y, with the BLAS convention that beta == 0 does not read y (NaN-safe).
inline void scale_output(int64_t n, float beta, float* y) {
  if (beta == 0) {
    std::fill_n(y, n, 0.0f);
  } else if (beta != 1) {
    for (int64_t i = 0; i < n; ++i) y[i] *= beta;
  }
}

inline blasint blas_size(int64_t value, const char* what) {
  LAMINA_REQUIRE(value >= 0 && value <= std::numeric_limits<blasint>::max(), "NativeBackend: ",
                 what, " = ", value, " does not fit OpenBLAS's ", sizeof(blasint) * 8,
                 "-bit integer; split the operation or use an ILP64 OpenBLAS");
  return static_cast<blasint>(value);
}

}  // namespace lamina::native
