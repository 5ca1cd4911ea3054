// FP16 loss scaling's test net (test_loss_scale.cpp, test_cuda_loss_scale.cpp): an FP16 MLP
// whose gradients overflow in chosen iterations, its solver and its data.
//
// GradientBoost, a test layer that makes them overflow: forward copies its
// bottom; backward passes the gradient back multiplied by `factor` in the backward passes
// whose 0-based index is listed in `passes` ("2,3,7"), unchanged in the others. In FP16
// training a factor of 1e30 overflows the 16-bit gradient below it, as a real overflow would.
// It counts its backward passes on the host (its state, so a resumed run goes on counting).
#pragma once

#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina::testing {

class GradientBoostLayer : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    require_custom_keys({"passes", "factor"});
    factor_ = float(custom_number("factor", 1));
    std::istringstream list(custom_string("passes", ""));
    for (std::string item; std::getline(list, item, ',');) passes_.insert(std::stoll(item));
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.copy(sizeof(float) * bottom[0]->count(), bottom[0]->data(), top[0]->mutable_data());
  }
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    const int64_t pass = passes_done_++;
    if (!propagate[0]) return;
    const int64_t n = bottom[0]->count();
    float* dx = bottom[0]->mutable_diff();
    backend_.copy(sizeof(float) * n, top[0]->diff(), dx);
    if (passes_.count(pass)) backend_.scal(n, factor_, dx);
  }
  std::vector<int64_t> state() const override { return {passes_done_}; }
  void set_state(const std::vector<int64_t>& state) override {
    LAMINA_REQUIRE(state.size() == 1, where(), "keeps one state value");
    passes_done_ = state[0];
  }
  std::optional<std::string> capture_blocker() const override {
    return std::string("it counts its backward passes on the host");
  }

 private:
  float factor_ = 1;
  std::set<int64_t> passes_;
  int64_t passes_done_ = 0;
};

// Registers the layer as "GradientBoost" once per process.
inline void register_gradient_boost() {
  static const bool done = [] {
    register_layer<GradientBoostLayer>("GradientBoost");
    return true;
  }();
  (void)done;
}

// test_util.hpp's small MLP, named "scaled", with GradientBoost before its loss: it
// multiplies the loss gradient by 1e30 in the listed backward passes, so that in FP16 the
// gradient below it overflows there.
inline NetParameter boosted_mlp(const std::string& passes) {
  register_gradient_boost();
  NetParameter net = parse_net_parameter(kSmallMlp, "net");
  net.set_name("scaled");
  LayerParameter* boost = net.add_layer();
  boost->set_name("boost");
  boost->set_type("GradientBoost");
  for (const auto& [key, value] : {std::pair<std::string, std::string>{"passes", passes},
                                   {"factor", "1e30"}}) {
    CustomParameter::Entry* entry = boost->mutable_custom_param()->add_entry();
    entry->set_key(key);
    entry->set_value(value);
  }
  // Between the scores and the loss, the last layer before it.
  net.mutable_layer()->SwapElements(net.layer_size() - 1, net.layer_size() - 2);
  return net;
}

// SGD with momentum in FP16, loss scale `scale` doubling after `growth_interval` finite
// iterations, and the solver fields `more`.
inline SolverParameter fp16_solver(const std::string& more = "", float scale = 1024,
                                   int growth_interval = 3) {
  SolverParameter p = parse_solver_parameter(
      "base_lr: 0.2 momentum: 0.9 random_seed: 3 precision: FP16 " + more, "solver");
  p.set_loss_scale(scale);
  p.set_loss_scale_growth_interval(growth_interval);
  return p;
}

// The same 8 random inputs and labels every iteration.
inline void feed(Solver& solver) {
  solver.net().blob("data").copy_data_from_host(random_values(8 * 24, 13));
  solver.net().blob("label").copy_data_from_host({0, 2, 1, 4, 3, 0, 1, 2});
}

}  // namespace lamina::testing
