// Split: hands one blob to several consumers (the net inserts it where a blob has more than
// one). Every top shares the bottom's data; each has its own diff, and backward sums them:
// dbottom = sum_i dtop_i (written with =).
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class SplitLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {}; }

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
    float* dx = bottom[0]->mutable_diff();
    backend_.copy(sizeof(float) * n, top[0]->diff(), dx);
    for (size_t i = 1; i < top.size(); ++i) backend_.axpy(n, 1.0f, top[i]->diff(), dx);
  }
};

}  // namespace

void register_split_layer() { register_layer<SplitLayer>("Split"); }

}  // namespace lamina
