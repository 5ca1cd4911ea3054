#include "lamina/common.hpp"

#include <limits>

namespace lamina {

int64_t shape_count(const Shape& shape) {
  constexpr int64_t kLimit = int64_t{1} << 62;
  int64_t count = 1;
  for (int64_t d : shape) {
    LAMINA_REQUIRE(d >= 0, "negative dimension in shape ", shape_string(shape));
    if (d != 0 && count > kLimit / d) fail("shape ", shape_string(shape), " has too many elements");
    count *= d;
  }
  return count;
}

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + ")";
}

}  // namespace lamina
