// Eltwise: combines two or more bottoms of one shape element by element (eltwise_param).
//
//   bottoms x_i (any shape, all equal)  ->  top, same shape
//   SUM:  y = sum_i coeff_i x_i (coeff: one per bottom, or none for all 1)
//         dx_i = coeff_i dy
//   PROD: y = prod_i x_i
//         dx_i = dy prod_{j != i} x_j (stable_prod_grad true, Caffe's default: the product
//                of the others, finite where an input is 0)
//         dx_i = dy (y x_i^-1)       (stable_prod_grad false: Caffe's dy y / x_i, computed as
//                y times the reciprocal; where x_i = 0 it is NaN or infinite, as Caffe's)
//   MAX:  y = max_i x_i; an int32 mask records which bottom won (the first on ties)
//         dx_i = dy where bottom i won, else 0
// Caffe's rules for coeff: one per bottom or none; PROD with coeff is an error; MAX accepts
// and ignores them (Lamina says so in the log).
// The divided form takes the reciprocal with pointwise_forward (kPower, power -1: kPointwise)
// and runs in FP32 (a 16-bit net converts around it); the other forms run in 16 bits too.
// Bottom diffs are written with =. Not in place: PROD's backward needs every input (and the
// divided form the top's values, so no later layer may overwrite them in place).
// In a 16-bit precision the bottoms, the top and their gradients are 16-bit, and each step
// is rounded as it is taken: SUM's y = round(coeff_0 x_0), then y = round(y + coeff_i x_i),
// and dx_i = round(coeff_i dy); PROD's every product; MAX selects (exact). The operations are
// written once over the storage, T = float or uint16_t (stored.hpp).

#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/stored.hpp"

namespace lamina {
namespace {

class EltwiseLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return -1; }
  std::vector<std::string> parameter_messages() const override { return {"eltwise_param"}; }
  HalfSupport half_support() const override {
    return divided_gradient() ? HalfSupport::kNone : HalfSupport::kHalf;
  }
  std::vector<Operation> operations() const override {
    if (param_.eltwise_param().operation() == EltwiseParameter::MAX)
      return {Operation::kEltwiseMax};
    if (divided_gradient()) return {Operation::kPointwise};
    return {};
  }
  // The divided gradient reads y: a later layer must not overwrite it in place.
  TopUse backward_reads_top() const override {
    return divided_gradient() ? TopUse::kValues : TopUse::kNothing;
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const EltwiseParameter& p = param_.eltwise_param();
    op_ = p.operation();
    divided_ = divided_gradient();
    const Tensor& first = *bottom[0];
    for (const Tensor* b : bottom) {
      LAMINA_REQUIRE(b->shape() == first.shape(), where(), "bottoms must have equal shapes, but '",
                     first.name(), "' is ", first.shape_string(), " and '", b->name(), "' is ",
                     b->shape_string());
      LAMINA_REQUIRE(b->dtype() == first.dtype(), where(), "bottoms must be stored alike, but '",
                     first.name(), "' is ", dtype_name(first.dtype()), " and '", b->name(),
                     "' is ", dtype_name(b->dtype()));
    }
    LAMINA_REQUIRE(p.coeff_size() == 0 || p.coeff_size() == int(bottom.size()), where(),
                   "eltwise_param.coeff takes one value per bottom: ", bottom.size(),
                   " bottoms, ", p.coeff_size(), " coeff values");
    LAMINA_REQUIRE(op_ != EltwiseParameter::PROD || p.coeff_size() == 0, where(),
                   "eltwise_param.coeff applies to operation SUM only, not PROD");
    coeff_.assign(bottom.size(), 1.0f);
    if (op_ == EltwiseParameter::SUM) {
      for (int i = 0; i < p.coeff_size(); ++i) coeff_[i] = p.coeff(i);
    } else if (p.coeff_size() > 0) {
      warn("eltwise_param.coeff is ignored by operation MAX (as in Caffe)");
    }
    top[0]->reshape(first.shape());
    storage_ = first.dtype();
    if (op_ == EltwiseParameter::MAX) mask_.reserve(backend_, sizeof(int32_t) * first.count());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    if (is_half(storage_)) return forward_as<uint16_t>(bottom, top);
    forward_as<float>(bottom, top);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (is_half(storage_)) return backward_as<uint16_t>(top, propagate, bottom);
    backward_as<float>(top, propagate, bottom);
  }

 private:
  template <class T>
  void forward_as(const Tensors& bottom, const Tensors& top) {
    const int64_t n = top[0]->count();
    T* y = mutable_values_of<T>(*top[0]);
    switch (op_) {
      case EltwiseParameter::SUM:
        for (size_t i = 0; i < bottom.size(); ++i)
          add_scaled(n, coeff_[i], values_of<T>(*bottom[i]), i == 0, y);
        break;
      case EltwiseParameter::PROD:
        mul(n, values_of<T>(*bottom[0]), values_of<T>(*bottom[1]), y);
        for (size_t i = 2; i < bottom.size(); ++i) mul(n, y, values_of<T>(*bottom[i]), y);
        break;
      case EltwiseParameter::MAX:
        for (size_t i = 0; i < bottom.size(); ++i)
          max_forward(n, int(i), values_of<T>(*bottom[i]), y);
        break;
    }
  }

  template <class T>
  void backward_as(const Tensors& top, const std::vector<bool>& propagate,
                   const Tensors& bottom) {
    const int64_t n = top[0]->count();
    const T* dy = gradients_of<T>(*top[0]);
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (!propagate[i]) continue;
      T* dx = mutable_gradients_of<T>(*bottom[i]);
      switch (op_) {
        case EltwiseParameter::SUM:
          add_scaled(n, coeff_[i], dy, true, dx);
          break;
        case EltwiseParameter::PROD: {
          if (divided_) {
            divided_prod_gradient(n, *bottom[i], *top[0], dx);
            break;
          }
          bool first = true;  // dx = dy * x_j for the first j != i, then *= x_j for the rest
          for (size_t j = 0; j < bottom.size(); ++j) {
            if (j == i) continue;
            mul(n, first ? dy : dx, values_of<T>(*bottom[j]), dx);
            first = false;
          }
          break;
        }
        case EltwiseParameter::MAX:
          max_backward(n, int(i), dy, dx);
          break;
      }
    }
  }

  bool divided_gradient() const {
    const EltwiseParameter& p = param_.eltwise_param();
    return p.operation() == EltwiseParameter::PROD && !p.stable_prod_grad();
  }
  // dx (n) = dy (y x^-1): Caffe's dy (y / x). Only FP32 (half_support).
  void divided_prod_gradient(int64_t n, const Tensor& x, const Tensor& y, float* dx) {
    backend_.pointwise_forward(Pointwise{PointwiseFn::kPower, -1, 1, 0}, n, x.data(), dx);
    backend_.mul(n, dx, y.data(), dx);
    backend_.mul(n, dx, y.diff(), dx);
  }
  void divided_prod_gradient(int64_t, const Tensor&, const Tensor&, uint16_t*) {
    fail(where(), "stable_prod_grad: false runs in FP32 only");  // half_support says kNone
  }

  // y = alpha x (first: without reading y, which may hold anything), else y += alpha x.
  void add_scaled(int64_t n, float alpha, const float* x, bool first, float* y) {
    if (!first) return backend_.axpy(n, alpha, x, y);
    backend_.copy(sizeof(float) * n, x, y);
    if (alpha != 1.0f) backend_.scal(n, alpha, y);
  }
  void add_scaled(int64_t n, float alpha, const uint16_t* x, bool first, uint16_t* y) {
    backend_.axpby(half_format(storage_), n, alpha, x, first ? 0.0f : 1.0f, y);
  }
  void mul(int64_t n, const float* a, const float* b, float* y) { backend_.mul(n, a, b, y); }
  void mul(int64_t n, const uint16_t* a, const uint16_t* b, uint16_t* y) {
    backend_.mul(half_format(storage_), n, a, b, y);
  }
  void max_forward(int64_t n, int index, const float* x, float* y) {
    backend_.eltwise_max_forward(n, index, x, y, mask_.as<int32_t>());
  }
  void max_forward(int64_t n, int index, const uint16_t* x, uint16_t* y) {
    backend_.eltwise_max_forward(half_format(storage_), n, index, x, y, mask_.as<int32_t>());
  }
  void max_backward(int64_t n, int index, const float* dy, float* dx) {
    backend_.eltwise_max_backward(n, index, dy, mask_.as<int32_t>(), dx);
  }
  void max_backward(int64_t n, int index, const uint16_t* dy, uint16_t* dx) {
    backend_.eltwise_max_backward(half_format(storage_), n, index, dy, mask_.as<int32_t>(), dx);
  }

  EltwiseParameter::EltwiseOp op_ = EltwiseParameter::SUM;
  bool divided_ = false;  // PROD with stable_prod_grad false: dx_i = dy y / x_i
  DType storage_ = DType::kF32;  // of the bottoms, the top and their gradients
  std::vector<float> coeff_;  // SUM: one per bottom
  Buffer mask_;               // MAX only: (count) index of the winning bottom
};

}  // namespace

void register_eltwise_layer() { register_layer<EltwiseLayer>("Eltwise"); }

}  // namespace lamina
