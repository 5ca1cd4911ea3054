// Embed: a learnable lookup table (Caffe's Embed): each bottom value, an index stored as a
// float (its integer part counts), selects a row of the weight.
//
//   bottom (any shape, M values in [0, input_dim))  ->  top (bottom's shape..., num_output)
//   weight W (input_dim, num_output), bias b (num_output) with bias_term (default true)
//   top row m = W[index m] + b
// embed_param: num_output and input_dim are required; fillers default to constant 0.
// An index outside [0, input_dim) is an error on the Native backend; on CUDA its row is NaN
// (a kernel cannot stop), which the solver's non-finite check reports.
// Gradients: dW[index m] += dtop row m (rows added in order of m), db += the column sums of
// dtop. The indices get none.
#include <string>
#include <vector>

#include "indexed_rows.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class EmbedLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"embed_param"}; }
  std::vector<Operation> operations() const override {
    return {Operation::kTensorOps, Operation::kChannelAffine};
  }
  bool accepts_gradient(int) const override { return false; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const EmbedParameter& p = param_.embed_param();
    LAMINA_REQUIRE(p.num_output() > 0, where(), "embed_param.num_output is required and must "
                   "be positive: the length of each embedding");
    LAMINA_REQUIRE(p.input_dim() > 0, where(), "embed_param.input_dim is required and must be "
                   "positive: how many indices there are (the table's rows)");
    rows_ = p.input_dim();
    cols_ = p.num_output();
    add_param("weight", {rows_, cols_}, p.weight_filler());
    bias_term_ = p.bias_term();
    if (bias_term_) add_param("bias", {cols_}, p.bias_filler());
    const Tensor& x = *bottom[0];
    m_ = x.count();
    context_ = where() + "bottom '" + x.name() + "'";
    Shape shape = x.shape();
    shape.push_back(cols_);
    top[0]->reshape(shape);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    float* y = top[0]->mutable_data();  // (M, num_output)
    with_index_context(context_, [&] {
      backend_.gather_rows(m_, cols_, bottom[0]->data(), rows_, params_[0].tensor->data(), y);
    });
    if (bias_term_)
      backend_.channel_affine(m_, cols_, 1, y, nullptr, params_[1].tensor->data(), y);
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  // On the side lane (Backend::to_side_lane), as every parameter gradient, unless a
  // parameter is shared with another layer.
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    const float* dy = top[0]->diff();  // (M, num_output)
    SideLane lane(backend_, !any_shared(params_));
    with_index_context(context_, [&] {
      backend_.scatter_add_rows(m_, cols_, bottom[0]->data(), rows_, dy,
                                params_[0].tensor->mutable_diff());
    });
    if (bias_term_)
      backend_.channel_reduce(m_, cols_, 1, dy, nullptr, params_[1].tensor->mutable_diff());
  }

 private:
  int64_t rows_ = 0, cols_ = 0;  // the table: input_dim, num_output
  int64_t m_ = 0;                // indices in the bottom
  bool bias_term_ = true;
  std::string context_;          // for an index error: the layer and the bottom
};

}  // namespace

void register_embed_layer() { register_layer<EmbedLayer>("Embed"); }

}  // namespace lamina
