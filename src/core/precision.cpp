// The Precision setting (precision.hpp).
#include "lamina/precision.hpp"

#include <algorithm>
#include <cctype>

#include "lamina/common.hpp"

namespace lamina {

Math math_of(Precision p) {
  switch (p) {
    case FP32: return Math::kFP32;
    case TF32: return Math::kTF32;
    case BF16:
    case FP16: break;
  }
  fail("precision ", Precision_Name(p), " is not available yet: Lamina trains in FP32 or TF32");
}

Precision parse_precision(const std::string& text, const std::string& option) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  Precision p = FP32;
  LAMINA_REQUIRE(Precision_Parse(upper, &p), option, " '", text, "' is not a precision; give "
                 "fp32 or tf32");
  try {
    math_of(p);
  } catch (const Error& e) {
    fail(option, " ", text, ": ", e.what());
  }
  return p;
}

void set_default_precision(NetParameter& net, Precision p) {
  for (LayerParameter& layer : *net.mutable_layer())
    if (!layer.has_precision()) layer.set_precision(p);
}

}  // namespace lamina
