// The Precision setting (lamina.proto; docs/precision.md): the precision a layer runs in,
// chosen per layer, per Sequential container or for the whole net by the solver, and the
// Math (backend.hpp) its products then run in.
#pragma once

#include <string>

#include "lamina/backend.hpp"
#include "lamina.pb.h"

namespace lamina {

// The Math of a layer's products in precision p. BF16 and FP16, not available yet, are an
// Error that says which precisions are.
Math math_of(Precision p);

// The precision a command-line option names, in any case ("tf32", "TF32"), if it is
// available; other text, or a precision not available yet, is an Error naming `option`.
Precision parse_precision(const std::string& text, const std::string& option);

// Gives every top-level layer of net that names no precision the precision p; the children
// of a Sequential container take their container's (net_builder.cpp).
void set_default_precision(NetParameter& net, Precision p);

}  // namespace lamina
