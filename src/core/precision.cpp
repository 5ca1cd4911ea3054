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
    case BF16:  // on 16-bit operands, accumulated in FP32
    case FP16: return Math::kFP32;
  }
  fail("precision ", int(p), " is not one Lamina knows: it trains in FP32, TF32, BF16 or FP16");
}

DType storage_of(Precision p) {
  math_of(p);  // refuses a value outside the enum
  return p == BF16 ? DType::kBF16 : (p == FP16 ? DType::kFP16 : DType::kF32);
}

Precision parse_precision(const std::string& text, const std::string& option) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  Precision p = FP32;
  LAMINA_REQUIRE(Precision_Parse(upper, &p), option, " '", text, "' is not a precision; give "
                 "fp32, tf32, bf16 or fp16");
  return p;
}

void set_default_precision(NetParameter& net, Precision p) {
  for (LayerParameter& layer : *net.mutable_layer())
    if (!layer.has_precision()) layer.set_precision(p);
}

}  // namespace lamina
