// Silence: consumes its bottoms and produces nothing, so that blobs a net does not use are
// not reported as outputs (Caffe's Silence).
//
//   bottoms (any shapes)  ->  no tops
// Forward does nothing. Backward writes zero gradients to the bottoms that need them, as
// Caffe does: a blob that also feeds a loss gets its gradient from there, and the zeros from
// here add nothing to it. Any storage (FP32 or 16-bit): a zero is all zero bits in each.
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class SilenceLayer : public Layer {
 public:
  using Layer::Layer;
  int max_bottoms() const override { return -1; }
  int min_tops() const override { return 0; }
  int max_tops() const override { return 0; }
  std::vector<std::string> parameter_messages() const override { return {}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& /*bottom*/, const Tensors& /*top*/) override {}
  void forward(const Tensors& /*bottom*/, const Tensors& /*top*/) override {}

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (!propagate[i]) continue;
      Tensor& x = *bottom[i];
      void* diff = is_half(x.dtype()) ? static_cast<void*>(x.mutable_half_diff())
                                      : static_cast<void*>(x.mutable_diff());
      backend_.zero(dtype_size(x.dtype()) * size_t(x.count()), diff);
    }
  }
};

}  // namespace

void register_silence_layer() { register_layer<SilenceLayer>("Silence"); }

}  // namespace lamina
