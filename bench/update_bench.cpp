// The fused solver update over a many-parameter arena, set against axpby over the same floats.
//
// The arena holds --params parameters (default 320, about a ResNet's) of varied sizes, from a
// few dozen floats (a batch-norm scale) to a few hundred thousand (a 3x3 convolution), each
// on a kArenaBlock boundary, about --floats floats in all (default 25.6M). Each operation is
// timed --repeats times (the three interleaved) with the backend synchronized before the
// clock is read; the median is printed with the bandwidth it reaches, counting the bytes it
// must move:
//   axpby    y = a x + b y             reads x, y; writes y          12 bytes per float
//   SGD      momentum update           reads w, g, h; writes w, h    20 bytes per float
//   Adam     first and second moments  reads w, g, h, h2; writes w, h, h2   28 bytes per float
//   sum of squares  dot(g, g), for clipping and loss scaling       reads g: 4 bytes per float
// ratio = update ms / axpby ms. A memory-bound update costs its bytes: SGD 20/12 = 1.67 and
// Adam 28/12 = 2.33 times an axpby at equal bandwidth, so equal GB/s columns mean the update
// costs nothing beyond its traffic (however many parameters), and a lower GB/s is work that
// is not traffic. The same two updates over the arena as one parameter (one segment of all n
// floats) show what the --params parameters cost beyond that: "vs 1 param" is their ratio.
//   update_bench [--gpu N] [--repeats 20] [--floats 25600000] [--params 320]
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <vector>

#include "bench_util.hpp"
#include "lamina/tensor.hpp"

namespace {

using lamina::Backend;
using lamina::kArenaBlock;
using lamina::ParamSegment;
using lamina::bench::Clock;
using lamina::bench::seconds_since;

int64_t padded(int64_t count) { return (count + kArenaBlock - 1) / kArenaBlock * kArenaBlock; }

// params parameters of log-uniform sizes (64 to 2^20 before scaling, none a multiple of the
// block, so most carry padding), scaled to about floats floats in all, laid out in order.
std::vector<ParamSegment> make_segments(int64_t floats, int params) {
  std::mt19937_64 rng(2024);
  std::uniform_real_distribution<double> log_size(std::log(64.0), std::log(1048576.0));
  std::vector<double> sizes(params);
  for (double& s : sizes) s = std::exp(log_size(rng));
  double total = 0;
  for (double s : sizes) total += s;
  std::vector<ParamSegment> segments;
  int64_t offset = 0;
  for (int i = 0; i < params; ++i) {
    const int64_t count = std::max<int64_t>(1, int64_t(sizes[i] / total * double(floats)) - 3);
    segments.push_back({offset, count, i % 2 ? 2.0f : 1.0f, i % 2 ? 0.0f : 1.0f});
    offset += padded(count);
  }
  return segments;
}

// The median time of each of ops, in milliseconds, over repeats rounds that call each once
// (interleaved, so that a disturbance on a shared machine falls on all of them alike), after
// two untimed rounds.
std::vector<double> median_ms(Backend& backend, int repeats,
                              const std::vector<std::function<void()>>& ops) {
  for (int i = 0; i < 2; ++i) {
    for (const auto& op : ops) op();
  }
  backend.synchronize();
  std::vector<std::vector<double>> ms(ops.size());
  for (int r = 0; r < repeats; ++r) {
    for (size_t k = 0; k < ops.size(); ++k) {
      const auto start = Clock::now();
      ops[k]();
      backend.synchronize();
      ms[k].push_back(1e3 * seconds_since(start));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& m : ms) {
    std::sort(m.begin(), m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;

  std::string gpu = "-1";  // --gpu as given; -1: the CPU
  int repeats = 20, params = 320;
  int64_t floats = 25600000;
  CLI::App app{"The fused update over a many-parameter arena against axpby over as many floats"};
  app.add_option("--gpu", gpu, "Time on this GPU; -1 times on the CPU (the default)");
  app.add_option("--repeats", repeats, "Timed calls per operation; the median is reported")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--floats", floats, "Floats of parameters in the arena (about)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--params", params, "Parameters in the arena")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    std::unique_ptr<Backend> backend =
        lamina::make_backend(lamina::backend_spec_from_gpu(gpu));
    Backend& be = *backend;
    const std::vector<ParamSegment> segments = make_segments(floats, params);
    const int64_t n = segments.back().offset + padded(segments.back().count);
    int64_t elements = 0;  // the floats the update moves: padding is left alone
    for (const ParamSegment& s : segments) elements += s.count;

    // The layout's tables in backend memory (the segments', and the same floats as one
    // parameter), and the four arenas.
    struct Tables {
      lamina::Buffer segments, blocks;
    };
    auto upload = [&](const std::vector<ParamSegment>& segs, Tables& t) {
      const std::vector<int32_t> blocks = lamina::block_segments(segs, n);
      t.segments = lamina::Buffer(be, sizeof(ParamSegment) * segs.size());
      t.blocks = lamina::Buffer(be, sizeof(int32_t) * blocks.size());
      be.copy_from_host(t.segments.bytes(), segs.data(), t.segments.get());
      be.copy_from_host(t.blocks.bytes(), blocks.data(), t.blocks.get());
      return lamina::UpdateLayout{n, t.segments.as<ParamSegment>(), int(segs.size()),
                                  t.blocks.as<int32_t>()};
    };
    Tables layout_tables, one_tables;
    const lamina::UpdateLayout layout = upload(segments, layout_tables);
    const lamina::UpdateLayout one = upload({{0, n, 1.0f, 1.0f}}, one_tables);
    lamina::Buffer w(be, sizeof(float) * n), g(be, sizeof(float) * n), h(be, sizeof(float) * n),
        h2(be, sizeof(float) * n);
    be.fill(n, 0.5f, w.as<float>());
    be.fill(n, 0.01f, g.as<float>());
    be.fill(n, 0.0f, h.as<float>());
    be.fill(n, 0.0f, h2.as<float>());

    lamina::UpdateArgs sgd;
    sgd.rule = lamina::UpdateRule::kSGD;
    sgd.momentum = 0.9f;
    sgd.weight_decay = 1e-4f;
    lamina::UpdateArgs adam = sgd;
    adam.rule = lamina::UpdateRule::kAdam;
    adam.momentum2 = 0.999f;
    // The step state each update reads: lr 1e-3, and Adam's bias correction at update 10.
    lamina::StepState host_step;
    host_step.lr = 1e-3f;
    lamina::Buffer sgd_step(be, sizeof(lamina::StepState));
    lamina::Buffer adam_step(be, sizeof(lamina::StepState));
    be.copy_from_host(sizeof(lamina::StepState), &host_step, sgd_step.get());
    host_step.correction = lamina::adam_correction(adam.momentum, adam.momentum2, 10);
    be.copy_from_host(sizeof(lamina::StepState), &host_step, adam_step.get());
    const lamina::StepState* sgd_state = sgd_step.as<lamina::StepState>();
    const lamina::StepState* adam_state = adam_step.as<lamina::StepState>();

    lamina::Buffer sum(be, sizeof(float));  // the sum of squares
    const std::vector<double> ms = median_ms(
        be, repeats,
        {[&] { be.axpby(n, 1e-3f, g.as<float>(), 0.999f, h.as<float>()); },
         [&] {
           be.update(sgd, sgd_state, layout, w.as<float>(), g.as<float>(), h.as<float>(),
                     nullptr);
         },
         [&] {
           be.update(adam, adam_state, layout, w.as<float>(), g.as<float>(), h.as<float>(),
                     h2.as<float>());
         },
         [&] {
           be.update(sgd, sgd_state, one, w.as<float>(), g.as<float>(), h.as<float>(), nullptr);
         },
         [&] {
           be.update(adam, adam_state, one, w.as<float>(), g.as<float>(), h.as<float>(),
                     h2.as<float>());
         },
         [&] { be.dot(n, g.as<float>(), g.as<float>(), sum.as<float>()); }});
    const double axpby_ms = ms[0], sgd_ms = ms[1], adam_ms = ms[2];

    std::printf("fused update on %s: %d parameters, %lld floats (%lld in the arena with "
                "padding), median of %d\n",
                be.name().c_str(), params, static_cast<long long>(elements),
                static_cast<long long>(n), repeats);
    std::printf("%-14s %10s %12s %10s %12s %14s %11s\n", "op", "ms", "bytes/float", "GB/s",
                "ratio/axpby", "traffic ratio", "vs 1 param");
    auto row = [&](const char* op, double ms, int bytes_per_float, int64_t count,
                   double one_ms) {
      const double gbps = double(bytes_per_float) * double(count) / (ms * 1e-3) / 1e9;
      std::printf("%-14s %10.3f %12d %10.1f %12.2f %14.2f", op, ms, bytes_per_float, gbps,
                  ms / axpby_ms, double(bytes_per_float) * count / (12.0 * double(n)));
      if (one_ms > 0) std::printf(" %11.2f", ms / one_ms);
      std::printf("\n");
    };
    row("axpby", axpby_ms, 12, n, 0);
    row("SGD", sgd_ms, 20, elements, ms[3]);
    row("Adam", adam_ms, 28, elements, ms[4]);
    row("SGD, 1 param", ms[3], 20, n, 0);
    row("Adam, 1 param", ms[4], 28, n, 0);
    row("sum of squares", ms[5], 4, n, 0);
    std::printf("ratio/axpby: the update's time over axpby's on the same floats; traffic ratio: "
                "its bytes over axpby's, the ratio a purely memory-bound update would show; vs 1 "
                "param: over the same update of the arena as one parameter\n");
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "update_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
