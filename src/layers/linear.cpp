// Linear (Caffe's InnerProduct): a fully connected layer.
//
// The bottom is viewed as a matrix (M, K): M = product of the dims before `axis`, K = the
// product of the rest; N = num_output. weight (N, K) in Caffe's layout, or (K, N) with
// transpose: true (Caffe 1.0's transposed InnerProduct); bias (N).
//   top (M, N) = bottom W^T + ones bias^T      (transposed: bottom W + ones bias^T)
// The top keeps the bottom's dims before `axis` and replaces the rest with N.
// Gradients: dbottom = dtop W (transposed: dtop W^T), written with =; dW += dtop^T bottom
// (transposed: bottom^T dtop); db += column sums of dtop.
// The weight's filler sees the stored shape, as Caffe's does: fan-in K and fan-out N, and
// transposed fan-in N and fan-out K.
// The bias goes into the product's epilogue (Backend::linear_forward), and so does a ReLU in
// place right after the layer, which the net lets the layer absorb (Layer::absorb): the
// forward is one operation, and the backward applies the ReLU's derivative and sums the bias
// gradient in one pass (linear_bias_backward). linear_forward reads an (N, K) weight, so a
// transposed layer runs a plain product, then adds the bias (channel_affine over the rows)
// and applies the absorbed ReLU, in place; its backward is the same as the other layout's.
// In a 16-bit precision the bottom, the top and their gradients are 16-bit, the products read
// the weight's 16-bit copy and accumulate in FP32, and the parameters' gradients are FP32
// (the bias and the arena stay FP32). Transposed, the product goes to an FP32 array (M, N)
// that the bias and the ReLU update, and the top is rounded once, as linear_forward rounds.
// The operations are written once over the storage, T = float or uint16_t (stored.hpp).
#include <cmath>
#include <memory>
#include <type_traits>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "layers/stored.hpp"

namespace lamina {
namespace {

class LinearLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"inner_product_param"}; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }
  // A transposed layer adds its bias with channel_affine.
  std::vector<Operation> operations() const override {
    const InnerProductParameter& p = param_.inner_product_param();
    if (p.transpose() && p.bias_term()) return {Operation::kChannelAffine};
    return {};
  }

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
    transpose_ = p.transpose();
    storage_ = x.dtype();

    add_param("weight", transpose_ ? Shape{k_, n_} : Shape{n_, k_},
              p.has_weight_filler() ? p.weight_filler() : xavier());
    if (bias_term_)
      add_param("bias", {n_}, p.has_bias_filler() ? p.bias_filler() : FillerParameter());
    if (transpose_ && is_half(storage_))
      wide_ = std::make_unique<Tensor>(backend_, Shape{m_, n_}, name() + "/product");

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
    if (is_half(storage_)) return forward_as<uint16_t>(bottom, top);
    forward_as<float>(bottom, top);
  }

  // The net calls backward_params (when a parameter learns) before backward_input; whichever
  // comes first turns the top gradient into the ReLU's input gradient, in place. What only
  // the parameters' gradients need runs on the side lane, beside the input gradient
  // (Backend::to_side_lane), unless a parameter is shared with another layer.
  void backward_params(const Tensors& top, const Tensors& bottom) override {
    if (is_half(storage_)) return backward_params_as<uint16_t>(top, bottom);
    backward_params_as<float>(top, bottom);
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (relu_ && !relu_applied_) apply_relu(top, nullptr);
    relu_applied_ = false;
    if (!propagate[0]) return;
    if (is_half(storage_)) return input_gradient<uint16_t>(top, bottom);
    input_gradient<float>(top, bottom);
  }

 private:
  template <class T>
  void forward_as(const Tensors& bottom, const Tensors& top) {
    const float* bias = bias_term_ ? params_[1].tensor->data() : nullptr;
    const T* x = values_of<T>(*bottom[0]);               // (M, K)
    const T* w = weights_of<T>(*params_[0].tensor);      // (N, K), transposed (K, N)
    T* y = mutable_values_of<T>(*top[0]);                // (M, N)
    if (!transpose_) return linear(x, w, bias, y);
    float* z = nullptr;  // the product in FP32: the top itself, or the array rounded into it
    if constexpr (std::is_same_v<T, float>) {
      z = y;
    } else {
      z = wide_->mutable_data();
    }
    product(Transpose::kNo, Transpose::kNo, m_, n_, k_, x, w, 0.0f, z);
    if (bias != nullptr) backend_.channel_affine(m_, n_, 1, z, nullptr, bias, z);
    if (relu_) backend_.activation_forward(Activation::kReLU, m_ * n_, 0.0f, z, z);
    if constexpr (!std::is_same_v<T, float>) backend_.to_half(half_format(storage_), m_ * n_, z, y);
  }

  template <class T>
  void backward_params_as(const Tensors& top, const Tensors& bottom) {
    float* db = bias_term_ ? params_[1].tensor->mutable_diff() : nullptr;
    float* dw = params_[0].tensor->mutable_diff();
    // Adds to the gradient, or writes it where it holds zeros (not read: a cheaper product).
    const float beta = params_[0].diff_zeroed ? 0.0f : 1.0f;
    if (relu_) apply_relu(top, db);
    SideLane lane(backend_, !any_shared(params_));
    const T* dy = gradients_of<T>(*top[0]);  // (M, N)
    const T* x = values_of<T>(*bottom[0]);   // (M, K)
    if (!relu_ && db != nullptr) bias_backward(nullptr, dy, nullptr, db);
    if (transpose_) {
      product(Transpose::kYes, Transpose::kNo, k_, n_, m_, x, dy, beta, dw);  // x^T dy
    } else {
      product(Transpose::kYes, Transpose::kNo, n_, k_, m_, dy, x, beta, dw);  // dy^T x
    }
  }

  // dx (M, K) = dy (M, N) W (N, K), or dy W^T for W (K, N).
  template <class T>
  void input_gradient(const Tensors& top, const Tensors& bottom) {
    product(Transpose::kNo, transpose_ ? Transpose::kYes : Transpose::kNo, m_, k_, n_,
            gradients_of<T>(*top[0]), weights_of<T>(*params_[0].tensor), 0.0f,
            mutable_gradients_of<T>(*bottom[0]));
  }

  // The ReLU's derivative applied to the top gradient in place, with the bias gradient
  // summed into db in the same pass when db is given.
  void apply_relu(const Tensors& top, float* db) {
    if (is_half(storage_)) {
      bias_backward(top[0]->half_data(), top[0]->half_diff(), top[0]->mutable_half_diff(), db);
    } else {
      bias_backward(top[0]->data(), top[0]->diff(), top[0]->mutable_diff(), db);
    }
    relu_applied_ = true;
  }

  // The backend's operations for either storage.
  void linear(const float* x, const float* w, const float* bias, float* y) {
    backend_.linear_forward(m_, n_, k_, x, w, bias, relu_, y);
  }
  void linear(const uint16_t* x, const uint16_t* w, const float* bias, uint16_t* y) {
    backend_.linear_forward(half_format(storage_), m_, n_, k_, x, w, bias, relu_, y);
  }
  void product(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const float* a,
               const float* b, float beta, float* c) {
    backend_.gemm(ta, tb, m, n, k, 1.0f, a, b, beta, c);
  }
  void product(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               const uint16_t* b, float beta, float* c) {
    backend_.gemm(half_format(storage_), ta, tb, m, n, k, 1.0f, a, b, beta, c);
  }
  void product(Transpose ta, Transpose tb, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               const uint16_t* b, float beta, uint16_t* c) {
    backend_.gemm(half_format(storage_), ta, tb, m, n, k, 1.0f, a, b, beta, c);
  }
  void bias_backward(const float* y, const float* dy, float* dz, float* db) {
    backend_.linear_bias_backward(m_, n_, y, dy, dz, db);
  }
  void bias_backward(const uint16_t* y, const uint16_t* dy, uint16_t* dz, float* db) {
    backend_.linear_bias_backward(half_format(storage_), m_, n_, y, dy, dz, db);
  }

  static FillerParameter xavier() {
    FillerParameter filler;
    filler.set_type("xavier");
    return filler;
  }

  int64_t m_ = 0, k_ = 0, n_ = 0;
  bool bias_term_ = true;
  bool transpose_ = false;       // the weight is stored (K, N)
  DType storage_ = DType::kF32;  // the bottom's and top's (the net chose it)
  bool relu_ = false;            // absorbed the ReLU after it
  bool relu_applied_ = false;    // this pass's top gradient went through the ReLU already
  std::unique_ptr<Tensor> wide_;  // transposed in 16 bits: the FP32 product (M, N)
};

}  // namespace

void register_linear_layer() {
  register_layer<LinearLayer>("Linear");
  register_layer<LinearLayer>("InnerProduct");
}

}  // namespace lamina
