// Linear (Caffe's InnerProduct): a fully connected layer.
//
// The bottom is viewed as a matrix (M, K): M = product of the dims before `axis`, K = the
// product of the rest. weight (num_output, K) in Caffe's layout, bias (num_output).
//   top (M, num_output) = bottom W^T + ones bias^T
// The top keeps the bottom's dims before `axis` and replaces the rest with num_output.
// Gradients: dbottom = dtop W (written with =); dW += dtop^T bottom, db += dtop^T ones.
#include <memory>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class LinearLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"inner_product_param"}; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const InnerProductParameter& p = param_.inner_product_param();
    LAMINA_REQUIRE(p.has_num_output() && p.num_output() > 0, where(),
                   "inner_product_param.num_output must be set to a positive number of outputs");
    const Tensor& x = *bottom[0];
    const int axes = x.num_axes();
    LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "axis ", p.axis(),
                   " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
    const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
    m_ = x.count(0, axis);
    k_ = x.count(axis, axes);
    n_ = p.num_output();
    bias_term_ = p.bias_term();

    add_param("weight", {n_, k_}, p.has_weight_filler() ? p.weight_filler() : xavier());
    if (bias_term_) {
      add_param("bias", {n_}, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
      ones_ = std::make_unique<Tensor>(backend_, Shape{m_}, name() + "/ones");  // (M)
      backend_.fill(m_, 1.0f, ones_->mutable_data());
    }

    Shape shape(x.shape().begin(), x.shape().begin() + axis);
    shape.push_back(n_);
    top[0]->reshape(shape);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* w = params_[0].tensor->data();  // (N, K)
    float* y = top[0]->mutable_data();           // (M, N)
    backend_.gemm(Transpose::kNo, Transpose::kYes, m_, n_, k_, 1.0f, bottom[0]->data(), w, 0.0f,
                  y);
    if (bias_term_) {
      backend_.gemm(Transpose::kNo, Transpose::kNo, m_, n_, 1, 1.0f, ones_->data(),
                    params_[1].tensor->data(), 1.0f, y);
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    backend_.gemm(Transpose::kNo, Transpose::kNo, m_, k_, n_, 1.0f, top[0]->diff(),
                  params_[0].tensor->data(), 0.0f, bottom[0]->mutable_diff());
  }

  void backward_params(const Tensors& top, const Tensors& bottom) override {
    const float* dy = top[0]->diff();  // (M, N)
    backend_.gemm(Transpose::kYes, Transpose::kNo, n_, k_, m_, 1.0f, dy, bottom[0]->data(), 1.0f,
                  params_[0].tensor->mutable_diff());
    if (bias_term_) {
      backend_.gemv(Transpose::kYes, m_, n_, 1.0f, dy, ones_->data(), 1.0f,
                    params_[1].tensor->mutable_diff());
    }
  }

 private:
  static FillerParameter xavier() {
    FillerParameter filler;
    filler.set_type("xavier");
    return filler;
  }

  int64_t m_ = 0, k_ = 0, n_ = 0;
  bool bias_term_ = true;
  std::unique_ptr<Tensor> ones_;  // (M) of 1, multiplies the bias into every row
};

}  // namespace

void register_linear_layer() {
  register_layer<LinearLayer>("Linear");
  register_layer<LinearLayer>("InnerProduct");
}

}  // namespace lamina
