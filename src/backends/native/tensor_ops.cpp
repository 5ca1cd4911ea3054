// NativeBackend's tensor copies and reductions (kTensorOps; semantics in backend.hpp): box
// copies (Crop, Tile), sums over a middle axis (Reduction, Tile's backward), the top-k along
// an axis (ArgMax), and rows gathered or scatter-added by index (Embed, BatchReindex).
//
// Sums are in double in a fixed order (of m, or of the rows), so results do not depend on
// the thread count and match the CUDA backend's bit for bit (but for reduce_middle with few
// outputs, which CUDA splits between threads: within a rounding; reduce_kernels.cu). Indices
// are floats whose integer part counts; every index is checked before anything is written,
// and one that names no row throws an Error naming it.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "lamina/native_backend.hpp"
#include "backends/tensor_ops_math.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

using native::parallel_ranges;
using native::parallel_rows;
using tensor_ops::reduce_term;
using tensor_ops::row_of;

// Throws when an entry of index (n) names no row of `rows`.
void require_rows(const char* op, int64_t n, const float* index, int64_t rows) {
  for (int64_t r = 0; r < n; ++r) {
    LAMINA_REQUIRE(row_of(index[r], rows) >= 0, op, ": index ", index[r], " (entry ", r,
                   ") names no row: there are ", rows, " (0..", rows - 1, ")");
  }
}

// Calls f with the ReduceOp as a compile-time constant.
template <class F>
void with_reduce_op(ReduceOp op, F f) {
  switch (op) {
    case ReduceOp::kSum: return f(std::integral_constant<ReduceOp, ReduceOp::kSum>());
    case ReduceOp::kAbsSum: return f(std::integral_constant<ReduceOp, ReduceOp::kAbsSum>());
    case ReduceOp::kSumSquares:
      return f(std::integral_constant<ReduceOp, ReduceOp::kSumSquares>());
  }
}

}  // namespace

// Lines along the box's last axis, one per index of the axes before it, each on one thread.
void NativeBackend::copy_block(const BlockCopy& box, const float* src, float* dst,
                               bool accumulate) {
  LAMINA_REQUIRE(box.axes >= 0 && box.axes <= kMaxBlockAxes, "copy_block: ", box.axes,
                 " axes; at most ", kMaxBlockAxes);
  const int last = box.axes - 1;
  int64_t lines = 1;
  for (int a = 0; a < last; ++a) lines *= box.shape[a];
  const int64_t length = box.axes > 0 ? box.shape[last] : 1;
  if (lines == 0 || length == 0) return;
  const int64_t ss = last >= 0 ? box.src_stride[last] : 0;
  const int64_t ds = last >= 0 ? box.dst_stride[last] : 0;
  parallel_rows(lines, length, [&](int64_t line) {
    int64_t s = 0, d = 0, rest = line;
    for (int a = last - 1; a >= 0; --a) {
      const int64_t i = rest % box.shape[a];
      rest /= box.shape[a];
      s += i * box.src_stride[a];
      d += i * box.dst_stride[a];
    }
    const float* from = src + s;
    float* to = dst + d;
    if (accumulate) {
      for (int64_t k = 0; k < length; ++k) to[k * ds] += from[k * ss];
    } else {
      for (int64_t k = 0; k < length; ++k) to[k * ds] = from[k * ss];
    }
  });
}

// x (outer, mid, inner) -> y (outer, inner). Each task sums a run of up to kRun positions i
// of one o, walking m in order with a double accumulator per position.
void NativeBackend::reduce_middle(ReduceOp op, int64_t outer, int64_t mid, int64_t inner,
                                  float coeff, const float* x, float* y) {
  constexpr int64_t kRun = 64;
  const int64_t runs = (inner + kRun - 1) / kRun;
  with_reduce_op(op, [&](auto op_constant) {
    constexpr ReduceOp kOp = decltype(op_constant)::value;
    parallel_rows(outer * runs, mid * kRun, [&](int64_t task) {
      const int64_t o = task / runs, i0 = (task % runs) * kRun;
      const int64_t width = std::min(kRun, inner - i0);
      double sum[kRun] = {};
      for (int64_t m = 0; m < mid; ++m) {
        const float* xr = x + (o * mid + m) * inner + i0;
        for (int64_t k = 0; k < width; ++k) sum[k] += reduce_term<kOp>(xr[k]);
      }
      for (int64_t k = 0; k < width; ++k)
        y[o * inner + i0 + k] = static_cast<float>(double(coeff) * sum[k]);
    });
  });
}

// dx (outer, mid, inner) = (coeff dy[o, i]) op'(x), the product rounded as written.
void NativeBackend::reduce_middle_backward(ReduceOp op, int64_t outer, int64_t mid,
                                           int64_t inner, float coeff, const float* x,
                                           const float* dy, float* dx) {
  parallel_rows(outer * mid, inner, [&](int64_t row) {
    const float* dyr = dy + (row / mid) * inner;
    float* dxr = dx + row * inner;
    const float* xr = x == nullptr ? nullptr : x + row * inner;
    for (int64_t i = 0; i < inner; ++i)
      dxr[i] = tensor_ops::reduce_gradient(op, coeff * dyr[i], xr == nullptr ? 0.0f : xr[i]);
  });
}

// x (outer, channels, inner) -> index, value (outer, top_k, inner), each (o, i) on one
// thread (tensor_ops::top_k: top_k scans of the channels, as on CUDA).
void NativeBackend::argmax(int64_t outer, int64_t channels, int64_t inner, int64_t top_k,
                           const float* x, float* index, float* value) {
  parallel_rows(outer * inner, channels * top_k, [&](int64_t p) {
    const int64_t o = p / inner, i = p % inner, at = o * top_k * inner + i;
    tensor_ops::top_k(channels, inner, top_k, x + o * channels * inner + i, inner,
                      index == nullptr ? nullptr : index + at,
                      value == nullptr ? nullptr : value + at);
  });
}

// dst (rows, cols) row r = src (src_rows, cols) row index[r].
void NativeBackend::gather_rows(int64_t rows, int64_t cols, const float* index,
                                int64_t src_rows, const float* src, float* dst) {
  require_rows("gather_rows", rows, index, src_rows);
  if (cols == 0) return;
  parallel_rows(rows, cols, [&](int64_t r) {
    std::memcpy(dst + r * cols, src + row_of(index[r], src_rows) * cols, sizeof(float) * cols);
  });
}

// dst (dst_rows, cols) row index[r] += src (rows, cols) row r, in order of r; the columns
// are split between threads, each walking every row in order.
void NativeBackend::scatter_add_rows(int64_t rows, int64_t cols, const float* index,
                                     int64_t dst_rows, const float* src, float* dst) {
  require_rows("scatter_add_rows", rows, index, dst_rows);
  parallel_ranges(
      cols,
      [&](int64_t begin, int64_t end) {
        for (int64_t r = 0; r < rows; ++r) {
          const float* from = src + r * cols;
          float* to = dst + row_of(index[r], dst_rows) * cols;
          for (int64_t j = begin; j < end; ++j) to[j] += from[j];
        }
      },
      rows * cols);
}

}  // namespace lamina
