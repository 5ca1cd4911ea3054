// What the solver's source files (solver.cpp, solver_snapshot.cpp, nonfinite.cpp) share.
#pragma once

#include <cmath>
#include <sstream>
#include <string>

#include "lamina/common.hpp"
#include "lamina/param_arena.hpp"

namespace lamina::solver_detail {

// Thrown by Solver::snapshot() when a value to be written is not finite, and by the
// non-finite check; handled by the `nonfinite` setting rather than `snapshot_failure`.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// NaN, inf, -inf or the number, for messages.
inline std::string number(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream out;
  out << v;
  return out.str();
}

// "parameter 'fc1/weight' of layer 'fc1'", for messages.
inline std::string describe(const ParamInfo& info) {
  return "parameter '" + info.name + "' of layer '" + info.layer + "'";
}

}  // namespace lamina::solver_detail
