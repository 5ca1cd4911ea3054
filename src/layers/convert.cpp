// Convert: the same values in another storage (Tensor::dtype), FP32 <-> BF16 or FP16. The
// net inserts one wherever a layer needs its bottom stored otherwise than its producer
// stores it (docs/precision.md); its top is stored as its precision says (BF16, FP16, or
// FP32 for FP32 and TF32). Forward rounds to nearest even into 16 bits, or widens exactly;
// backward does the same to the gradient, the other way (dbottom = dtop, written with =).
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ConvertLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {}; }
  HalfSupport half_support() const override { return HalfSupport::kConverts; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const DType from = bottom[0]->dtype(), to = top[0]->dtype();
    LAMINA_REQUIRE(is_half(from) != is_half(to), where(), "converts between FP32 and 16 bits; "
                   "its bottom '", bottom[0]->name(), "' is ", dtype_name(from),
                   " and its top is ", dtype_name(to));
    top[0]->reshape(bottom[0]->shape());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t n = bottom[0]->count();
    if (is_half(top[0]->dtype())) {
      backend_.to_half(half_format(top[0]->dtype()), n, bottom[0]->data(),
                       top[0]->mutable_half_data());
    } else {
      backend_.from_half(half_format(bottom[0]->dtype()), n, bottom[0]->half_data(),
                         top[0]->mutable_data());
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t n = bottom[0]->count();
    if (is_half(bottom[0]->dtype())) {
      backend_.to_half(half_format(bottom[0]->dtype()), n, top[0]->diff(),
                       bottom[0]->mutable_half_diff());
    } else {
      backend_.from_half(half_format(top[0]->dtype()), n, top[0]->half_diff(),
                         bottom[0]->mutable_diff());
    }
  }
};

}  // namespace

void register_convert_layer() { register_layer<ConvertLayer>("Convert"); }

}  // namespace lamina
