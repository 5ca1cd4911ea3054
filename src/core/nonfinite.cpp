// Non-finite values: where a NaN or infinity first appears in a net (Net::find_nonfinite),
// and the solver's check of the loss, weights and gradients (Solver::check_finite), with the
// message that says what diverged and what to change.
#include <glog/logging.h>

#include <cmath>
#include <sstream>

#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"
#include "solver_internal.hpp"

namespace lamina {

using solver_detail::describe;
using solver_detail::NonFiniteError;
using solver_detail::number;

namespace {

// "" when every value of values is finite; else how many are not and the first of them.
std::string nonfinite_values(const std::vector<float>& values) {
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (std::isfinite(values[i])) continue;
    if (first < 0) first = int64_t(i);
    ++bad;
  }
  if (bad == 0) return {};
  std::ostringstream out;
  const float v = values[first];
  out << bad << " of " << values.size() << " values are not finite, the first ("
      << (std::isnan(v) ? "NaN" : v > 0 ? "inf" : "-inf") << ") at index " << first;
  return out.str();
}

}  // namespace

int64_t first_nonfinite(const float* values, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(values[i])) return i;
  return -1;
}

std::string Net::find_nonfinite() {
  auto layer_named = [&](int i) {
    return "layer '" + layers_[i]->name() + "' (" + layers_[i]->type() + ")";
  };
  // The layer, and the layers it absorbed (its forward does their work too).
  auto running = [&](int i) {
    std::string name = layer_named(i);
    for (int j = i + 1; j < num_layers() && fused_[j]; ++j)
      name += (j == i + 1 ? " with the " : " and the ") + layer_named(j);
    return name + (i + 1 < num_layers() && fused_[i + 1] ? " it absorbed" : "");
  };
  refresh_half_weights();
  for (int i = 0; i < num_layers(); ++i) {
    forward_layer(i);
    for (int t : io_[i].tops) {
      const std::string bad = nonfinite_values(blobs_[t]->copy_data_to_host());
      if (!bad.empty())
        return "the forward pass: " + running(i) + " output '" + blobs_[t]->name() + "': " + bad;
    }
  }
  arena_->zero_diff();
  for (const auto& l : loss_blobs_) backend_.fill(1, l.second, blobs_[l.first]->mutable_diff());
  for (int i = num_layers() - 1; i >= 0; --i) {
    if (!needs_backward_[i]) continue;
    backward_layer(i);
    // Its own parameters, and those of the layers it absorbed, whose gradients it computes.
    for (int j = i; j == i || (j < num_layers() && fused_[j]); ++j) {
      for (const Param& p : layers_[j]->params()) {
        const std::string bad = nonfinite_values(p.tensor->copy_diff_to_host());
        if (!bad.empty())
          return "the backward pass: " + layer_named(j) +
                 (j == i ? "" : " (run by " + layer_named(i) + ")") +
                 " gradient of parameter '" + p.tensor->name() + "': " + bad;
      }
    }
    for (size_t j = 0; j < io_[i].bottoms.size(); ++j) {
      if (!propagate_[i][j]) continue;
      const Tensor& b = *blobs_[io_[i].bottoms[j]];
      const std::string bad = nonfinite_values(b.copy_diff_to_host());
      if (!bad.empty())
        return "the backward pass: " + layer_named(i) + " gradient of input '" + b.name() +
               "': " + bad;
    }
  }
  return {};
}


namespace {

// The first parameter of table whose values in arena (host copy) are not finite.
const ParamInfo* first_nonfinite_param(const std::vector<ParamInfo>& table,
                                       const std::vector<float>& arena) {
  for (const ParamInfo& info : table)
    if (first_nonfinite(arena.data() + info.offset, info.count) >= 0) return &info;
  return nullptr;
}

}  // namespace

std::string Solver::divergence_advice() const {
  std::ostringstream m;
  if (last_snapshot_.empty())
    m << "No snapshot was written before";
  else
    m << "The last snapshot, '" << last_snapshot_.state << "' (iteration " << last_snapshot_iter_
      << "), holds finite weights";
  m << "; training stopped. The same settings will likely diverge again from there: lower "
       "base_lr (now " << param_.base_lr() << ")";
  if (param_.clip_gradients() > 0)
    m << " or clip_gradients (now " << param_.clip_gradients() << ")";
  else
    m << " or set clip_gradients to bound the gradient norm";
  m << ", then resume (nonfinite: CONTINUE would train on regardless)";
  return m.str();
}

void Solver::check_finite(const Net::LayerStates& states_before, bool arenas) {
  const int average = param_.average_loss();
  const float loss = ring_host_[iter_ % average];
  const float product = arenas ? ring_host_[average] : 0.0f;
  if (std::isfinite(loss) && std::isfinite(product)) {
    if (arenas) last_finite_check_ = iter_;
    return;
  }
  ParamArena& arena = net_->arena();
  const std::vector<float> weights = arena.to_host(arena.data());
  const std::vector<float> grads = arena.to_host(arena.diff());
  const ParamInfo* bad_weight = first_nonfinite_param(arena.table(), weights);
  // With loss scaling a gradient that overflowed is expected: that update was skipped.
  const ParamInfo* bad_grad =
      scales_loss() ? nullptr : first_nonfinite_param(arena.table(), grads);
  if (std::isfinite(loss) && !bad_weight && !bad_grad) {
    VLOG(1) << "iteration " << iter_ << ": the arenas' dot product overflowed (" << product
            << "); every value is finite";
    last_finite_check_ = iter_;
    return;
  }
  if (nonfinite_seen_) {  // nonfinite: CONTINUE, reported already
    if (param_.display() > 0 && iter_ % param_.display() == 0)
      LOG(WARNING) << "iteration " << iter_ << ": values are still not finite";
    return;
  }

  std::ostringstream message;
  message << "training diverged at iteration " << iter_ << ": ";
  std::vector<std::string> found;
  if (!std::isfinite(loss)) found.push_back("the loss is " + number(loss));
  if (bad_weight) {
    found.push_back(describe(*bad_weight) + " holds non-finite weights, from an update after " +
                    (last_finite_check_ < 0 ? std::string("training started")
                                            : "iteration " + std::to_string(last_finite_check_) +
                                                  " (the last check that found them finite)"));
  }
  if (bad_grad) found.push_back(describe(*bad_grad) + " has a non-finite gradient");
  for (size_t i = 0; i < found.size(); ++i) message << (i ? "; " : "") << found[i];

  // Replay this iteration's batch layer by layer to find where the values go bad, then put
  // the layers and gradients back as they were.
  const Net::LayerStates states_after = net_->layer_states();
  std::string first;
  try {
    net_->set_layer_states(states_before, "diagnosis");
    first = net_->find_nonfinite();
    net_->set_layer_states(states_after, "diagnosis");
  } catch (const Error& e) {
    first.clear();
    LOG(WARNING) << "the non-finite diagnosis failed: " << e.what();
  }
  arena.from_host(grads, arena.diff());
  if (!first.empty()) {
    message << ". The first non-finite value is in " << first;
  } else if (bad_weight) {
    message << ". The weights went bad in an update before this iteration's forward pass";
  }
  message << ". " << divergence_advice();
  if (param_.nonfinite() == SolverParameter::STOP) throw NonFiniteError(message.str());
  nonfinite_seen_ = true;
  LOG(ERROR) << message.str() << " (training goes on: nonfinite is CONTINUE)";
}

}  // namespace lamina
