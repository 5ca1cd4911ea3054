// Tests of the TiledLinear example, the way a user tests a layer with kernels of its own:
//   - its forward against a double-precision product, and its gradients against central
//     differences (Lamina's gradient checker), on the Native backend (the CPU twin) and on a
//     GPU (the kernels);
//   - the kernels against the CPU twin and against Lamina's own Linear, on the same values;
//   - training: a net with TiledLinear in place of Linear follows the same losses and weights;
//     on a GPU the training step, kernels included, is recorded and replayed as a CUDA graph
//     (the same weights bit for bit as launching every kernel directly), and a layer that
//     does not declare itself capturable makes the solver launch directly, saying so;
//   - failures: a bad launch configuration is an Error naming the layer, and so is a kernel's
//     illegal address (in a child process, since it leaves the device unusable); a layer with
//     CUDA kernels only is refused on the CPU.
// GPU tests skip, saying why, without a device or without CUDA.
#include <gmock/gmock.h>
#include <glog/logging.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "lamina/cuda.hpp"
#include "lamina/cuda_kernels.hpp"
#include "lamina/gradient_checker.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "lamina/solver.hpp"
#include "tiled_linear_layer.hpp"

namespace example {

#ifdef LAMINA_WITH_CUDA
void launch_too_many_threads(const lamina::Layer& layer, lamina::cuda::Stream stream, float* y,
                             int n);  // faulty_kernels.cu
void launch_stray_store(const lamina::Layer& layer, lamina::cuda::Stream stream, float* y,
                        int n);
#endif

namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

// ---------------------------------------------------------------- test layers

// A layer whose forward launches a kernel that fails: custom_param fault "launch" (too many
// threads per block) or "address" (a store outside every allocation). CUDA only.
class FaultyKernelLayer : public lamina::Layer {
 public:
  using Layer::Layer;
  void setup(const lamina::Tensors& bottom, const lamina::Tensors& top) override {
    require_custom_keys({"fault"});
    fault_ = custom_string("fault", "launch");
    lamina::cuda::require_cuda(*this);
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const lamina::Tensors&, const lamina::Tensors& top) override {
#ifdef LAMINA_WITH_CUDA
    const lamina::cuda::Stream stream = lamina::cuda::stream(backend_);
    const int n = int(top[0]->count());
    if (fault_ == "launch") return launch_too_many_threads(*this, stream, top[0]->mutable_data(), n);
    launch_stray_store(*this, stream, reinterpret_cast<float*>(uintptr_t{16}), n);
#else
    (void)top;
#endif
  }
  void backward_input(const lamina::Tensors&, const std::vector<bool>&,
                      const lamina::Tensors&) override {}
  std::optional<std::string> capture_blocker() const override { return std::string(); }

 private:
  std::string fault_;
};
LAMINA_REGISTER_LAYER(FaultyKernelLayer, "FaultyKernel");

// TiledLinear as a layer that does not say whether it can be captured (Layer's default for
// layers defined outside Lamina).
class EagerTiledLinearLayer : public TiledLinearLayer {
 public:
  using TiledLinearLayer::TiledLinearLayer;
  std::optional<std::string> capture_blocker() const override { return std::nullopt; }
};
LAMINA_REGISTER_LAYER(EagerTiledLinearLayer, "EagerTiledLinear");

// ---------------------------------------------------------------- helpers

enum class Device { kNative, kCuda };

std::string device_name(const ::testing::TestParamInfo<Device>& info) {
  return info.param == Device::kNative ? "Native" : "Cuda";
}

bool have_gpu() { return lamina::cuda_compiled() && lamina::cuda_device_count() > 0; }
const char* no_gpu_reason() {
  return lamina::cuda_compiled() ? "no CUDA device present" : "Lamina was built without CUDA";
}

std::unique_ptr<lamina::Backend> open_backend(Device d) {
  if (d == Device::kNative) return std::make_unique<lamina::NativeBackend>();
  return lamina::make_cuda_backend(0);
}

std::vector<float> random_values(size_t n, uint64_t seed, float lo = -1, float hi = 1) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

lamina::LayerParameter layer_param(const std::string& text) {
  return lamina::parse_net_parameter("layer { " + text + " }", "test").layer(0);
}

lamina::LayerParameter tiled(int64_t outputs, bool bias = true, const std::string& type = "TiledLinear") {
  return layer_param("name: 'fc' type: '" + type + "' inner_product_param { num_output: " +
                     std::to_string(outputs) + (bias ? "" : " bias_term: false") +
                     " weight_filler { type: 'gaussian' std: 0.5 } bias_filler { type: "
                     "'gaussian' std: 0.5 } }");
}

// |a - b| within tol of the magnitude of what was summed (scale[i]) for every element.
void expect_close(const std::vector<float>& a, const std::vector<float>& b,
                  const std::vector<double>& scale, double tol, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  int shown = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::abs(double(a[i]) - double(b[i])) <= tol * (scale[i] + 1e-6)) continue;
    ADD_FAILURE() << what << "[" << i << "]: " << a[i] << " vs " << b[i] << " (scale "
                  << scale[i] << ")";
    if (++shown == 5) return;
  }
}

// The layer's values on one backend: x (N, C), the top y (N, K), the gradients of x, w and b
// after one backward pass from dy, with w's and b's gradients starting at `initial` (+=).
struct Pass {
  std::vector<float> y, dx, dw, db;
};

Pass run_pass(lamina::Backend& backend, const lamina::LayerParameter& param, int64_t n,
              int64_t c, const std::vector<float>& w, const std::vector<float>& b) {
  lamina::Tensor x(backend, {n, c}, "x"), y(backend, {1}, "y");
  x.copy_data_from_host(random_values(size_t(n * c), 11));
  auto layer = lamina::LayerRegistry::create(param, {backend, lamina::TRAIN, 1});
  lamina::setup_standalone(*layer, {&x}, {&y}, 1);
  layer->params()[0].tensor->copy_data_from_host(w);
  layer->params()[1].tensor->copy_data_from_host(b);
  for (lamina::Param& p : layer->params())
    p.tensor->copy_diff_from_host(std::vector<float>(size_t(p.tensor->count()), 0.25f));
  layer->forward({&x}, {&y});
  y.copy_diff_from_host(random_values(size_t(y.count()), 12));
  layer->backward_params({&y}, {&x});
  layer->backward_input({&y}, {true}, {&x});
  return {y.copy_data_to_host(), x.copy_diff_to_host(),
          layer->params()[0].tensor->copy_diff_to_host(),
          layer->params()[1].tensor->copy_diff_to_host()};
}

// ---------------------------------------------------------------- on each backend

class TiledLinearOn : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam() == Device::kCuda && !have_gpu()) GTEST_SKIP() << no_gpu_reason();
    backend_ = open_backend(GetParam());
  }
  std::unique_ptr<lamina::Backend> backend_;
};

// y = x w^T + b against the same sums in double, on shapes that end inside a tile (70 rows
// and 66 outputs: tiles of 64; 37 inputs: steps of 16).
TEST_P(TiledLinearOn, ForwardIsTheProductPlusBias) {
  const int64_t n = 70, c = 37, k = 66;
  lamina::Tensor x(*backend_, {n, c}, "x"), y(*backend_, {1}, "y");
  const std::vector<float> xv = random_values(size_t(n * c), 1);
  x.copy_data_from_host(xv);
  auto layer = lamina::LayerRegistry::create(tiled(k), {*backend_, lamina::TRAIN, 1});
  lamina::setup_standalone(*layer, {&x}, {&y}, 3);
  ASSERT_EQ(y.shape(), (lamina::Shape{n, k}));
  const std::vector<float> w = layer->params()[0].tensor->copy_data_to_host();
  const std::vector<float> b = layer->params()[1].tensor->copy_data_to_host();
  layer->forward({&x}, {&y});
  std::vector<float> expected(size_t(n * k));
  std::vector<double> scale(expected.size());
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < k; ++j) {
      double sum = b[j], magnitude = std::abs(b[j]);
      for (int64_t q = 0; q < c; ++q) {
        sum += double(xv[i * c + q]) * w[j * c + q];
        magnitude += std::abs(double(xv[i * c + q]) * w[j * c + q]);
      }
      expected[i * k + j] = float(sum);
      scale[i * k + j] = magnitude;
    }
  }
  expect_close(y.copy_data_to_host(), expected, scale, 4e-6, "y");  // 37 roundings at most
}

// Central differences on every input and parameter element: rows across two tiles and two
// bias chunks (70), outputs across two tiles (66); without a bias on a 3-D bottom.
TEST_P(TiledLinearOn, GradientsMatchFiniteDifferences) {
  struct Case {
    lamina::Shape bottom;
    int64_t outputs;
    bool bias;
  };
  for (const Case& t : {Case{{70, 3}, 5, true}, Case{{4, 20}, 66, true},
                        Case{{2, 3, 4}, 3, false}}) {
    SCOPED_TRACE(lamina::shape_string(t.bottom));
    lamina::Tensor x(*backend_, t.bottom, "x"), y(*backend_, {1}, "y");
    x.copy_data_from_host(random_values(size_t(lamina::shape_count(t.bottom)), 5));
    auto layer = lamina::LayerRegistry::create(tiled(t.outputs, t.bias),
                                               {*backend_, lamina::TRAIN, 1});
    lamina::setup_standalone(*layer, {&x}, {&y}, 7);
    lamina::GradientCheckOptions options;
    options.threshold = 1e-3f;
    const lamina::GradientCheckResult r = lamina::check_gradients(*layer, {&x}, {&y}, options);
    EXPECT_TRUE(r.ok) << r.summary();
    const int64_t c = lamina::shape_count(t.bottom) / t.bottom[0];
    EXPECT_EQ(r.checked, lamina::shape_count(t.bottom) + t.outputs * c + (t.bias ? t.outputs : 0));
  }
}

// A small classifier trained with TiledLinear follows the one trained with Lamina's Linear:
// the same starting weights (the layers declare the same parameters and fillers), the same
// mean loss and weights after 40 SGD iterations, up to rounding. On a GPU the steps are
// replayed from a CUDA graph.
TEST_P(TiledLinearOn, TrainsLikeLinear) {
  auto train = [&](const std::string& type) {
    const std::string layers =
        "layer { name: 'data' type: 'Input' top: 'data' top: 'label' input_param { "
        "shape { dim: 96 dim: 30 } shape { dim: 96 } } }"
        "layer { name: 'fc1' type: '" + type + "' bottom: 'data' top: 'h' "
        "inner_product_param { num_output: 80 } }"
        "layer { name: 'relu' type: 'ReLU' bottom: 'h' top: 'h' }"
        "layer { name: 'fc2' type: '" + type + "' bottom: 'h' top: 'scores' "
        "inner_product_param { num_output: 4 } }"
        "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'scores' bottom: 'label' }";
    lamina::Solver solver(lamina::parse_solver_parameter(
                              "base_lr: 0.1 momentum: 0.9 random_seed: 5 display: 0", "solver"),
                          lamina::parse_net_parameter(layers, "net"), *backend_);
    std::vector<float> labels(96);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = float(i % 4);
    std::vector<float> data = random_values(96 * 30, 21);
    for (size_t i = 0; i < 96; ++i) data[i * 30 + i % 4] += 2;  // learnable
    solver.net().blob("data").copy_data_from_host(data);
    solver.net().blob("label").copy_data_from_host(labels);
    const std::vector<float> start = solver.net().arena().to_host(solver.net().arena().data());
    solver.step(40);
    const float loss = solver.take_mean_loss();
    return std::make_tuple(start, loss,
                           solver.net().arena().to_host(solver.net().arena().data()));
  };
  const auto [tiled_start, tiled_loss, tiled_end] = train("TiledLinear");
  const auto [linear_start, linear_loss, linear_end] = train("Linear");
  EXPECT_EQ(tiled_start, linear_start);
  EXPECT_NEAR(tiled_loss, linear_loss, 1e-4 * linear_loss);
  EXPECT_LT(tiled_loss, 1.0f) << "it learns";
  expect_close(tiled_end, linear_end, std::vector<double>(linear_end.size(), 1.0), 1e-4,
               "weights after 40 iterations");
}

INSTANTIATE_TEST_SUITE_P(Backends, TiledLinearOn, ::testing::Values(Device::kNative, Device::kCuda),
                         device_name);

// ---------------------------------------------------------------- the GPU against the CPU

class TiledLinearCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!have_gpu()) GTEST_SKIP() << no_gpu_reason();
    gpu_ = lamina::make_cuda_backend(0);
  }
  std::unique_ptr<lamina::Backend> gpu_;
};

// The kernels, their CPU twin, and Lamina's Linear (OpenBLAS, cuBLAS) on the same values:
// outputs, input gradients and parameter gradients added to 0.25 (+=).
TEST_F(TiledLinearCuda, KernelsAgreeWithTheCpuTwinAndWithLinear) {
  const int64_t n = 130, c = 300, k = 200;
  const std::vector<float> w = random_values(size_t(k * c), 31, -0.1f, 0.1f);
  const std::vector<float> b = random_values(size_t(k), 32);
  lamina::NativeBackend cpu;
  const Pass twin = run_pass(cpu, tiled(k), n, c, w, b);
  const Pass kernels = run_pass(*gpu_, tiled(k), n, c, w, b);
  const Pass cublas = run_pass(*gpu_, tiled(k, true, "Linear"), n, c, w, b);
  // Sums of 300 (y), 200 (dx) and 130 (dw, db) products of values below 1 in magnitude.
  auto scale = [](size_t size, double terms) { return std::vector<double>(size, terms); };
  for (const Pass* other : {&twin, &cublas}) {
    const std::string vs = other == &twin ? " (kernels vs CPU twin)" : " (kernels vs Linear)";
    expect_close(kernels.y, other->y, scale(kernels.y.size(), 30), 1e-6, "y" + vs);
    expect_close(kernels.dx, other->dx, scale(kernels.dx.size(), 20), 1e-6, "dx" + vs);
    expect_close(kernels.dw, other->dw, scale(kernels.dw.size(), 65), 1e-6, "dw" + vs);
    expect_close(kernels.db, other->db, scale(kernels.db.size(), 65), 1e-6, "db" + vs);
  }
}

// The kernels run inside the training step's CUDA graph: a solver that replays the step
// from its recording ends with the same weights, bit for bit, as one that launches every
// kernel directly (a kernel launched outside the recording would not run on replays).
TEST_F(TiledLinearCuda, RunsInsideTheCapturedTrainingStep) {
  auto train = [&](const std::string& type, bool graph) {
    const std::string net =
        "layer { name: 'data' type: 'Input' top: 'data' top: 'label' input_param { "
        "shape { dim: 64 dim: 50 } shape { dim: 64 } } }"
        "layer { name: 'fc1' type: '" + type + "' bottom: 'data' top: 'h' "
        "inner_product_param { num_output: 70 } }"
        "layer { name: 'relu' type: 'ReLU' bottom: 'h' top: 'h' }"
        "layer { name: 'fc2' type: '" + type + "' bottom: 'h' top: 'scores' "
        "inner_product_param { num_output: 3 } }"
        "layer { name: 'loss' type: 'SoftmaxWithLoss' bottom: 'scores' bottom: 'label' }";
    auto solver = std::make_unique<lamina::Solver>(
        lamina::parse_solver_parameter(std::string("base_lr: 0.05 momentum: 0.9 random_seed: 2 "
                                                   "display: 0 cuda_graph: ") +
                                           (graph ? "true" : "false"),
                                       "solver"),
        lamina::parse_net_parameter(net, "net"), *gpu_);
    std::vector<float> labels(64);
    for (size_t i = 0; i < labels.size(); ++i) labels[i] = float(i % 3);
    solver->net().blob("data").copy_data_from_host(random_values(64 * 50, 41));
    solver->net().blob("label").copy_data_from_host(labels);
    solver->step(25);
    return solver;
  };
  auto weights = [](lamina::Solver& solver) {
    return solver.net().arena().to_host(solver.net().arena().data());
  };
  const std::unique_ptr<lamina::Solver> replayed = train("TiledLinear", true);
  const std::unique_ptr<lamina::Solver> direct = train("TiledLinear", false);
  EXPECT_TRUE(replayed->replays_steps());
  EXPECT_GT(replayed->step_operations(), 0) << "the step was recorded";
  EXPECT_FALSE(direct->replays_steps());
  EXPECT_EQ(weights(*replayed), weights(*direct));

  // A layer that does not declare itself capturable: the solver launches directly and says
  // why, naming the layer; the kernels are the same, so are the weights.
  testing::internal::CaptureStderr();
  const std::unique_ptr<lamina::Solver> eager = train("EagerTiledLinear", true);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_FALSE(eager->replays_steps());
  EXPECT_EQ(eager->step_operations(), 0);
  EXPECT_THAT(log, HasSubstr("CUDA graphs off: layer 'fc1' (EagerTiledLinear) does not say "
                             "whether its operations can be replayed"));
  EXPECT_EQ(weights(*eager), weights(*replayed));
}

// ---------------------------------------------------------------- failures

// A launch with a bad configuration is an Error naming the layer and its kernel, raised by
// the forward pass that launched it; the device stays usable.
TEST_F(TiledLinearCuda, BadLaunchIsAnErrorNamingTheLayer) {
  lamina::Net net(lamina::parse_net_parameter(
                      "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 4 "
                      "dim: 8 } } }"
                      "layer { name: 'bad' type: 'FaultyKernel' bottom: 'x' top: 'y' "
                      "custom_param { entry { key: 'fault' value: 'launch' } } }",
                      "net"),
                  lamina::TEST, *gpu_, 1);
  try {
    net.forward();
    FAIL() << "expected a lamina::Error";
  } catch (const lamina::Error& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("layer 'bad' (FaultyKernel): its kernel fill_ones failed to "
                                   "launch at "));
    EXPECT_THAT(message, HasSubstr("faulty_kernels.cu"));
    // CUDA 12 calls the launch an invalid configuration, CUDA 13 an invalid value.
    EXPECT_THAT(message, AnyOf(HasSubstr("cudaErrorInvalidConfiguration"),
                               HasSubstr("cudaErrorInvalidValue")));
  }
  // Nothing is left over for the next launch check: TiledLinear still runs, and right.
  const Pass after = run_pass(*gpu_, tiled(5), 3, 4, random_values(20, 1), random_values(5, 2));
  lamina::NativeBackend cpu;
  const Pass twin = run_pass(cpu, tiled(5), 3, 4, random_values(20, 1), random_values(5, 2));
  expect_close(after.y, twin.y, std::vector<double>(after.y.size(), 4), 1e-6, "y");
}

// The output of this test binary run again as a child process with fault_child set (main,
// below) and the given environment, and its exit status (-1: it did not exit normally).
std::pair<std::string, int> run_child(const std::string& environment) {
  const std::string command = environment + " /proc/" + std::to_string(getpid()) +
                              "/exe --fault-child 2>&1";
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return {"popen failed", -1};
  std::string output;
  char buffer[4096];
  size_t got;
  while ((got = fread(buffer, 1, sizeof buffer, pipe)) > 0) output.append(buffer, got);
  const int status = pclose(pipe);
  return {output, WIFEXITED(status) ? WEXITSTATUS(status) : -1};
}

// A kernel's illegal address leaves the device unusable, so it is tested in child processes.
// With LAMINA_CHECK_KERNELS=1 the forward pass that launched it reports it, naming the layer
// and the kernel; without, the next wait for the device reports it, naming the layers whose
// kernels ran last. Either way an Error, not an abort.
TEST_F(TiledLinearCuda, IllegalAddressIsAnErrorNamingTheLayer) {
  const auto [checked, checked_status] = run_child("LAMINA_CHECK_KERNELS=1");
  EXPECT_EQ(checked_status, 3) << checked;
  EXPECT_THAT(checked, HasSubstr("error in forward: layer 'stray' (FaultyKernel): its kernel "
                                 "fill_ones (launched at "));
  EXPECT_THAT(checked, HasSubstr("failed while it ran: cudaErrorIllegalAddress"));

  const auto [later, later_status] = run_child("LAMINA_CHECK_KERNELS=0");
  EXPECT_EQ(later_status, 3) << later;
  EXPECT_THAT(later, HasSubstr("cudaErrorIllegalAddress"));
  EXPECT_THAT(later, HasSubstr("Kernels of layers defined outside Lamina ran before it (the "
                               "last ones: layer 'stray' (FaultyKernel): fill_ones)"));
}

// ---------------------------------------------------------------- on the CPU

TEST(FaultyKernel, CudaOnlyLayerIsRefusedOnTheCpu) {
  lamina::NativeBackend cpu;
  try {
    lamina::Net net(lamina::parse_net_parameter(
                        "layer { name: 'in' type: 'Input' top: 'x' input_param { shape { dim: 2 "
                        "} } }"
                        "layer { name: 'gpu_only' type: 'FaultyKernel' bottom: 'x' top: 'y' }",
                        "net"),
                    lamina::TEST, cpu, 1);
    FAIL() << "expected a lamina::Error";
  } catch (const lamina::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer 'gpu_only' (FaultyKernel) has CUDA kernels and no "
                                    "CPU implementation, so it runs only on a CUDA backend, "
                                    "and this net runs on native"));
  }
}

TEST(TiledLinear, TransposedWeightIsRefused) {
  lamina::NativeBackend cpu;
  lamina::Tensor x(cpu, {2, 3}, "x"), y(cpu, {1}, "y");
  auto layer = lamina::LayerRegistry::create(
      layer_param("name: 'fc' type: 'TiledLinear' inner_product_param { num_output: 2 "
                  "transpose: true }"),
      {cpu, lamina::TRAIN, 1});
  EXPECT_THROW(layer->setup({&x}, {&y}), lamina::Error);
}

// The child of IllegalAddressIsAnErrorNamingTheLayer: a FaultyKernel layer storing outside
// every allocation, then a wait for the device. Exit status 3 and the message on an Error,
// 0 when nothing failed.
int fault_child() {
  try {
    std::unique_ptr<lamina::Backend> gpu = lamina::make_cuda_backend(0);
    lamina::Tensor x(*gpu, {4}, "x"), y(*gpu, {1}, "y");
    auto layer = lamina::LayerRegistry::create(
        layer_param("name: 'stray' type: 'FaultyKernel' custom_param { entry { key: 'fault' "
                    "value: 'address' } }"),
        {*gpu, lamina::TEST, 1});
    lamina::setup_standalone(*layer, {&x}, {&y}, 1);
    try {
      layer->forward({&x}, {&y});
    } catch (const lamina::Error& e) {
      std::printf("error in forward: %s\n", e.what());
      return 3;
    }
    gpu->synchronize();
  } catch (const lamina::Error& e) {
    std::printf("error later: %s\n", e.what());
    return 3;
  }
  std::printf("no error\n");
  return 0;
}

}  // namespace
}  // namespace example

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  if (argc == 2 && std::string(argv[1]) == "--fault-child") return example::fault_child();
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
