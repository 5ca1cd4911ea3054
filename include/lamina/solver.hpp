// Solver: trains a net from a SolverParameter.
//
// Its nets (solver_nets.hpp): the train net, and the test nets (none, one, or several, each
// with its test_iter and test_state), as Caffe's solver chooses them. Every test tests each
// test net in turn and logs its outputs as Caffe does ("Test net output #0: accuracy =
// 0.98"), with the test loss too under test_compute_loss.
//
// Every field of SolverParameter is applied; values that cannot be applied are errors at
// construction. The update is one fused backend call over the parameter arena per
// iteration. A steady-state iteration copies nothing between host and device: the loss is
// accumulated on the device and read only every `display` iterations, and test outputs are
// summed on the device and read once per test.
//
// Snapshots (docs/snapshots.md): with snapshot_prefix set, the solver writes
// PREFIX_iter_N.lamina (weights) and PREFIX_iter_N.solverstate every `snapshot` iterations,
// when asked to (an action), and at the end of solve(). restore() continues from a
// .solverstate exactly: on the same backend, a run interrupted and resumed produces the
// same weights, bit for bit, and the same loss at every iteration as one that was not.
//
// Non-finite values: the loss is checked every iteration on host backends and at display
// iterations on devices (no extra device sync or copy), the weights and gradients at display
// iterations, and everything a snapshot writes before it is written. When one is found, a diagnosis pass names the first
// layer whose output or gradient is not finite; with nonfinite: STOP (the default) training
// ends with an Error saying so, and no snapshot is written from the bad weights.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/gradient_buckets.hpp"
#include "lamina/net.hpp"
#include "lamina/solver_nets.hpp"
#include "lamina/solver_observer.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

class Communicator;  // communicator.hpp

struct TestResult {
  int net = 0;  // which test net (its index, as test_iter counts them)
  std::vector<std::pair<std::string, float>> outputs;  // mean over test_iter batches
  float value(const std::string& name) const;          // throws when absent
  bool has_loss = false;  // test_compute_loss: the net's mean loss over the batches
  float loss = 0;
};

struct LossRecord {
  int iteration;
  float loss;  // smoothed over average_loss iterations, as displayed
};

// What the solver does when its action source (set_action_source) is polled.
enum class SolverAction {
  kNone,      // carry on
  kSnapshot,  // write a snapshot, then carry on
  kStop,      // write a snapshot (when snapshot_prefix is set), then return from step/solve
};

struct SnapshotPaths {
  std::string weights;  // PREFIX_iter_N.lamina
  std::string state;    // PREFIX_iter_N.solverstate
  bool empty() const { return state.empty(); }
};

class Solver {
 public:
  // net_param: the net (train and test phases in one file), in place of the solver's net or
  // net_param (test_net and test_net_param still add test nets). `source` names the net
  // file. workers: this process's place in a data-parallel job (docs/distributed.md), or
  // null for training alone. It must outlive the solver; every worker builds its solver
  // with the same files, and they train in step (solver_workers.cpp).
  Solver(const SolverParameter& param, const NetParameter& net_param, Backend& backend,
         const std::string& source = {}, Communicator* comm = nullptr);
  // The nets as solver_nets() found them.
  Solver(const SolverParameter& param, const SolverNets& nets, Backend& backend,
         Communicator* comm = nullptr);
  // Reads the solver prototxt and the nets it names (relative to the solver file).
  static std::unique_ptr<Solver> from_file(const std::string& solver_path, Backend& backend,
                                           Communicator* workers = nullptr);
  // The same for a parameter already read (and perhaps changed) from solver_path.
  static std::unique_ptr<Solver> create(const SolverParameter& param,
                                        const std::string& solver_path, Backend& backend,
                                        Communicator* workers = nullptr);

  // Trains until max_iter, testing every test_interval and logging every display. With
  // snapshot_prefix set, first checks that its directory is writable and that no snapshot
  // would overwrite a protected file, and at the end writes a snapshot
  // (snapshot_after_train) unless one was just written. Throws when that final snapshot
  // could not be written (with snapshot_failure: CONTINUE, after training to the end).
  void solve();
  // Runs iters iterations (forward, backward, update), with display, tests, snapshots,
  // non-finite checks and actions as configured. Returns early after a kStop action.
  void step(int iters);
  // Runs test net `net` for its test_iter batches and returns the mean of each output. In a
  // data-parallel job each worker runs test_iter / workers batches of its share and the
  // means are over all of them.
  TestResult test(int net = 0);
  // Every test net in turn, as a test during training does.
  std::vector<TestResult> test_all();
  // The workers of the data-parallel job (1 alone) and this one's rank (0 alone). Only rank
  // 0 writes snapshots.
  int workers() const;
  int rank() const;

  int iter() const { return iter_; }
  float learning_rate() const;  // the policy's rate at the current iteration
  Net& net() { return *net_; }
  Net* test_net(int i = 0) { return i < num_test_nets() ? test_nets_[i].get() : nullptr; }
  int num_test_nets() const { return int(test_nets_.size()); }
  const SolverParameter& param() const { return param_; }
  // Mean training loss over the iterations since the last call (one host copy).
  float take_mean_loss();
  // Losses shown at each display iteration.
  const std::vector<LossRecord>& loss_history() const { return loss_history_; }
  // Test results at each test point, with their iteration: one per test net.
  const std::vector<std::pair<int, TestResult>>& test_history() const { return test_history_; }
  // The seed of the fillers, the data order and dropout (random_seed, or the one drawn).
  uint64_t seed() const { return seed_; }

  // ---- snapshots and resuming ----
  // Writes PREFIX_iter_N.lamina, then PREFIX_iter_N.solverstate, each atomically, and
  // returns their paths. Throws, keeping every earlier snapshot, when snapshot_prefix is
  // empty, when a weight or optimizer value is not finite (nothing is written), or when a
  // file cannot be written (the error names the path and the reason).
  SnapshotPaths snapshot();
  // Continues from a .solverstate and the weights file it names (PREFIX_iter_N.lamina, read
  // from the state file's directory): the iteration (and with it the learning-rate
  // schedule), the weights, the optimizer history, the loss smoothing, the seed and every
  // layer's state (data order, dropout counter) of the training and test nets. Everything
  // is validated before anything changes: a truncated, corrupt or foreign file, a state
  // for another net or another solver type, or a weights file that is not the one the state
  // was written with, throws an Error naming the file and the problem, and leaves the
  // solver as it was. The solver prototxt may differ in max_iter, display, test and
  // snapshot settings; the net, the solver type and average_loss must be the same.
  //
  // The records of a .solverstate are listed in solver_state.hpp.
  void restore(const std::string& state_path);
  // A file this run must never overwrite (the weights it was fine-tuned from): solve()
  // refuses to start when a snapshot it would write has that path, and snapshot() refuses
  // to write one.
  void protect_file(const std::string& path);
  // The last snapshot written (or restored from); empty before the first.
  const SnapshotPaths& last_snapshot() const { return last_snapshot_; }

  // Polled once per iteration, after the update (the lamina tool turns signals into
  // actions). A kSnapshot or kStop snapshot that cannot be written follows snapshot_failure.
  void set_action_source(std::function<SolverAction()> source) {
    action_source_ = std::move(source);
  }
  // Whether the last step() or solve() returned early because of a kStop action.
  bool stopped_early() const { return stopped_early_; }

  // Observers (solver_observer.hpp), called in the order added. The solver does not own
  // them: each must outlive the solver or be removed first. Adding one twice is an Error.
  // An observer may add or remove observers (itself too) while it is called.
  void add_observer(SolverObserver& observer);
  void remove_observer(SolverObserver& observer);

  // ---- FP16 loss scaling (solver_loss_scale.cpp, docs/precision.md) ----
  // Whether the solver scales the loss: some layer of its TRAIN net runs in FP16.
  bool scales_loss() const { return schedule_.growth_interval > 0; }
  struct LossScaleState {
    float scale = 1;         // the loss scale the next iteration's backward pass uses
    int32_t good_steps = 0;  // finite iterations in a row since it last changed
    int64_t skipped = 0;     // iterations skipped so far (gradients not finite)
    bool skipped_at_smallest = false;  // the last iteration ran at 2^-24 and was skipped
  };
  // Its state now (one host copy); an Error when the solver does not scale the loss.
  LossScaleState loss_scale_state() const;

  // ---- captured steps (solver_graphs.cpp, docs/performance.md) ----
  // Whether iterations are replayed from a recording: cuda_graph is on, the backend can
  // capture, and every layer can be captured. The first iteration (and the first test) runs
  // directly, sizing workspaces and choosing algorithms; the second is recorded and every
  // later one without display replays it. Display iterations run directly, with their checks
  // between the step's passes and its update.
  bool replays_steps() const { return graphs_; }
  // The operations in the recorded training step (CUDA graph nodes); 0 before it is recorded.
  int64_t step_operations() const { return step_graph_ ? step_graph_->operations() : 0; }

 private:
  // One iteration's operations: forward_backward_advance, apply_update.
  // Zeroes the gradients, runs iter_size forward/backward passes, then advance_step_state;
  // with one pass, the zeroing runs beside the forward pass and (without clipping) the
  // step state's advance beside the backward pass (Backend::to_side_lane).
  void forward_backward_advance();
  void forward_backward_advance_passes();  // forward_backward_advance but for its failure
  void apply_update();
  // The iteration by replaying the recorded step (recording it first if needed); false when
  // it cannot be replayed now and the caller runs the operations itself.
  bool replay_step();
  // test() without refreshing the weights' 16-bit copy first: within training, where the
  // update keeps it (step() refreshed it on entry); test_all_updated_weights for every net.
  TestResult test_updated_weights(int net);
  void test_all_updated_weights();
  // Test net k's forward passes, the same way; run_test_passes runs them directly.
  bool replay_test(int k);
  void run_test_passes(int k);
  // What both share: replays `graph` (of net's `passes` forward passes), or records `ops`
  // into it and launches that, logging `what` was recorded.
  bool replay(Net& net, int passes, const char* what, std::unique_ptr<CapturedOps>& graph,
              int64_t& generation, const std::function<void()>& ops);
  // Snapshots and actions after an iteration; false when an action stopped training.
  // Then rethrows an observer's exception of this iteration (observer_error_).
  bool after_iteration();
  bool snapshot_and_act();  // after_iteration's work: on_iteration, snapshots, actions
  float smoothed_loss();
  // Copies the loss ring and its check slot to ring_host_ (one copy).
  void read_ring();
  // Checks the loss of this iteration and, with arenas, the weights and gradients (their dot
  // product, left in the ring's check slot), as read by read_ring; on a non-finite value,
  // diagnoses and stops or logs as `nonfinite` says (nonfinite.cpp).
  void check_finite(const Net::LayerStates& states_before, bool arenas);
  // Where the last good weights are and what to change before resuming, for a divergence.
  std::string divergence_advice() const;
  // A snapshot at the current iteration unless one was just written, following
  // snapshot_failure when it cannot be written (and skipping non-finite weights). Returns
  // whether the snapshot is on disk; when not, snapshot_error_ says why.
  bool snapshot_as_configured(const char* why);
  bool write_snapshot_as_configured(const char* why);  // its part on worker 0
  SnapshotPaths write_snapshot();  // snapshot() but for telling the observers
  // "; the last snapshot on disk is 'P' (iteration N)", or "; no snapshot is on disk".
  std::string last_snapshot_note() const;
  // Refuses, before training, a run whose snapshots would overwrite a protected file.
  void check_protected_files() const;
  // Warns once when periodic snapshots of `bytes` (written from start to end) would write
  // more than 100 MB per second of training.
  void warn_about_snapshot_rate(size_t bytes, std::chrono::steady_clock::time_point start,
                                std::chrono::steady_clock::time_point end);

  // ---- data parallel (solver_workers.cpp) ----
  // At construction: checks that every worker has the same solver and net and makes the
  // nets this worker's share; after the nets: the same data sets, weights from worker 0.
  void check_workers_agree(const SolverNets& nets);
  void join_workers();
  // Every worker's weights and optimizer state become worker 0's (start, restore).
  void broadcast_weights();
  // The backward pass whose gradients the update applies (an iteration's last): in a
  // data-parallel job the gradient buckets start summing as their layers finish.
  void last_backward();
  // Completes the gradient arena's sum over the workers (the update's scale divides by
  // them): the buckets not yet issued, and later operations wait for all; or, when
  // update_by_bucket_, apply_update waits for each bucket's sum before updating its part.
  void sum_gradients();
  // Makes the operations issued from now on wait for the whole gradient sum (a no-op after
  // sum_gradients, unless update_by_bucket_). Between forward_backward_advance and
  // apply_update, anything that reads the gradients calls it first.
  void join_gradient_sums();
  // After a step's operations threw: the sums issued so far are joined, so that no later
  // operation (a retried step's zeroing of the gradients, a capture's end) runs beside them.
  void join_sums_after_failure();
  // ring_host_ (and take_mean_loss's sum): the mean over the workers.
  void average_over_workers(float* values, int count);
  // The action every worker takes now: the strongest any of them was asked for since the
  // last agreement, at agreement points (every iteration on host backends, else display
  // iterations or every 100); kNone between them.
  SolverAction agree_on_action(SolverAction local);
  bool writes_files() const;  // rank 0, or training alone
  // This worker's forward passes of a test of net k: its share of test_iter.
  int test_passes(int k) const { return param_.test_iter(k) / workers(); }
  // "Trained N iterations in T s: X samples/s (...)", for the whole job (after a wait for
  // the device).
  void log_throughput(int iterations, std::chrono::steady_clock::time_point start);

  SolverParameter param_;
  Backend& backend_;
  Communicator* comm_ = nullptr;  // null: training alone
  std::unique_ptr<GradientBuckets> buckets_;  // with comm_: the gradient all-reduce's plan
  // The update runs bucket by bucket, each part once its sum is done (sums beside backward
  // and no clipping, whose norm needs every gradient before any update).
  bool update_by_bucket_ = false;
  SolverAction pending_action_ = SolverAction::kNone;  // asked for, not yet agreed on
  UpdateArgs args_;
  StepSchedule schedule_;  // advances step_state_ each iteration
  Buffer stepvalues_;      // the multistep schedule's stepvalues, in backend memory
  Buffer step_state_;      // a StepState: the iteration and the next update's lr and scale
  // Writes iter_ and scale_state_ into the step state (construction, restore); the rest it
  // computes itself.
  void upload_step_state();
  // Writes iter_ alone into it (a direct step that failed puts its iteration back).
  void upload_step_iteration();
  // FP16's dynamic loss scaling: on when the TRAIN net stores values in FP16 (refusing the
  // solver's loss_scale fields otherwise): its schedule (a growth interval > 0 is what turns
  // it on, scales_loss()), and the net's scaled loss gradient.
  void init_loss_scaling();
  // ", loss scale = S (N iterations skipped)" for the display line ("" without scaling),
  // after check_loss_scale.
  std::string loss_scale_note();
  // An iteration skipped that ran at the smallest scale (the gradients are not finite at any
  // scale) is a divergence, handled as `nonfinite` says.
  void check_loss_scale(const LossScaleState& state);
  // The run's skipped iterations and the scale at its end, after `iterations` of training.
  void log_loss_scaling(int iterations);
  // What upload_step_state writes: the start, or a restore (whose skipped count is kept
  // for Adam's update count in any precision).
  LossScaleState scale_state_;
  // The clipping norm if asked for, then advance_step: the loss into the ring, the update's
  // rate and scale, the step state's iteration + 1.
  void advance_step_state();
  std::unique_ptr<Net> net_;
  std::vector<std::unique_ptr<Net>> test_nets_;
  int iter_ = 0;
  uint64_t seed_ = 0;
  Buffer loss_ring_;   // last average_loss losses, then one check slot (weights . grads)
  std::vector<float> ring_host_;
  int last_finite_check_ = -1;  // the last iteration whose weights and gradients were finite
  bool nonfinite_seen_ = false;  // nonfinite: CONTINUE, after the first report
  Buffer loss_now_;    // the mean loss of an iteration's iter_size passes (iter_size > 1)
  Buffer loss_sum_;    // running sum for take_mean_loss
  int64_t loss_sum_count_ = 0;
  // Per test net: its outputs' sums over a test's passes, then (test_compute_loss) its loss.
  std::vector<Buffer> test_sums_;
  std::vector<LossRecord> loss_history_;
  std::vector<std::pair<int, TestResult>> test_history_;
  SnapshotPaths last_snapshot_;
  int last_snapshot_iter_ = -1;
  std::string snapshot_error_;               // why the last snapshot_as_configured failed
  std::vector<std::string> protected_files_;
  int rate_reference_iter_ = 0;              // warn_about_snapshot_rate's last measurement
  std::chrono::steady_clock::time_point rate_reference_time_;
  bool rate_warned_ = false;
  std::function<SolverAction()> action_source_;
  // Observers; an observer removed during a call is null until the outermost call returns.
  std::vector<SolverObserver*> observers_;
  int notifying_ = 0;  // calls of notify in progress
  // The first exception an observer threw within an iteration, rethrown once the iteration
  // is complete (its update applied, snapshot written, actions taken): after_iteration.
  std::exception_ptr observer_error_;
  // Calls f(observer) for each observer, those added meanwhile included (no allocation).
  template <typename F>
  void notify(F&& f) {
    struct Leave {
      Solver& solver;
      ~Leave() {
        if (--solver.notifying_ == 0) solver.drop_removed_observers();
      }
    } leave{*this};
    ++notifying_;
    for (size_t i = 0; i < observers_.size(); ++i)
      if (observers_[i]) f(*observers_[i]);
  }
  // notify, keeping the first exception in observer_error_ instead of throwing it.
  template <typename F>
  void notify_deferred(F&& f) {
    try {
      notify(f);
    } catch (...) {
      if (!observer_error_) observer_error_ = std::current_exception();
    }
  }
  void drop_removed_observers();
  bool stopped_early_ = false;
  bool stop_snapshot_saved_ = true;  // false: a stop asked for a snapshot that failed
  bool graphs_ = false;     // replays_steps()
  bool step_warm_ = false;  // an iteration has run directly
  std::vector<bool> test_warm_;  // per test net: a test has run directly
  std::unique_ptr<CapturedOps> step_graph_;
  std::vector<std::unique_ptr<CapturedOps>> test_graphs_;  // per test net
  int64_t step_graph_generation_ = 0;             // the nets' generation()
  std::vector<int64_t> test_graph_generations_;   // per test net
  // Decides replays_steps() at construction, logging why not when cuda_graph is on.
  void init_replays();
  // Turns replays off for the rest of the run, logging why once.
  void stop_replaying(const std::string& why);
};

}  // namespace lamina
