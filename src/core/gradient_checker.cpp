#include "lamina/gradient_checker.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "lamina/filler.hpp"

namespace lamina {
namespace {

// Drives the layer: restores the inputs, runs forward, evaluates the objective on the host.
class Probe {
 public:
  Probe(Layer& layer, const Tensors& bottom, const Tensors& top, uint64_t seed)
      : layer_(layer), bottom_(bottom), top_(top) {
    for (Tensor* b : bottom_) inputs_.push_back(b->copy_data_to_host());
    // Tops whose shapes forward decides (Filter): r has the shapes a pass gives.
    if (layer_.reshapes_each_pass()) layer_.forward(bottom_, top_);
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    for (Tensor* t : top_) {
      std::vector<float> r(t->count());
      for (float& v : r) v = dist(rng);
      weights_.push_back(std::move(r));
    }
  }

  std::vector<float>& input(size_t i) { return inputs_[i]; }

  // f = sum_t sum_i r_ti * top_ti after a forward pass from the stored inputs.
  double objective() {
    for (size_t i = 0; i < bottom_.size(); ++i) bottom_[i]->copy_data_from_host(inputs_[i]);
    layer_.forward(bottom_, top_);
    double f = 0;
    for (size_t t = 0; t < top_.size(); ++t) {
      const std::vector<float> y = top_[t]->copy_data_to_host();
      for (size_t i = 0; i < y.size(); ++i) f += double(weights_[t][i]) * y[i];
    }
    return f;
  }

  // Forward, then top diffs = r, then the layer's backward, as the net runs it.
  void backward(const std::vector<bool>& propagate) {
    objective();
    for (size_t t = 0; t < top_.size(); ++t) top_[t]->copy_diff_from_host(weights_[t]);
    for (auto& p : layer_.params()) {
      p.tensor->copy_diff_from_host(std::vector<float>(p.tensor->count(), 0.0f));
    }
    if (!layer_.params().empty()) layer_.backward_params(top_, bottom_);
    if (std::find(propagate.begin(), propagate.end(), true) != propagate.end()) {
      layer_.backward_input(top_, propagate, bottom_);
    }
  }

 private:
  Layer& layer_;
  const Tensors& bottom_;
  const Tensors& top_;
  std::vector<std::vector<float>> inputs_;   // the bottom values every forward starts from
  std::vector<std::vector<float>> weights_;  // r, one per top
};

// Compares the analytic gradient of one blob with central differences of the objective.
// perturb(i, v) sets element i to v (and re-uploads what must be re-uploaded).
template <class Perturb>
void check_blob(const std::string& label, std::vector<float> values,
                const std::vector<float>& analytic, Probe& probe, Perturb perturb,
                const GradientCheckOptions& options, GradientCheckResult& result) {
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = values[i];
    if (options.kink_range >= 0 && std::abs(x) >= options.kink - options.kink_range &&
        std::abs(x) <= options.kink + options.kink_range) {
      ++result.skipped;
      continue;
    }
    perturb(i, x + options.step);
    const double plus = probe.objective();
    perturb(i, x - options.step);
    const double minus = probe.objective();
    perturb(i, x);
    const double numeric = (plus - minus) / (2.0 * options.step);
    const double a = analytic[i];
    const double scale = std::max({std::abs(a), std::abs(numeric), 1.0});
    const double error = std::abs(a - numeric) / scale;
    ++result.checked;
    if (!(error <= result.max_error)) result.max_error = error;  // NaN propagates
    if (!(error <= options.threshold)) {
      ++result.failures;
      if (result.ok) {
        std::ostringstream out;
        out << label << " [" << i << "] (value " << x << "): analytic " << a << " vs numeric "
            << numeric << ", error " << error << " > " << options.threshold;
        result.first_failure = out.str();
      }
      result.ok = false;
    }
  }
}

}  // namespace

std::string GradientCheckResult::summary() const {
  std::ostringstream out;
  if (ok) {
    out << "ok: " << checked << " elements checked";
  } else {
    out << failures << " of " << checked << " elements failed; first: " << first_failure;
  }
  out << ", max error " << max_error;
  if (skipped > 0) out << ", " << skipped << " skipped at the kink";
  return out.str();
}

void setup_standalone(Layer& layer, const Tensors& bottom, const Tensors& top, uint64_t seed) {
  if (works_in_place(bottom, top)) check_in_place(layer, bottom, top, {});  // as a net would
  layer.setup(bottom, top);
  std::mt19937_64 rng(seed);
  std::vector<float> values;
  for (Param& p : layer.params()) {
    p.tensor->allocate(layer.backend());
    fill(p.filler, p.tensor->shape(), rng, values);
    p.tensor->copy_data_from_host(values);
  }
}

GradientCheckResult check_gradients(Layer& layer, const Tensors& bottom, const Tensors& top,
                                    const GradientCheckOptions& options) {
  LAMINA_REQUIRE(options.step > 0, "gradient check of layer '", layer.name(),
                 "': the step must be positive, got ", options.step);
  std::vector<bool> propagate(bottom.size());
  for (size_t i = 0; i < bottom.size(); ++i) {
    const bool skipped = std::find(options.skip_bottoms.begin(), options.skip_bottoms.end(),
                                   int(i)) != options.skip_bottoms.end();
    propagate[i] = layer.accepts_gradient(int(i)) && !skipped;
  }

  Probe probe(layer, bottom, top, options.seed);
  probe.backward(propagate);
  std::vector<std::vector<float>> bottom_grads(bottom.size()), param_grads;
  for (size_t i = 0; i < bottom.size(); ++i) {
    if (propagate[i]) bottom_grads[i] = bottom[i]->copy_diff_to_host();
  }
  for (Param& p : layer.params()) param_grads.push_back(p.tensor->copy_diff_to_host());

  GradientCheckResult result;
  for (size_t b = 0; b < bottom.size(); ++b) {
    if (!propagate[b]) continue;
    std::vector<float>& input = probe.input(b);
    const std::string label = "bottom " + std::to_string(b) + " '" + bottom[b]->name() + "' " +
                              bottom[b]->shape_string();
    check_blob(label, input, bottom_grads[b], probe,
               [&input](size_t i, float v) { input[i] = v; }, options, result);
  }
  if (options.check_params) {
    for (size_t k = 0; k < layer.params().size(); ++k) {
      Tensor& w = *layer.params()[k].tensor;
      std::vector<float> values = w.copy_data_to_host();
      const std::string label = "parameter " + std::to_string(k) + " '" + w.name() + "' " +
                                w.shape_string();
      check_blob(label, values, param_grads[k], probe,
                 [&w, &values](size_t i, float v) {
                   values[i] = v;
                   w.copy_data_from_host(values);
                 },
                 options, result);
    }
  }
  // Leave the bottoms holding their inputs (an in-place layer overwrote them).
  for (size_t i = 0; i < bottom.size(); ++i) bottom[i]->copy_data_from_host(probe.input(i));
  return result;
}

}  // namespace lamina
