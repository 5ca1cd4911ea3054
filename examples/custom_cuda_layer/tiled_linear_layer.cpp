// TiledLinear (tiled_linear_layer.hpp): the layer around the kernels of tiled_linear.hpp.
// setup() decides once which implementation runs: the CUDA kernels on a CUDA backend, the
// CPU twin on the Native backend; any other backend is refused. Lamina's CUDA backend hands
// the kernels its stream (the side lane's for the parameter gradients, which run beside the
// input gradient) and its workspace; nothing here allocates, copies or waits during a pass.
#include "tiled_linear_layer.hpp"

#include "lamina/cuda_kernels.hpp"
#include "lamina/registry.hpp"
#include "tiled_linear.hpp"

namespace example {

void TiledLinearLayer::setup(const lamina::Tensors& bottom, const lamina::Tensors& top) {
  const lamina::InnerProductParameter& p = param_.inner_product_param();
  LAMINA_REQUIRE(p.has_num_output() && p.num_output() > 0, where(),
                 "inner_product_param.num_output must be set to a positive number of outputs");
  LAMINA_REQUIRE(!p.transpose(), where(), "TiledLinear stores its weight (num_output, inputs); "
                 "inner_product_param.transpose is not supported");
  on_gpu_ = lamina::cuda::is_cuda(backend_);
  LAMINA_REQUIRE(on_gpu_ || backend_.is_host(), where(), "runs on a CUDA backend or on the "
                 "CPU, not on ", backend_.name());
  const lamina::Tensor& x = *bottom[0];
  const int axes = x.num_axes();
  LAMINA_REQUIRE(p.axis() >= -axes && p.axis() < axes, where(), "axis ", p.axis(),
                 " is out of range for bottom '", x.name(), "' of shape ", x.shape_string());
  const int axis = p.axis() < 0 ? p.axis() + axes : p.axis();
  n_ = x.count(0, axis);
  c_ = x.count(axis, axes);
  k_ = p.num_output();
  bias_term_ = p.bias_term();

  lamina::FillerParameter xavier;
  xavier.set_type("xavier");
  add_param("weight", {k_, c_}, p.has_weight_filler() ? p.weight_filler() : xavier);
  if (bias_term_) add_param("bias", {k_}, p.bias_filler());

  lamina::Shape shape(x.shape().begin(), x.shape().begin() + axis);
  shape.push_back(k_);
  top[0]->reshape(shape);
}

void TiledLinearLayer::forward(const lamina::Tensors& bottom, const lamina::Tensors& top) {
  const float* x = bottom[0]->data();                               // (N, C)
  const float* w = params_[0].tensor->data();                       // (K, C)
  const float* b = bias_term_ ? params_[1].tensor->data() : nullptr;  // (K)
  float* y = top[0]->mutable_data();                                // (N, K)
#ifdef LAMINA_WITH_CUDA
  if (on_gpu_)
    return tiled_linear_forward_gpu(*this, lamina::cuda::stream(backend_), n_, c_, k_, x, w, b,
                                    y);
#endif
  tiled_linear_forward_cpu(n_, c_, k_, x, w, b, y);
}

void TiledLinearLayer::backward_input(const lamina::Tensors& top,
                                      const std::vector<bool>& propagate,
                                      const lamina::Tensors& bottom) {
  if (!propagate[0]) return;
  const float* dy = top[0]->diff();            // (N, K)
  const float* w = params_[0].tensor->data();  // (K, C)
  float* dx = bottom[0]->mutable_diff();       // (N, C), written with =
#ifdef LAMINA_WITH_CUDA
  if (on_gpu_)
    return tiled_linear_backward_input_gpu(*this, lamina::cuda::stream(backend_), n_, c_, k_,
                                           dy, w, dx);
#endif
  tiled_linear_backward_input_cpu(n_, c_, k_, dy, w, dx);
}

void TiledLinearLayer::backward_params(const lamina::Tensors& top,
                                       const lamina::Tensors& bottom) {
  // On the side lane, beside the input gradient, unless another layer shares a parameter
  // (its gradient is then a sum that must stay in order with the other layer's additions).
  lamina::SideLane lane(backend_, !lamina::any_shared(params_));
  const float* x = bottom[0]->data();                                      // (N, C)
  const float* dy = top[0]->diff();                                        // (N, K)
  float* dw = params_[0].tensor->mutable_diff();                           // (K, C), +=
  float* db = bias_term_ ? params_[1].tensor->mutable_diff() : nullptr;    // (K), +=
#ifdef LAMINA_WITH_CUDA
  if (on_gpu_) {
    // Asked for inside the SideLane: the side lane's stream and workspace.
    const lamina::cuda::Stream stream = lamina::cuda::stream(backend_);
    float* partial = db != nullptr ? static_cast<float*>(lamina::cuda::workspace(
                                         backend_, tiled_linear_workspace_bytes(n_, k_)))
                                   : nullptr;
    return tiled_linear_backward_params_gpu(*this, stream, n_, c_, k_, x, dy, dw, db, partial);
  }
#endif
  tiled_linear_backward_params_cpu(n_, c_, k_, x, dy, dw, db);
}

LAMINA_REGISTER_LAYER(TiledLinearLayer, "TiledLinear");

}  // namespace example
