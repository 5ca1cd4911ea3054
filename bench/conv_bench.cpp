// Training throughput of a compute-bound convolutional net in each precision
// (docs/precision.md): bench/resnet_blocks.prototxt (ResNet basic blocks at CIFAR-10's size)
// or --model, on random data held on the device, SGD with momentum 0.9, each step replayed as
// a CUDA graph unless --no-cuda-graph. For each precision: 10 warm-up iterations (algorithm
// choice, capture), then --repeats runs of --iterations iterations, each timed with the device
// synchronized before the clock is read; the median is printed in images/s, with the rate the
// convolutions' FLOPs reach over the whole step (a convolution's forward pass is 2 n k (c /
// groups) kh kw oh ow FLOPs, two per multiply-add; training does it three times, twice for
// one whose input needs no gradient). bench/pytorch_conv.py trains the same net in PyTorch.
//   conv_bench [--gpu 0] [--batch 256] [--iterations 50] [--repeats 5]
//              [--precisions fp32,tf32,bf16] [--model FILE] [--no-cuda-graph]
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <random>
#include <sstream>
#include <vector>

#include "bench_util.hpp"
#include "lamina/io.hpp"

namespace {

using lamina::bench::Clock;
using lamina::bench::seconds_since;

// The convolutions' multiply-add FLOPs in one training iteration of net.
double conv_flops(lamina::Net& net) {
  double flops = 0;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (std::string(net.layer(i).type()) != "Convolution") continue;
    const lamina::Tensor& weight = *net.layer(i).params()[0].tensor;
    const double forward =
        2.0 * double(net.layer_tops(i)[0]->count()) * double(weight.count() / weight.shape()[0]);
    const bool input_gradient = net.layer_bottoms(i)[0]->name() != "data";
    flops += forward * (input_gradient ? 3 : 2);
  }
  return flops;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;

  std::string gpu = "0", precisions = "fp32,tf32,bf16";
  std::string model = std::string(LAMINA_SOURCE_DIR) + "/bench/resnet_blocks.prototxt";
  int batch = 256, iterations = 50, repeats = 5;
  bool no_cuda_graph = false;
  CLI::App app{"Training throughput of a compute-bound convolutional net in each precision"};
  app.add_option("--gpu", gpu, "GPU to train on; -1 trains on the CPU")->capture_default_str();
  app.add_option("--batch", batch, "Images per iteration")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--iterations", iterations, "Iterations per timed run")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", repeats, "Timed runs; the median is reported")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--precisions", precisions, "Precisions to train in, comma-separated")
      ->capture_default_str();
  app.add_option("--model", model, "Net prototxt with an Input layer of tops data and label")
      ->capture_default_str();
  app.add_flag("--no-cuda-graph", no_cuda_graph, "Launch every operation directly");
  CLI11_PARSE(app, argc, argv);

  try {
    std::unique_ptr<lamina::Backend> backend =
        lamina::make_backend(lamina::backend_spec_from_gpu(gpu));
    lamina::NetParameter net = lamina::read_net_parameter(model);
    for (lamina::LayerParameter& layer : *net.mutable_layer()) {
      if (layer.type() != "Input") continue;
      for (lamina::BlobShape& shape : *layer.mutable_input_param()->mutable_shape())
        shape.set_dim(0, batch);
    }
    std::printf("%s, batch %d, on %s\n", net.name().c_str(), batch, backend->name().c_str());
    std::printf("%9s %12s %12s %10s %10s %14s\n", "precision", "images/s", "ms/iter",
                "ops/step", "conv_GF", "conv_TFLOP/s");
    std::istringstream list(precisions);
    for (std::string name; std::getline(list, name, ',');) {
      lamina::SolverParameter sp;
      sp.set_base_lr(0.01f);
      sp.set_momentum(0.9f);
      sp.set_max_iter(INT_MAX);
      sp.set_random_seed(1);
      sp.set_cuda_graph(!no_cuda_graph);
      sp.set_precision(lamina::parse_precision(name, "--precisions"));
      lamina::Solver solver(sp, net, *backend, model);
      // Random images in [-1, 1] and labels of 10 classes, uploaded once.
      std::mt19937 rng(1);
      std::uniform_real_distribution<float> pixel(-1, 1);
      lamina::Tensor& data = solver.net().blob("data");
      std::vector<float> values(data.count());
      for (float& v : values) v = pixel(rng);
      data.copy_data_from_host(values);
      lamina::Tensor& label = solver.net().blob("label");
      std::vector<float> labels(label.count());
      for (float& l : labels) l = float(rng() % 10);
      label.copy_data_from_host(labels);

      solver.step(10);
      backend->synchronize();
      std::vector<double> seconds;
      for (int r = 0; r < repeats; ++r) {
        const auto start = Clock::now();
        solver.step(iterations);
        backend->synchronize();
        seconds.push_back(seconds_since(start));
      }
      std::sort(seconds.begin(), seconds.end());
      const double per_iter = seconds[seconds.size() / 2] / iterations;
      const double flops = conv_flops(solver.net());
      std::printf("%9s %12.0f %12.3f %10lld %10.1f %14.1f\n",
                  lamina::Precision_Name(sp.precision()).c_str(), batch / per_iter,
                  1e3 * per_iter, static_cast<long long>(solver.step_operations()), flops / 1e9,
                  flops / per_iter / 1e12);
      std::fflush(stdout);
    }
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "conv_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
