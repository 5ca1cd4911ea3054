// Layers and training on the CUDA backend, against the Native backend (tiers 1-3 on the GPU):
//   - every layer case of one table: a numerical gradient check on each backend, and the same
//     forward/backward on Native and on the device, compared at relative error 1e-5;
//   - the MNIST MLP trained 200 iterations on both: the same displayed losses (1e-4 relative)
//     and test accuracies within 0.1 percentage point;
//   - a steady-state iteration makes no host/device copy; one read per displayed loss
//     (counted by wrapping the backend in a CountingBackend);
//   - one context, stream and cuBLAS handle per device, however many backends and nets.
//
// Devices: Cuda (skips visibly without a GPU) and HostAsDevice, a NativeBackend that says it
// is not host memory. HostAsDevice runs everywhere: through it the harness, the residency
// bookkeeping of tensors and the transfer counts are tested without a GPU.
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/solver.hpp"
#include "layer_cases.hpp"

namespace lamina::testing {
namespace {

// ---------------------------------------------------------------- the layer cases

std::vector<LayerCase> layer_cases() {
  const char* kIgnored = "type: 'SoftmaxWithLoss' loss_param { ignore_label: -1 normalization: ";
  return {
      // (4, 6) -> (4, 3); (3, 2, 2) -> (3, 3); (2, 3, 4) -> (2, 3, 2)
      LayerCase("LinearBias", "type: 'Linear' inner_product_param { num_output: 3 "
                "bias_filler { type: 'gaussian' } }", {{4, 6}}),
      LayerCase("LinearNoBias", "type: 'Linear' inner_product_param { num_output: 3 "
                "bias_term: false }", {{3, 2, 2}}),
      LayerCase("LinearAxis2", "type: 'Linear' inner_product_param { num_output: 2 axis: 2 "
                "bias_filler { type: 'gaussian' } }", {{2, 3, 4}}),
      // Linear with the in-place ReLU after it fused in (the net's Linear + ReLU).
      LayerCase("LinearReLUFused", "type: 'Linear' inner_product_param { num_output: 5 "
                "bias_filler { type: 'gaussian' } }", {{4, 6}})
          .absorbing("name: 'relu' type: 'ReLU'"),
      LayerCase("LinearNoBiasReLUFused", "type: 'Linear' inner_product_param { num_output: 5 "
                "bias_term: false }", {{3, 7}})
          .absorbing("name: 'relu' type: 'ReLU'"),
      // Elementwise, (3, 4); the gradient check's step is 0.01.
      LayerCase("ReLU", "type: 'ReLU'", {{3, 4}}).kink(0.011f),
      LayerCase("LeakyReLU", "type: 'ReLU' relu_param { negative_slope: 0.2 }", {{3, 4}})
          .kink(0.011f),
      LayerCase("ReLUInPlace", "type: 'ReLU' relu_param { negative_slope: 0.1 }", {{3, 4}})
          .inplace().kink(0.011f),
      LayerCase("Sigmoid", "type: 'Sigmoid'", {{3, 4}}),
      LayerCase("TanH", "type: 'TanH'", {{3, 4}}),
      // Over the channels (axis 1, C = 2) at each of the 3 x 2 positions, as Caffe.
      LayerCase("Softmax", "type: 'Softmax'", {{3, 2, 2}}),
      LayerCase("LogSoftmax", "type: 'LogSoftmax'", {{3, 4}}),
      // Scores (N, C), labels (N) in [0, C); with ignore_label rows 1 and 4 are ignored.
      LayerCase("SoftmaxLoss", "type: 'SoftmaxWithLoss'", {{4, 5, 1, 1}, {4}}).labels(1, 5),
      LayerCase("SoftmaxLossIgnoreValid", std::string(kIgnored) + "VALID }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossFull", std::string(kIgnored) + "FULL }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossBatchSize", std::string(kIgnored) + "BATCH_SIZE }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      LayerCase("SoftmaxLossNone", std::string(kIgnored) + "NONE }", {{6, 5}, {6}})
          .labels(1, 5).ignore(-1),
      // Top 1 is the probabilities (N, C), an output whose diff is not propagated.
      LayerCase("SoftmaxLossProbTop", "type: 'SoftmaxWithLoss'", {{4, 5}, {4}}).labels(1, 5)
          .with_tops(2).visible(1),
      LayerCase("NegativeLogLikelihood", "type: 'NegativeLogLikelihood'", {{5, 3}, {5}})
          .labels(1, 3).range(-3, 0),
      LayerCase("EuclideanLoss", "type: 'EuclideanLoss'", {{3, 2}, {3, 2, 1}}),
      LayerCase("AccuracyTop1", "type: 'Accuracy'", {{8, 5}, {8}}).labels(1, 5).no_gradient(),
      LayerCase("AccuracyTop3", "type: 'Accuracy' accuracy_param { top_k: 3 }", {{8, 5}, {8}})
          .labels(1, 5).no_gradient(),
      // (2, 3, 2, 2) -> (2, 12); (2, 3, 4) -> (2, 6, 2)
      LayerCase("Flatten", "type: 'Flatten'", {{2, 3, 2, 2}}),
      LayerCase("Reshape", "type: 'Reshape' reshape_param { shape { dim: 0 dim: -1 dim: 2 } }",
                {{2, 3, 4}}),
      LayerCase("DropoutTrain", "type: 'Dropout' dropout_param { dropout_ratio: 0.3 }",
                {{4, 6}}).replayed(),
      LayerCase("Split", "type: 'Split'", {{3, 2}}).with_tops(3),
      // Convolutional layers: x (N, C, H, W).
      LayerCase("ConvStridePad", "type: 'Convolution' convolution_param { num_output: 4 "
                "kernel_size: 3 stride: 2 pad: 1 weight_filler { type: 'gaussian' std: 0.3 } "
                "bias_filler { type: 'uniform' min: -0.1 max: 0.1 } }", {{2, 3, 7, 6}}),
      LayerCase("ConvGroupsDilation", "type: 'Convolution' convolution_param { num_output: 4 "
                "kernel_h: 3 kernel_w: 2 dilation: 2 group: 2 bias_term: false "
                "weight_filler { type: 'gaussian' std: 0.3 } }", {{2, 4, 8, 7}}),
      LayerCase("PoolMaxOverlapping", "type: 'Pooling' pooling_param { pool: MAX kernel_size: 3 "
                "stride: 2 }", {{2, 3, 7, 6}}).distinct(),
      LayerCase("PoolAvePadded", "type: 'Pooling' pooling_param { pool: AVE kernel_size: 3 "
                "stride: 2 pad: 1 }", {{2, 3, 7, 6}}),
      LayerCase("PoolGlobal", "type: 'Pooling' pooling_param { pool: AVE global_pooling: true }",
                {{2, 3, 4, 5}}),
      LayerCase("BatchNormTrain", "type: 'BatchNorm'", {{4, 3, 2, 2}}),
      LayerCase("ScaleWithBias", "type: 'Scale' scale_param { bias_term: true filler { "
                "type: 'uniform' min: 0.5 max: 1.5 } bias_filler { type: 'uniform' } }",
                {{2, 3, 2, 2}}),
      LayerCase("Bias", "type: 'Bias' bias_param { filler { type: 'uniform' } }", {{2, 3, 2}}),
      LayerCase("Concat", "type: 'Concat'", {{2, 3, 2}, {2, 1, 2}}),
      LayerCase("EltwiseSumCoeff", "type: 'Eltwise' eltwise_param { operation: SUM coeff: 1.5 "
                "coeff: -0.5 }", {{3, 4}, {3, 4}}),
      LayerCase("EltwiseProd", "type: 'Eltwise' eltwise_param { operation: PROD }",
                {{3, 4}, {3, 4}, {3, 4}}),
      LayerCase("EltwiseMax", "type: 'Eltwise' eltwise_param { operation: MAX }",
                {{3, 4}, {3, 4}}).distinct(),
  };
}

LAMINA_LAYER_CASES(Layers, layer_cases);
// The comparison is not vacuous: a gemm off by 1e-4 (relative) fails it.
TEST(LayerMatchesNativeHarness, CatchesAWrongKernel) {
  const LayerCase c = layer_cases().front();  // LinearBias
  ASSERT_EQ(c.name, "LinearBias");
  NativeBackend native;
  HostAsDeviceBackend skewed;
  skewed.gemm_skew = 1e-4f;
  std::vector<std::vector<float>> params;
  const Outputs expected = run_case(native, c, params);
  const std::vector<std::string> found = differences(expected, run_case(skewed, c, params), 1e-5);
  // The top (linear_forward), the bottom diff and the weight diff (gemms) are skewed; the
  // bias diff (linear_bias_backward) is not.
  ASSERT_EQ(found.size(), 3u);
  EXPECT_EQ(found[0].rfind("top 0: normalized error", 0), 0u) << found[0];
}

// ---------------------------------------------------------------- training

::testing::AssertionResult mnist_available() {
  const std::string dir = mnist_dir();
  for (const char* file : {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                           "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"}) {
    const std::string path = dir + "/" + file;
    if (!std::filesystem::exists(path) && !std::filesystem::exists(path + ".gz")) {
      return ::testing::AssertionFailure() << dir << "/" << file << " is missing: run "
             << "scripts/fetch_mnist.sh " << dir << " (or set LAMINA_MNIST_DIR)";
    }
  }
  return ::testing::AssertionSuccess();
}

// The MLP of models/mnist (784-512-512-10, batch 64), seed 1, with a test net of 100 batches.
mnist::Model mlp_model() {
  mnist::ModelOptions options;
  options.data_dir = mnist_dir();
  options.seed = 1;
  return mnist::load_model("mlp", options);
}

class TrainingOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  std::unique_ptr<Backend> backend_;
};

// Trains the MNIST MLP in `precision` for 200 iterations on the CPU and on the device, from
// the same seed, and compares: the loss every 20 iterations within loss_tol (relative), the
// test accuracies within accuracy_tol.
void expect_training_matches_the_cpu(Backend& device, Precision precision, double loss_tol,
                                     float accuracy_tol) {
  ASSERT_TRUE(mnist_available());
  mnist::Model m = mlp_model();
  m.solver.set_display(20);
  m.solver.set_average_loss(1);
  m.solver.set_precision(precision);
  NativeBackend cpu;
  Solver reference(m.solver, m.net, cpu, m.net_path);
  Solver solver(m.solver, m.net, device, m.net_path);
  reference.step(200);
  solver.step(200);

  const std::vector<LossRecord>& a = reference.loss_history();
  const std::vector<LossRecord>& b = solver.loss_history();
  ASSERT_EQ(a.size(), 10u);
  ASSERT_EQ(b.size(), a.size());
  const std::string name = Precision_Name(precision);
  std::printf("%9s %12s %12s %10s   (%s, %s)\n", "iteration", "cpu", "device", "rel diff",
              device.name().c_str(), name.c_str());
  for (size_t i = 0; i < a.size(); ++i) {
    const double rel = std::abs(double(b[i].loss) - a[i].loss) / std::abs(double(a[i].loss));
    std::printf("%9d %12.7f %12.7f %10.2e\n", a[i].iteration, a[i].loss, b[i].loss, rel);
    EXPECT_EQ(b[i].iteration, a[i].iteration);
    EXPECT_LE(rel, loss_tol) << "iteration " << a[i].iteration << ": cpu " << a[i].loss
                             << ", device " << b[i].loss;
  }
  EXPECT_LT(a.back().loss, 0.5 * a.front().loss) << "the MLP must have trained";

  if (reference.scales_loss()) {
    const Solver::LossScaleState sa = reference.loss_scale_state(), sb = solver.loss_scale_state();
    std::printf("loss scale: cpu %g (%lld skipped), device %g (%lld skipped)\n", sa.scale,
                (long long)sa.skipped, sb.scale, (long long)sb.skipped);
    EXPECT_EQ(sb.scale, sa.scale);
    EXPECT_EQ(sb.skipped, sa.skipped);
  }
  const float cpu_accuracy = reference.test().value("accuracy");
  const float accuracy = solver.test().value("accuracy");
  std::printf("%s test accuracy: cpu %.2f%%, device %.2f%%\n", name.c_str(),
              100 * cpu_accuracy, 100 * accuracy);
  EXPECT_LE(std::abs(accuracy - cpu_accuracy), accuracy_tol + 1e-6f);
}

TEST_P(TrainingOnDevice, MlpLossesAndAccuracyMatchTheCpu) {
  expect_training_matches_the_cpu(*backend_, FP32, 1e-4, 0.001f);  // 10 of 10,000 images
}

// The same in TF32 on both. The CPU rounds each product's operands to nearest; the GPU's
// tensor cores convert them their own way and sum in their own order, so products differ by
// up to about 2^-10 of their size (against FP32's 2^-23 summation differences, for which
// 1e-4 holds above). 200 steps of a stable SGD keep the losses within a small multiple of
// that: 1e-2 relative, and the test accuracies within 0.3 points (30 of 10,000 images).
TEST_P(TrainingOnDevice, MlpInTf32MatchesTheCpuInTf32) {
  expect_training_matches_the_cpu(*backend_, TF32, 1e-2, 0.003f);
}

// The same in BF16 on both: both read the same 16-bit operands exactly and sum in FP32, so
// a stored value differs only where the two sums' order moves it across a rounding boundary,
// by one BF16 step (2^-8 of it) in a small fraction of values. Those steps feed the next
// layers and iterations like TF32's operand rounding does, a little larger: 2e-2 relative on
// the losses, and the test accuracies within 0.3 points.
TEST_P(TrainingOnDevice, MlpInBf16MatchesTheCpuInBf16) {
  expect_training_matches_the_cpu(*backend_, BF16, 2e-2, 0.003f);
}

// The same in FP16 with loss scaling on both: FP16 keeps 11 significant bits, so its
// rounding boundaries are 8 times denser than BF16's and the two sums' order crosses one
// about as often, by a step 8 times smaller. The losses within 1e-2, the accuracies within 0.3
// points; the loss scale must be the same on both.
TEST_P(TrainingOnDevice, MlpInFp16MatchesTheCpuInFp16) {
  expect_training_matches_the_cpu(*backend_, FP16, 1e-2, 0.003f);
}

TEST_P(TrainingOnDevice, SteadyStateIterationsMakeNoTransfers) {
  ASSERT_TRUE(mnist_available());
  mnist::Model m = mlp_model();  // 937 iterations per epoch: the steps below stay in epoch 0
  m.solver.clear_test_iter();    // training only (test_interval is 0)
  m.solver.set_display(0);
  CountingBackend counting(*backend_);
  using Transfers = CountingBackend::Transfers;
  // Gradient clipping computes its norm and scale in backend memory too.
  for (double clip : {0.0, 0.5}) {
    SCOPED_TRACE(clip > 0 ? "clip_gradients 0.5" : "no clipping");
    m.solver.set_clip_gradients(clip);
    Solver solver(m.solver, m.net, counting, m.net_path);
    const Transfers setup = counting.transfers();
    EXPECT_GT(setup.from_host, 0) << "uploading the data set and the weights is counted";
    solver.step(3);  // warm-up
    const Transfers before = counting.transfers();
    solver.step(50);
    EXPECT_EQ(counting.transfers().to_host, before.to_host);
    EXPECT_EQ(counting.transfers().from_host, before.from_host);
    EXPECT_EQ(counting.transfers().bytes, before.bytes);
  }
  m.solver.clear_clip_gradients();
  {
    // FP16: the loss scale and its finiteness test advance in backend memory too.
    SCOPED_TRACE("FP16 with loss scaling");
    m.solver.set_precision(FP16);
    Solver solver(m.solver, m.net, counting, m.net_path);
    ASSERT_TRUE(solver.scales_loss());
    solver.step(3);
    const Transfers before = counting.transfers();
    solver.step(50);
    EXPECT_EQ(counting.transfers().to_host, before.to_host);
    EXPECT_EQ(counting.transfers().from_host, before.from_host);
    m.solver.clear_precision();
  }
  // Displaying reads the loss ring (smoothed_loss: one copy_to_host of average_loss floats).
  m.solver.set_display(10);
  Solver solver(m.solver, m.net, counting, m.net_path);
  solver.step(3);  // displays iteration 0
  const Transfers before = counting.transfers();
  solver.step(50);  // iterations 3..52 display 10, 20, 30, 40, 50
  EXPECT_EQ(counting.transfers().to_host, before.to_host + 5);
  EXPECT_EQ(counting.transfers().from_host, before.from_host);
  EXPECT_EQ(solver.loss_history().size(), 6u);
}

INSTANTIATE_TEST_SUITE_P(Mlp, TrainingOnDevice,
                         ::testing::Values(Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

// Two backends of device 0, a training net and a test net on each, trained and tested: the
// device's context, its three streams (main, side lane, collective lane) and the lanes'
// cuBLAS handles exist once for the whole process.
TEST(CudaHandles, CreatedOncePerDeviceAcrossRunsAndNets) {
  const CudaDiagnostics start = cuda_diagnostics();  // earlier tests may have made them
  LAMINA_CUDA_BACKEND_OR_SKIP(first);
  ASSERT_TRUE(mnist_available());
  const CudaDiagnostics created = cuda_diagnostics();
  EXPECT_LE(created.contexts_created, start.contexts_created + 1);
  EXPECT_LE(created.streams_created, start.streams_created + 3);
  EXPECT_LE(created.blas_handles_created, start.blas_handles_created + 2);
  EXPECT_EQ(created.contexts_created, 1) << "this process uses device 0 only";
  EXPECT_EQ(created.streams_created, 3);
  EXPECT_EQ(created.blas_handles_created, 2);

  std::unique_ptr<Backend> second = make_cuda_backend(0);
  mnist::Model m = mlp_model();
  m.solver.set_display(2);
  m.solver.set_test_iter(0, 2);
  m.solver.set_test_interval(3);
  Solver a(m.solver, m.net, *first, m.net_path);
  Solver b(m.solver, m.net, *second, m.net_path);
  for (Solver* solver : {&a, &b, &a}) {
    solver->step(7);  // tests every 3 iterations, from iteration 0
    EXPECT_TRUE(std::isfinite(solver->test().value("loss")));
  }
  EXPECT_EQ(a.test_history().size(), 7u);  // iterations 0, 3, 6, 7, then 9, 12, 14
  EXPECT_EQ(b.test_history().size(), 4u);  // iterations 0, 3, 6, 7
  const CudaDiagnostics end = cuda_diagnostics();
  EXPECT_EQ(end.contexts_created, created.contexts_created);
  EXPECT_EQ(end.streams_created, created.streams_created);
  EXPECT_EQ(end.blas_handles_created, created.blas_handles_created);
  EXPECT_LE(end.dnn_handles_created, 2);
}

}  // namespace
}  // namespace lamina::testing
