// Trains the MNIST MLP with the example's TiledLinear layers in place of Linear
// (mlp_tiled_solver.prototxt), on a GPU (its kernels) or the CPU (its CPU twin), and reports
// per epoch the mean training loss, the accuracy on the 10,000 test images and the
// throughput. `mnist mlp` (examples/mnist) trains the same net with Linear, for comparison:
//   tiled_linear_train --gpu 0            # 15 epochs, as models/mnist/mlp_solver.prototxt
//   tiled_linear_train --epochs 2         # on the CPU
//   build/examples/mnist/mnist mlp --gpu 0
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>

#include "../mnist/mnist_model.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/solver.hpp"

namespace {

int run(const std::string& gpu, int epochs, bool no_cuda_graph, lamina::mnist::ModelOptions o) {
  o.models_dir = lamina::mnist::source_root() + "/examples/custom_cuda_layer";
  o.epochs = epochs;
  lamina::mnist::Model m = lamina::mnist::load_model("mlp_tiled", o);
  std::unique_ptr<lamina::Backend> backend = lamina::make_solver_backend(
      m.solver, gpu.empty() ? "cpu" : lamina::backend_spec_from_gpu(gpu));
  if (no_cuda_graph) m.solver.set_cuda_graph(false);
  lamina::Solver trainer(m.solver, m.net, *backend, m.net_path);
  std::printf("MNIST MLP with TiledLinear on %s: batch %d, lr %g, momentum %g, seed %lld, "
              "%d epochs of %d iterations%s\n",
              backend->name().c_str(), m.batch_size, m.solver.base_lr(), m.solver.momentum(),
              static_cast<long long>(trainer.seed()), epochs, m.iters_per_epoch,
              trainer.replays_steps() ? ", steps replayed as a CUDA graph" : "");
  float accuracy = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    trainer.step(m.iters_per_epoch);
    const float loss = trainer.take_mean_loss();  // waits for the epoch's last iteration
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    accuracy = trainer.test().value("accuracy");
    std::printf("epoch %2d: train loss %.4f  test accuracy %.2f%%  %.0f samples/s (%.2f s)\n",
                epoch, loss, 100 * accuracy, m.iters_per_epoch * double(m.batch_size) / seconds,
                seconds);
    std::fflush(stdout);
  }
  std::printf("final test accuracy: %.2f%% after %d epochs (%d iterations)\n", 100 * accuracy,
              epochs, trainer.iter());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // this program prints its own progress
  std::string gpu;
  int epochs = 15;
  bool no_cuda_graph = false;
  lamina::mnist::ModelOptions options;
  CLI::App app{"Train the MNIST MLP with the TiledLinear layer", "tiled_linear_train"};
  app.add_option("--gpu", gpu, "GPU device to train on (default: the CPU)")->type_name("INT");
  app.add_option("--epochs", epochs, "Epochs of 937 iterations (default 15)")
      ->check(CLI::Range(1, 1000));
  app.add_flag("--no-cuda-graph", no_cuda_graph,
               "Launch every kernel directly instead of replaying each step as a CUDA graph");
  app.add_option("--data-dir", options.data_dir, "Directory holding the MNIST IDX files "
                 "(default: data/mnist)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run(gpu, epochs, no_cuda_graph, options);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "tiled_linear_train: error: %s\n", e.what());
    return 1;
  }
}
