// Numerical gradient checking for layers, after Caffe's GradientChecker: the analytic
// gradient from backward_input/backward_params is compared with central differences on every
// bottom and parameter element. Results are returned, not asserted, so any test framework
// (or none) can use them:
//
//   Tensor x(backend, {2, 3}, "x"), y(backend, {1}, "y");
//   x.copy_data_from_host(values);
//   auto layer = LayerRegistry::create(param, {backend, TRAIN, 1});
//   setup_standalone(*layer, {&x}, {&y}, /*seed=*/1);
//   GradientCheckResult r = check_gradients(*layer, {&x}, {&y}, {});
//   EXPECT_TRUE(r.ok) << r.summary();
//
// The objective is f = sum over tops t of sum_i r_ti * t_i with fixed random weights r in
// [-1, 1], so every top element (a scalar loss too) carries gradient. The check works on any
// backend: values move through explicit host copies, never through raw pointers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

struct GradientCheckOptions {
  float step = 1e-2f;       // h in (f(x + h) - f(x - h)) / 2h
  float threshold = 1e-2f;  // allowed |analytic - numeric| / max(|analytic|, |numeric|, 1)
  // Elements whose value lies in [kink - kink_range, kink + kink_range] are skipped: the
  // function is not differentiable there (ReLU at 0). kink_range < 0 checks every element.
  float kink = 0;
  float kink_range = -1;
  uint64_t seed = 1701;            // of the objective's weights r
  std::vector<int> skip_bottoms;   // bottoms neither given a gradient nor checked
  bool check_params = true;        // also check every parameter element
};

struct GradientCheckResult {
  bool ok = true;
  double max_error = 0;        // the largest |a - n| / max(|a|, |n|, 1) seen
  int64_t checked = 0;         // elements compared
  int64_t skipped = 0;         // elements skipped at a kink
  int64_t failures = 0;        // elements over the threshold
  std::string first_failure;   // which blob, index, analytic vs numeric; empty when ok

  // One line: "ok: 42 elements checked, max error 1e-4" or the counts and first failure.
  std::string summary() const;
};

// Sets a layer up outside a net: calls setup, then gives each parameter its own memory on the
// layer's backend, filled by its filler from a generator seeded with seed.
void setup_standalone(Layer& layer, const Tensors& bottom, const Tensors& top, uint64_t seed);

// Checks every bottom that accepts gradients (minus options.skip_bottoms) and, unless turned
// off, every parameter. The layer must be set up (setup_standalone) and bottom data filled;
// the checker restores the bottom values before every forward pass, so in-place layers
// (top == bottom) work. Bottom and parameter values are left as they were given.
GradientCheckResult check_gradients(Layer& layer, const Tensors& bottom, const Tensors& top,
                                    const GradientCheckOptions& options = {});

}  // namespace lamina
