// LeNet (Caffe's MNIST net, models/mnist/lenet_*.prototxt) training throughput, and how much
// of it the convolutions take.
//
// For each batch size it times whole epochs of training (forward, backward, fused update;
// 60000 / batch full batches) and reports the median. Then, as `lamina time` does, it runs
// the training net layer by layer with a synchronize after each layer and reports the
// Convolution layers' forward + backward time against all layers' (the convolutions' share
// of an iteration), with the rate the convolutions reach in GFLOP/s. With --lmdb it also
// times the same epochs reading the training set through a Data layer from an LMDB (made
// from the IDX files by convert_mnist when missing) and prints the ratio to MnistData's.
// --layer-table prints lamina time's per-layer table for each batch size.
//   lenet_bench [--batch-sizes 64,256] [--epochs 3] [--gpu N] [--lmdb PATH] [--layer-table]
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/layer_timing.hpp"

namespace {

// Multiply-add FLOPs of LeNet's two convolutions in one training iteration at batch n:
// forward and the filter gradient for both, the input gradient for conv2 only (the data
// needs none). One pass of a convolution is 2 n k c kh kw out_h out_w.
double conv_flops(int n) {
  const double conv1 = 2.0 * n * 20 * 1 * 5 * 5 * 24 * 24;   // (n,1,28,28) -> (n,20,24,24)
  const double conv2 = 2.0 * n * 50 * 20 * 5 * 5 * 8 * 8;    // (n,20,12,12) -> (n,50,8,8)
  return 2 * conv1 + 3 * conv2;
}

// The Convolution layers' forward + backward milliseconds per iteration.
double conv_ms(lamina::Net& net, const lamina::LayerTiming& t) {
  double ms = 0;
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).type() == "Convolution") ms += t.forward_ms[size_t(i)] + t.backward_ms[size_t(i)];
  return ms;
}

// Replaces the TRAIN MnistData layer by a Data layer over the LMDB at `db`, with the same
// tops, transform and batch size.
void read_from_lmdb(lamina::mnist::Model& m, const std::string& db) {
  for (lamina::LayerParameter& layer : *m.net.mutable_layer()) {
    if (layer.type() != "MnistData" || layer.include_size() == 0 ||
        layer.include(0).phase() != lamina::TRAIN)
      continue;
    const int batch = int(layer.mnist_data_param().batch_size());
    layer.clear_mnist_data_param();
    layer.set_type("Data");
    lamina::DataParameter& p = *layer.mutable_data_param();
    p.set_source(db);
    p.set_backend(lamina::DataParameter::LMDB);
    p.set_batch_size(batch);
    return;
  }
  lamina::fail("the LeNet model has no TRAIN MnistData layer to replace");
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;

  lamina::bench::Options o;
  int layer_iterations = 20;
  CLI::App app{"LeNet epoch time, and the convolutions' share of it"};
  lamina::bench::add_options(app, o);
  app.add_option("--layer-iterations", layer_iterations,
                 "Iterations timed layer by layer for the convolutions' share")
      ->capture_default_str();
  bool layer_table = false;
  app.add_flag("--layer-table", layer_table, "Also print lamina time's table of each layer's "
               "times, share and shapes for each batch size");
  std::string lmdb;
  app.add_option("--lmdb", lmdb,
                 "Also time epochs reading the training set from this LMDB (Data layer)");
  CLI11_PARSE(app, argc, argv);

  try {
    LAMINA_REQUIRE(layer_iterations > 0, "--layer-iterations must be > 0, got ",
                   layer_iterations);
    std::unique_ptr<lamina::Backend> backend = lamina::bench::checked_backend(o);
    std::printf("LeNet (conv 20 5x5, pool, conv 50 5x5, pool, 500, ReLU, 10) on %s in %s\n",
                backend->name().c_str(),
                lamina::Precision_Name(lamina::parse_precision(o.precision, "--precision"))
                    .c_str());
    std::printf("%6s %8s %10s %12s %10s %10s %10s %10s %11s %10s\n", "batch", "iters",
                "epoch_s", "samples/s", "us/iter", "ops/step", "conv_ms", "layers_ms",
                "conv_share", "conv_GF/s");
    for (int batch : o.batch_sizes) {
      lamina::bench::EpochTiming timing =
          lamina::bench::time_epochs("lenet", batch, o, *backend);
      const lamina::mnist::Model& m = timing.model;
      lamina::Solver& solver = *timing.solver;
      const double epoch = timing.epoch_seconds;

      const lamina::LayerTiming t = lamina::time_layers(solver.net(), layer_iterations);
      const double conv = conv_ms(solver.net(), t);
      const double layers = t.total_forward_ms() + t.total_backward_ms();
      std::printf("%6d %8d %10.4f %12.0f %10.1f %10lld %10.3f %10.3f %10.1f%% %10.1f\n", batch,
                  m.iters_per_epoch, epoch, m.iters_per_epoch * double(batch) / epoch,
                  timing.us_per_iteration(), static_cast<long long>(timing.step_operations()),
                  conv, layers, 100 * conv / layers, conv_flops(batch) / (1e6 * conv));
      if (layer_table) {
        std::printf("per layer at batch %d (ms per iteration):\n%s", batch,
                    lamina::layer_table(solver.net(), t).c_str());
      }
      std::fflush(stdout);
    }
    if (!lmdb.empty()) {
      if (!std::filesystem::exists(lmdb)) {
        const std::string dir = o.model.data_dir;
        lamina::convert_mnist(dir + "/train-images-idx3-ubyte", dir + "/train-labels-idx1-ubyte",
                              lmdb, lamina::DbKind::kLmdb);
      }
      std::printf("%6s %14s %12s %8s %14s %12s\n", "batch", "MnistData_s", "LMDB_s", "ratio",
                  "MnistData_ops", "LMDB_ops");
      for (int batch : o.batch_sizes) {
        const lamina::bench::EpochTiming resident =
            lamina::bench::time_epochs("lenet", batch, o, *backend);
        const lamina::bench::EpochTiming from_db =
            lamina::bench::time_epochs("lenet", batch, o, *backend, [&](auto& m) {
              read_from_lmdb(m, lmdb);
            });
        std::printf("%6d %14.4f %12.4f %8.3f %14lld %12lld\n", batch, resident.epoch_seconds,
                    from_db.epoch_seconds, from_db.epoch_seconds / resident.epoch_seconds,
                    static_cast<long long>(resident.step_operations()),
                    static_cast<long long>(from_db.step_operations()));
        std::fflush(stdout);
      }
    }
    std::printf("conv_share = Convolution layers' forward + backward / all layers' (timed layer "
                "by layer, synchronized); us/iter = epoch_s / iters (update included); ops/step = "
                "operations in the step replayed as one CUDA graph (0: launched directly)\n");
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "lenet_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
