// The solver's snapshots: writing one (Solver::snapshot), what happens when it cannot be
// written (snapshot_as_configured), and resuming (Solver::restore). The file formats are in
// snapshot.hpp and solver_state.hpp; docs/snapshots.md tells the whole story.
#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <filesystem>

#include "lamina/communicator.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_config.hpp"
#include "lamina/solver_state.hpp"
#include "solver_internal.hpp"

namespace lamina {

using solver_detail::describe;
using solver_detail::NonFiniteError;
using solver_detail::number;

namespace {

constexpr double kSnapshotRateWarning = 100e6;  // bytes per second of training

// Whether a and b name the same file (neither need exist).
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ea, eb;
  const auto ca = std::filesystem::weakly_canonical(a, ea);
  const auto cb = std::filesystem::weakly_canonical(b, eb);
  return !ea && !eb ? ca == cb : a == b;
}

// "refusing to write a snapshot at iteration N: " + what, thrown as a NonFiniteError when
// values[0, n) holds a NaN or an infinity.
void require_finite(const float* values, int64_t n, int iter, const std::string& what) {
  const int64_t bad = first_nonfinite(values, n);
  if (bad < 0) return;
  throw NonFiniteError("refusing to write a snapshot at iteration " + std::to_string(iter) +
                       ": " + what + " (" + number(values[bad]) + " at index " +
                       std::to_string(bad) + ")");
}

}  // namespace

void Solver::protect_file(const std::string& path) { protected_files_.push_back(path); }

void Solver::check_protected_files() const {
  const std::string& prefix = param_.snapshot_prefix();
  const std::string stem = std::filesystem::path(prefix).filename().string() + "_iter_";
  for (const std::string& kept : protected_files_) {
    // PREFIX_iter_N.lamina or .solverstate, with N an iteration this run will snapshot.
    const std::filesystem::path path(kept);
    const std::string name = path.stem().string(), ext = path.extension().string();
    if (name.compare(0, stem.size(), stem) != 0 || (ext != ".lamina" && ext != ".solverstate"))
      continue;
    const std::string digits = name.substr(stem.size());
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      continue;
    const int n = std::stoi(digits);
    const bool written = n > iter_ && n <= param_.max_iter() &&
                         ((param_.snapshot() > 0 && n % param_.snapshot() == 0) ||
                          (n == param_.max_iter() && param_.snapshot_after_train()));
    const std::string target = prefix + "_iter_" + digits + ext;
    LAMINA_REQUIRE(!written || !same_file(target, kept), "the snapshot at iteration ", n,
                   " would overwrite '", kept, "', which this run started from; choose "
                   "another snapshot_prefix (now '", prefix, "'); training did not start");
  }
}

std::string Solver::last_snapshot_note() const {
  if (last_snapshot_.empty()) return "; no snapshot is on disk";
  return "; the last snapshot on disk is '" + last_snapshot_.state + "' (iteration " +
         std::to_string(last_snapshot_iter_) + ")";
}

bool Solver::snapshot_as_configured(const char* why) {
  if (!last_snapshot_.empty() && last_snapshot_iter_ == iter_) return true;  // just written
  if (!comm_) return write_snapshot_as_configured(why);
  // Worker 0 writes the job's snapshot; every worker waits for it and learns whether it is
  // on disk (so none of them exits while worker 0 still writes).
  const bool saved = writes_files() ? write_snapshot_as_configured(why) : true;
  const bool all = broadcast_value(*comm_, saved ? 1 : 0) == 1;
  if (writes_files()) return all;
  if (!all) {
    snapshot_error_ = "worker 0 could not write it (its log says why)";
    return false;
  }
  // The job's snapshot, as on worker 0 (so "just written" holds on every worker alike).
  const std::string base = snapshot_stem(param_.snapshot_prefix(), iter_);
  last_snapshot_ = SnapshotPaths{base + ".lamina", base + ".solverstate"};
  last_snapshot_iter_ = iter_;
  return true;
}

bool Solver::write_snapshot_as_configured(const char* why) {
  SnapshotPaths paths;
  try {
    paths = write_snapshot();
  } catch (const NonFiniteError& e) {
    if (param_.nonfinite() == SolverParameter::STOP && !nonfinite_seen_) {
      // The last update made a weight non-finite. Say where the values go bad with these
      // weights (a forward and backward pass of the next batch).
      std::string first;
      try {
        first = net_->find_nonfinite();
      } catch (const Error& diagnosis) {
        LOG(WARNING) << "the non-finite diagnosis failed: " << diagnosis.what();
      }
      fail("training diverged before the snapshot at iteration ", iter_, ": ", e.what(),
           first.empty() ? std::string() : ". With these weights the first non-finite value is in " + first,
           ". ", divergence_advice());
    }
    LOG(ERROR) << e.what() << "; no snapshot written (" << why << ")";
    snapshot_error_ = e.what();
  } catch (const Error& e) {
    if (param_.snapshot_failure() == SolverParameter::STOP) {
      fail(e.what(), "; training stopped at iteration ", iter_,
           last_snapshot_.empty() ? std::string()
                                  : "; the last snapshot is '" + last_snapshot_.state + "'",
           " (with snapshot_failure: CONTINUE it would train on)");
    }
    LOG(ERROR) << e.what() << " (" << why << " snapshot at iteration " << iter_
               << "); training goes on (snapshot_failure: CONTINUE)";
    snapshot_error_ = e.what();
  }
  if (paths.empty()) return false;
  // Outside the try: an observer's failure is not the snapshot's. It is rethrown once the
  // iteration (or solve) is complete.
  notify_deferred([&](SolverObserver& o) { o.on_snapshot(*this, paths); });
  return true;
}

SnapshotPaths Solver::snapshot() {
  const SnapshotPaths paths = write_snapshot();
  notify([&](SolverObserver& o) { o.on_snapshot(*this, paths); });
  return paths;
}

SnapshotPaths Solver::write_snapshot() {
  const auto start = std::chrono::steady_clock::now();
  const std::string& prefix = param_.snapshot_prefix();
  LAMINA_REQUIRE(!prefix.empty(), "cannot write a snapshot: snapshot_prefix is not set");
  const std::string base = snapshot_stem(prefix, iter_);
  const SnapshotPaths paths{base + ".lamina", base + ".solverstate"};
  for (const std::string& kept : protected_files_) {
    for (const std::string& target : {paths.weights, paths.state}) {
      LAMINA_REQUIRE(!same_file(target, kept), "cannot write the snapshot '", target,
                     "': it would overwrite '", kept, "', which this run started from; "
                     "choose another snapshot_prefix");
    }
  }
  const ParamArena& arena = net_->arena();
  const std::vector<ParamInfo>& table = arena.table();

  // Everything is copied and checked before the first byte is written.
  std::vector<SnapshotRecord> weights = arena_records(arena, arena.data(), "");
  for (size_t i = 0; i < weights.size(); ++i) {
    require_finite(weights[i].floats.data(), int64_t(weights[i].floats.size()), iter_,
                   describe(table[i]) + " holds a non-finite weight");
  }
  SolverState state;
  state.iteration = iter_;
  state.seed = seed_;
  state.solver_type = solver_type_name(args_.rule);
  state.net_name = net_->name();
  for (int k = 0; k < arena.num_state(); ++k) {
    state.optimizer.push_back(arena.to_host(arena.state(k)));
    const std::string prefix_k = optimizer_state_prefix(k);
    const std::string which = prefix_k.substr(0, prefix_k.size() - 1);
    for (const ParamInfo& info : table) {
      require_finite(state.optimizer[k].data() + info.offset, info.count, iter_,
                     "the optimizer " + which + " of " + describe(info) + " is not finite");
    }
  }
  const int average = param_.average_loss();
  state.loss_ring.resize(average);
  backend_.copy_to_host(sizeof(float) * average, loss_ring_.get(), state.loss_ring.data());
  backend_.copy_to_host(sizeof(float), loss_sum_.get(), &state.loss_sum);
  state.loss_sum_count = loss_sum_count_;
  state.train_layers = net_->layer_states();
  for (const auto& test : test_nets_) state.test_layers.push_back(test->layer_states());
  state.algorithms = backend_.algorithm_choices();
  state.workers = workers();
  // The loss scale, or the skipped count of an earlier FP16 run that Adam's count keeps.
  if (scales_loss() || scale_state_.skipped > 0) {
    const LossScaleState scale = scales_loss() ? loss_scale_state() : scale_state_;
    state.has_loss_scale = true;
    state.loss_scale = scale.scale;
    state.good_steps = scale.good_steps;
    state.skipped = scale.skipped;
  }

  const std::string weights_bytes =
      encode_snapshot(SnapshotKind::kWeights, weights, &state.weights_crc32);
  weights.clear();
  state.weights_file = std::filesystem::path(paths.weights).filename().string();
  const std::string state_bytes =
      encode_snapshot(SnapshotKind::kSolverState, encode_solver_state(state, arena));
  // The weights first: a state file on disk always has its weights file complete beside it.
  write_file_atomically(paths.weights, weights_bytes);
  write_file_atomically(paths.state, state_bytes);
  const auto end = std::chrono::steady_clock::now();
  warn_about_snapshot_rate(weights_bytes.size() + state_bytes.size(), start, end);
  last_snapshot_ = paths;
  last_snapshot_iter_ = iter_;
  const double ms = std::chrono::duration<double, std::milli>(end - start).count();
  LOG(INFO) << "Snapshot at iteration " << iter_ << ": " << paths.weights << ", " << paths.state
            << " (" << ms << " ms)";
  return paths;
}

void Solver::warn_about_snapshot_rate(size_t bytes, std::chrono::steady_clock::time_point start,
                                      std::chrono::steady_clock::time_point end) {
  // The training time per iteration since the last snapshot was written (or training
  // started), times the snapshot interval: how long training runs between two snapshots.
  const int since = iter_ - rate_reference_iter_;
  const double seconds = std::chrono::duration<double>(start - rate_reference_time_).count();
  rate_reference_iter_ = iter_;
  rate_reference_time_ = end;
  if (rate_warned_ || param_.snapshot() <= 0 || since <= 0 || seconds <= 0) return;
  const double interval = seconds / since * param_.snapshot();
  const double rate = bytes / interval;
  if (rate <= kSnapshotRateWarning) return;
  rate_warned_ = true;
  LOG(WARNING) << "snapshot: " << param_.snapshot() << " writes " << bytes / 1e6
               << " MB every " << interval << " s of training, " << rate / 1e6
               << " MB/s; that wears disks and slows training: raise snapshot to at least "
               << int64_t(std::ceil(param_.snapshot() * rate / kSnapshotRateWarning))
               << " for under " << kSnapshotRateWarning / 1e6 << " MB/s";
}

void Solver::restore(const std::string& state_path) {
  const std::string what = "solver state '" + state_path + "': ";
  ParamArena& arena = net_->arena();
  const SolverState state =
      decode_solver_state(read_snapshot_file(state_path, SnapshotKind::kSolverState), state_path,
                          arena, solver_type_name(args_.rule), arena.num_state());
  if (state.net_name != net_->name())
    LOG(WARNING) << what << "it was written for net '" << state.net_name << "', this net is '"
                 << net_->name() << "'";
  LAMINA_REQUIRE(state.workers == workers(), what, "it was written by a data-parallel job of ",
                 state.workers, " worker", state.workers == 1 ? "" : "s", ", this one has ",
                 workers(), "; resume it with ", state.workers, " (the data order and the "
                 "global batch depend on the count: lamina train --gpu with ", state.workers,
                 " devices, or mpirun -np ", state.workers, "), or start a new run from its "
                 "weights with --weights");
  const int average = param_.average_loss();
  LAMINA_REQUIRE(int64_t(state.loss_ring.size()) == average, what, "it was written with "
                 "average_loss ", state.loss_ring.size(), ", this solver has ", average,
                 "; use the same average_loss");
  // A state written with test nets resumes without them (or with fewer); a test net it
  // holds no state for stays where it is (its position only affects test outputs).
  std::vector<int> restore_tests;
  for (int k = 0; k < num_test_nets(); ++k) {
    if (k < int(state.test_layers.size()) && !state.test_layers[k].empty())
      restore_tests.push_back(k);
    else if (!test_nets_[k]->layer_states().empty())
      LOG(INFO) << what << "it holds no state for test net #" << k
                << "; its test data starts from the beginning";
  }

  // The weights file written with it, checked by its checksum.
  std::filesystem::path weights_path(state.weights_file);
  if (weights_path.is_relative())
    weights_path = std::filesystem::path(state_path).parent_path() / weights_path;
  const std::string wpath = weights_path.string();
  const SnapshotFile weights_file = read_snapshot_file(wpath, SnapshotKind::kWeights);
  LAMINA_REQUIRE(weights_file.checksum == state.weights_crc32, what, "it was written with a "
                 "weights file of checksum ", state.weights_crc32, " but '", wpath,
                 "' has checksum ", weights_file.checksum, "; the weights file was replaced since");
  const std::vector<float> weights =
      arena_from_records(arena, weights_file, wpath, "", WeightsMatch::kExact);

  // Every check passed: apply. Layer states first (they can still refuse; rolled back).
  const std::string source = what.substr(0, what.size() - 2);
  const Net::LayerStates train_before = net_->layer_states();
  std::vector<Net::LayerStates> tests_before;
  for (int k : restore_tests) tests_before.push_back(test_nets_[k]->layer_states());
  try {
    net_->set_layer_states(state.train_layers, source);
    for (int k : restore_tests) test_nets_[k]->set_layer_states(state.test_layers[k], source);
  } catch (const Error&) {
    net_->set_layer_states(train_before, "rollback");
    for (size_t i = 0; i < restore_tests.size(); ++i)
      test_nets_[restore_tests[i]]->set_layer_states(tests_before[i], "rollback");
    throw;
  }
  arena.from_host(weights, arena.data());
  backend_.reuse_algorithm_choices(state.algorithms);
  // The next step and test run directly before they are recorded again: a plan the choices
  // replaced is made then, not while recording.
  step_warm_ = false;
  test_warm_.assign(test_warm_.size(), false);
  for (int k = 0; k < arena.num_state(); ++k) arena.from_host(state.optimizer[k], arena.state(k));
  backend_.copy_from_host(sizeof(float) * average, state.loss_ring.data(), loss_ring_.get());
  backend_.copy_from_host(sizeof(float), &state.loss_sum, loss_sum_.get());
  loss_sum_count_ = state.loss_sum_count;
  iter_ = int(state.iteration);
  // The skipped count stays in any precision (Adam counts the updates made).
  if (state.has_loss_scale) {
    scale_state_ = {state.loss_scale, int32_t(state.good_steps), state.skipped};
    if (!scales_loss())
      LOG(INFO) << what << "its FP16 loss scale (" << state.loss_scale << ") is not used: no "
                << "layer of this net runs in FP16";
  } else {
    scale_state_ = {scales_loss() ? param_.loss_scale() : 1.0f, 0, 0};
    if (scales_loss())
      LOG(INFO) << what << "it holds no loss scale (it was written by a run without FP16 "
                << "layers); the scale starts at loss_scale, " << scale_state_.scale;
  }
  upload_step_state();
  broadcast_weights();  // every worker read the same file; worker 0's are the job's
  net_->refresh_half_weights();
  if (state.seed != seed_)
    LOG(INFO) << "the snapshot's seed " << state.seed << " replaces " << seed_
              << " (the layers' random states come from the snapshot)";
  seed_ = state.seed;
  last_snapshot_ = SnapshotPaths{wpath, state_path};
  last_snapshot_iter_ = iter_;
  last_finite_check_ = iter_ - 1;
  nonfinite_seen_ = false;
  LOG(INFO) << "Resuming from " << state_path << " (weights " << wpath << ") at iteration "
            << iter_;
}

}  // namespace lamina
