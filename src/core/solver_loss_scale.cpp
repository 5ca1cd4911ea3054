// FP16 training's dynamic loss scaling in the solver (docs/precision.md): when it is on, what
// the log says about it, and the check that it has not collapsed. The scale itself lives in
// the step state and advances on the device (step_state.hpp's advance_loss_scale); the
// update skips an iteration whose scaled gradients are not finite (Backend::update).
#include <glog/logging.h>

#include <sstream>

#include "lamina/solver.hpp"
#include "solver_internal.hpp"

namespace lamina {

using solver_detail::NonFiniteError;

namespace {

// Below this the scale has halved from any sensible start through every iteration of a run
// of a hundred or more: the gradients are not finite at any scale.
constexpr float kSmallestLossScale = 1.0f / (1 << 24);

}  // namespace

void Solver::init_loss_scaling() {
  loss_scaling_ = net_->stores_fp16();
  if (!loss_scaling_) {
    const std::string set = param_.has_loss_scale()                   ? "loss_scale"
                            : param_.has_loss_scale_growth_interval() ? "loss_scale_growth_interval"
                                                                      : "";
    LAMINA_REQUIRE(set.empty(), "the solver sets ", set, ", but no layer of the TRAIN net '",
                   net_->name(), "' runs in FP16, so nothing would use it: remove it, or "
                   "train in FP16 (precision: FP16, or lamina train --precision fp16)");
    return;
  }
  schedule_.growth_interval = param_.loss_scale_growth_interval();
  scale_state_.scale = param_.loss_scale();
  net_->set_loss_scale(&step_state_.as<StepState>()->loss_scale);
  LOG(INFO) << "FP16 loss scaling: the loss gradient is scaled by " << scale_state_.scale
            << " at first, halved on an iteration whose gradients are not finite (its update "
            << "is skipped), doubled after " << schedule_.growth_interval
            << " finite iterations in a row";
}

Solver::LossScaleState Solver::loss_scale_state() const {
  LAMINA_REQUIRE(loss_scaling_, "the solver does not scale the loss: no layer of its TRAIN net "
                 "runs in FP16");
  StepState state;
  backend_.copy_to_host(sizeof(StepState), step_state_.get(), &state);
  return {state.loss_scale, state.good_steps, state.skipped};
}

std::string Solver::loss_scale_note() {
  if (!loss_scaling_) return {};
  const LossScaleState s = loss_scale_state();
  std::ostringstream note;
  note << ", loss scale = " << s.scale << " (" << s.skipped << " iteration"
       << (s.skipped == 1 ? "" : "s") << " skipped)";
  if (s.scale >= kSmallestLossScale) return note.str();
  const std::string message =
      "training diverged at iteration " + std::to_string(iter_) + ": the FP16 loss scale "
      "fell to " + solver_detail::number(s.scale) + " after " + std::to_string(s.skipped) +
      " skipped iterations: the gradients are not finite at any scale. " + divergence_advice();
  if (param_.nonfinite() == SolverParameter::STOP) throw NonFiniteError(message);
  if (!nonfinite_seen_) LOG(ERROR) << message << " (training goes on: nonfinite is CONTINUE)";
  nonfinite_seen_ = true;
  return note.str();
}

void Solver::log_loss_scaling(int iterations) {
  if (!loss_scaling_ || iterations <= 0) return;
  const LossScaleState s = loss_scale_state();
  LOG(INFO) << "FP16 loss scaling: " << s.skipped << " of " << iter_
            << " iterations skipped in all (gradients not finite); the scale is " << s.scale;
}

}  // namespace lamina
