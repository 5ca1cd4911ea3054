// What the MNIST benchmarks share: the backend choice and the median training epoch.
#pragma once

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"

namespace lamina::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// GPU gpu, or the CPU when gpu < 0.
inline std::unique_ptr<Backend> make_backend(int gpu) {
  if (gpu >= 0) return make_cuda_backend(gpu);
  return std::make_unique<NativeBackend>();
}

// The command line both benchmarks take.
struct Options {
  std::vector<int> batch_sizes = {64, 256};
  int gpu = -1;
  int repeats = 3;  // epochs timed per batch size
  mnist::ModelOptions model;
};

inline void add_options(CLI::App& app, Options& o) {
  app.add_option("--batch-sizes", o.batch_sizes, "Batch sizes to time")->delimiter(',');
  app.add_option("--gpu", o.gpu, "Time on this GPU (default: the CPU)");
  app.add_option("--epochs", o.repeats, "Epochs timed per batch size; the median is reported")
      ->capture_default_str();
  app.add_option("--data-dir", o.model.data_dir, "Directory holding the MNIST IDX files");
}

struct EpochTiming {
  mnist::Model model;
  std::unique_ptr<Solver> solver;  // trained for the timed epochs, for further measurements
  double epoch_seconds;            // the median of the timed epochs
};

// Trains `name` (models/mnist/NAME_*) at batch size `batch` with no test net: 10 warm-up
// iterations (first touches, library start-up, algorithm choice), then `repeats` epochs of
// full batches, each timed with the device synchronized before the clock is read.
inline EpochTiming time_epochs(const std::string& name, int batch, int repeats,
                               mnist::ModelOptions options, Backend& backend) {
  options.batch_size = batch;
  EpochTiming t{mnist::load_model(name, options), nullptr, 0};
  t.model.solver.clear_test_iter();  // training only
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
