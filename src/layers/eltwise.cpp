// Eltwise: combines two or more bottoms of one shape element by element (eltwise_param).
//
//   bottoms x_i (any shape, all equal)  ->  top, same shape
//   SUM:  y = sum_i coeff_i x_i (coeff: one per bottom, or none for all 1)
//         dx_i = coeff_i dy
//   PROD: y = prod_i x_i
//         dx_i = dy prod_{j != i} x_j (the product of the others, no division, so zeros are fine)
//   MAX:  y = max_i x_i; an int32 mask records which bottom won (the first on ties)
//         dx_i = dy where bottom i won, else 0
// Bottom diffs are written with =. Not in place: PROD's backward needs every input.
// SUM also runs in 16 bits (bottoms, top and gradients in the format): y = round(coeff_0 x_0),
// then each term is added and the sum rounded (y = round(y + coeff_i x_i)), and dx_i =
// round(coeff_i dy).
// PROD and MAX have no 16-bit path yet and run in FP32.
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class EltwiseLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return -1; }
  std::vector<std::string> parameter_messages() const override { return {"eltwise_param"}; }
  HalfSupport half_support() const override {
    const bool sum = param_.eltwise_param().operation() == EltwiseParameter::SUM;
    return sum ? HalfSupport::kHalf : HalfSupport::kNone;
  }
  std::vector<Operation> operations() const override {
    const bool max = param_.eltwise_param().operation() == EltwiseParameter::MAX;
    return max ? std::vector<Operation>{Operation::kEltwiseMax} : std::vector<Operation>{};
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const EltwiseParameter& p = param_.eltwise_param();
    op_ = p.operation();
    const Tensor& first = *bottom[0];
    for (const Tensor* b : bottom) {
      LAMINA_REQUIRE(b->shape() == first.shape(), where(), "bottoms must have equal shapes, but '",
                     first.name(), "' is ", first.shape_string(), " and '", b->name(), "' is ",
                     b->shape_string());
    }
    LAMINA_REQUIRE(op_ == EltwiseParameter::SUM || p.coeff_size() == 0, where(),
                   "eltwise_param.coeff applies to operation SUM only, not ",
                   EltwiseParameter::EltwiseOp_Name(op_));
    LAMINA_REQUIRE(p.coeff_size() == 0 || p.coeff_size() == int(bottom.size()), where(),
                   "eltwise_param.coeff takes one value per bottom: ", bottom.size(),
                   " bottoms, ", p.coeff_size(), " coeff values");
    coeff_.assign(bottom.size(), 1.0f);
    for (int i = 0; i < p.coeff_size(); ++i) coeff_[i] = p.coeff(i);
    top[0]->reshape(first.shape());
    storage_ = first.dtype();
    LAMINA_REQUIRE(op_ == EltwiseParameter::SUM || !is_half(storage_), where(),
                   EltwiseParameter::EltwiseOp_Name(op_), " has no 16-bit path, but bottom '",
                   first.name(), "' is stored in ", dtype_name(storage_), ": give it FP32 "
                   "bottoms");
    if (op_ == EltwiseParameter::MAX) mask_ = Buffer(backend_, sizeof(int32_t) * first.count());
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t n = top[0]->count();
    if (is_half(storage_)) {  // SUM
      const Half f = half_format(storage_);
      uint16_t* y = top[0]->mutable_half_data();
      for (size_t i = 0; i < bottom.size(); ++i)
        backend_.axpby(f, n, coeff_[i], bottom[i]->half_data(), i == 0 ? 0.0f : 1.0f, y);
      return;
    }
    float* y = top[0]->mutable_data();
    switch (op_) {
      case EltwiseParameter::SUM:
        scaled_copy(n, coeff_[0], bottom[0]->data(), y);
        for (size_t i = 1; i < bottom.size(); ++i) {
          backend_.axpy(n, coeff_[i], bottom[i]->data(), y);
        }
        break;
      case EltwiseParameter::PROD:
        backend_.mul(n, bottom[0]->data(), bottom[1]->data(), y);
        for (size_t i = 2; i < bottom.size(); ++i) backend_.mul(n, y, bottom[i]->data(), y);
        break;
      case EltwiseParameter::MAX:
        for (size_t i = 0; i < bottom.size(); ++i)
          backend_.eltwise_max_forward(n, int(i), bottom[i]->data(), y, mask_.as<int32_t>());
        break;
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    const int64_t n = top[0]->count();
    if (is_half(storage_)) {  // SUM
      for (size_t i = 0; i < bottom.size(); ++i) {
        if (propagate[i]) {
          backend_.axpby(half_format(storage_), n, coeff_[i], top[0]->half_diff(), 0.0f,
                         bottom[i]->mutable_half_diff());
        }
      }
      return;
    }
    const float* dy = top[0]->diff();
    for (size_t i = 0; i < bottom.size(); ++i) {
      if (!propagate[i]) continue;
      float* dx = bottom[i]->mutable_diff();
      switch (op_) {
        case EltwiseParameter::SUM:
          scaled_copy(n, coeff_[i], dy, dx);
          break;
        case EltwiseParameter::PROD: {
          bool first = true;  // dx = dy * x_j for the first j != i, then *= x_j for the rest
          for (size_t j = 0; j < bottom.size(); ++j) {
            if (j == i) continue;
            backend_.mul(n, first ? dy : dx, bottom[j]->data(), dx);
            first = false;
          }
          break;
        }
        case EltwiseParameter::MAX:
          backend_.eltwise_max_backward(n, int(i), dy, mask_.as<int32_t>(), dx);
          break;
      }
    }
  }

 private:
  // y = alpha x, without reading y (which may hold anything).
  void scaled_copy(int64_t n, float alpha, const float* x, float* y) {
    backend_.copy(sizeof(float) * n, x, y);
    if (alpha != 1.0f) backend_.scal(n, alpha, y);
  }

  EltwiseParameter::EltwiseOp op_ = EltwiseParameter::SUM;
  DType storage_ = DType::kF32;  // of the bottoms, the top and their gradients
  std::vector<float> coeff_;  // SUM: one per bottom
  Buffer mask_;               // MAX only: (count) index of the winning bottom
};

}  // namespace

void register_eltwise_layer() { register_layer<EltwiseLayer>("Eltwise"); }

}  // namespace lamina
