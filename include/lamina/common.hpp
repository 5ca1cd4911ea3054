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

// Number of elements of a shape; throws on negative dimensions or overflow past 2^62.
int64_t shape_count(const Shape& shape);
// "(64, 1, 28, 28)"
std::string shape_string(const Shape& shape);

}  // namespace lamina
