// Shared vocabulary: the user-facing error type and shapes.
//
// Conventions used across Lamina:
//   - Tensors are float32, row-major, dimensions written (N, C, H, W) / (N, K) in comments.
//   - A user mistake (bad prototxt, wrong shape, missing file, no GPU) throws lamina::Error
//     with what is needed to fix it. CHECK (glog) aborts only on broken internal invariants.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace lamina {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Builds an Error message from any streamable pieces and throws it.
template <class... Args>
[[noreturn]] void fail(const Args&... args) {
  std::ostringstream message;
  (message << ... << args);
  throw Error(message.str());
}

#define LAMINA_REQUIRE(condition, ...)             \
  do {                                              \
    if (!(condition)) ::lamina::fail(__VA_ARGS__);  \
  } while (0)

using Shape = std::vector<int64_t>;

// The most elements a tensor (or the parameter arena) may hold: 2^56, so that a byte count
// (elements x 8) can never overflow an int64 or a size_t. Larger shapes are errors before
// anything is allocated; smaller ones that do not fit in memory fail at allocation with an
// error naming the size.
constexpr int64_t kMaxElements = int64_t{1} << 56;

// Number of elements of a shape. Throws on a negative dimension, or when the product of the
// non-zero dimensions exceeds kMaxElements (so that no partial product, Tensor::count(a, b),
// can overflow either, even when another dimension is 0).
int64_t shape_count(const Shape& shape);
// "(64, 1, 28, 28)"
std::string shape_string(const Shape& shape);

}  // namespace lamina
