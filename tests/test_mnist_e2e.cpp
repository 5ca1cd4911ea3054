// End to end: the MNIST MLP of models/mnist/ trains on the real training set on the CPU and
// is scored on the real 10,000-image test set.
#include <gtest/gtest.h>

#include "../examples/mnist/mnist_model.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

TEST(MnistEndToEnd, MlpReaches95PercentOnTheTestSetInTwoEpochsOnTheCpu) {
  mnist::ModelOptions options;
  options.data_dir = testing::mnist_dir();
  options.epochs = 2;
  mnist::Model m = mnist::load_model("mlp", options);
  NativeBackend backend;
  Solver solver(m.solver, m.net, backend, m.net_path);
  solver.step(2 * m.iters_per_epoch);
  const float loss = solver.take_mean_loss();
  const TestResult result = solver.test();
  EXPECT_EQ(solver.param().test_iter(0) * 100, 10000) << "the test must cover all 10,000 images";
  std::printf("MLP after 2 epochs on the CPU: train loss %.4f, test accuracy %.2f%%\n", loss,
              100 * result.value("accuracy"));
  EXPECT_LT(loss, 0.5f);
  EXPECT_GE(result.value("accuracy"), 0.95f);
}

}  // namespace
}  // namespace lamina
