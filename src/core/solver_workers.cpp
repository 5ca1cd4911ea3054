// The solver in a data-parallel job (docs/distributed.md): each worker trains its own copy
// of the net on its share of every batch, the gradient arena is summed over the workers
// (in buckets beside the backward pass: gradient_buckets.hpp) and the update divides by
// the workers too, so every worker applies the mean gradient of the whole job's batch and
// the copies stay equal. Host values (displayed losses, test results, actions) are combined
// only where the solver reads the host anyway.
#include <glog/logging.h>

#include <algorithm>
#include <limits>

#include "lamina/communicator.hpp"
#include "lamina/gradient_buckets.hpp"
#include "lamina/solver.hpp"

namespace lamina {
namespace {

// The first dimension of the first layer's first top: the batch of one pass.
int64_t pass_batch(Net& net) {
  if (net.num_layers() == 0 || net.layer_tops(0).empty()) return 0;
  const Shape& shape = net.layer_tops(0)[0]->shape();
  return shape.empty() ? 0 : shape[0];
}

}  // namespace

int Solver::workers() const { return comm_ ? comm_->size() : 1; }
int Solver::rank() const { return comm_ ? comm_->rank() : 0; }
bool Solver::writes_files() const { return rank() == 0; }

void Solver::check_workers_agree(const SolverNets& nets) {
  // The device a worker trains on is its own; everything else must be the same.
  SolverParameter same = param_;
  same.clear_device_id();
  require_same_on_all_workers(*comm_, same.ShortDebugString(), "solver");
  std::string all = nets.train.param.ShortDebugString();
  for (const SolverNet& test : nets.tests) all += "\n" + test.param.ShortDebugString();
  require_same_on_all_workers(*comm_, all, "net");
}

void Solver::join_workers() {
  const int n = workers(), r = rank();
  net_->set_worker(r, n);
  for (int k = 0; k < num_test_nets(); ++k) {
    LAMINA_REQUIRE(param_.test_iter(k) % n == 0, "test_iter ", param_.test_iter(k),
                   num_test_nets() > 1 ? " of test net #" + std::to_string(k) : std::string(),
                   " does not split evenly over the ", n, " workers; make it a multiple of ", n,
                   " (each worker runs test_iter / ", n, " batches of its share of the test data)");
    test_nets_[k]->set_worker(r, n);
  }
  // Data files of the same size and the same positions in them.
  std::string positions;
  std::vector<const Net*> nets = {net_.get()};
  for (const auto& test : test_nets_) nets.push_back(test.get());
  for (const Net* net : nets) {
    for (const auto& [layer, values] : net->layer_states()) {
      positions += layer + ":";
      for (int64_t v : values) positions += " " + std::to_string(v);
      positions += ";";
    }
  }
  require_same_on_all_workers(*comm_, positions, "data set (or data position)");
  broadcast_weights();
  // layer_wise_reduce: false (Caffe's): one all-reduce after the whole backward pass. So
  // with debug_info too, whose lines then show this worker's own gradients, not sums in
  // progress.
  const double bucket_bytes = param_.layer_wise_reduce() && !net_->debug_info()
                                  ? double(param_.gradient_bucket_mb()) * 1e6
                                  : std::numeric_limits<double>::infinity();
  buckets_ = std::make_unique<GradientBuckets>(*net_, *comm_, bucket_bytes);
  // Clipping and loss scaling need every gradient (their sum of squares) before any update.
  update_by_bucket_ = buckets_->beside() && param_.clip_gradients() <= 0 && !scales_loss();
  const int64_t batch = pass_batch(*net_);
  LOG(INFO) << "Data-parallel training: " << n << (n == 1 ? " worker (" : " workers (")
            << comm_->description() << "), batch " << batch << " per worker, global batch "
            << batch * n << " (x iter_size " << param_.iter_size() << "); each update "
            << "applies the mean gradient over the global batch; gradients: "
            << buckets_->summary()
            << (param_.layer_wise_reduce() ? "" : " (layer_wise_reduce: false)");
}

void Solver::log_throughput(int iterations, std::chrono::steady_clock::time_point start) {
  if (iterations <= 0) return;
  backend_.synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const int64_t global = pass_batch(*net_) * param_.iter_size() * workers();
  LOG(INFO) << "Trained " << iterations << " iterations in " << seconds << " s: "
            << (seconds > 0 ? double(global) * iterations / seconds : 0.0)
            << " samples/s (global batch " << global << " on " << workers() << " worker"
            << (workers() == 1 ? "" : "s") << ", tests and snapshots included)";
}

void Solver::broadcast_weights() {
  if (!comm_ || comm_->size() == 1) return;
  ParamArena& arena = net_->arena();
  if (arena.count() == 0) return;
  comm_->broadcast(arena.data(), arena.count(), 0);
  for (int k = 0; k < arena.num_state(); ++k) comm_->broadcast(arena.state(k), arena.count(), 0);
}

void Solver::last_backward() {
  if (!buckets_) return net_->backward();
  buckets_->start();
  // If it throws, forward_backward_advance joins the buckets issued.
  net_->backward([this](int layer) { buckets_->params_done(layer); });
}

void Solver::join_sums_after_failure() {
  if (buckets_) comm_->join_beside();
}

void Solver::sum_gradients() {
  if (!buckets_) return;
  if (update_by_bucket_)
    buckets_->issue_rest();
  else
    buckets_->finish();
}

void Solver::join_gradient_sums() {
  if (update_by_bucket_) comm_->join_beside();
}

void Solver::average_over_workers(float* values, int count) {
  if (!comm_ || comm_->size() == 1) return;
  std::vector<double> sums(values, values + count);
  sums = sum_over_workers(*comm_, sums);
  for (int i = 0; i < count; ++i) values[i] = float(sums[i] / comm_->size());
}

SolverAction Solver::agree_on_action(SolverAction local) {
  pending_action_ = std::max(pending_action_, local);  // kNone < kSnapshot < kStop
  if (!comm_ || comm_->size() == 1) {
    const SolverAction now = pending_action_;
    pending_action_ = SolverAction::kNone;
    return now;
  }
  const int period = backend_.is_host() ? 1 : param_.display() > 0 ? param_.display() : 100;
  if (iter_ % period != 0) return SolverAction::kNone;
  const std::vector<double> asked = sum_over_workers(
      *comm_, {pending_action_ == SolverAction::kSnapshot ? 1.0 : 0.0,
               pending_action_ == SolverAction::kStop ? 1.0 : 0.0});
  pending_action_ = SolverAction::kNone;
  if (asked[1] > 0) return SolverAction::kStop;
  return asked[0] > 0 ? SolverAction::kSnapshot : SolverAction::kNone;
}

}  // namespace lamina
