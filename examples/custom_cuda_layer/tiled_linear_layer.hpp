// TiledLinear: a fully connected layer whose products are the example's own CUDA kernels (a
// matrix product tiled through shared memory, tiled_linear_kernels.cu) on a GPU, and their
// CPU twin (tiled_linear_cpu.cpp) on the Native backend. It computes what Lamina's Linear
// computes and reads the same inner_product_param, so a prototxt swaps one for the other by
// the type name alone (and weights saved from one load into the other):
//   layer { name: "fc1" type: "TiledLinear" inner_product_param { num_output: 512 } }
// x (N, C): the bottom viewed as a matrix at `axis`; weight (K, C), bias (K); top (N, K).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "lamina/layer.hpp"

namespace example {

class TiledLinearLayer : public lamina::Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"inner_product_param"}; }

  void setup(const lamina::Tensors& bottom, const lamina::Tensors& top) override;
  void forward(const lamina::Tensors& bottom, const lamina::Tensors& top) override;
  void backward_input(const lamina::Tensors& top, const std::vector<bool>& propagate,
                      const lamina::Tensors& bottom) override;
  void backward_params(const lamina::Tensors& top, const lamina::Tensors& bottom) override;

  // Every pass launches the same kernels with the same arguments on Lamina's stream, and
  // neither waits for the device nor copies to or from the host, so the solver may record a
  // training step once and replay it as a CUDA graph.
  std::optional<std::string> capture_blocker() const override { return std::string(); }

 private:
  bool on_gpu_ = false;   // decided in setup: the CUDA kernels, or the CPU twin
  int64_t n_ = 0, c_ = 0, k_ = 0;
  bool bias_term_ = true;
};

}  // namespace example
