// Crop: cuts a window out of bottom 0 whose shape is bottom 1's along the axes from
// crop_param.axis (default 2: the spatial axes of (N, C, H, W)) on (Caffe's Crop, which
// fully convolutional nets use to align a score map with the image).
//
//   bottom 0 x (d0, ..., dk), bottom 1 ref (r0, ..., rk)  ->  top (d0, .., r_axis, .., rk)
//   top[i] = x[i + offset] (offset 0 on the axes before crop_param.axis)
// crop_param.offset: none (0), one for every cropped axis, or one per cropped axis. The
// window must lie inside x. Only ref's shape is read; it gets no gradient.
// Gradients: dx = 0 outside the window, dtop inside.
#include <string>
#include <vector>

#include "block_copy.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class CropLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return 2; }
  std::vector<std::string> parameter_messages() const override { return {"crop_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }
  bool accepts_gradient(int bottom_index) const override { return bottom_index == 0; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const CropParameter& p = param_.crop_param();
    const Tensor& x = *bottom[0];
    const Tensor& ref = *bottom[1];
    const int axes = x.num_axes();
    LAMINA_REQUIRE(ref.num_axes() == axes, where(), "bottom '", ref.name(), "' ",
                   ref.shape_string(), " gives the shape to crop to and must have as many "
                   "axes as bottom '", x.name(), "' ", x.shape_string());
    LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "crop_param.axis ", p.axis(),
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    const int start = p.axis() < 0 ? p.axis() + axes : p.axis();
    LAMINA_REQUIRE(p.offset_size() <= 1 || p.offset_size() == axes - start, where(),
                   "crop_param has ", p.offset_size(), " offsets; give one for all cropped "
                   "axes or one per cropped axis (", axes - start, ": axes ", start, " to ",
                   axes - 1, ")");
    Shape shape = x.shape();
    offset_ = 0;
    const std::vector<int64_t> x_strides = contiguous_strides(x.shape());
    for (int i = start; i < axes; ++i) {
      const int64_t offset =
          p.offset_size() == 0 ? 0 : p.offset(p.offset_size() == 1 ? 0 : i - start);
      LAMINA_REQUIRE(offset + ref.dim(i) <= x.dim(i), where(), "the crop runs past bottom '",
                     x.name(), "' ", x.shape_string(), " along axis ", i, ": offset ", offset,
                     " + size ", ref.dim(i), " (of '", ref.name(), "') > ", x.dim(i));
      shape[i] = ref.dim(i);
      offset_ += offset * x_strides[i];
    }
    top[0]->reshape(shape);
    const std::vector<int64_t> top_strides = contiguous_strides(shape);
    forward_ = block_copy(where(), shape, x_strides, top_strides);
    backward_ = block_copy(where(), shape, top_strides, x_strides);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.copy_block(forward_, bottom[0]->data() + offset_, top[0]->mutable_data(), false);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    float* dx = bottom[0]->mutable_diff();
    backend_.zero(sizeof(float) * bottom[0]->count(), dx);
    backend_.copy_block(backward_, top[0]->diff(), dx + offset_, false);
  }

 private:
  int64_t offset_ = 0;               // of the window's first element in x
  BlockCopy forward_{}, backward_{};  // x's window -> top, and top -> dx's window
};

}  // namespace

void register_crop_layer() { register_layer<CropLayer>("Crop"); }

}  // namespace lamina
