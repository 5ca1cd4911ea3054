// LRN: Caffe's local response normalisation, lrn_param, bottom (N, C, H, W) -> top (same).
//
// ACROSS_CHANNELS (default): y = x (k + alpha / size * (the sum of x^2 over the local_size
// channels centred on each, clipped at the ends))^-beta, through the lrn operations; the
// scale (N, C, H, W) is kept for the backward pass, which also reads the top.
// WITHIN_CHANNEL, as Caffe composes it from layers: y = x scale with
//   avg   = the average pooling of x^2 over local_size x local_size windows, stride 1,
//           zero padding (local_size - 1) / 2 (Caffe's AVE pooling: the divisor counts the
//           padded positions, so it is always local_size^2),
//   scale = (1 + alpha avg)^-beta, Caffe's Power layer (power -beta, scale alpha, shift 1).
// Caffe adds 1 there, not k, and alpha is not divided by the size (the average already
// divides): k is unused. The same operations run here (pool_forward average, the pointwise
// Power, mul), and the backward pass is the chain of their gradients, as Caffe's layers
// give it: dx = dy scale + 2 x pool_backward(Power'(avg) (dy x)). avg and scale are kept
// from the forward pass; a third array holds x^2, then the gradient's intermediate terms,
// so the scratch is three arrays of the bottom's size.
// local_size must be odd (Caffe's requirement); engine is accepted as a hint. FP32.

#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

class LrnLayer : public Layer {
 public:
  // The region is known from the start: the net asks operations() before setup.
  LrnLayer(const LayerParameter& param, const LayerContext& context)
      : Layer(param, context),
        within_(param.lrn_param().norm_region() == LRNParameter::WITHIN_CHANNEL) {}

  std::vector<std::string> parameter_messages() const override { return {"lrn_param"}; }
  std::vector<Operation> operations() const override {
    if (!within_) return {Operation::kLrn};
    return {Operation::kPooling, Operation::kPointwise};
  }
  TopUse backward_reads_top() const override {
    return within_ ? TopUse::kNothing : TopUse::kValues;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const LRNParameter& p = param_.lrn_param();
    const Tensor& x = *bottom[0];
    require_nchw(where(), x);
    LAMINA_REQUIRE(p.local_size() % 2 == 1, where(), "lrn_param.local_size must be odd "
                   "(Caffe's LRN centres the window on each element), got ", p.local_size());
    const int64_t size = p.local_size();
    count_ = x.count();
    n_ = x.dim(0), c_ = x.dim(1), plane_ = x.dim(2) * x.dim(3);
    top[0]->reshape(x.shape());
    scale_.reserve(backend_, sizeof(float) * count_);
    if (!within_) {
      args_ = LrnArgs{size, p.alpha(), p.beta(), p.k()};
      return;
    }
    if (p.has_k()) warn("lrn_param.k is not used by WITHIN_CHANNEL, which adds 1 (as in Caffe)");
    const int64_t pad = (size - 1) / 2;
    pool_ = PoolGeometry{n_, c_, x.dim(2), x.dim(3), size, size, 1, 1, pad, pad,
                         x.dim(2), x.dim(3)};
    power_ = Pointwise{PointwiseFn::kPower, -p.beta(), p.alpha(), 1.0f};
    avg_.reserve(backend_, sizeof(float) * count_);
    work_.reserve(backend_, sizeof(float) * count_);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    float* scale = scale_.as<float>();
    if (!within_) {
      backend_.lrn_forward(n_, c_, plane_, args_, x, scale, y);
      return;
    }
    backend_.pointwise_forward(kSquare, count_, x, work_.as<float>());
    backend_.pool_forward(PoolMethod::kAverage, pool_, work_.as<float>(), avg_.as<float>(),
                          nullptr);
    backend_.pointwise_forward(power_, count_, avg_.as<float>(), scale);
    backend_.mul(count_, x, scale, y);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* x = bottom[0]->data();
    const float* dy = top[0]->diff();
    float* dx = bottom[0]->mutable_diff();
    const float* scale = scale_.as<float>();
    if (!within_) {
      backend_.lrn_backward(n_, c_, plane_, args_, x, top[0]->data(), scale, dy, dx);
      return;
    }
    // Caffe's layers backwards: the product's gradient for scale (dy x), the Power's for
    // avg, the pooling's for x^2, the square's for x; then the product's for x (dy scale)
    // added, as Caffe's Split adds the gradients of the two uses of x.
    float* work = work_.as<float>();
    backend_.mul(count_, dy, x, work);
    backend_.pointwise_backward(power_, count_, avg_.as<float>(), scale, work, work);
    backend_.pool_backward(PoolMethod::kAverage, pool_, work, nullptr, dx);
    backend_.pointwise_backward(kSquare, count_, x, nullptr, dx, dx);  // Power reads no y
    backend_.mul(count_, dy, scale, work);
    backend_.axpy(count_, 1.0f, work, dx);
  }

 private:
  // Caffe's Power layer with power 2: x^2 (its gradient 2 x dy).
  static constexpr Pointwise kSquare{PointwiseFn::kPower, 2.0f, 1.0f, 0.0f};

  bool within_;
  int64_t count_ = 0, n_ = 0, c_ = 0, plane_ = 0;
  // Across: the lrn operations' scale; within: (1 + alpha avg)^-beta. (N, C, H, W)
  Buffer scale_;
  LrnArgs args_;  // across
  // Within: the pooling window, the Power of avg, avg (N, C, H, W) and the scratch array
  // (N, C, H, W: x^2 in the forward pass, the gradient's terms in the backward pass).
  PoolGeometry pool_{};
  Pointwise power_{};
  Buffer avg_, work_;
};

}  // namespace

void register_lrn_layer() { register_layer<LrnLayer>("LRN"); }

}  // namespace lamina
