// Tile: repeats its bottom tile_param.tiles times along tile_param.axis (default 1).
//
//   bottom (d0, ..., a, ..., dk)  ->  top (d0, ..., tiles * a, ..., dk)
// Viewed as (outer, inner) with outer = the dims before the axis and inner = the rest (the
// axis included), the top is (outer, tiles, inner): every tile a copy of the bottom's row
// (one box copy whose tile axis has source stride 0).
// Gradients: dx (outer, inner) = the sum of dtop over the tiles (in order, in double).
#include <string>
#include <vector>

#include "block_copy.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class TileLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"tile_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const TileParameter& p = param_.tile_param();
    const Tensor& x = *bottom[0];
    const int axes = x.num_axes();
    LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "tile_param.axis ", p.axis(),
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    LAMINA_REQUIRE(p.has_tiles(), where(), "tile_param.tiles is required: how many copies");
    LAMINA_REQUIRE(p.tiles() >= 1, where(), "tile_param.tiles must be at least 1, got ",
                   p.tiles());
    const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
    tiles_ = p.tiles();
    outer_ = x.count(0, axis);
    inner_ = x.count(axis, axes);
    Shape shape = x.shape();
    shape[axis] *= tiles_;
    top[0]->reshape(shape);
    box_ = block_copy(where(), {outer_, tiles_, inner_}, {inner_, 0, 1},
                      {tiles_ * inner_, inner_, 1});
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.copy_block(box_, bottom[0]->data(), top[0]->mutable_data(), false);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.reduce_middle(ReduceOp::kSum, outer_, tiles_, inner_, 1.0f, top[0]->diff(),
                           bottom[0]->mutable_diff());
  }

 private:
  int64_t tiles_ = 1;
  int64_t outer_ = 0, inner_ = 0;  // the dims before the axis, and the rest
  BlockCopy box_{};                // bottom (outer, inner) -> top (outer, tiles, inner)
};

}  // namespace

void register_tile_layer() { register_layer<TileLayer>("Tile"); }

}  // namespace lamina
