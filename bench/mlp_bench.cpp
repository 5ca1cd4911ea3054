// MNIST MLP (784-H-H-10, H = 512 unless --hidden) training throughput, set against the GEMM
// work it must do.
//
// For each batch size it times one epoch of training (forward, backward, fused update) and,
// in the same run, the backend's gemm alone on exactly the matrix products an iteration
// performs (OpenBLAS on the CPU, cuBLAS on a GPU). The ratio epoch time / (epoch GEMM FLOPs /
// measured gemm rate) says how much everything that is not a matrix product costs: 1.0 would
// be pure GEMM.
//   mlp_bench [--batch-sizes 64,256] [--epochs 3] [--gpu N] [--hidden 4096] [--no-cuda-graph]
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"
#include "lamina/tensor.hpp"

namespace {

using lamina::bench::Clock;
using lamina::bench::seconds_since;

// One gemm of an iteration: C (m, n) = op(A) op(B), row-major, with its transposes.
struct Gemm {
  lamina::Transpose ta, tb;
  int64_t m, n, k;
  float beta;
};

// The matrix products of one MLP iteration at batch b. Forward: y = x W^T per layer.
// Backward: dx = dy W for the two upper layers (the input needs no gradient), and
// dW += dy^T x for all three.
std::vector<Gemm> mlp_gemms(int64_t b, int64_t hidden) {
  using lamina::Transpose;
  const int64_t in[3] = {784, hidden, hidden}, out[3] = {hidden, hidden, 10};
  std::vector<Gemm> g;
  for (int l = 0; l < 3; ++l) g.push_back({Transpose::kNo, Transpose::kYes, b, out[l], in[l], 0});
  for (int l = 2; l >= 1; --l) g.push_back({Transpose::kNo, Transpose::kNo, b, in[l], out[l], 0});
  for (int l = 0; l < 3; ++l) g.push_back({Transpose::kYes, Transpose::kNo, out[l], in[l], b, 1});
  return g;
}

double flops(const std::vector<Gemm>& gemms) {
  double f = 0;
  for (const Gemm& g : gemms) f += 2.0 * g.m * g.n * g.k;
  return f;
}

// The backend's gemm rate (FLOP/s) over the iteration's products, on its own memory, as the
// Linear layers run them in `storage`: FP32, or 16-bit operands with the outputs that are
// written (beta 0) in 16 bits and the weight gradients (accumulated, beta 1) in FP32. The
// median of five runs of about half a second each, the device synchronized before each clock.
double gemm_rate(lamina::Backend& backend, const std::vector<Gemm>& gemms, lamina::DType storage) {
  using lamina::Buffer;
  const bool half = lamina::is_half(storage);
  const lamina::Half format = lamina::half_format(storage);
  std::vector<Buffer> a, b, c;
  auto filled = [&](int64_t count, float value, bool sixteen) {
    Buffer buffer(backend, sizeof(float) * count);
    backend.fill(count, value, buffer.as<float>());
    if (!sixteen) return buffer;
    Buffer narrow(backend, sizeof(uint16_t) * count);
    backend.to_half(format, count, buffer.as<float>(), narrow.as<uint16_t>());
    return narrow;
  };
  for (const Gemm& g : gemms) {
    a.push_back(filled(g.m * g.k, 0.01f, half));
    b.push_back(filled(g.k * g.n, 0.02f, half));
    c.push_back(filled(g.m * g.n, 0.0f, half && g.beta == 0));
  }
  auto run = [&] {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const Gemm& g = gemms[i];
      if (!half) {
        backend.gemm(g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].as<float>(), b[i].as<float>(),
                     g.beta, c[i].as<float>());
      } else if (g.beta == 0) {
        backend.gemm(format, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].as<uint16_t>(),
                     b[i].as<uint16_t>(), g.beta, c[i].as<uint16_t>());
      } else {
        backend.gemm(format, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].as<uint16_t>(),
                     b[i].as<uint16_t>(), g.beta, c[i].as<float>());
      }
    }
  };
  for (int i = 0; i < 5; ++i) run();
  backend.synchronize();
  std::vector<double> rates;
  for (int trial = 0; trial < 5; ++trial) {
    int reps = 0;
    const auto start = Clock::now();
    while (seconds_since(start) < 0.5) {
      for (int i = 0; i < 10; ++i) run();
      backend.synchronize();
      reps += 10;
    }
    rates.push_back(reps * flops(gemms) / seconds_since(start));
  }
  std::sort(rates.begin(), rates.end());
  return rates[rates.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;

  lamina::bench::Options o;
  int64_t hidden = 512;
  CLI::App app{"MNIST MLP epoch time against the gemm rate at its shapes"};
  lamina::bench::add_options(app, o);
  app.add_option("--hidden", hidden, "Width of the two hidden layers")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    LAMINA_REQUIRE(hidden > 0, "--hidden must be > 0, got ", hidden);
    std::unique_ptr<lamina::Backend> backend = lamina::bench::checked_backend(o);
    const lamina::Precision precision = lamina::parse_precision(o.precision, "--precision");
    std::printf("MNIST MLP 784-%lld-%lld-10 on %s in %s\n", static_cast<long long>(hidden),
                static_cast<long long>(hidden), backend->name().c_str(),
                lamina::Precision_Name(precision).c_str());
    std::printf("%6s %8s %12s %14s %10s %10s %14s %12s %8s\n", "batch", "iters", "epoch_s",
                "samples/s", "us/iter", "ops/step", "gemm_GFLOP", "gemm_GF/s", "ratio");
    // The hidden layers of models/mnist/mlp_train.prototxt: Sequential "mlp", fc1 and fc2.
    auto widen = [hidden](lamina::mnist::Model& m) {
      for (lamina::LayerParameter& container : *m.net.mutable_layer())
        for (lamina::LayerParameter& layer : *container.mutable_layer())
          if (layer.name() == "fc1" || layer.name() == "fc2")
            layer.mutable_inner_product_param()->set_num_output(static_cast<uint32_t>(hidden));
    };
    for (int batch : o.batch_sizes) {
      const lamina::bench::EpochTiming timing =
          lamina::bench::time_epochs("mlp", batch, o, *backend, widen);
      const lamina::mnist::Model& m = timing.model;
      const double epoch = timing.epoch_seconds;

      const std::vector<Gemm> gemms = mlp_gemms(batch, hidden);
      const double epoch_flops = flops(gemms) * m.iters_per_epoch;
      std::printf("%6d %8d %12.4f %14.0f %10.1f %10lld %14.1f", batch, m.iters_per_epoch, epoch,
                  m.iters_per_epoch * double(batch) / epoch, timing.us_per_iteration(),
                  static_cast<long long>(timing.step_operations()), epoch_flops / 1e9);
      const lamina::MathScope math(*backend, lamina::math_of(precision));  // as the net's
      const double rate = gemm_rate(*backend, gemms, lamina::storage_of(precision));
      std::printf(" %12.1f %8.2f\n", rate / 1e9, epoch / (epoch_flops / rate));
      std::fflush(stdout);
    }
    std::printf("ratio = epoch time / (epoch GEMM FLOPs / the backend's gemm rate at the same "
                "shapes); targets: <= 1.5 on the CPU, <= 1.15 on a GPU at 784-4096-4096-10, "
                "batch 1024\n");
    std::printf("ops/step = operations in the step replayed as one CUDA graph (0: launched "
                "directly)\n");
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "mlp_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
