// The alignment of device addresses, which vectorised kernels (16-byte loads) and the
// cuBLASLt and cuDNN descriptors ask of the arrays they are given.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace lamina::cuda_detail {

// The largest power of two, at most 256, that divides every non-null address.
inline int alignment_of(std::initializer_list<const void*> pointers) {
  int align = 256;
  for (const void* p : pointers) {
    if (p == nullptr) continue;
    while (reinterpret_cast<uintptr_t>(p) % align != 0) align /= 2;
  }
  return align;
}

}  // namespace lamina::cuda_detail
