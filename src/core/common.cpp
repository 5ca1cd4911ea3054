#include "lamina/common.hpp"

#include <limits>

namespace lamina {

int64_t shape_count(const Shape& shape) {
  int64_t nonzero = 1;  // product of the non-zero dimensions
  bool empty = false;
  for (int64_t d : shape) {
    LAMINA_REQUIRE(d >= 0, "negative dimension in shape ", shape_string(shape));
    if (d == 0) {
      empty = true;
      continue;
    }
    if (nonzero > kMaxElements / d)
      fail("shape ", shape_string(shape), " has too many elements (more than 2^56)");
    nonzero *= d;
  }
  return empty ? 0 : nonzero;
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
