// BatchReindex: picks rows of bottom 0 along its first axis by the indices in bottom 1, in
// any order and with repeats (Caffe's BatchReindex).
//
//   bottom 0 x (N, ...), bottom 1 idx (K) of row numbers in [0, N) stored as floats
//   ->  top (K, ...): top row k = x row idx[k]
// An index outside [0, N) is an error on the Native backend; on CUDA its row is NaN.
// Gradients: dx = 0, then dx row idx[k] += dtop row k for k in order (rows picked more than
// once get the sum). The indices get none.
#include <string>
#include <vector>

#include "indexed_rows.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class BatchReindexLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  std::vector<std::string> parameter_messages() const override { return {}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index == 0; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& x = *bottom[0];
    const Tensor& idx = *bottom[1];
    LAMINA_REQUIRE(x.num_axes() >= 1, where(), "bottom '", x.name(), "' has no axes to pick "
                   "rows along");
    LAMINA_REQUIRE(idx.num_axes() == 1, where(), "bottom '", idx.name(), "' holds the row "
                   "indices and must have one axis, but is ", idx.shape_string());
    n_ = x.dim(0);
    k_ = idx.dim(0);
    inner_ = x.count(1, x.num_axes());
    Shape shape = x.shape();
    shape[0] = k_;
    top[0]->reshape(shape);
    context_ = where() + "bottom '" + idx.name() + "'";
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    with_index_context(context_, [&] {
      backend_.gather_rows(k_, inner_, bottom[1]->data(), n_, bottom[0]->data(),
                           top[0]->mutable_data());
    });
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    float* dx = bottom[0]->mutable_diff();
    backend_.zero(sizeof(float) * bottom[0]->count(), dx);
    with_index_context(context_, [&] {
      backend_.scatter_add_rows(k_, inner_, bottom[1]->data(), n_, top[0]->diff(), dx);
    });
  }

 private:
  int64_t n_ = 0, k_ = 0, inner_ = 0;  // x's rows, the indices, each row's values
  std::string context_;                // for an index error: the layer and the indices' blob
};

}  // namespace

void register_batch_reindex_layer() { register_layer<BatchReindexLayer>("BatchReindex"); }

}  // namespace lamina
