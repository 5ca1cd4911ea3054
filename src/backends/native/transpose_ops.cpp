// NativeBackend::transpose: y (outer, cols, rows) = each x (outer, rows, cols) transposed.
// The softmax layers use it to bring a class axis with positions after it, (outer, C,
// inner), to the rows their operations take, (outer, inner, C), and back.
//
// Each matrix is walked in square tiles of kTile x kTile, so that the reads of a tile's rows
// and the writes of its columns both stay within a few cache lines; the tiles are
// independent and run on the thread pool when the array is large. Out of place only.
#include <algorithm>

#include "lamina/native_backend.hpp"
#include "parallel.hpp"

namespace lamina {
namespace {

constexpr int64_t kTile = 32;

}  // namespace

void NativeBackend::transpose(int64_t outer, int64_t rows, int64_t cols, const float* x,
                              float* y) {
  if (outer <= 0 || rows <= 0 || cols <= 0) return;
  const int64_t tile_rows = (rows + kTile - 1) / kTile, tile_cols = (cols + kTile - 1) / kTile;
  const int64_t tiles = outer * tile_rows * tile_cols;
  // One tile per index: matrix o, tile row tr, tile column tc.
  native::parallel_rows(tiles, kTile * kTile, [=](int64_t t) {
    const int64_t o = t / (tile_rows * tile_cols);
    const int64_t tr = (t / tile_cols) % tile_rows, tc = t % tile_cols;
    const float* xo = x + o * rows * cols;
    float* yo = y + o * rows * cols;
    const int64_t r_end = std::min(rows, (tr + 1) * kTile);
    const int64_t c_end = std::min(cols, (tc + 1) * kTile);
    for (int64_t r = tr * kTile; r < r_end; ++r) {
      for (int64_t c = tc * kTile; c < c_end; ++c) yo[c * rows + r] = xo[r * cols + c];
    }
  });
}

}  // namespace lamina
