// Pooling: 2-D max, average or stochastic pooling, NCHW, Caffe's pooling_param.
//
//   bottom (N, C, H, W)  ->  top (N, C, OH, OW)
// CEIL (Caffe's default): OH = ceil((H + 2 pad_h - KH) / stride_h) + 1, FLOOR rounds down;
// with padding, a last window that would start inside the bottom padding is dropped
// ((OH - 1) stride_h >= H + pad_h: OH -= 1), as Caffe does. OW likewise. global_pooling
// takes the whole plane (kernel = (H, W), stride 1, pad 0).
// Max pooling records the arg-max of every window in an int32 mask (N, C, OH, OW) and its
// backward routes dtop there; average pooling spreads dtop over the window. Stochastic
// pooling samples a window element in TRAIN (recorded in the mask as max's arg-max) and
// takes sum x^2 / sum x in TEST (pool_method.hpp); like Caffe, it takes no pad, and its
// draws are layer state (pass_random.hpp). dbottom is written with =.
// Caffe's optional second top (the mask as floats) is not supported.
// In a 16-bit precision the bottom, the top and their gradients are 16-bit; stochastic
// pooling computes in FP32 (the net converts around it).
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "pool_method.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

// random_: TRAIN stochastic pooling's draws (state: seed and offset).
class PoolingLayer : public DrawingLayer {
 public:
  using DrawingLayer::DrawingLayer;
  std::vector<std::string> parameter_messages() const override { return {"pooling_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kPooling}; }
  HalfSupport half_support() const override {
    return param_.pooling_param().pool() == PoolingParameter::STOCHASTIC ? HalfSupport::kNone
                                                                        : HalfSupport::kHalf;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const PoolingParameter& p = param_.pooling_param();
    const Tensor& x = *bottom[0];
    require_nchw(where(), x);
    kind_ = pool_kind(p, phase_);
    const auto one = [](bool has, uint32_t v) {
      return has ? std::vector<int64_t>{v} : std::vector<int64_t>{};
    };
    const std::string m = "pooling_param";
    Extent2 kernel = spatial_setting(where(), m, "kernel_size", "kernel",
                                     one(p.has_kernel_size(), p.kernel_size()), p.has_kernel_h(),
                                     p.kernel_h(), p.has_kernel_w(), p.kernel_w(), 0, true);
    const Extent2 stride = spatial_setting(where(), m, "stride", "stride",
                                           one(p.has_stride(), p.stride()), p.has_stride_h(),
                                           p.stride_h(), p.has_stride_w(), p.stride_w(), 1, true);
    const Extent2 pad = spatial_setting(where(), m, "pad", "pad", one(p.has_pad(), p.pad()),
                                        p.has_pad_h(), p.pad_h(), p.has_pad_w(), p.pad_w(), 0,
                                        false);
    if (p.global_pooling()) {
      // Caffe: no kernel with global pooling; stride and pad may only restate 1 and 0.
      LAMINA_REQUIRE(kernel.h == 0 && kernel.w == 0, where(), "pooling_param.global_pooling "
                     "takes the whole plane as the kernel; remove kernel_size/kernel_h/kernel_w");
      LAMINA_REQUIRE(stride.h == 1 && stride.w == 1 && pad.h == 0 && pad.w == 0, where(),
                     "pooling_param.global_pooling needs stride 1 and pad 0, got stride ",
                     stride.h, "x", stride.w, " and pad ", pad.h, "x", pad.w);
      kernel = {x.dim(2), x.dim(3)};
    }
    LAMINA_REQUIRE(kernel.h > 0 && kernel.w > 0, where(), "pooling_param.kernel_size (or "
                   "kernel_h and kernel_w, or global_pooling) must be given and positive, got ",
                   kernel.h, "x", kernel.w);
    LAMINA_REQUIRE(stride.h > 0 && stride.w > 0, where(), "pooling_param.stride must be "
                   "positive, got ", stride.h, "x", stride.w);
    LAMINA_REQUIRE(pad.h < kernel.h && pad.w < kernel.w, where(), "pooling_param.pad ", pad.h,
                   "x", pad.w, " must be smaller than the kernel ", kernel.h, "x", kernel.w);
    LAMINA_REQUIRE(p.pool() != PoolingParameter::STOCHASTIC || (pad.h == 0 && pad.w == 0),
                   where(), "pooling_param.pad must be 0 with pool: STOCHASTIC (Caffe pads "
                   "only MAX and AVE pooling), got ", pad.h, "x", pad.w);

    g_ = PoolGeometry{x.dim(0), x.dim(1), x.dim(2), x.dim(3), kernel.h, kernel.w, stride.h,
                      stride.w, pad.h, pad.w, 0, 0};
    const bool ceil = p.round_mode() == PoolingParameter::CEIL;
    g_.out_h = pooled_size(g_.h, kernel.h, stride.h, pad.h, ceil);
    g_.out_w = pooled_size(g_.w, kernel.w, stride.w, pad.w, ceil);
    LAMINA_REQUIRE(g_.out_h >= 1 && g_.out_w >= 1, where(), "the ", kernel.h, "x", kernel.w,
                   " kernel does not fit in bottom '", x.name(), "' ", x.shape_string(),
                   " padded by ", pad.h, "x", pad.w, ": the output would be empty");
    top[0]->reshape({g_.n, g_.c, g_.out_h, g_.out_w});
    if (uses_mask(kind_)) mask_.reserve(backend_, sizeof(int32_t) * top[0]->count());
    if (kind_ == PoolKind::kSampled) random_.shape(backend_, top[0]->count(), 1);
    storage_ = x.dtype();
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    if (is_half(storage_)) {
      backend_.pool_forward(half_format(storage_), method(), g_, bottom[0]->half_data(),
                            top[0]->mutable_half_data(), mask());
      return;
    }
    pool_forward(backend_, kind_, g_, PoolDraws{&random_}, bottom[0]->data(),
                 top[0]->mutable_data(), mask());
    random_.advance();
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    if (is_half(storage_)) {
      backend_.pool_backward(half_format(storage_), method(), g_, top[0]->half_diff(), mask(),
                             bottom[0]->mutable_half_diff());
      return;
    }
    pool_backward(backend_, kind_, g_, bottom[0]->data(), top[0]->diff(), mask(),
                  bottom[0]->mutable_diff());
  }

 private:
  // 16 bits: MAX or AVE only.
  PoolMethod method() const {
    return kind_ == PoolKind::kMax ? PoolMethod::kMax : PoolMethod::kAverage;
  }
  int32_t* mask() const { return uses_mask(kind_) ? mask_.as<int32_t>() : nullptr; }

  PoolKind kind_ = PoolKind::kMax;
  PoolGeometry g_{};
  // max and TRAIN stochastic: (N, C, OH, OW) the chosen index h * W + w in the bottom plane
  Buffer mask_;
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
};

}  // namespace

void register_pooling_layer() { register_layer<PoolingLayer>("Pooling"); }

}  // namespace lamina
