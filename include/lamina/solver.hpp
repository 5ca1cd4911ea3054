// Solver: trains a net from a SolverParameter.
//
// Every field of SolverParameter is applied; values that cannot be applied are errors at
// construction. The update is one fused backend call over the parameter arena per
// iteration. A steady-state iteration copies nothing between host and device: the loss is
// accumulated on the device and read only every `display` iterations, and test outputs are
// summed on the device and read once per test.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/net.hpp"
#include "lamina.pb.h"

namespace lamina {

struct TestResult {
  std::vector<std::pair<std::string, float>> outputs;  // mean over test_iter batches
  float value(const std::string& name) const;          // throws when absent
};

struct LossRecord {
  int iteration;
  float loss;  // smoothed over average_loss iterations, as displayed
};

// The backend a solver asks for: GPU device_id when solver_mode is GPU, else the CPU.
// gpu >= 0 (a command line's --gpu) overrides both and is written back into param.
std::unique_ptr<Backend> make_solver_backend(SolverParameter& param, int gpu = -1);

class Solver {
 public:
  // net_param: the net (train and test phases in one file). `source` names the net file.
  Solver(const SolverParameter& param, const NetParameter& net_param, Backend& backend,
         const std::string& source = {});
  // Reads the solver prototxt and the net it names (relative to the solver file).
  static std::unique_ptr<Solver> from_file(const std::string& solver_path, Backend& backend);
  // The same for a parameter already read (and perhaps changed) from solver_path.
  static std::unique_ptr<Solver> create(const SolverParameter& param,
                                        const std::string& solver_path, Backend& backend);

  // Trains until max_iter, testing every test_interval and logging every display.
  void solve();
  // Runs iters iterations (forward, backward, update), with display and tests as configured.
  void step(int iters);
  // Runs the test net for test_iter batches and returns the mean of each output.
  TestResult test();

  int iter() const { return iter_; }
  float learning_rate() const;  // the policy's rate at the current iteration
  Net& net() { return *net_; }
  Net* test_net() { return test_net_.get(); }
  const SolverParameter& param() const { return param_; }
  // Mean training loss over the iterations since the last call (one host copy).
  float take_mean_loss();
  // Losses shown at each display iteration.
  const std::vector<LossRecord>& loss_history() const { return loss_history_; }
  // Test results at each test point, with their iteration.
  const std::vector<std::pair<int, TestResult>>& test_history() const { return test_history_; }

 private:
  void apply_update();
  float smoothed_loss();

  SolverParameter param_;
  Backend& backend_;
  UpdateArgs args_;
  std::unique_ptr<Net> net_;
  std::unique_ptr<Net> test_net_;
  int iter_ = 0;
  Buffer history_;
  Buffer history2_;
  Buffer segments_;
  int num_segments_ = 0;
  Buffer loss_ring_;   // last average_loss losses
  Buffer loss_sum_;    // running sum for take_mean_loss
  int64_t loss_sum_count_ = 0;
  Buffer test_sums_;
  std::vector<LossRecord> loss_history_;
  std::vector<std::pair<int, TestResult>> test_history_;
};

}  // namespace lamina
