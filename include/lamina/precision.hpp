// The Precision setting (lamina.proto; docs/precision.md): the precision a layer runs in,
// chosen per layer, per Sequential container or for the whole net by the solver, and the
// Math (backend.hpp) its products then run in.
#pragma once

#include <string>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// The Math of a layer's products in precision p: BF16's and FP16's are kFP32, FP32 sums of
// products of 16-bit operands. A value outside the enum is an Error that says which are.
Math math_of(Precision p);

// How a layer in precision p stores its values when it can run in 16 bits
// (Layer::half_support): BF16 or FP16 for those precisions, else FP32. Errors as math_of.
DType storage_of(Precision p);

// The precision a command-line option names, in any case ("tf32", "TF32"); other text is
// an Error naming `option`.
Precision parse_precision(const std::string& text, const std::string& option);

// Gives every top-level layer of net that names no precision the precision p; the children
// of a Sequential container take their container's (net_builder.cpp). Nets in Caffe's V1
// syntax were upgraded where they were read (io.hpp, solver_nets.hpp), so theirs take p too.
void set_default_precision(NetParameter& net, Precision p);

}  // namespace lamina
