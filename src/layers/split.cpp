// Split: hands one blob to several consumers (the net inserts it where a blob has more than
// one). Every top shares the bottom's data; each has its own diff, and backward sums them:
// dbottom = sum_i dtop_i (written with =). It stores its tops as its bottom is stored; in 16
// bits each gradient after the first is added and rounded once.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class SplitLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {}; }
  HalfSupport half_support() const override { return HalfSupport::kFollows; }

  int max_tops() const override { return -1; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    for (Tensor* t : top) {
      t->reshape(bottom[0]->shape());
      t->share_data(*bottom[0]);
    }
  }

  void forward(const Tensors&, const Tensors&) override {}

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t n = bottom[0]->count();
    if (is_half(bottom[0]->dtype())) {
      const Half f = half_format(bottom[0]->dtype());
      uint16_t* dx = bottom[0]->mutable_half_diff();
      backend_.copy(sizeof(uint16_t) * n, top[0]->half_diff(), dx);
      for (size_t i = 1; i < top.size(); ++i)
        backend_.axpby(f, n, 1.0f, top[i]->half_diff(), 1.0f, dx);
      return;
    }
    float* dx = bottom[0]->mutable_diff();
    backend_.copy(sizeof(float) * n, top[0]->diff(), dx);
    for (size_t i = 1; i < top.size(); ++i) backend_.axpy(n, 1.0f, top[i]->diff(), dx);
  }
};

}  // namespace

void register_split_layer() { register_layer<SplitLayer>("Split"); }

}  // namespace lamina
