// Times the TiledLinear kernels against Lamina's Linear (cuBLASLt / cuBLAS, FP32) on a GPU,
// at the MNIST MLP's shapes and at larger ones: the forward pass (product and bias) and the
// backward pass (input gradient, weight and bias gradients), each averaged over enough calls
// to take about 0.2 s, with the device synchronised before each clock is read.
//   tiled_linear_bench [--gpu 0] [--shapes 64x784x512,4096x4096x4096]
// A shape is N x C x K: N rows of C inputs to K outputs, 2 N C K floating-point operations
// per product (three products in a forward and backward pass).
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/cuda.hpp"
#include "lamina/gradient_checker.hpp"
#include "lamina/io.hpp"
#include "lamina/registry.hpp"

namespace {

struct Shape {
  int64_t n, c, k;
};

std::vector<Shape> parse_shapes(const std::string& text) {
  std::vector<Shape> shapes;
  std::stringstream list(text);
  std::string item;
  while (std::getline(list, item, ',')) {
    Shape s{};
    char x1 = 0, x2 = 0;
    std::stringstream in(item);
    LAMINA_REQUIRE((in >> s.n >> x1 >> s.c >> x2 >> s.k) && x1 == 'x' && x2 == 'x' &&
                       s.n > 0 && s.c > 0 && s.k > 0,
                   "--shapes: '", item, "' is not NxCxK with positive sizes");
    shapes.push_back(s);
  }
  return shapes;
}

// Seconds per call of fn, the device synchronised before each clock is read.
double seconds_per_call(lamina::Backend& backend, const std::function<void()>& fn) {
  using Clock = std::chrono::steady_clock;
  for (int i = 0; i < 3; ++i) fn();  // warm up (cuBLASLt chooses its algorithm)
  backend.synchronize();
  auto start = Clock::now();
  fn();
  backend.synchronize();
  const double once = std::chrono::duration<double>(Clock::now() - start).count();
  const int calls = int(std::clamp(0.2 / std::max(once, 1e-7), 5.0, 2000.0));
  start = Clock::now();
  for (int i = 0; i < calls; ++i) fn();
  backend.synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count() / calls;
}

struct Timing {
  double forward, backward;  // seconds per call
};

Timing time_layer(lamina::Backend& backend, const std::string& type, const Shape& s) {
  const lamina::LayerParameter param =
      lamina::parse_net_parameter("layer { name: 'fc' type: '" + type +
                                      "' inner_product_param { num_output: " +
                                      std::to_string(s.k) + " } }",
                                  "bench")
          .layer(0);
  lamina::Tensor x(backend, {s.n, s.c}, "x"), y(backend, {1}, "y");
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<float> values(size_t(s.n * s.c));
  for (float& v : values) v = dist(rng);
  x.copy_data_from_host(values);
  auto layer = lamina::LayerRegistry::create(param, {backend, lamina::TRAIN, 1});
  lamina::setup_standalone(*layer, {&x}, {&y}, 1);
  y.copy_diff_from_host(std::vector<float>(size_t(y.count()), 0.01f));
  Timing t{};
  t.forward = seconds_per_call(backend, [&] { layer->forward({&x}, {&y}); });
  t.backward = seconds_per_call(backend, [&] {
    layer->backward_params({&y}, {&x});
    layer->backward_input({&y}, {true}, {&x});
  });
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;
  int gpu = 0;
  std::string shapes_text = "64x784x512,64x512x512,256x1024x1024,1024x4096x4096,4096x4096x4096";
  CLI::App app{"TiledLinear's kernels against Lamina's Linear (cuBLAS)", "tiled_linear_bench"};
  app.add_option("--gpu", gpu, "GPU device")->capture_default_str();
  app.add_option("--shapes", shapes_text, "Comma-separated NxCxK shapes")->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    const std::vector<Shape> shapes = parse_shapes(shapes_text);
    std::unique_ptr<lamina::Backend> backend = lamina::make_cuda_backend(gpu);
    std::printf("TiledLinear (64x64 tiles through shared memory) vs Linear (cuBLAS), FP32, on "
                "%s\n", backend->name().c_str());
    std::printf("%-22s %-9s %22s %22s %8s\n", "N x C x K", "pass", "TiledLinear",
                "Linear (cuBLAS)", "ratio");
    for (const Shape& s : shapes) {
      const Timing tiled = time_layer(*backend, "TiledLinear", s);
      const Timing cublas = time_layer(*backend, "Linear", s);
      const double flops = 2.0 * double(s.n) * double(s.c) * double(s.k);
      const std::string name =
          std::to_string(s.n) + " x " + std::to_string(s.c) + " x " + std::to_string(s.k);
      auto row = [&](const char* pass, double a, double b, double products) {
        std::printf("%-22s %-9s %9.1f us %6.2f TF/s %9.1f us %6.2f TF/s %7.2fx\n", name.c_str(),
                    pass, a * 1e6, products * flops / a * 1e-12, b * 1e6,
                    products * flops / b * 1e-12, a / b);
      };
      row("forward", tiled.forward, cublas.forward, 1);
      row("backward", tiled.backward, cublas.backward, 2);
      std::fflush(stdout);
    }
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "tiled_linear_bench: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
