// MNIST MLP (784-512-512-10) training throughput, set against the GEMM work it must do.
//
// For each batch size it times one epoch of training (forward, backward, fused update) and,
// in the same run, OpenBLAS sgemm on exactly the matrix products an iteration performs. The
// ratio epoch time / (epoch GEMM FLOPs / measured sgemm rate) says how much everything that is
// not a matrix product costs: 1.0 would be pure GEMM.
//   mlp_bench [--batch-sizes 64,256] [--epochs 3] [--gpu N]
#include <CLI/CLI.hpp>
#include <cblas.h>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "bench_util.hpp"

namespace {

using lamina::bench::Clock;
using lamina::bench::seconds_since;

// One sgemm of an iteration: C (m, n) = op(A) op(B), row-major, with its transposes.
struct Gemm {
  CBLAS_TRANSPOSE ta, tb;
  int m, n, k;
  float beta;
};

// The matrix products of one MLP iteration at batch b. Forward: y = x W^T per layer.
// Backward: dx = dy W for the two upper layers (the input needs no gradient), and
// dW += dy^T x for all three.
std::vector<Gemm> mlp_gemms(int b) {
  const int in[3] = {784, 512, 512}, out[3] = {512, 512, 10};
  std::vector<Gemm> g;
  for (int l = 0; l < 3; ++l) g.push_back({CblasNoTrans, CblasTrans, b, out[l], in[l], 0});
  for (int l = 2; l >= 1; --l) g.push_back({CblasNoTrans, CblasNoTrans, b, in[l], out[l], 0});
  for (int l = 0; l < 3; ++l) g.push_back({CblasTrans, CblasNoTrans, out[l], in[l], b, 1});
  return g;
}

double flops(const std::vector<Gemm>& gemms) {
  double f = 0;
  for (const Gemm& g : gemms) f += 2.0 * g.m * g.n * g.k;
  return f;
}

// Measured sgemm rate (FLOP/s) over the iteration's products: the median of five runs of
// about half a second each.
double sgemm_rate(const std::vector<Gemm>& gemms) {
  std::vector<std::vector<float>> a, b, c;
  for (const Gemm& g : gemms) {
    a.emplace_back(size_t(g.m) * g.k, 0.01f);
    b.emplace_back(size_t(g.k) * g.n, 0.02f);
    c.emplace_back(size_t(g.m) * g.n, 0.0f);
  }
  auto run = [&] {
    for (size_t i = 0; i < gemms.size(); ++i) {
      const Gemm& g = gemms[i];
      const int lda = g.ta == CblasNoTrans ? g.k : g.m;
      const int ldb = g.tb == CblasNoTrans ? g.n : g.k;
      cblas_sgemm(CblasRowMajor, g.ta, g.tb, g.m, g.n, g.k, 1.0f, a[i].data(), lda, b[i].data(),
                  ldb, g.beta, c[i].data(), g.n);
    }
  };
  for (int i = 0; i < 5; ++i) run();
  std::vector<double> rates;
  for (int trial = 0; trial < 5; ++trial) {
    int reps = 0;
    const auto start = Clock::now();
    while (seconds_since(start) < 0.5) {
      run();
      ++reps;
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
  CLI::App app{"MNIST MLP epoch time against the sgemm rate at its shapes"};
  lamina::bench::add_options(app, o);
  CLI11_PARSE(app, argc, argv);

  try {
    std::unique_ptr<lamina::Backend> backend = lamina::bench::checked_backend(o);
    std::printf("MNIST MLP 784-512-512-10 on %s\n", backend->name().c_str());
    std::printf("%6s %8s %12s %14s %10s %10s %14s %12s %8s\n", "batch", "iters", "epoch_s",
                "samples/s", "us/iter", "ops/step", "gemm_GFLOP", "sgemm_GF/s", "ratio");
    for (int batch : o.batch_sizes) {
      const lamina::bench::EpochTiming timing =
          lamina::bench::time_epochs("mlp", batch, o, *backend);
      const lamina::mnist::Model& m = timing.model;
      const double epoch = timing.epoch_seconds;

      const std::vector<Gemm> gemms = mlp_gemms(batch);
      const double epoch_flops = flops(gemms) * m.iters_per_epoch;
      std::printf("%6d %8d %12.4f %14.0f %10.1f %10lld %14.1f", batch, m.iters_per_epoch, epoch,
                  m.iters_per_epoch * double(batch) / epoch, timing.us_per_iteration(),
                  static_cast<long long>(timing.step_operations()), epoch_flops / 1e9);
      if (!backend->is_host()) {  // on a GPU the reference is bench/pytorch_mlp.py
        std::printf(" %12s %8s\n", "-", "-");
        continue;
      }
      const double rate = sgemm_rate(gemms);
      std::printf(" %12.1f %8.2f\n", rate / 1e9, epoch / (epoch_flops / rate));
    }
    if (backend->is_host()) {
      std::printf("ratio = epoch time / (epoch GEMM FLOPs / sgemm rate at the same shapes); "
                  "target <= 1.5 on the CPU\n");
    }
    std::printf("ops/step = operations in the step replayed as one CUDA graph (0: launched "
                "directly)\n");
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "mlp_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
