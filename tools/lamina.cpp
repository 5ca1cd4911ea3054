// The lamina command-line tool: train a net from a solver prototxt, time a net layer by layer,
// list GPUs. User mistakes print one message and exit 1.
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <memory>

#include "lamina/cuda.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/solver.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::unique_ptr<lamina::Backend> make_backend(int gpu) {
  if (gpu < 0) return std::make_unique<lamina::NativeBackend>();
  return lamina::make_cuda_backend(gpu);
}

int train(const std::string& solver_path, int gpu) {
  lamina::SolverParameter param = lamina::read_solver_parameter(solver_path);
  auto backend = lamina::make_solver_backend(param, gpu);  // --gpu wins over solver_mode
  std::cout << "Training on " << backend->name() << std::endl;
  auto solver = lamina::Solver::create(param, solver_path, *backend);
  solver->solve();
  if (solver->test_net() && !solver->test_history().empty()) {
    for (const auto& output : solver->test_history().back().second.outputs)
      std::cout << "final " << output.first << " = " << output.second << "\n";
  }
  return 0;
}

// Per-layer forward and backward time (synchronizing around each layer) and the
// whole-iteration time (no synchronization inside the iteration).
int time_net(const std::string& model_path, int iterations, int gpu) {
  LAMINA_REQUIRE(iterations > 0, "--iterations must be > 0");
  auto backend = make_backend(gpu);
  lamina::Net net(lamina::read_net_parameter(model_path), lamina::TRAIN, *backend, 1, nullptr,
                  model_path);
  net.forward();  // warm-up: first touches, library initialisation
  net.backward();
  backend->synchronize();

  const int n = net.num_layers();
  std::vector<double> forward_ms(n, 0), backward_ms(n, 0);
  for (int it = 0; it < iterations; ++it) {
    for (int i = 0; i < n; ++i) {
      auto start = Clock::now();
      net.forward_layer(i);
      backend->synchronize();
      forward_ms[i] += ms_since(start);
    }
    for (int i = n - 1; i >= 0; --i) {
      auto start = Clock::now();
      net.backward_layer(i);
      backend->synchronize();
      backward_ms[i] += ms_since(start);
    }
  }
  auto start = Clock::now();
  for (int it = 0; it < iterations; ++it) {
    net.forward();
    net.backward();
  }
  backend->synchronize();
  const double iteration_ms = ms_since(start) / iterations;

  std::cout << "Timing " << net.name() << " on " << backend->name() << ", " << iterations
            << " iterations (ms per iteration)\n";
  std::cout << std::left << std::setw(28) << "layer" << std::setw(18) << "type" << std::right
            << std::setw(12) << "forward" << std::setw(12) << "backward" << "\n";
  double total_forward = 0, total_backward = 0;
  for (int i = 0; i < n; ++i) {
    lamina::Layer& layer = net.layer(i);
    std::cout << std::left << std::setw(28) << layer.name() << std::setw(18) << layer.type()
              << std::right << std::fixed << std::setprecision(4) << std::setw(12)
              << forward_ms[i] / iterations << std::setw(12) << backward_ms[i] / iterations
              << "\n";
    total_forward += forward_ms[i] / iterations;
    total_backward += backward_ms[i] / iterations;
  }
  std::cout << "sum of layers: forward " << total_forward << " ms, backward " << total_backward
            << " ms\n";
  std::cout << "whole iteration (forward + backward): " << iteration_ms << " ms\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  CLI::App app{"Lamina: train and time neural networks defined in prototxt files"};
  app.require_subcommand(1);
  std::string solver_path, model_path;
  int gpu = -1, iterations = 50;

  auto* train_cmd = app.add_subcommand("train", "Train a net from a solver prototxt");
  train_cmd->add_option("--solver", solver_path, "Solver prototxt")->required();
  train_cmd->add_option("--gpu", gpu, "GPU device to train on (default: the CPU)");

  auto* time_cmd = app.add_subcommand("time", "Time a net's layers forward and backward");
  time_cmd->add_option("--model", model_path, "Net prototxt (its TRAIN phase)")->required();
  time_cmd->add_option("--iterations", iterations, "Iterations to average over");
  time_cmd->add_option("--gpu", gpu, "GPU device (default: the CPU)");

  auto* query_cmd = app.add_subcommand("device_query", "List the GPUs Lamina can use");
  bool count_only = false;
  int name_of = -1;
  query_cmd->add_flag("--count", count_only, "Print only the number of devices");
  query_cmd->add_option("--name", name_of, "Print only this device's name");

  CLI11_PARSE(app, argc, argv);
  try {
    if (*train_cmd) return train(solver_path, gpu);
    if (*time_cmd) return time_net(model_path, iterations, gpu);
    if (*query_cmd) {
      if (count_only) {
        std::cout << lamina::cuda_device_count() << "\n";
      } else if (name_of >= 0) {
        std::cout << lamina::make_cuda_backend(name_of)->name() << "\n";
      } else {
        std::cout << lamina::cuda_device_query();
      }
      return 0;
    }
  } catch (const lamina::Error& e) {
    std::cerr << "lamina: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
