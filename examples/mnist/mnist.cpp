// Trains the MNIST models in models/mnist/ and reports, per epoch, the mean training loss,
// the accuracy on the 10,000 test images and the training throughput.
//
//   mnist mlp --batch-size 20 --momentum 0.03
//   mnist linear --epochs 5 --gpu 0
//   mnist conv                     # LeNet, Caffe's solver, 11 epochs (10,307 iterations)
//   mnist conv --dataset fashion   # the same net on Fashion-MNIST
//   mnist mlp --metrics mlp.csv    # and then: lamina plot mlp.csv --output mlp.png
//
// The flags override the values in the model's solver and net prototxt files; a value a
// flag cannot take is an error, never replaced by the file's. An epoch is 60000 / batch full
// batches (937 at batch 64). On a terminal a status line shows the epoch's progress
// (--progress, training_progress.hpp); --metrics records each epoch's training loss and test
// (metrics_log.hpp).
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>

#include "lamina/backend_factory.hpp"
#include "lamina/metrics_log.hpp"
#include "lamina/precision.hpp"
#include "lamina/solver.hpp"
#include "lamina/training_progress.hpp"
#include "mnist_model.hpp"

namespace {

struct Options {
  std::string model;
  std::string dataset = "mnist";
  lamina::mnist::ModelOptions model_options;
  std::string gpu;  // empty: as the solver file says
  bool no_cuda_graph = false;
  std::string precision;  // empty: as the solver file says
  std::string progress = "auto";
  std::string metrics;  // a metrics file to write, or empty
};

// The model's prototxt files are models/<dir>/<file>_{solver,train}.prototxt.
std::string model_file(const std::string& model) { return model == "conv" ? "lenet" : model; }

// Default epochs: LeNet's 11 epochs of 937 iterations are Caffe's 10,000 iterations rounded up
// to a whole epoch; the MLP and the linear model train for 15.
int default_epochs(const std::string& model) { return model == "conv" ? 11 : 15; }

int run(Options o) {
  const std::string root = lamina::mnist::source_root();
  lamina::mnist::ModelOptions& mo = o.model_options;
  if (o.dataset == "fashion") {
    // LeNet has its own Fashion-MNIST files (for `lamina train`); the other models reuse
    // models/mnist/ with the Fashion-MNIST data: the nets are the same, the images differ.
    if (mo.models_dir.empty())
      mo.models_dir = root + (o.model == "conv" ? "/models/fashion_mnist" : "/models/mnist");
    if (mo.data_dir.empty()) mo.data_dir = root + "/data/fashion-mnist";
    std::error_code ec;
    LAMINA_REQUIRE(std::filesystem::exists(mo.data_dir, ec), "no Fashion-MNIST in ", mo.data_dir,
                   ": install it (apt-get install dataset-fashion-mnist) and run "
                   "scripts/fetch_mnist.sh to link it there, or pass --data-dir");
  }
  if (mo.models_dir.empty()) mo.models_dir = root + "/models/mnist";
  if (mo.data_dir.empty()) mo.data_dir = root + "/data/mnist";

  lamina::mnist::Model m = lamina::mnist::load_model(model_file(o.model), mo);
  const int epochs = mo.epochs;
  const int batch = m.batch_size;
  const int iters_per_epoch = m.iters_per_epoch;

  std::unique_ptr<lamina::Backend> backend;
  try {
    backend = lamina::make_solver_backend(
        m.solver, o.gpu.empty() ? "" : lamina::backend_spec_from_gpu(o.gpu));
  } catch (const lamina::Error& e) {
    if (!o.gpu.empty()) throw;  // the GPU came from the solver file, which --gpu overrides
    throw lamina::Error(std::string(e.what()) + " (mnist: --gpu -1 trains on the CPU)");
  }
  if (o.no_cuda_graph) m.solver.set_cuda_graph(false);
  if (!o.precision.empty())
    m.solver.set_precision(lamina::parse_precision(o.precision, "--precision"));
  // Observers of the trainer, destroyed after it.
  std::unique_ptr<lamina::ProgressDisplay> display;
  std::unique_ptr<lamina::MetricsLog> metrics;
  lamina::Solver trainer(m.solver, m.net, *backend, m.net_path);
  const lamina::ProgressMode mode = lamina::parse_progress_mode(o.progress, "--progress");
  if (!o.metrics.empty()) {
    metrics = std::make_unique<lamina::MetricsLog>(
        o.metrics, trainer, lamina::MetricsOptions{double(iters_per_epoch), double(batch), {}});
    trainer.add_observer(*metrics);
  }
  if (mode != lamina::ProgressMode::kNone) {
    lamina::ProgressOptions options;
    options.mode = mode;
    options.iterations_per_epoch = iters_per_epoch;
    options.samples_per_iteration = batch;
    options.route_glog = true;
    display = std::make_unique<lamina::ProgressDisplay>(trainer, options);
    trainer.add_observer(*display);
  }
  // A line of this program's: above the status line when there is one.
  auto say = [&](const std::string& line) {
    if (display) {
      display->print(line, stdout);
    } else {
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
  };
  std::printf("%s %s on %s in %s: batch %d, lr %g (%s), momentum %g, weight decay %g, "
              "seed %lld, %d epochs of %d iterations\n",
              o.dataset.c_str(), o.model.c_str(), backend->name().c_str(),
              lamina::Precision_Name(m.solver.precision()).c_str(), batch,
              m.solver.base_lr(), m.solver.lr_policy().c_str(), m.solver.momentum(),
              m.solver.weight_decay(), static_cast<long long>(trainer.seed()), epochs,
              iters_per_epoch);

  float accuracy = 0;
  for (int epoch = 1; epoch <= epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    trainer.step(iters_per_epoch);
    const float loss = trainer.take_mean_loss();  // waits for the epoch's last iteration
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (display) display->set_loss(loss);
    if (metrics) metrics->record_train(trainer, loss, trainer.learning_rate());
    accuracy = trainer.test().value("accuracy");
    char line[256];
    const int n = std::snprintf(line, sizeof line,
                          "epoch %2d: train loss %.4f  test accuracy %.2f%%  %.0f samples/s "
                          "(%.2f s)", epoch, loss, 100 * accuracy,
                          iters_per_epoch * double(batch) / seconds, seconds);
    if (trainer.scales_loss()) {  // FP16
      const lamina::Solver::LossScaleState scale = trainer.loss_scale_state();
      std::snprintf(line + n, sizeof line - size_t(n), "  loss scale %g (%lld iterations skipped)",
                    scale.scale, static_cast<long long>(scale.skipped));
    }
    say(line);
  }
  if (display) display->finish();
  std::printf("final test accuracy: %.2f%% after %d epochs (%d iterations)\n", 100 * accuracy,
              epochs, trainer.iter());
  return 0;
}

// A CLI11 check that the value is a T for which ok() holds; `accepted` says which values
// are ("> 0"). NaN fails every comparison, so `ok` written as comparisons refuses it.
template <class T, class Ok>
CLI::Validator accepts(const std::string& accepted, Ok ok) {
  return CLI::Validator(
      [accepted, ok](std::string& text) -> std::string {
        T value{};
        if (!CLI::detail::lexical_cast(text, value) || !ok(value))
          return "must be " + accepted + ", got '" + text + "'";
        return {};
      },
      accepted);
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // this program prints its own progress

  Options o;
  o.model_options.models_dir.clear();  // set by --dataset
  o.model_options.data_dir.clear();
  int batch_size = 0, epochs = 0;
  float momentum = 0, learning_rate = 0;
  int64_t seed = 0;
  CLI::App app{"Train Lamina's MNIST models", "mnist"};
  app.add_option("model", o.model,
                 "Which model: mlp (784-512-512-10), linear, or conv (Caffe's LeNet: conv 20 5x5, "
                 "max pool, conv 50 5x5, max pool, 500, ReLU, 10)")
      ->required()
      ->check(CLI::IsMember({"mlp", "linear", "conv"}));
  app.add_option("--dataset", o.dataset, "mnist, or fashion (Fashion-MNIST, data/fashion-mnist)")
      ->check(CLI::IsMember({"mnist", "fashion"}))
      ->capture_default_str();
  auto* batch_option = app.add_option("--batch-size", batch_size,
                                      "Training batch size (default: the prototxt's)")
      ->check(accepts<int>("an integer > 0", [](int v) { return v > 0; }));
  auto* momentum_option =
      app.add_option("--momentum", momentum, "SGD momentum, in [0, 1) (default: the solver's)")
          ->check(accepts<float>("in [0, 1)", [](float v) { return v >= 0 && v < 1; }));
  auto* lr_option = app.add_option("--learning-rate", learning_rate,
                                   "Base learning rate, > 0 (default: the solver's)")
      ->check(accepts<float>("a finite number > 0",
                             [](float v) { return v > 0 && std::isfinite(v); }));
  auto* epochs_option =
      app.add_option("--epochs", epochs,
                     "Epochs of 60000 / batch iterations (937 at batch 64) to train (default: 11 "
                     "for conv, about Caffe's 10,000 LeNet iterations; 15 for mlp and linear)")
          ->check(accepts<int>("an integer from 1 to 100000",
                               [](int v) { return v >= 1 && v <= 100000; }));
  auto* seed_option = app.add_option("--seed", seed, "Random seed, >= 0 (default: the solver's)")
      ->check(accepts<int64_t>("an integer >= 0", [](int64_t v) { return v >= 0; }));
  app.add_option("--gpu", o.gpu,
                 "GPU device to train on; -1 trains on the CPU even if the solver says "
                 "solver_mode: GPU (default: as the solver says, the CPU for the files shipped)")
      ->type_name("INT");
  app.add_flag("--no-cuda-graph", o.no_cuda_graph,
               "Launch every operation directly instead of replaying each step as a CUDA graph");
  app.add_option("--progress", o.progress,
                 "auto (the default: a live status line on a terminal), bar, log or none")
      ->check(CLI::IsMember({"auto", "bar", "log", "none"}));
  app.add_option("--metrics", o.metrics,
                 "Record each epoch's training loss and test accuracy in FILE (.csv or .jsonl) "
                 "for lamina plot")
      ->type_name("FILE");
  app.add_option("--precision", o.precision,
                 "Precision to train in: fp32, tf32, bf16 or fp16 (default: the solver's, FP32; "
                 "docs/precision.md)");
  const auto not_empty =
      accepts<std::string>("a directory", [](const std::string& v) { return !v.empty(); });
  app.add_option("--data-dir", o.model_options.data_dir,
                 "Directory holding the IDX files, plain or .gz (default: data/mnist, or "
                 "data/fashion-mnist with --dataset fashion)")
      ->check(not_empty);
  app.add_option("--models-dir", o.model_options.models_dir,
                 "Directory holding the model prototxt files (default: models/mnist, or "
                 "models/fashion_mnist for conv with --dataset fashion)")
      ->check(not_empty);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "mnist: error: %s (mnist --help lists the options)\n", e.what());
    return 1;
  }
  // Only the flags given override the files.
  lamina::mnist::ModelOptions& mo = o.model_options;
  if (*batch_option) mo.batch_size = batch_size;
  if (*momentum_option) mo.momentum = momentum;
  if (*lr_option) mo.learning_rate = learning_rate;
  if (*seed_option) mo.seed = seed;
  mo.epochs = *epochs_option ? epochs : default_epochs(o.model);
  try {
    return run(o);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "mnist: error: %s\n", e.what());
    return 1;
  }
}
