// Reduction: sums every axis from reduction_param.axis (default 0) to the last, scaled by
// coeff (default 1), as Caffe's Reduction does.
//
//   bottom (d0, ..., dk), axis a  ->  top (d0, ..., d_{a-1})   (axis 0: a scalar, shape ())
//   viewed as x (num, dim) with dim = the reduced axes' count:
//   SUM   y = coeff sum x        dx = coeff dy
//   ASUM  y = coeff sum |x|      dx = coeff dy sign(x)   (sign(0) = 0)
//   SUMSQ y = coeff sum x^2      dx = coeff dy 2 x
//   MEAN  y = coeff / dim sum x  dx = coeff / dim dy     (coeff / dim rounded to a float first)
// Sums run in double in order along the row, so every backend gives the same bits. Only the
// tail can be reduced: axis -1 is the last axis alone, not "none".
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class ReductionLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"reduction_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const ReductionParameter& p = param_.reduction_param();
    const Tensor& x = *bottom[0];
    const int axes = x.num_axes();
    LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "reduction_param.axis ",
                   p.axis(), " is out of range for bottom '", x.name(), "' of shape ",
                   x.shape_string(), " (axes ", -axes, " to ", axes - 1, ")");
    const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
    num_ = x.count(0, axis);
    dim_ = x.count(axis, axes);
    switch (p.operation()) {
      case ReductionParameter::SUM:
      case ReductionParameter::MEAN: op_ = ReduceOp::kSum; break;
      case ReductionParameter::ASUM: op_ = ReduceOp::kAbsSum; break;
      case ReductionParameter::SUMSQ: op_ = ReduceOp::kSumSquares; break;
    }
    coeff_ = p.coeff();
    if (p.operation() == ReductionParameter::MEAN && dim_ > 0) coeff_ /= float(dim_);
    top[0]->reshape(Shape(x.shape().begin(), x.shape().begin() + axis));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.reduce_middle(op_, num_, dim_, 1, coeff_, bottom[0]->data(),
                           top[0]->mutable_data());
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* x = op_ == ReduceOp::kSum ? nullptr : bottom[0]->data();
    backend_.reduce_middle_backward(op_, num_, dim_, 1, coeff_, x, top[0]->diff(),
                                    bottom[0]->mutable_diff());
  }

 private:
  ReduceOp op_ = ReduceOp::kSum;
  float coeff_ = 1;
  int64_t num_ = 0, dim_ = 0;  // the kept axes' count, the reduced axes' count
};

}  // namespace

void register_reduction_layer() { register_layer<ReductionLayer>("Reduction"); }

}  // namespace lamina
