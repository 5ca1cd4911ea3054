// Trains the MNIST models in models/mnist/ and reports, per epoch, the mean training loss,
// the accuracy on the 10,000 test images and the training throughput.
//
//   mnist mlp --batch-size 20 --momentum 0.03
//   mnist linear --epochs 5 --gpu 0
//
// The flags override the values in the model's solver and net prototxt files.
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <chrono>
#include <cstdio>
#include <iostream>

#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "mnist_model.hpp"

namespace {

struct Options {
  std::string model;
  lamina::mnist::ModelOptions model_options;
  int gpu = -1;
};

int run(const Options& o) {
  if (o.model == "conv") {
    lamina::fail("the 'conv' model (LeNet) needs the Convolution and Pooling layers, which "
                 "Lamina does not have yet; train 'mlp' or 'linear' meanwhile");
  }
  const lamina::mnist::Model m = lamina::mnist::load_model(o.model, o.model_options);
  const int epochs = o.model_options.epochs;
  const int batch = m.batch_size;
  const int iters_per_epoch = m.iters_per_epoch;

  std::unique_ptr<lamina::Backend> backend;
  if (o.gpu >= 0) {
    backend = lamina::make_cuda_backend(o.gpu);
  } else {
    backend = std::make_unique<lamina::NativeBackend>();
  }
  lamina::Solver trainer(m.solver, m.net, *backend, m.net_path);
  std::printf("mnist %s on %s: batch %d, lr %g, momentum %g, %d epochs of %d iterations\n",
              o.model.c_str(), backend->name().c_str(), batch, m.solver.base_lr(),
              m.solver.momentum(), epochs, iters_per_epoch);

  float accuracy = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    trainer.step(iters_per_epoch);
    const float loss = trainer.take_mean_loss();  // waits for the epoch's last iteration
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    accuracy = trainer.test().value("accuracy");
    std::printf("epoch %2d: train loss %.4f  test accuracy %.2f%%  %.0f samples/s (%.2f s)\n",
                epoch, loss, 100 * accuracy, iters_per_epoch * double(batch) / seconds, seconds);
    std::fflush(stdout);
  }
  std::printf("final test accuracy: %.2f%% after %d epochs\n", 100 * accuracy, epochs);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // this program prints its own progress

  Options o;
  o.model_options.epochs = 15;
  CLI::App app{"Train Lamina's MNIST models"};
  app.add_option("model", o.model, "Which model: mlp, linear or conv")
      ->required()
      ->check(CLI::IsMember({"mlp", "linear", "conv"}));
  app.add_option("--batch-size", o.model_options.batch_size, "Training batch size (default: the prototxt's)");
  app.add_option("--momentum", o.model_options.momentum, "SGD momentum (default: the solver's)");
  app.add_option("--learning-rate", o.model_options.learning_rate, "Base learning rate (default: the solver's)");
  app.add_option("--epochs", o.model_options.epochs, "Epochs to train")->capture_default_str();
  app.add_option("--seed", o.model_options.seed, "Random seed (default: the solver's)");
  app.add_option("--gpu", o.gpu, "GPU device to train on (default: the CPU)");
  app.add_option("--data-dir", o.model_options.data_dir, "Directory holding the MNIST IDX files")
      ->capture_default_str();
  app.add_option("--models-dir", o.model_options.models_dir, "Directory holding the model prototxt files")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "mnist: error: %s\n", e.what());
    return 1;
  }
}
