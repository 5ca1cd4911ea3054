// Solver: learning-rate policies, the training loop and testing. Every SolverParameter field
// is checked at construction against what the chosen policy and update rule use.
#include "lamina/solver.hpp"

#include <glog/logging.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <filesystem>
#include <random>
#include <set>
#include <sstream>

#include "lamina/cuda.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/snapshot.hpp"

namespace lamina {
namespace {

UpdateRule parse_rule(const std::string& type) {
  if (type == "SGD") return UpdateRule::kSGD;
  if (type == "Nesterov") return UpdateRule::kNesterov;
  if (type == "Adam") return UpdateRule::kAdam;
  if (type == "AdamW") return UpdateRule::kAdamW;
  if (type == "RMSProp") return UpdateRule::kRMSProp;
  if (type == "AdaGrad") return UpdateRule::kAdaGrad;
  fail("solver type '", type, "' is unknown; use SGD, Nesterov, Adam, AdamW, RMSProp or AdaGrad");
}

// Rejects fields that are set but that the chosen policy and rule would not use.
void check_fields(const SolverParameter& p, UpdateRule rule) {
  const std::string& policy = p.lr_policy();
  struct Uses {
    bool gamma, power, stepsize, stepvalue, max_iter;
  };
  Uses uses{};
  if (policy == "fixed") {
  } else if (policy == "step") {
    uses = {true, false, true, false, false};
  } else if (policy == "multistep") {
    uses = {true, false, false, true, false};
  } else if (policy == "exp") {
    uses = {true, false, false, false, false};
  } else if (policy == "inv") {
    uses = {true, true, false, false, false};
  } else if (policy == "poly") {
    uses = {false, true, false, false, true};
  } else if (policy == "sigmoid") {
    uses = {true, false, true, false, false};
  } else if (policy == "cosine") {
    uses = {false, false, false, false, true};
  } else {
    fail("lr_policy '", policy, "' is unknown; use fixed, step, multistep, exp, inv, poly, "
         "sigmoid or cosine");
  }
  auto need = [&](bool used, bool set, const char* field) {
    if (used && !set) fail("lr_policy '", policy, "' needs ", field);
    if (!used && set) fail(field, " is set but lr_policy '", policy, "' does not use it");
  };
  need(uses.gamma, p.has_gamma(), "gamma");
  need(uses.power, p.has_power(), "power");
  need(uses.stepsize, p.has_stepsize(), "stepsize");
  need(uses.stepvalue, p.stepvalue_size() > 0, "stepvalue");
  if (uses.max_iter) LAMINA_REQUIRE(p.max_iter() > 0, "lr_policy '", policy, "' needs max_iter");
  if (uses.stepsize) LAMINA_REQUIRE(p.stepsize() > 0, "stepsize must be > 0");
  for (int i = 1; i < p.stepvalue_size(); ++i)
    LAMINA_REQUIRE(p.stepvalue(i) > p.stepvalue(i - 1), "stepvalue must increase; got ",
                   p.stepvalue(i - 1), " then ", p.stepvalue(i));

  const bool adam = rule == UpdateRule::kAdam || rule == UpdateRule::kAdamW;
  const bool momentum_rule = rule == UpdateRule::kSGD || rule == UpdateRule::kNesterov || adam;
  const char* type = p.type().c_str();
  if (p.has_momentum() && !momentum_rule) fail("momentum is set but solver type ", type, " does not use it");
  if (p.has_momentum2() && !adam) fail("momentum2 is set but solver type ", type, " does not use it");
  if (p.has_rms_decay() && rule != UpdateRule::kRMSProp)
    fail("rms_decay is set but solver type ", type, " does not use it");
  if (p.has_delta() && (rule == UpdateRule::kSGD || rule == UpdateRule::kNesterov))
    fail("delta is set but solver type ", type, " does not use it");
  LAMINA_REQUIRE(p.regularization_type() == "L2" || p.regularization_type() == "L1",
                 "regularization_type '", p.regularization_type(), "' is unknown; use L2 or L1");
  LAMINA_REQUIRE(p.has_base_lr() && p.base_lr() > 0, "base_lr must be set and > 0");
  LAMINA_REQUIRE(p.iter_size() >= 1, "iter_size must be >= 1, got ", p.iter_size());
  LAMINA_REQUIRE(p.average_loss() >= 1, "average_loss must be >= 1, got ", p.average_loss());
  LAMINA_REQUIRE(p.display() >= 0, "display must be >= 0");
  LAMINA_REQUIRE(p.max_iter() >= 0, "max_iter must be >= 0");
  LAMINA_REQUIRE(p.weight_decay() >= 0, "weight_decay must be >= 0");
  LAMINA_REQUIRE(p.test_iter_size() <= 1, "one test net is supported: give one test_iter");
  if (p.has_device_id())
    LAMINA_REQUIRE(p.solver_mode() == SolverParameter::GPU, "device_id is set but solver_mode "
                   "is CPU; set solver_mode: GPU (or train with --gpu N)");
  LAMINA_REQUIRE(p.test_interval() >= 0, "test_interval must be >= 0");
  if (p.test_interval() > 0)
    LAMINA_REQUIRE(p.test_iter_size() == 1 && p.test_iter(0) > 0,
                   "test_interval is set: give test_iter, the number of test batches");
  if (p.test_iter_size() == 1)
    LAMINA_REQUIRE(p.test_iter(0) > 0, "test_iter must be > 0, got ", p.test_iter(0));
  if (p.has_test_initialization())
    LAMINA_REQUIRE(p.test_interval() > 0,
                   "test_initialization is set but no test_interval says when to test");
  LAMINA_REQUIRE(p.snapshot() >= 0, "snapshot must be >= 0 (0: no periodic snapshots)");
  if (p.snapshot() > 0)
    LAMINA_REQUIRE(!p.snapshot_prefix().empty(), "snapshot is ", p.snapshot(),
                   " but snapshot_prefix is not set; say where snapshots go "
                   "(snapshot_prefix: \"dir/name\")");
}

// Thrown by snapshot() when a value to be written is not finite; handled by the
// `nonfinite` setting rather than `snapshot_failure`.
class NonFiniteError : public Error {
 public:
  using Error::Error;
};

// NaN, inf, -inf or the number, for messages.
std::string number(float v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  std::ostringstream out;
  out << v;
  return out.str();
}

// "parameter 'fc1/weight' of layer 'fc1'", for messages.
std::string describe(const ParamInfo& info) {
  return "parameter '" + info.name + "' of layer '" + info.layer + "'";
}

// The first parameter of table whose values in arena (host copy) are not finite.
const ParamInfo* first_nonfinite_param(const std::vector<ParamInfo>& table,
                                       const std::vector<float>& arena) {
  for (const ParamInfo& info : table)
    if (first_nonfinite(arena.data() + info.offset, info.count) >= 0) return &info;
  return nullptr;
}

std::vector<float> to_host(Backend& backend, const float* data, int64_t n) {
  std::vector<float> host(n);
  if (n > 0) backend.copy_to_host(sizeof(float) * n, data, host.data());
  return host;
}

}  // namespace

float TestResult::value(const std::string& name) const {
  for (const auto& output : outputs)
    if (output.first == name) return output.second;
  std::string known;
  for (const auto& output : outputs) known += (known.empty() ? "" : ", ") + output.first;
  fail("the test net has no output '", name, "'; its outputs: ", known);
}

Solver::Solver(const SolverParameter& param, const NetParameter& net_param, Backend& backend,
               const std::string& source)
    : param_(param), backend_(backend) {
  args_.rule = parse_rule(param.type());
  check_fields(param, args_.rule);
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
  if (param.random_seed() < 0) LOG(INFO) << "random_seed not set; using " << seed;
  seed_ = seed;
  net_ = std::make_unique<Net>(net_param, TRAIN, backend, seed, nullptr, source);
  if (param.test_iter_size() == 1) {
    test_net_ = std::make_unique<Net>(net_param, TEST, backend, seed + 1, net_.get(), source);
    const int64_t outputs = [&] {
      int64_t n = 0;
      for (const std::string& name : test_net_->output_names()) n += test_net_->blob(name).count();
      return n;
    }();
    LAMINA_REQUIRE(outputs > 0, "the TEST net has no outputs to report");
    test_sums_ = Buffer(backend, sizeof(float) * outputs);
  }

  const int64_t n = net_->arena_count();
  history_ = Buffer(backend, sizeof(float) * n);
  if (n) backend.zero(sizeof(float) * n, history_.get());
  if (args_.rule == UpdateRule::kAdam || args_.rule == UpdateRule::kAdamW) {
    history2_ = Buffer(backend, sizeof(float) * n);
    if (n) backend.zero(sizeof(float) * n, history2_.get());
  }
  std::vector<ParamSegment> segments;
  for (const ParamInfo& info : net_->param_table())
    segments.push_back({info.offset, info.count, info.lr_mult, info.decay_mult});
  num_segments_ = int(segments.size());
  // The segment table, then the block table of the update's layout, in one buffer.
  const std::vector<int32_t> blocks = block_segments(segments, n);
  const size_t segment_bytes = sizeof(ParamSegment) * segments.size();
  segments_ = Buffer(backend, segment_bytes + sizeof(int32_t) * blocks.size());
  if (!segments.empty()) {
    backend.copy_from_host(segment_bytes, segments.data(), segments_.get());
    backend.copy_from_host(sizeof(int32_t) * blocks.size(), blocks.data(),
                           static_cast<char*>(segments_.get()) + segment_bytes);
  }

  loss_ring_ = Buffer(backend, sizeof(float) * (param.average_loss() + 1));
  backend.zero(loss_ring_.bytes(), loss_ring_.get());
  ring_host_.assign(param.average_loss() + 1, 0.0f);
  loss_sum_ = Buffer(backend, sizeof(float));
  backend.zero(sizeof(float), loss_sum_.get());
}

std::unique_ptr<Solver> Solver::from_file(const std::string& solver_path, Backend& backend) {
  return create(read_solver_parameter(solver_path), solver_path, backend);
}

std::unique_ptr<Solver> Solver::create(const SolverParameter& param,
                                       const std::string& solver_path, Backend& backend) {
  LAMINA_REQUIRE(param.has_net(), solver_path, ": the solver names no net (net: \"file.prototxt\")");
  const std::string net_path = resolve_path(param.net(), solver_path);
  return std::make_unique<Solver>(param, read_net_parameter(net_path), backend, net_path);
}

std::unique_ptr<Backend> make_solver_backend(SolverParameter& param, int gpu) {
  if (gpu >= 0) {
    param.set_solver_mode(SolverParameter::GPU);
    param.set_device_id(gpu);
  }
  if (param.solver_mode() == SolverParameter::GPU) return make_cuda_backend(param.device_id());
  return std::make_unique<NativeBackend>();
}

float Solver::learning_rate() const {
  const SolverParameter& p = param_;
  const double base = p.base_lr();
  const double it = iter_;
  const std::string& policy = p.lr_policy();
  if (policy == "fixed") return base;
  if (policy == "step") return base * std::pow(p.gamma(), std::floor(it / p.stepsize()));
  if (policy == "exp") return base * std::pow(p.gamma(), it);
  if (policy == "inv") return base * std::pow(1.0 + p.gamma() * it, -p.power());
  if (policy == "multistep") {
    int passed = 0;
    while (passed < p.stepvalue_size() && iter_ >= p.stepvalue(passed)) ++passed;
    return base * std::pow(p.gamma(), passed);
  }
  if (policy == "poly") return base * std::pow(1.0 - std::min(it / p.max_iter(), 1.0), p.power());
  if (policy == "sigmoid") return base / (1.0 + std::exp(-p.gamma() * (it - p.stepsize())));
  if (policy == "cosine")
    return base * 0.5 * (1.0 + std::cos(M_PI * std::min(it / p.max_iter(), 1.0)));
  fail("lr_policy '", policy, "' is unknown");
}

void Solver::solve() {
  LOG(INFO) << "Solving " << net_->name() << " on " << backend_.name() << " for "
            << param_.max_iter() << " iterations";
  stopped_early_ = false;
  const std::string& prefix = param_.snapshot_prefix();
  if (!prefix.empty()) {
    // Report an unwritable snapshot directory now, not hours from now.
    try {
      check_writable(prefix);
    } catch (const Error& e) {
      if (param_.snapshot_failure() == SolverParameter::STOP)
        fail(e.what(), "; training did not start (with snapshot_failure: CONTINUE it would "
             "train without snapshots)");
      LOG(ERROR) << e.what() << "; training goes on without snapshots (snapshot_failure: "
                 "CONTINUE)";
    }
  }
  step(param_.max_iter() - iter_);
  if (stopped_early_) {
    LOG(INFO) << "Optimization stopped early, at iteration " << iter_ << ".";
    return;
  }
  if (!prefix.empty() && param_.snapshot_after_train()) snapshot_as_configured("end of training");
  if (test_net_ && param_.test_interval() > 0 && iter_ % param_.test_interval() == 0) test();
  LOG(INFO) << "Optimization done.";
}

void Solver::step(int iters) {
  const int average = param_.average_loss();
  const int64_t n = net_->arena_count();
  stopped_early_ = false;
  for (int k = 0; k < iters; ++k) {
    // A restored state may sit at the last iteration an int counts (found by fuzz_solverstate).
    LAMINA_REQUIRE(iter_ < INT_MAX, "iteration ", iter_, " is the last one Lamina counts; "
                   "the solver cannot train further");
    if (test_net_ && param_.test_interval() > 0 && iter_ % param_.test_interval() == 0 &&
        (iter_ > 0 || param_.test_initialization())) {
      test();
    }
    const bool display = param_.display() > 0 && iter_ % param_.display() == 0;
    // Non-finite checks. The loss: every iteration on host backends, where reading it costs
    // nothing; at display iterations on devices, folded into the one copy of the loss ring
    // that displaying makes anyway. The weights and gradients: at display iterations (a pass
    // over the arena costs about 3% of an MLP iteration on the CPU), and in every snapshot.
    const bool check = display || backend_.is_host();
    Net::LayerStates states_before;
    if (check) states_before = net_->layer_states();  // to replay this batch in a diagnosis
    net_->zero_param_diffs();
    float* slot = loss_ring_.as<float>() + iter_ % average;
    backend_.zero(sizeof(float), slot);
    for (int i = 0; i < param_.iter_size(); ++i) {
      net_->forward();
      net_->backward();
      backend_.axpy(1, 1.0f / param_.iter_size(), net_->loss_tensor().data(), slot);
    }
    backend_.axpy(1, 1.0f, slot, loss_sum_.as<float>());
    ++loss_sum_count_;
    if (display && n > 0) {
      // weights . gradients is NaN or infinite when any weight or gradient is (x * NaN,
      // inf * 0, inf * x all are); it can also overflow, which check_finite tells apart.
      backend_.gemv(Transpose::kNo, 1, n, 1.0f, net_->param_data(), net_->param_diff(), 0.0f,
                    loss_ring_.as<float>() + average);
    }
    if (check) read_ring();
    if (display) {
      const float loss = smoothed_loss();
      loss_history_.push_back({iter_, loss});
      LOG(INFO) << "Iteration " << iter_ << ", loss = " << loss << ", lr = " << learning_rate();
    }
    if (check) check_finite(states_before, display);
    apply_update();
    ++iter_;
    if (param_.snapshot() > 0 && iter_ % param_.snapshot() == 0) snapshot_as_configured("periodic");
    if (!action_source_) continue;
    const SolverAction action = action_source_();
    if (action == SolverAction::kSnapshot) snapshot_as_configured("requested");
    if (action == SolverAction::kStop) {
      if (param_.snapshot_prefix().empty()) {
        LOG(WARNING) << "Stopping at iteration " << iter_ << " as requested; snapshot_prefix is "
                     << "not set, so no snapshot is written";
      } else {
        snapshot_as_configured("stop");
      }
      stopped_early_ = true;
      return;
    }
  }
}

void Solver::read_ring() {
  backend_.copy_to_host(loss_ring_.bytes(), loss_ring_.get(), ring_host_.data());
}

float Solver::smoothed_loss() {
  const int average = param_.average_loss();
  const int count = std::min(iter_ + 1, average);
  double sum = 0;
  for (int i = 0; i < count; ++i) sum += ring_host_[(iter_ - i) % average];
  return float(sum / count);
}

void Solver::check_finite(const Net::LayerStates& states_before, bool arenas) {
  const int average = param_.average_loss();
  const float loss = ring_host_[iter_ % average];
  const float product = arenas ? ring_host_[average] : 0.0f;
  if (std::isfinite(loss) && std::isfinite(product)) {
    if (arenas) last_finite_check_ = iter_;
    return;
  }
  const int64_t n = net_->arena_count();
  const std::vector<float> weights = to_host(backend_, net_->param_data(), n);
  const std::vector<float> grads = to_host(backend_, net_->param_diff(), n);
  const ParamInfo* bad_weight = first_nonfinite_param(net_->param_table(), weights);
  const ParamInfo* bad_grad = first_nonfinite_param(net_->param_table(), grads);
  if (std::isfinite(loss) && !bad_weight && !bad_grad) {
    VLOG(1) << "iteration " << iter_ << ": weights . gradients overflowed (" << product
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
  if (n > 0) backend_.copy_from_host(sizeof(float) * n, grads.data(), net_->param_diff());
  if (!first.empty()) {
    message << ". The first non-finite value is in " << first;
  } else if (bad_weight) {
    message << ". The weights went bad in an update before this iteration's forward pass";
  }
  message << ". ";
  if (last_snapshot_.empty())
    message << "No snapshot was written before";
  else
    message << "The last snapshot, '" << last_snapshot_.state << "' (iteration "
            << last_snapshot_iter_ << "), holds finite weights";

  if (param_.nonfinite() == SolverParameter::STOP) {
    message << "; training stopped (nonfinite: CONTINUE, or lamina train --nonfinite continue, "
               "trains on)";
    throw NonFiniteError(message.str());
  }
  nonfinite_seen_ = true;
  LOG(ERROR) << message.str() << "; training goes on (nonfinite: CONTINUE)";
}

float Solver::take_mean_loss() {
  float sum = 0;
  backend_.copy_to_host(sizeof(float), loss_sum_.get(), &sum);
  backend_.zero(sizeof(float), loss_sum_.get());
  const float mean = loss_sum_count_ ? sum / loss_sum_count_ : 0.0f;
  loss_sum_count_ = 0;
  return mean;
}

void Solver::apply_update() {
  const int64_t n = net_->arena_count();
  if (n == 0) return;
  args_.lr = learning_rate();
  args_.step = iter_ + 1;
  args_.grad_scale = 1.0f / param_.iter_size();
  if (param_.clip_gradients() > 0) {
    // The global norm needs one device-to-host read; only when clipping is on.
    const float norm =
        std::sqrt(backend_.dot(n, net_->param_diff(), net_->param_diff())) * args_.grad_scale;
    if (norm > param_.clip_gradients()) {
      args_.grad_scale *= param_.clip_gradients() / norm;
      VLOG(1) << "clipping gradients: norm " << norm << " > " << param_.clip_gradients();
    }
  }
  const ParamSegment* segments = segments_.as<ParamSegment>();
  const UpdateLayout layout{n, segments, num_segments_,
                            reinterpret_cast<const int32_t*>(segments + num_segments_)};
  backend_.update(args_, layout, net_->param_data(), net_->param_diff(), history_.as<float>(),
                  history2_.as<float>());
}

void Solver::snapshot_as_configured(const char* why) {
  if (!last_snapshot_.empty() && last_snapshot_iter_ == iter_) return;  // just written
  try {
    snapshot();
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
           ". ", last_snapshot_.empty() ? std::string("No snapshot was written before")
                                        : "The last snapshot, '" + last_snapshot_.state +
                                              "' (iteration " + std::to_string(last_snapshot_iter_) +
                                              "), holds finite weights",
           "; training stopped (nonfinite: CONTINUE, or lamina train --nonfinite continue, "
           "trains on)");
    }
    LOG(ERROR) << e.what() << "; no snapshot written (" << why << ")";
  } catch (const Error& e) {
    if (param_.snapshot_failure() == SolverParameter::STOP) {
      fail(e.what(), "; training stopped at iteration ", iter_,
           last_snapshot_.empty() ? std::string()
                                  : "; the last snapshot is '" + last_snapshot_.state + "'",
           " (with snapshot_failure: CONTINUE, or lamina train --snapshot-failure continue, "
           "it would train on)");
    }
    LOG(ERROR) << e.what() << " (" << why << " snapshot at iteration " << iter_
               << "); training goes on (snapshot_failure: CONTINUE)";
  }
}

SnapshotPaths Solver::snapshot() {
  const auto start = std::chrono::steady_clock::now();
  const std::string& prefix = param_.snapshot_prefix();
  LAMINA_REQUIRE(!prefix.empty(), "cannot write a snapshot: snapshot_prefix is not set");
  const std::string base = prefix + "_iter_" + std::to_string(iter_);
  const SnapshotPaths paths{base + ".lamina", base + ".solverstate"};
  const std::vector<ParamInfo>& table = net_->param_table();
  const int64_t n = net_->arena_count();

  // Everything is copied and checked before the first byte is written.
  std::vector<SnapshotRecord> weights = weights_records(*net_);
  for (size_t i = 0; i < weights.size(); ++i) {
    const int64_t bad = first_nonfinite(weights[i].floats.data(), int64_t(weights[i].floats.size()));
    if (bad >= 0)
      throw NonFiniteError("refusing to write a snapshot at iteration " + std::to_string(iter_) +
                           ": " + describe(table[i]) + " holds a non-finite weight (" +
                           number(weights[i].floats[bad]) + " at index " +
                           std::to_string(bad) + ")");
  }
  std::vector<SnapshotRecord> state;
  state.push_back(SnapshotRecord::of_ints("iteration", {iter_}));
  state.push_back(SnapshotRecord::of_ints("seed", {int64_t(seed_)}));
  state.push_back(SnapshotRecord::of_bytes("solver_type", param_.type()));
  state.push_back(SnapshotRecord::of_bytes("net_name", net_->name()));
  const bool adam = args_.rule == UpdateRule::kAdam || args_.rule == UpdateRule::kAdamW;
  for (const char* which : {"history", "history2"}) {
    const bool second = std::string(which) == "history2";
    if (second && !adam) continue;
    const std::vector<float> host =
        to_host(backend_, (second ? history2_ : history_).as<float>(), n);
    for (const ParamInfo& info : table) {
      const float* begin = host.data() + info.offset;
      const int64_t bad = first_nonfinite(begin, info.count);
      if (bad >= 0)
        throw NonFiniteError("refusing to write a snapshot at iteration " + std::to_string(iter_) +
                             ": the optimizer " + which + " of " + describe(info) +
                             " is not finite at index " + std::to_string(bad));
      state.push_back(SnapshotRecord::of_floats(std::string(which) + "/" + info.name, info.shape,
                                                std::vector<float>(begin, begin + info.count)));
    }
  }
  const int average = param_.average_loss();
  state.push_back(SnapshotRecord::of_floats(
      "loss_ring", {average}, to_host(backend_, loss_ring_.as<float>(), average)));
  state.push_back(SnapshotRecord::of_floats("loss_sum", {1},
                                            to_host(backend_, loss_sum_.as<float>(), 1)));
  state.push_back(SnapshotRecord::of_ints("loss_sum_count", {loss_sum_count_}));
  for (const auto& [phase, net] : {std::pair<const char*, Net*>{"train", net_.get()},
                                   std::pair<const char*, Net*>{"test", test_net_.get()}}) {
    if (!net) continue;
    for (auto& [layer, values] : net->layer_states())
      state.push_back(SnapshotRecord::of_ints(std::string("state/") + phase + "/" + layer, values));
  }

  uint32_t crc = 0;
  const std::string weights_bytes = encode_snapshot(SnapshotKind::kWeights, weights, &crc);
  weights.clear();
  state.push_back(SnapshotRecord::of_bytes(
      "weights_file", std::filesystem::path(paths.weights).filename().string()));
  state.push_back(SnapshotRecord::of_ints("weights_crc32", {int64_t(crc)}));
  // The weights first: a state file on disk always has its weights file complete beside it.
  write_file_atomically(paths.weights, weights_bytes);
  write_file_atomically(paths.state, encode_snapshot(SnapshotKind::kSolverState, state));
  last_snapshot_ = paths;
  last_snapshot_iter_ = iter_;
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  LOG(INFO) << "Snapshot at iteration " << iter_ << ": " << paths.weights << ", " << paths.state
            << " (" << ms << " ms)";
  return paths;
}

void Solver::restore(const std::string& state_path) {
  const SnapshotFile file = read_snapshot_file(state_path, SnapshotKind::kSolverState);
  const std::string what = "solver state '" + state_path + "': ";
  using Type = SnapshotRecord::Type;
  std::set<std::string> used;
  auto get = [&](const std::string& name, Type type, int64_t count) -> const SnapshotRecord& {
    const SnapshotRecord* r = file.find(name);
    LAMINA_REQUIRE(r, what, "missing record '", name, "'; the file is damaged or not a Lamina "
                   "solver state");
    LAMINA_REQUIRE(r->type == type && (count < 0 || r->count() == count), what, "record '",
                   name, "' has the wrong type or size");
    used.insert(name);
    return *r;
  };
  const int64_t iteration = get("iteration", Type::kInt64, 1).ints[0];
  LAMINA_REQUIRE(iteration >= 0 && iteration <= INT_MAX, what, "iteration ", iteration,
                 " is out of range");
  const int64_t seed = get("seed", Type::kInt64, 1).ints[0];
  const std::string& type = get("solver_type", Type::kBytes, -1).bytes;
  LAMINA_REQUIRE(type == param_.type(), what, "it was written by a ", type,
                 " solver, but this solver is ", param_.type(), "; resume with the same type, or "
                 "start a new run from its weights (lamina train --weights)");
  const std::string& net_name = get("net_name", Type::kBytes, -1).bytes;
  if (net_name != net_->name())
    LOG(WARNING) << what << "it was written for net '" << net_name << "', this net is '"
                 << net_->name() << "'";
  const std::string& weights_name = get("weights_file", Type::kBytes, -1).bytes;
  const int64_t weights_crc = get("weights_crc32", Type::kInt64, 1).ints[0];
  const int average = param_.average_loss();
  const SnapshotRecord& ring = get("loss_ring", Type::kFloat32, -1);
  LAMINA_REQUIRE(ring.count() == average, what, "it was written with average_loss ",
                 ring.count(), ", this solver has ", average, "; use the same average_loss");
  const float loss_sum = get("loss_sum", Type::kFloat32, 1).floats[0];
  const int64_t loss_sum_count = get("loss_sum_count", Type::kInt64, 1).ints[0];

  // Optimizer history, keyed like the weights.
  const int64_t n = net_->arena_count();
  const bool adam = args_.rule == UpdateRule::kAdam || args_.rule == UpdateRule::kAdamW;
  std::vector<float> history(n, 0.0f), history2(adam ? n : 0, 0.0f);
  for (const ParamInfo& info : net_->param_table()) {
    for (const char* which : {"history", "history2"}) {
      const bool second = std::string(which) == "history2";
      if (second && !adam) continue;
      const std::string name = std::string(which) + "/" + info.name;
      const SnapshotRecord* r = file.find(name);
      LAMINA_REQUIRE(r, what, "it holds no ", which, " for ", describe(info),
                     "; it was written for a different net");
      LAMINA_REQUIRE(r->type == Type::kFloat32 && r->shape == info.shape, what, "layer '",
                     info.layer, "': the ", which, " of parameter '", info.name, "' has shape ",
                     shape_string(r->shape), " in the file but the parameter has shape ",
                     shape_string(info.shape), "; it was written for a different net");
      std::copy(r->floats.begin(), r->floats.end(),
                (second ? history2 : history).begin() + info.offset);
      used.insert(name);
    }
  }
  // Layer states of both nets.
  Net::LayerStates states[2];
  const char* phases[2] = {"state/train/", "state/test/"};
  for (const SnapshotRecord& r : file.records) {
    for (int p = 0; p < 2; ++p) {
      const std::string prefix = phases[p];
      if (r.name.compare(0, prefix.size(), prefix) != 0) continue;
      LAMINA_REQUIRE(r.type == Type::kInt64, what, "record '", r.name, "' is not int64");
      states[p][r.name.substr(prefix.size())] = r.ints;
      used.insert(r.name);
    }
  }
  for (const SnapshotRecord& r : file.records) {
    if (used.count(r.name)) continue;
    if (r.name.rfind("history", 0) == 0)
      fail(what, "it holds '", r.name, "', which no parameter of net '", net_->name(),
           "' matches; it was written for a different net");
    fail(what, "unknown record '", r.name, "'");
  }
  // A state written with a test net resumes without one; one written without a test net
  // leaves this solver's test net where it is (its position only affects test outputs).
  const bool restore_test = test_net_ && !states[1].empty();
  if (test_net_ && states[1].empty() && !test_net_->layer_states().empty())
    LOG(INFO) << what << "it holds no TEST net state; the test data starts from the beginning";

  // The weights file written with it, checked by its checksum.
  std::filesystem::path weights_path(weights_name);
  if (weights_path.is_relative())
    weights_path = std::filesystem::path(state_path).parent_path() / weights_path;
  const std::string wpath = weights_path.string();
  const SnapshotFile weights_file = read_snapshot_file(wpath, SnapshotKind::kWeights);
  LAMINA_REQUIRE(int64_t(weights_file.checksum) == weights_crc, what, "it was written with a "
                 "weights file of checksum ", weights_crc, " but '", wpath, "' has checksum ",
                 weights_file.checksum, "; the weights file was replaced since");
  const std::vector<float> weights = check_weights(*net_, weights_file, wpath, WeightsMatch::kExact);

  // Every check passed: apply. Layer states first (they can still refuse; rolled back).
  const Net::LayerStates train_before = net_->layer_states();
  net_->set_layer_states(states[0], what.substr(0, what.size() - 2));
  if (restore_test) {
    try {
      test_net_->set_layer_states(states[1], what.substr(0, what.size() - 2));
    } catch (const Error&) {
      net_->set_layer_states(train_before, "rollback");
      throw;
    }
  }
  if (n > 0) {
    backend_.copy_from_host(sizeof(float) * n, weights.data(), net_->param_data());
    backend_.copy_from_host(sizeof(float) * n, history.data(), history_.get());
    if (adam) backend_.copy_from_host(sizeof(float) * n, history2.data(), history2_.get());
  }
  backend_.copy_from_host(sizeof(float) * average, ring.floats.data(), loss_ring_.get());
  backend_.copy_from_host(sizeof(float), &loss_sum, loss_sum_.get());
  loss_sum_count_ = loss_sum_count;
  iter_ = int(iteration);
  if (uint64_t(seed) != seed_)
    LOG(INFO) << "the snapshot's seed " << uint64_t(seed) << " replaces " << seed_
              << " (the layers' random states come from the snapshot)";
  seed_ = uint64_t(seed);
  last_snapshot_ = SnapshotPaths{wpath, state_path};
  last_snapshot_iter_ = iter_;
  last_finite_check_ = iter_ - 1;
  nonfinite_seen_ = false;
  LOG(INFO) << "Resuming from " << state_path << " (weights " << wpath << ") at iteration "
            << iter_;
}

TestResult Solver::test() {
  LAMINA_REQUIRE(test_net_ != nullptr, "the solver has no test net: set test_iter");
  float* sums = test_sums_.as<float>();
  backend_.zero(test_sums_.bytes(), sums);
  const int iters = param_.test_iter(0);
  for (int i = 0; i < iters; ++i) {
    test_net_->forward();
    int64_t offset = 0;
    for (const std::string& name : test_net_->output_names()) {
      Tensor& out = test_net_->blob(name);
      backend_.axpy(out.count(), 1.0f, out.data(), sums + offset);
      offset += out.count();
    }
  }
  std::vector<float> host(test_sums_.bytes() / sizeof(float));
  backend_.copy_to_host(test_sums_.bytes(), sums, host.data());
  TestResult result;
  int64_t offset = 0;
  for (const std::string& name : test_net_->output_names()) {
    const int64_t count = test_net_->blob(name).count();
    for (int64_t k = 0; k < count; ++k) {
      const std::string label = count == 1 ? name : name + "[" + std::to_string(k) + "]";
      result.outputs.push_back({label, host[offset + k] / iters});
      LOG(INFO) << "Test at iteration " << iter_ << ": " << label << " = "
                << result.outputs.back().second;
    }
    offset += count;
  }
  test_history_.push_back({iter_, result});
  return result;
}

}  // namespace lamina
