// Linear (Caffe's InnerProduct): a fully connected layer.
//
// The bottom is viewed as a matrix (M, K): M = product of the dims before `axis`, K = the
// product of the rest. weight (num_output, K) in Caffe's layout, bias (num_output).
//   top (M, num_output) = bottom W^T + ones bias^T
// The top keeps the bottom's dims before `axis` and replaces the rest with num_output.
// Gradients: dbottom = dtop W (written with =); dW += dtop^T bottom, db += column sums of dtop.
// The bias goes into the product's epilogue (Backend::linear_forward), and so does a ReLU in
// place right after the layer, which the net lets the layer absorb (Layer::absorb): the
// forward is one operation, and the backward applies the ReLU's derivative and sums the bias
// gradient in one pass (linear_bias_backward). In a 16-bit precision the bottom, the top and
// their gradients are 16-bit, the products read the weight's 16-bit copy and accumulate in
// FP32, and the parameters' gradients are FP32 (the bias and the arena stay FP32).
#include <cmath>
#include <memory>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class LinearLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"inner_product_param"}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const InnerProductParameter& p = param_.inner_product_param();
    LAMINA_REQUIRE(p.has_num_output() && p.num_output() > 0, where(),
                   "inner_product_param.num_output must be set to a positive number of outputs");
    LAMINA_REQUIRE(!p.transpose(), where(), "inner_product_param.transpose (a weight stored "
                   "(k, num_output)) is not supported yet; remove it");
    const Tensor& x = *bottom[0];
    const int axes = x.num_axes();
    LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "axis ", p.axis(),
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
    m_ = x.count(0, axis);
    k_ = x.count(axis, axes);
    n_ = p.num_output();
    bias_term_ = p.bias_term();
    storage_ = x.dtype();

    add_param("weight", {n_, k_}, p.has_weight_filler() ? p.weight_filler() : xavier());
    if (bias_term_)
      add_param("bias", {n_}, p.has_bias_filler() ? p.bias_filler() : FillerParameter());

    Shape shape(x.shape().begin(), x.shape().begin() + axis);
    shape.push_back(n_);
    top[0]->reshape(shape);
  }

  // A ReLU in place on the output, with negative_slope 0, becomes part of the product's
  // epilogue; its derivative is applied to the top gradient here (from the output's sign,
  // which is what ReLU's own backward reads).
  bool absorb(const Layer& next) override {
    const float slope = next.param().relu_param().negative_slope();
    if (relu_ || next.type() != "ReLU" || slope != 0 || std::signbit(slope)) return false;
    relu_ = true;
    return true;
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* bias = bias_term_ ? params_[1].tensor->data() : nullptr;
    if (is_half(storage_)) {
      backend_.linear_forward(half_format(storage_), m_, n_, k_, bottom[0]->half_data(),
                              params_[0].tensor->half_copy(), bias, relu_,
                              top[0]->mutable_half_data());
    } else {
      backend_.linear_forward(m_, n_, k_, bottom[0]->data(), params_[0].tensor->data(), bias,
                              relu_, top[0]->mutable_data());
    }
  }

  // The net calls backward_params (when a parameter learns) before backward_input; whichever
  // comes first turns the top gradient into the ReLU's input gradient, in place. What only
  // the parameters' gradients need runs on the side lane, beside the input gradient
  // (Backend::to_side_lane), unless a parameter is shared with another layer.
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    float* db = bias_term_ ? params_[1].tensor->mutable_diff() : nullptr;
    float* dw = params_[0].tensor->mutable_diff();
    // Adds to the gradient, or writes it where it holds zeros (not read: a cheaper product).
    const float beta = params_[0].diff_zeroed ? 0.0f : 1.0f;
    if (relu_) apply_relu(top, db);
    SideLane lane(backend_, !any_shared(params_));
    if (is_half(storage_)) {
      const Half f = half_format(storage_);
      const uint16_t* dy = top[0]->half_diff();  // (M, N)
      if (!relu_ && db != nullptr)
        backend_.linear_bias_backward(f, m_, n_, nullptr, dy, nullptr, db);
      backend_.gemm(f, Transpose::kYes, Transpose::kNo, n_, k_, m_, 1.0f, dy,
                    bottom[0]->half_data(), beta, dw);
      return;
    }
    const float* dy = top[0]->diff();  // (M, N)
    if (!relu_ && db != nullptr) backend_.linear_bias_backward(m_, n_, nullptr, dy, nullptr, db);
    backend_.gemm(Transpose::kYes, Transpose::kNo, n_, k_, m_, 1.0f, dy, bottom[0]->data(), beta,
                  dw);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (relu_ && !relu_applied_) apply_relu(top, nullptr);
    relu_applied_ = false;
    if (!propagate[0]) return;
    if (is_half(storage_)) {
      backend_.gemm(half_format(storage_), Transpose::kNo, Transpose::kNo, m_, k_, n_, 1.0f,
                    top[0]->half_diff(), params_[0].tensor->half_copy(), 0.0f,
                    bottom[0]->mutable_half_diff());
      return;
    }
    backend_.gemm(Transpose::kNo, Transpose::kNo, m_, k_, n_, 1.0f, top[0]->diff(),
                  params_[0].tensor->data(), 0.0f, bottom[0]->mutable_diff());
  }

 private:
  // The ReLU's derivative applied to the top gradient in place, with the bias gradient
  // summed into db in the same pass when db is given.
  void apply_relu(const Tensors& top, float* db) {
    if (is_half(storage_)) {
      backend_.linear_bias_backward(half_format(storage_), m_, n_, top[0]->half_data(),
                                    top[0]->half_diff(), top[0]->mutable_half_diff(), db);
    } else {
      backend_.linear_bias_backward(m_, n_, top[0]->data(), top[0]->diff(),
                                    top[0]->mutable_diff(), db);
    }
    relu_applied_ = true;
  }

  static FillerParameter xavier() {
    FillerParameter filler;
    filler.set_type("xavier");
    return filler;
  }

  int64_t m_ = 0, k_ = 0, n_ = 0;
  bool bias_term_ = true;
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
  bool relu_ = false;          // absorbed the ReLU after it
  bool relu_applied_ = false;  // this pass's top gradient went through the ReLU already
};

}  // namespace

void register_linear_layer() {
  register_layer<LinearLayer>("Linear");
  register_layer<LinearLayer>("InnerProduct");
}

}  // namespace lamina
