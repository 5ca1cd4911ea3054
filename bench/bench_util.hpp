// What the MNIST benchmarks share: the command line, the backend and the median training epoch.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/precision.hpp"

namespace lamina::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The command line both benchmarks take.
struct Options {
  std::vector<int> batch_sizes = {64, 256};
  std::string gpu = "-1";  // --gpu as given; -1: the CPU
  int repeats = 3;  // epochs timed per batch size
  bool no_cuda_graph = false;  // launch every operation directly (solver cuda_graph: false)
  std::string precision = "fp32";  // the solver's precision (lamina.proto's Precision)
  mnist::ModelOptions model;
};

inline void add_options(CLI::App& app, Options& o) {
  app.add_option("--batch-sizes", o.batch_sizes, "Batch sizes to time")->delimiter(',');
  app.add_option("--gpu", o.gpu, "Time on this GPU; -1 times on the CPU (the default)");
  app.add_option("--epochs", o.repeats, "Epochs timed per batch size; the median is reported")
      ->capture_default_str();
  app.add_option("--data-dir", o.model.data_dir, "Directory holding the MNIST IDX files");
  app.add_flag("--no-cuda-graph", o.no_cuda_graph,
               "Launch every operation directly instead of replaying the step as a CUDA graph");
  app.add_option("--precision", o.precision, "Precision to train in: fp32, tf32, bf16 or fp16")
      ->capture_default_str();
}

// The backend the options ask for, after checking the values no default can stand in for.
inline std::unique_ptr<Backend> checked_backend(const Options& o) {
  LAMINA_REQUIRE(o.repeats > 0, "--epochs must be > 0, got ", o.repeats);
  LAMINA_REQUIRE(!o.batch_sizes.empty(), "--batch-sizes names no batch size");
  parse_precision(o.precision, "--precision");  // an Error for text that names none
  for (int batch : o.batch_sizes)
    LAMINA_REQUIRE(batch > 0, "--batch-sizes: every batch size must be > 0, got ", batch);
  return lamina::make_backend(backend_spec_from_gpu(o.gpu));
}

struct EpochTiming {
  mnist::Model model;
  std::unique_ptr<Solver> solver;  // trained for the timed epochs, for further measurements
  double epoch_seconds;            // the median of the timed epochs
  double us_per_iteration() const { return 1e6 * epoch_seconds / model.iters_per_epoch; }
  // Operations per step: the recorded CUDA graph's nodes, or 0 when steps run directly.
  int64_t step_operations() const { return solver->step_operations(); }
};

// Trains `name` (models/mnist/NAME_*) at batch size `batch` with no test net (the step
// replayed as a CUDA graph unless --no-cuda-graph): 10 warm-up
// iterations (first touches, library start-up, algorithm choice), then `repeats` epochs of
// full batches, each timed with the device synchronized before the clock is read. `adjust`
// may change the model (its net) first.
inline EpochTiming time_epochs(const std::string& name, int batch, const Options& o,
                               Backend& backend,
                               const std::function<void(mnist::Model&)>& adjust = {}) {
  mnist::ModelOptions options = o.model;
  options.batch_size = batch;
  const int repeats = o.repeats;
  EpochTiming t{mnist::load_model(name, options), nullptr, 0};
  if (adjust) adjust(t.model);
  t.model.solver.clear_test_iter();  // training only
  t.model.solver.set_cuda_graph(!o.no_cuda_graph);
  t.model.solver.set_precision(parse_precision(o.precision, "--precision"));
  t.solver = std::make_unique<Solver>(t.model.solver, t.model.net, backend, t.model.net_path);
  t.solver->step(10);
  backend.synchronize();
  std::vector<double> epochs;
  for (int e = 0; e < repeats; ++e) {
    const auto start = Clock::now();
    t.solver->step(t.model.iters_per_epoch);
    backend.synchronize();
    epochs.push_back(seconds_since(start));
  }
  std::sort(epochs.begin(), epochs.end());
  t.epoch_seconds = epochs[epochs.size() / 2];
  return t;
}

}  // namespace lamina::bench
