// Building Backend::copy_block's boxes for the layers that copy strided windows (Crop, Tile).
#pragma once

#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"

namespace lamina {

// The strides (in elements) of a contiguous row-major array of `shape`.
inline std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (int a = int(shape.size()) - 2; a >= 0; --a) strides[a] = strides[a + 1] * shape[a + 1];
  return strides;
}

// The box of `shape` read with src strides and written with dst strides, made small: axes
// of size 1 are dropped, and an axis merged into the one before it where both arrays step
// over it as over one longer axis. Throws (after where, "layer 'x' (T): ") when more than
// kMaxBlockAxes axes remain.
inline BlockCopy block_copy(const std::string& where, const Shape& shape,
                            const std::vector<int64_t>& src, const std::vector<int64_t>& dst) {
  BlockCopy box;
  std::vector<int64_t> dims, ss, ds;
  for (size_t a = 0; a < shape.size(); ++a) {
    if (shape[a] == 1) continue;
    const size_t k = dims.size();
    if (k > 0 && ss[k - 1] == shape[a] * src[a] && ds[k - 1] == shape[a] * dst[a]) {
      dims[k - 1] *= shape[a];
      ss[k - 1] = src[a];
      ds[k - 1] = dst[a];
      continue;
    }
    dims.push_back(shape[a]);
    ss.push_back(src[a]);
    ds.push_back(dst[a]);
  }
  LAMINA_REQUIRE(dims.size() <= size_t(kMaxBlockAxes), where, "the copy of ",
                 shape_string(shape), " steps over ", dims.size(), " separate axes; at most ",
                 kMaxBlockAxes, " are supported");
  box.axes = int(dims.size());
  for (int a = 0; a < box.axes; ++a) {
    box.shape[a] = dims[a];
    box.src_stride[a] = ss[a];
    box.dst_stride[a] = ds[a];
  }
  return box;
}

}  // namespace lamina
