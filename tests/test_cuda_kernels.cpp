// Lamina's side of custom CUDA kernels in user layers (cuda_kernels.hpp), where no GPU is
// needed: what a layer with kernels of its own is told on a backend that is not CUDA, the
// Error a failed launch becomes (its layer, its kernel, the status; CUDA builds), and the
// solver launching every operation directly, saying why, when a layer defined outside
// Lamina does not declare itself capturable (a backend that says it can capture stands in
// for the GPU), and when LAMINA_CHECK_KERNELS=1 is set. examples/custom_cuda_layer's tests
// run the kernels themselves.
#include <gmock/gmock.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#ifdef LAMINA_WITH_CUDA
#include <cuda_runtime.h>
#endif

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "forwarding_backend.hpp"
#include "lamina/cuda_kernels.hpp"
#include "lamina/io.hpp"
#include "lamina/registry.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

// top = 2 bottom, through backend operations; capture_blocker as custom_param "capture"
// says: "unsaid" (Layer's default for layers defined outside Lamina), "yes" (empty), or a
// reason.
class DoublingLayer : public Layer {
 public:
  using Layer::Layer;
  void setup(const Tensors& bottom, const Tensors& top) override {
    require_custom_keys({"capture"});
    top[0]->reshape(bottom[0]->shape());
  }
  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.axpby(bottom[0]->count(), 2, bottom[0]->data(), 0, top[0]->mutable_data());
  }
  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (propagate[0])
      backend_.axpby(top[0]->count(), 2, top[0]->diff(), 0, bottom[0]->mutable_diff());
  }
  std::optional<std::string> capture_blocker() const override {
    const std::string capture = custom_string("capture", "unsaid");
    if (capture == "unsaid") return Layer::capture_blocker();
    if (capture == "yes") return std::string();
    return capture;
  }
};
LAMINA_REGISTER_LAYER(DoublingLayer, "Doubling");

// The Native backend saying it can capture, as the CUDA backend does: the solver decides
// whether to replay when it is built, before anything is captured.
class SaysItCaptures final : public ForwardingBackend {
 public:
  bool can_capture() const override { return true; }
};

LayerParameter doubling(const std::string& capture) {
  return parse_net_parameter("layer { name: 'twice' type: 'Doubling' custom_param { entry { "
                             "key: 'capture' value: '" + capture + "' } } }",
                             "test")
      .layer(0);
}

TEST(CudaKernels, OtherBackendsAreNotCudaAndSayWhatToDo) {
  NativeBackend cpu;
  EXPECT_FALSE(cuda::is_cuda(cpu));
  for (const std::string& message :
       {error_of([&] { cuda::stream(cpu); }), error_of([&] { cuda::device(cpu); }),
        error_of([&] { cuda::workspace(cpu, 16); })}) {
    EXPECT_THAT(message, HasSubstr("backend native"));
    EXPECT_THAT(message, HasSubstr("lamina::cuda::is_cuda()"));
  }
  auto layer = LayerRegistry::create(doubling("yes"), {cpu, TRAIN, 1});
  EXPECT_THAT(error_of([&] { cuda::require_cuda(*layer); }),
              HasSubstr("layer 'twice' (Doubling) has CUDA kernels and no CPU implementation, "
                        "so it runs only on a CUDA backend, and this net runs on native. "));
}

#ifdef LAMINA_WITH_CUDA
// The message LAMINA_KERNEL_LAUNCHED gives a launch that failed, and one that found the
// device failed by an earlier kernel. The statuses are the runtime's; no device is needed.
TEST(CudaKernels, FailedLaunchIsAnErrorNamingTheLayerAndKernel) {
  NativeBackend cpu;
  auto layer = LayerRegistry::create(doubling("yes"), {cpu, TRAIN, 1});
  EXPECT_THAT(error_of([&] {
                cuda::check_launch(*layer, cudaErrorInvalidConfiguration, "my_kernel",
                                   "my_layer.cu", 12);
              }),
              HasSubstr("layer 'twice' (Doubling): its kernel my_kernel failed to launch at "
                        "my_layer.cu:12: cudaErrorInvalidConfiguration (invalid configuration "
                        "argument); check the launch configuration"));
  EXPECT_THAT(error_of([&] {
                cuda::check_launch(*layer, cudaErrorIllegalAddress, "my_kernel", "my_layer.cu",
                                   12);
              }),
              HasSubstr("layer 'twice' (Doubling): the launch of its kernel my_kernel at "
                        "my_layer.cu:12 found the GPU failed: cudaErrorIllegalAddress"));
}
#else
TEST(CudaKernels, WithoutCudaNothingLaunches) {
  NativeBackend cpu;
  auto layer = LayerRegistry::create(doubling("yes"), {cpu, TRAIN, 1});
  EXPECT_THAT(error_of([&] { cuda::check_launch(*layer, 1, "my_kernel", "my_layer.cu", 12); }),
              HasSubstr("built without CUDA"));
}
#endif

// A net of an Input, the Doubling layer and a Euclidean loss, trained by a solver on a
// backend that says it can capture.
std::unique_ptr<Solver> doubling_solver(Backend& backend, const std::string& capture) {
  const std::string net =
      "layer { name: 'in' type: 'Input' top: 'x' top: 't' input_param { shape { dim: 2 "
      "dim: 3 } shape { dim: 2 dim: 4 } } }"
      "layer { name: 'fc' type: 'Linear' bottom: 'x' top: 'h' inner_product_param { "
      "num_output: 4 } }"
      "layer { name: 'twice' type: 'Doubling' bottom: 'h' top: 'y' custom_param { entry { "
      "key: 'capture' value: '" + capture + "' } } }"
      "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'y' bottom: 't' }";
  return std::make_unique<Solver>(parse_solver_parameter("base_lr: 0.1 display: 0", "solver"),
                                  parse_net_parameter(net, "net"), backend);
}

TEST(CudaKernels, SolverLaunchesDirectlyUnlessEveryCustomLayerDeclaresItselfCapturable) {
  FLAGS_logtostderr = true;
  SaysItCaptures backend;
  EXPECT_TRUE(doubling_solver(backend, "yes")->replays_steps());
  struct Case {
    std::string capture, logged;
  };
  for (const Case& c :
       {Case{"unsaid", "CUDA graphs off: layer 'twice' (Doubling) does not say whether its "
                       "operations can be replayed"},
        Case{"it reads its result on the host",
             "CUDA graphs off: layer 'twice' (Doubling): it reads its result on the host; "
             "every operation is launched directly"}}) {
    ::testing::internal::CaptureStderr();
    const std::unique_ptr<Solver> solver = doubling_solver(backend, c.capture);
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(solver->replays_steps()) << c.capture;
    EXPECT_THAT(log, HasSubstr(c.logged));
    // It trains, every operation launched directly (a capture on this backend would throw).
    solver->net().blob("x").copy_data_from_host({1, 2, 3, 4, 5, 6});
    solver->step(3);
    EXPECT_EQ(solver->iter(), 3);
    EXPECT_EQ(solver->step_operations(), 0);
  }
}

// LAMINA_CHECK_KERNELS=1 waits for each custom kernel, which a captured step cannot: the
// solver launches directly and says why. The variable is read once per process, so this
// runs in a child process of its own.
TEST(CudaKernels, CheckingKernelsTurnsCapturedStepsOff) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // the child runs this test from the start
  FLAGS_logtostderr = true;
  setenv("LAMINA_CHECK_KERNELS", "1", 1);
  EXPECT_EXIT(
      {
        SaysItCaptures backend;
        std::exit(doubling_solver(backend, "yes")->replays_steps() ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "CUDA graphs off: LAMINA_CHECK_KERNELS=1 is set");
  unsetenv("LAMINA_CHECK_KERNELS");
}

}  // namespace
}  // namespace lamina::testing
