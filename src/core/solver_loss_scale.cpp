// FP16 training's dynamic loss scaling in the solver (docs/precision.md): when it is on, what the
// log says about it, and the check that it has not collapsed (an iteration skipped that ran at the
// smallest scale), at display iterations and at the end of training. The scale itself lives in the
// step state and advances on the device (step_state.hpp's advance_loss_scale); the update skips an
// iteration whose scaled gradients are not finite (Backend::update).
#include <glog/logging.h>

#include <sstream>

#include "lamina/solver.hpp"
#include "lamina/step_state.hpp"
#include "solver_internal.hpp"

namespace lamina {

using solver_detail::NonFiniteError;

void Solver::init_loss_scaling() {
  if (!net_->stores_fp16()) {
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
  LAMINA_REQUIRE(scales_loss(), "the solver does not scale the loss: no layer of its TRAIN net "
                 "runs in FP16");
  StepState state;
  backend_.copy_to_host(sizeof(StepState), step_state_.get(), &state);
  return {state.loss_scale, state.good_steps, state.skipped, state.skip == 2};
}

void Solver::check_loss_scale(const LossScaleState& s) {
  if (!s.skipped_at_smallest) return;
  const std::string message =
      "training diverged at iteration " + std::to_string(iter_) + ": the gradients are not "
      "finite at any loss scale (" + std::to_string(s.skipped) + " iterations skipped in all, "
      "the last at the smallest scale, 2^-24): some layer's backward pass gives NaN or "
      "infinity whatever the scale. Run that part of the net in FP32 or BF16 (precision: on "
      "the layer or the solver), or look for NaN or infinity in the data" +
      last_snapshot_note();
  if (param_.nonfinite() == SolverParameter::STOP) throw NonFiniteError(message);
  if (!nonfinite_seen_) LOG(ERROR) << message << " (training goes on: nonfinite is CONTINUE)";
  nonfinite_seen_ = true;
}

std::string Solver::loss_scale_note() {
  if (!scales_loss()) return {};
  const LossScaleState s = loss_scale_state();
  check_loss_scale(s);
  std::ostringstream note;
  note << ", loss scale = " << s.scale << " (" << s.skipped << " iteration"
       << (s.skipped == 1 ? "" : "s") << " skipped)";
  return note.str();
}

void Solver::log_loss_scaling(int iterations) {
  if (!scales_loss() || iterations <= 0) return;
  const LossScaleState s = loss_scale_state();
  LOG(INFO) << "FP16 loss scaling: " << s.skipped << " of " << iter_
            << " iterations skipped in all (gradients not finite); the scale is " << s.scale;
  check_loss_scale(s);
}

}  // namespace lamina
