// FP16 loss scaling on the GPU against the CPU (loss_scale_net.hpp): the same net, whose
// gradients overflow in chosen iterations, trained on both. The scale, its counters and the
// skipped iterations must be the same on both, a skipped iteration must leave the GPU's
// weights unchanged bit for bit, and the weights must stay within FP16's precision of the
// CPU's; the update writes their FP16 copy. And the update kernels without a four-float
// path write the weights' BF16 copy too. Skips (with the reason) without a GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/rounding.hpp"
#include "loss_scale_net.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

TEST(CudaLossScaling, SkipsAndScalesAsTheCpuDoes) {
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda);
  NativeBackend native;
  const NetParameter net = testing::boosted_mlp("2,3,7,8,13");
  Solver cpu(testing::fp16_solver(), net, native), gpu(testing::fp16_solver(), net, *cuda);
  testing::feed(cpu);
  testing::feed(gpu);
  ParamArena& arena = gpu.net().arena();
  int skips = 0;
  for (int it = 0; it < 20; ++it) {
    const std::vector<float> before = arena.to_host(arena.data());
    cpu.step(1);
    gpu.step(1);
    const Solver::LossScaleState a = cpu.loss_scale_state(), b = gpu.loss_scale_state();
    ASSERT_EQ(b.scale, a.scale) << "after iteration " << it;
    ASSERT_EQ(b.good_steps, a.good_steps) << "after iteration " << it;
    ASSERT_EQ(b.skipped, a.skipped) << "after iteration " << it;
    const std::vector<float> after = arena.to_host(arena.data());
    if (b.skipped > skips) {
      EXPECT_EQ(testing::compare_bits(before, after), "") << "iteration " << it << " skipped";
      skips = int(b.skipped);
    } else {
      EXPECT_NE(before, after) << "iteration " << it << " updates the weights";
    }
    // Both round the same FP16 values; sums in another order move a value by an FP16 step
    // (2^-11 of it) now and then, and such steps add up over the iterations.
    const ParamArena& c = cpu.net().arena();
    const double error = testing::normalized_error(c.to_host(c.data()), after);
    EXPECT_LE(error, 2e-3) << "after iteration " << it;
    if (it % 5 == 4) std::printf("iteration %2d: weights' normalized error %.2e\n", it, error);
  }
  EXPECT_EQ(skips, 5);
  // The update kernel writes the weights' FP16 copy (padding aside): the rounded weights,
  // bit for bit (rounding.hpp's conversion, as on the host).
  EXPECT_EQ(testing::half_copy_mismatch(*cuda, arena, Half::kFP16), "");
}

// The update rules without a four-float kernel (Adam here) write the weights' BF16 copy from
// their one-float kernel: the rounded weights, bit for bit.
TEST(CudaHalfCopy, TheOneFloatUpdateWritesTheBf16Copy) {
  LAMINA_CUDA_BACKEND_OR_SKIP(cuda);
  const SolverParameter param = parse_solver_parameter(
      "base_lr: 0.01 type: \"Adam\" random_seed: 3 precision: BF16", "solver");
  Solver solver(param, testing::boosted_mlp(""), *cuda);
  testing::feed(solver);
  solver.step(5);
  EXPECT_EQ(testing::half_copy_mismatch(*cuda, solver.net().arena(), Half::kBF16), "");
}

}  // namespace
}  // namespace lamina
