// Solver: the training loop and testing. The SolverParameter is checked at construction
// (solver_config.cpp); the learning rate at each iteration comes from lr_policy.cpp.
#include "lamina/solver.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstddef>
#include <exception>
#include <filesystem>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <sstream>

#include "lamina/communicator.hpp"
#include "lamina/gradient_buckets.hpp"
#include "lamina/io.hpp"
#include "lamina/lr_policy.hpp"
#include "lamina/precision.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/snapshot_lock.hpp"
#include "lamina/solver_config.hpp"

namespace lamina {

float TestResult::value(const std::string& name) const {
  for (const auto& output : outputs)
    if (output.first == name) return output.second;
  std::string known;
  for (const auto& output : outputs) known += (known.empty() ? "" : ", ") + output.first;
  fail("the test net has no output '", name, "'; its outputs: ", known);
}

Solver::Solver(const SolverParameter& param, const NetParameter& net_param, Backend& backend,
               const std::string& source, Communicator* comm)
    : Solver(param, solver_nets(param, net_param, source), backend, comm) {}

Solver::Solver(const SolverParameter& param, const SolverNets& nets, Backend& backend,
               Communicator* comm)
    : param_(param), backend_(backend), comm_(comm) {
  check_solver_parameter(param, {}, TestRunner::kCaller);  // the caller may run test() itself
  args_.rule = parse_solver_type(param);
  if (param.has_solver_mode()) {
    const bool gpu = param.solver_mode() == SolverParameter::GPU;
    LAMINA_REQUIRE(gpu != backend.is_host(), "solver_mode is ",
                   SolverParameter::SolverMode_Name(param.solver_mode()),
                   " but the solver was given the ", backend.name(), " backend; build the "
                   "backend with make_solver_backend(param)");
  }
  args_.momentum = param.momentum();
  args_.momentum2 = args_.rule == UpdateRule::kRMSProp ? param.rms_decay() : param.momentum2();
  args_.delta = param.delta();
  args_.weight_decay = param.weight_decay();
  args_.regularization =
      param.regularization_type() == "L1" ? Regularization::kL1 : Regularization::kL2;

  const uint64_t seed = param.random_seed() >= 0 ? uint64_t(param.random_seed())
                                                 : uint64_t(std::random_device{}());
  seed_ = comm_ ? broadcast_value(*comm_, seed) : seed;  // worker 0's: the same data order
  if (param.random_seed() < 0) LOG(INFO) << "random_seed not set; using " << seed_;
  if (comm_) check_workers_agree(nets);
  if (param.has_snapshot_format())
    LOG(INFO) << "snapshot_format: "
              << SolverParameter::SnapshotFormat_Name(param.snapshot_format())
              << " is taken as a request; Lamina writes its own snapshot format whatever is "
              << "asked (docs/snapshots.md)";
  // Layers that name no precision run in the solver's. debug_info: the train net logs at
  // display iterations (step), the test nets every pass, as Caffe's solver does.
  auto prepared = [&](const SolverNet& net) {
    NetParameter p = net.param;
    set_default_precision(p, param.precision());
    if (param.debug_info()) p.set_debug_info(true);
    return p;
  };
  net_ = std::make_unique<Net>(prepared(nets.train), nets.train.param.state().phase(), backend,
                               seed_, nullptr, nets.train.source);
  for (size_t k = 0; k < nets.tests.size(); ++k) {
    const SolverNet& test = nets.tests[k];
    // With several test nets, their errors say which one.
    const std::string label = nets.tests.size() > 1
        ? "test net #" + std::to_string(k) + " (" + test.origin + "): " : std::string();
    try {
      test_nets_.push_back(std::make_unique<Net>(prepared(test), test.param.state().phase(),
                                                 backend, seed_ + 1 + k, net_->arena_handle(),
                                                 test.source));
    } catch (const Error& e) {
      fail(label, e.what());
    }
    Net& net = *test_nets_.back();
    int64_t outputs = 0;
    for (const std::string& name : net.output_names()) outputs += net.blob(name).count();
    // As Caffe: a test net without outputs still runs its passes, and reports nothing.
    if (outputs == 0) {
      LOG(INFO) << label << "the " << Phase_Name(net.phase()) << " net"
                << (nets.tests.size() > 1 ? " #" + std::to_string(k) : std::string())
                << " has no outputs to report (a top no layer reads, such as accuracy or "
                << "loss); its tests run its forward passes and report none";
    }
    test_sums_.emplace_back(backend, sizeof(float) * (outputs + 1));  // + the loss
    test_warm_.push_back(false);
    test_graphs_.emplace_back();
    test_graph_generations_.push_back(0);
  }

  // The weights' 16-bit copy (layers in BF16 or FP16) is written by the update, not
  // refreshed by every forward pass of either net.
  ParamArena& arena = net_->arena();
  if (arena.has_half_copy()) {
    args_.half_copy = arena.half_copy(arena.half_format());
    args_.half_format = arena.half_format();
    net_->half_copy_kept_by_update();
    for (auto& test : test_nets_) test->half_copy_kept_by_update();
  }
  // The optimizer's state lives in the arena: Adam and AdamW keep two moments, AdaDelta its
  // averages of squared gradients and squared steps, the others one history.
  const bool adam = args_.rule == UpdateRule::kAdam || args_.rule == UpdateRule::kAdamW;
  net_->arena().allocate_state(adam || args_.rule == UpdateRule::kAdaDelta ? 2 : 1);
  step_state_ = Buffer(backend, sizeof(StepState));
  init_loss_scaling();  // before join_workers, which plans the update by it
  if (comm_) join_workers();
  net_->refresh_half_weights();  // of the weights as they are now (worker 0's, in a job)

  loss_ring_ = Buffer(backend, sizeof(float) * (param.average_loss() + 1));
  backend.zero(loss_ring_.bytes(), loss_ring_.get());
  ring_host_.assign(param.average_loss() + 1, 0.0f);
  loss_sum_ = Buffer(backend, sizeof(float));
  backend.zero(sizeof(float), loss_sum_.get());
  loss_now_ = Buffer(backend, sizeof(float));

  // The step state and what advances it: the schedule (its stepvalues in backend memory),
  // iter_size, clipping and Adam's betas.
  schedule_.lr = lr_schedule(param_);
  stepvalues_ = Buffer(backend, sizeof(int32_t) * param_.stepvalue_size());
  if (param_.stepvalue_size() > 0)
    backend.copy_from_host(stepvalues_.bytes(), param_.stepvalue().data(), stepvalues_.get());
  schedule_.lr.stepvalues = stepvalues_.as<int32_t>();
  // The mean gradient: over iter_size passes and, summed by sum_gradients, over the workers.
  schedule_.iter_scale = 1.0f / (float(param_.iter_size()) * float(workers()));
  schedule_.clip = param_.clip_gradients();
  schedule_.adam = adam;
  schedule_.beta1 = args_.momentum;
  schedule_.beta2 = args_.momentum2;
  // With one pass per iteration the net's own loss is the iteration's; with more, their mean
  // is gathered in loss_now_.
  schedule_.loss = param_.iter_size() == 1 ? net_->loss_tensor().data() : loss_now_.as<float>();
  schedule_.ring = loss_ring_.as<float>();
  schedule_.ring_len = param_.average_loss();
  schedule_.loss_sum = loss_sum_.as<float>();
  upload_step_state();
  init_replays();
}

void Solver::upload_step_state() {
  StepState state;
  state.iter = iter_;
  state.loss_scale = scale_state_.scale;
  state.good_steps = scale_state_.good_steps;
  state.skipped = scale_state_.skipped;
  backend_.copy_from_host(sizeof(StepState), &state, step_state_.get());
}

void Solver::upload_step_iteration() {
  const int64_t iter = iter_;
  backend_.copy_from_host(sizeof(iter), &iter,
                          step_state_.as<char>() + offsetof(StepState, iter));
}

std::unique_ptr<Solver> Solver::from_file(const std::string& solver_path, Backend& backend,
                                          Communicator* workers) {
  return create(read_solver_parameter(solver_path), solver_path, backend, workers);
}

std::unique_ptr<Solver> Solver::create(const SolverParameter& param,
                                       const std::string& solver_path, Backend& backend,
                                       Communicator* workers) {
  check_solver_parameter(param, solver_path);  // before the net is read, naming solver_path:line
  return std::make_unique<Solver>(param, solver_nets(param, solver_path), backend, workers);
}

float Solver::learning_rate() const { return float(lamina::learning_rate(param_, iter_)); }

void Solver::solve() {
  LOG(INFO) << "Solving " << net_->name() << " on " << backend_.name() << " for "
            << param_.max_iter() << " iterations";
  stopped_early_ = false;
  stop_snapshot_saved_ = true;
  const std::string& prefix = param_.snapshot_prefix();
  std::optional<SnapshotPrefixLock> lock;  // one run per prefix, held until solve() returns
  if (!prefix.empty() && writes_files()) {
    // Report an unwritable snapshot directory now, not hours from now.
    bool writable = true;
    try {
      check_writable(prefix, param_.max_iter());
    } catch (const Error& e) {
      if (param_.snapshot_failure() == SolverParameter::STOP)
        fail(e.what(), "; training did not start (with snapshot_failure: CONTINUE it would "
             "train without snapshots)");
      LOG(ERROR) << e.what() << "; training goes on without snapshots (snapshot_failure: "
                 "CONTINUE)";
      writable = false;
    }
    if (writable) {
      try {
        lock.emplace(prefix);
      } catch (const Error& e) {
        fail(e.what(), "; training did not start (give this run another snapshot_prefix, or "
             "wait for the other one to end)");
      }
    }
    check_protected_files();
  }
  rate_reference_iter_ = iter_;
  rate_reference_time_ = std::chrono::steady_clock::now();
  broadcast_weights();  // worker 0's, also when they were loaded after construction
  const int first_iter = iter_;
  const auto start = std::chrono::steady_clock::now();
  step(param_.max_iter() - iter_);
  log_throughput(iter_ - first_iter, start);
  log_loss_scaling(iter_ - first_iter);
  if (stopped_early_) {
    // Stopped but not saved (snapshot_failure: CONTINUE): the caller must not report success.
    LAMINA_REQUIRE(stop_snapshot_saved_, "training stopped at iteration ", iter_, " as requested "
                   "but its snapshot could not be written: ", snapshot_error_,
                   last_snapshot_note());
    LOG(INFO) << "Optimization stopped early, at iteration " << iter_ << ".";
    return;
  }
  const bool saved =
      prefix.empty() || !param_.snapshot_after_train() || snapshot_as_configured("end of training");
  if (observer_error_) std::rethrow_exception(std::exchange(observer_error_, nullptr));
  if (!test_nets_.empty() && param_.test_interval() > 0 && iter_ % param_.test_interval() == 0)
    test_all_updated_weights();
  // Trained to the end but not saved: the caller (and the tool's exit status) must know.
  LAMINA_REQUIRE(saved, "training finished at iteration ", iter_, " but its final snapshot "
                 "could not be written: ", snapshot_error_, last_snapshot_note());
  LOG(INFO) << "Optimization done.";
}

void Solver::step(int iters) {
  const int average = param_.average_loss();
  const int64_t n = net_->arena().count();
  stopped_early_ = false;
  net_->refresh_half_weights();  // weights written since the last update (a restore, a load)
  for (int k = 0; k < iters; ++k) {
    observer_error_ = nullptr;  // one left by an iteration that failed is not this one's
    // A restored state may sit at the last iteration an int counts (found by fuzz_solverstate).
    LAMINA_REQUIRE(iter_ < INT_MAX, "iteration ", iter_, " is the last one Lamina counts; "
                   "the solver cannot train further");
    if (!test_nets_.empty() && param_.test_interval() > 0 &&
        iter_ % param_.test_interval() == 0 && (iter_ > 0 || param_.test_initialization())) {
      test_all_updated_weights();
    }
    const bool display = param_.display() > 0 && iter_ % param_.display() == 0;
    if (param_.debug_info()) net_->set_debug_info(display);  // Caffe's: display iterations
    // Non-finite checks. The loss: every iteration on host backends, where reading it costs
    // nothing; at display iterations on devices, folded into the one copy of the loss ring
    // that displaying makes anyway. The weights and gradients: at display iterations (a pass
    // over the arena costs about 3% of an MLP iteration on the CPU), and in every snapshot.
    const bool check = display || backend_.is_host();
    ++loss_sum_count_;
    if (!check && replay_step()) {
      ++iter_;
      if (!after_iteration()) return;
      continue;
    }
    // The operations run directly: as replay_step's recording, with the display's checks
    // between the step's passes and its update.
    Net::LayerStates states_before;
    if (check) states_before = net_->layer_states();  // to replay this batch in a diagnosis
    forward_backward_advance();
    if (display) join_gradient_sums();  // the dot below reads the gradients
    if (display && n > 0) {
      // weights . gradients is NaN or infinite when any weight or gradient is (x * NaN,
      // inf * 0, inf * x all are); it can also overflow, which check_finite tells apart.
      // With loss scaling, weights . weights: gradients may overflow (the update skips them).
      const float* arena = net_->arena().data();
      backend_.dot(n, arena, scales_loss() ? arena : net_->arena().diff(),
                   loss_ring_.as<float>() + average);
    }
    if (check) read_ring();
    if (display) {
      const float loss = smoothed_loss();
      loss_history_.push_back({iter_, loss});
      const std::string scale = loss_scale_note();
      LOG(INFO) << "Iteration " << iter_ << ", loss = " << loss << ", lr = " << learning_rate()
                << scale;
      // An observer's exception waits for the iteration to complete: the step state on the
      // device has advanced, so the update must follow it.
      notify_deferred([&](SolverObserver& o) {
        o.on_display(*this, loss_history_.back(), learning_rate());
      });
    }
    if (check) check_finite(states_before, display);
    apply_update();
    step_warm_ = true;
    ++iter_;
    if (!after_iteration()) return;
  }
}

bool Solver::after_iteration() {
  try {
    const bool go_on = snapshot_and_act();
    if (observer_error_) std::rethrow_exception(std::exchange(observer_error_, nullptr));
    return go_on;
  } catch (...) {
    observer_error_ = nullptr;  // a failure of the iteration's own wins over an observer's
    throw;
  }
}

bool Solver::snapshot_and_act() {
  notify_deferred([&](SolverObserver& o) { o.on_iteration(*this); });
  if (param_.snapshot() > 0 && iter_ % param_.snapshot() == 0) snapshot_as_configured("periodic");
  if (!action_source_) return true;
  const SolverAction action = agree_on_action(action_source_());
  if (action == SolverAction::kSnapshot) snapshot_as_configured("requested");
  if (action != SolverAction::kStop) return true;
  if (param_.snapshot_prefix().empty()) {
    LOG(WARNING) << "Stopping at iteration " << iter_ << " as requested; snapshot_prefix is "
                 << "not set, so no snapshot is written";
  } else {
    stop_snapshot_saved_ = snapshot_as_configured("stop");
  }
  stopped_early_ = true;
  return false;
}

void Solver::forward_backward_advance() {
  try {
    forward_backward_advance_passes();
  } catch (...) {
    join_sums_after_failure();
    throw;
  }
}

void Solver::forward_backward_advance_passes() {
  // This iteration's loss (schedule_.loss); advance_step stores it in the ring at the step
  // state's iteration: the same arguments every iteration.
  if (param_.iter_size() == 1) {
    // The gradients are zeroed on the side lane while the forward pass runs (it touches no
    // gradient of a parameter), and joined before the backward pass adds to them.
    SideLaneScope forward_lanes(backend_);
    {
      SideLane beside(backend_, true);
      net_->arena().zero_diff();
    }
    net_->forward();
    forward_lanes.close();
    // The step state needs only the loss, unless clipping or loss scaling needs the
    // gradients' sum of squares.
    if (param_.clip_gradients() > 0 || scales_loss() || !backend_.has_side_lane()) {
      last_backward();
      sum_gradients();
      advance_step_state();
      return;
    }
    SideLaneScope backward_lanes(backend_);
    {
      SideLane beside(backend_, true);
      advance_step_state();
    }
    try {
      last_backward();
    } catch (...) {
      // A direct step that fails puts the step state's iteration back (joined first; in a
      // recording nothing ran, and the upload is refused). The loss it recorded stays.
      try {
        backward_lanes.close();
        upload_step_iteration();
      } catch (const Error&) {
      }
      throw;
    }
    backward_lanes.close();
    sum_gradients();
    return;
  }
  net_->arena().zero_diff();
  float* loss = loss_now_.as<float>();
  backend_.zero(sizeof(float), loss);
  for (int i = 0; i < param_.iter_size(); ++i) {
    net_->forward();
    if (i + 1 < param_.iter_size())
      net_->backward();
    else
      last_backward();
    backend_.axpy(1, 1.0f / param_.iter_size(), net_->loss_tensor().data(), loss);
  }
  sum_gradients();
  advance_step_state();
}

void Solver::read_ring() {
  backend_.copy_to_host(loss_ring_.bytes(), loss_ring_.get(), ring_host_.data());
  average_over_workers(ring_host_.data(), int(ring_host_.size()));
}

float Solver::smoothed_loss() {
  const int average = param_.average_loss();
  const int count = std::min(iter_ + 1, average);
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += ring_host_[(iter_ - i) % average];
  return float(sum / count);
}

float Solver::take_mean_loss() {
  float sum = 0;
  backend_.copy_to_host(sizeof(float), loss_sum_.get(), &sum);
  backend_.zero(sizeof(float), loss_sum_.get());
  average_over_workers(&sum, 1);
  const float mean = loss_sum_count_ ? sum / loss_sum_count_ : 0.0f;
  loss_sum_count_ = 0;
  return mean;
}

void Solver::advance_step_state() {
  ParamArena& arena = net_->arena();
  StepState* step = step_state_.as<StepState>();
  // The clipping norm (or loss scaling's finiteness test) is summed, and the loss recorded
  // and the rate, correction and scale computed, in backend memory: nothing is read back.
  if ((param_.clip_gradients() > 0 || scales_loss()) && arena.count() > 0)
    backend_.dot(arena.count(), arena.diff(), arena.diff(), &step->grad_sumsq);
  backend_.advance_step(schedule_, step);
}

void Solver::apply_update() {
  ParamArena& arena = net_->arena();
  if (arena.count() == 0) return;
  const auto update = [&](const UpdateLayout& layout) {
    backend_.update(args_, step_state_.as<StepState>(), layout, arena.data(), arena.diff(),
                    arena.state(0), arena.num_state() > 1 ? arena.state(1) : nullptr);
  };
  if (!update_by_bucket_) return update(arena.layout());
  // Each bucket's part as soon as its sum is done: the first buckets' while the last ones'
  // sums still run (gradient_buckets.hpp).
  try {
    buckets_->finish_each([&](const GradientBucket& bucket) {
      update(arena.layout_part(bucket.offset, bucket.count));
    });
  } catch (...) {
    join_sums_after_failure();
    throw;
  }
}

void Solver::run_test_passes(int k) {
  Net& net = *test_nets_[k];
  float* sums = test_sums_[k].as<float>();
  backend_.zero(test_sums_[k].bytes(), sums);
  const int iters = test_passes(k);
  for (int i = 0; i < iters; ++i) {
    try {
      net.forward();
    } catch (const Error& e) {
      fail(Phase_Name(net.phase()), " net", num_test_nets() > 1 ? " #" + std::to_string(k) : "",
           ", test iteration ", i, " of ", iters, " at training iteration ", iter_, ": ",
           e.what());
    }
    // Sums are kept per output value: outputs whose size changes (behind a Filter) have none.
    if (net.shapes_vary()) {
      int64_t values = 0;
      for (const std::string& name : net.output_names()) values += net.blob(name).count();
      if (values + 1 != int64_t(test_sums_[k].bytes() / sizeof(float))) {
        std::string shapes;
        for (const std::string& name : net.output_names())
          shapes += (shapes.empty() ? "'" : ", '") + name + "' " + net.blob(name).shape_string();
        fail(Phase_Name(net.phase()), " net", num_test_nets() > 1 ? " #" + std::to_string(k) : "",
             ": its outputs (", shapes, ") changed size during the test: a layer before them (a "
             "Filter) keeps a different number of rows each pass. A test reports the mean of "
             "each output value, so reduce them to a fixed size first (a loss, Accuracy or "
             "Reduction)");
      }
    }
    int64_t offset = 0;
    for (const std::string& name : net.output_names()) {
      Tensor& out = net.blob(name);
      backend_.axpy(out.count(), 1.0f, out.data(), sums + offset);
      offset += out.count();
    }
    if (param_.test_compute_loss()) backend_.axpy(1, 1.0f, net.loss_tensor().data(), sums + offset);
  }
}

TestResult Solver::test(int net) {
  LAMINA_REQUIRE(!test_nets_.empty(), "the solver has no test net: set test_iter");
  LAMINA_REQUIRE(net >= 0 && net < num_test_nets(), "the solver has no test net #", net,
                 "; it has ", num_test_nets(), " (#0 to #", num_test_nets() - 1, ")");
  test_nets_[net]->refresh_half_weights();  // the weights may have been written since the update
  return test_updated_weights(net);
}

void Solver::add_observer(SolverObserver& observer) {
  LAMINA_REQUIRE(std::find(observers_.begin(), observers_.end(), &observer) == observers_.end(),
                 "this observer was already added to the solver");
  observers_.push_back(&observer);
}

void Solver::remove_observer(SolverObserver& observer) {
  std::replace(observers_.begin(), observers_.end(), &observer, static_cast<SolverObserver*>(nullptr));
  if (notifying_ == 0) drop_removed_observers();
}

void Solver::drop_removed_observers() {
  observers_.erase(std::remove(observers_.begin(), observers_.end(), nullptr), observers_.end());
}

std::vector<TestResult> Solver::test_all() {
  std::vector<TestResult> results;
  for (int k = 0; k < num_test_nets(); ++k) results.push_back(test(k));
  return results;
}

void Solver::test_all_updated_weights() {
  for (int k = 0; k < num_test_nets(); ++k) test_updated_weights(k);
}

// Logged as Caffe's solver logs a test, so that tools reading Caffe's logs read these too.
TestResult Solver::test_updated_weights(int k) {
  Net& net = *test_nets_[k];
  if (!replay_test(k)) {
    run_test_passes(k);
    test_warm_[k] = true;
  }
  std::vector<float> host(test_sums_[k].bytes() / sizeof(float));
  backend_.copy_to_host(test_sums_[k].bytes(), test_sums_[k].get(), host.data());
  average_over_workers(host.data(), int(host.size()));  // each worker's mean of its share
  const float passes = float(test_passes(k));
  TestResult result;
  result.net = k;
  LOG(INFO) << "Iteration " << iter_ << ", Testing net (#" << k << ")";
  int64_t offset = 0;
  for (const std::string& name : net.output_names()) offset += net.blob(name).count();
  if (param_.test_compute_loss()) {
    result.has_loss = true;
    result.loss = host[offset] / passes;
    LOG(INFO) << "Test loss: " << result.loss;
  }
  offset = 0;
  for (const std::string& name : net.output_names()) {
    const int64_t count = net.blob(name).count();
    const float weight = net.loss_weight(name);
    for (int64_t j = 0; j < count; ++j) {
      const std::string label = count == 1 ? name : name + "[" + std::to_string(j) + "]";
      const float mean = host[offset + j] / passes;
      result.outputs.push_back({label, mean});
      std::ostringstream loss;
      if (weight != 0) loss << " (* " << weight << " = " << weight * mean << " loss)";
      LOG(INFO) << "    Test net output #" << result.outputs.size() - 1 << ": " << label
                << " = " << mean << loss.str();
    }
    offset += count;
  }
  test_history_.push_back({iter_, result});
  notify([&](SolverObserver& o) { o.on_test(*this, result); });
  return result;
}

}  // namespace lamina
