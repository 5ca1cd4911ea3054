// FP16 training's dynamic loss scaling (docs/precision.md): the step state's advance against
// a hand-computed sequence, and on the CPU an FP16 net whose gradients overflow in chosen
// iterations (loss_scale_net.hpp): those updates are skipped (weights and optimizer
// history unchanged), the scale halves and grows back as the sequence says, the display line
// and the end of training report it, a resumed run repeats an uninterrupted one bit for
// bit, and a scale that collapses stops training with the reason.
#include <gmock/gmock.h>
#include <glog/logging.h>
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "lamina/step_state.hpp"
#include "loss_scale_net.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using testing::boosted_mlp;
using testing::feed;
using testing::fp16_solver;

// Eight iterations of Adam (iter_size 2: iter_scale 1/2) from a scale of 8, doubling after
// two finite iterations in a row, with gradients that are finite, finite, infinite, NaN, then
// finite. Worked by hand: each row is the state after the advance of that iteration.
TEST(AdvanceLossScale, FollowsAHandComputedSequence) {
  StepSchedule s;
  s.iter_scale = 0.5f;
  s.adam = true;
  s.beta1 = 0.9f;
  s.beta2 = 0.999f;
  s.growth_interval = 2;
  StepState state;
  state.loss_scale = 8;
  const float inf = INFINITY, nan = NAN;
  struct Row {
    float sumsq;
    float grad_scale;   // 1/2 over the scale the iteration's gradients were made with
    int64_t adam_t;     // the update count Adam's correction uses: skipped ones not counted
    int32_t skip;
    float scale_after;
    int32_t good_after;
    int64_t skipped_after;
  };
  const Row rows[] = {
      {1, 0.0625f, 1, 0, 8, 1, 0},     {4, 0.0625f, 2, 0, 16, 0, 0},
      {inf, 0.03125f, 3, 1, 8, 0, 1},  {nan, 0.0625f, 3, 1, 4, 0, 2},
      {2, 0.125f, 3, 0, 4, 1, 2},      {2, 0.125f, 4, 0, 8, 0, 2},
      {2, 0.0625f, 5, 0, 8, 1, 2},     {2, 0.0625f, 6, 0, 16, 0, 2},
  };
  for (size_t i = 0; i < std::size(rows); ++i) {
    const Row& r = rows[i];
    state.grad_sumsq = r.sumsq;
    advance_step_values(s, state);
    EXPECT_EQ(state.iter, int64_t(i) + 1);
    EXPECT_EQ(state.grad_scale, r.grad_scale) << "iteration " << i;
    EXPECT_EQ(state.correction, adam_correction(0.9f, 0.999f, r.adam_t)) << "iteration " << i;
    EXPECT_EQ(state.skip, r.skip) << "iteration " << i;
    EXPECT_EQ(state.loss_scale, r.scale_after) << "iteration " << i;
    EXPECT_EQ(state.good_steps, r.good_after) << "iteration " << i;
    EXPECT_EQ(state.skipped, r.skipped_after) << "iteration " << i;
  }

  // Clipping sees the unscaled norm: sqrt(64) / 4 = 2 > 1 halves the update's scale.
  StepSchedule clip;
  clip.clip = 1;
  clip.growth_interval = 2000;
  StepState scaled;
  scaled.loss_scale = 4;
  scaled.grad_sumsq = 64;
  advance_step_values(clip, scaled);
  EXPECT_EQ(scaled.grad_scale, 0.125f);
  // At the smallest scale a skip leaves it there and says so (skip 2): a halving that lands
  // on it is an ordinary skip (1).
  StepState low;
  low.loss_scale = std::ldexp(1.0f, -23);
  for (int32_t expected_skip : {1, 2, 2}) {
    low.grad_sumsq = inf;
    advance_step_values(s, low);
    EXPECT_EQ(low.skip, expected_skip);
    EXPECT_EQ(low.loss_scale, kSmallestLossScale);
  }
  // A scale that would overflow stays.
  StepSchedule every;
  every.growth_interval = 1;
  StepState top;
  top.loss_scale = std::ldexp(1.0f, 127);
  advance_step_values(every, top);
  EXPECT_EQ(top.loss_scale, std::ldexp(1.0f, 127));
  EXPECT_EQ(top.skip, 0);
  // Without loss scaling the step state ignores the sum of squares (not clipping).
  StepState plain;
  plain.grad_sumsq = inf;
  advance_step_values(StepSchedule{}, plain);
  EXPECT_EQ(plain.skip, 0);
  EXPECT_EQ(plain.grad_scale, 1.0f);
}

// Collects glog lines while it lives.
class LogLines : public google::LogSink {
 public:
  LogLines() { google::AddLogSink(this); }
  ~LogLines() override { google::RemoveLogSink(this); }
  void send(google::LogSeverity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    text += std::string(message, length) + "\n";
  }
  std::string text;
};

TEST(LossScaling, OverflowingIterationsAreSkippedAndTheScaleFollows) {
  NativeBackend native;
  Solver solver(fp16_solver(), boosted_mlp("2,3,7"), native);
  ASSERT_TRUE(solver.scales_loss());
  feed(solver);
  struct Expected {
    float scale;
    int32_t good;
    int64_t skipped;
  };
  // Growth after 3 finite iterations; iterations 2, 3 and 7 overflow.
  const Expected expected[] = {{1024, 1, 0}, {1024, 2, 0}, {512, 0, 1}, {256, 0, 2}, {256, 1, 2},
                               {256, 2, 2},  {512, 0, 2},  {256, 0, 3}, {256, 1, 3}};
  ParamArena& arena = solver.net().arena();
  const float first_loss = [&] {
    solver.net().forward();
    return solver.net().loss();
  }();
  for (int it = 0; it < int(std::size(expected)); ++it) {
    const std::vector<float> w = arena.to_host(arena.data()), h = arena.to_host(arena.state(0));
    const int64_t skipped_before = solver.loss_scale_state().skipped;
    solver.step(1);
    const Solver::LossScaleState s = solver.loss_scale_state();
    EXPECT_EQ(s.scale, expected[it].scale) << "after iteration " << it;
    EXPECT_EQ(s.good_steps, expected[it].good) << "after iteration " << it;
    EXPECT_EQ(s.skipped, expected[it].skipped) << "after iteration " << it;
    const std::vector<float> w2 = arena.to_host(arena.data()), h2 = arena.to_host(arena.state(0));
    if (s.skipped > skipped_before) {
      EXPECT_EQ(w2, w) << "iteration " << it << " was skipped: no weight changes";
      EXPECT_EQ(h2, h) << "iteration " << it << " was skipped: no history changes";
    } else {
      EXPECT_NE(w2, w) << "iteration " << it << " updates the weights";
    }
  }
  for (float v : arena.to_host(arena.data())) ASSERT_TRUE(std::isfinite(v));
  solver.step(40);
  EXPECT_LT(solver.net().loss(), 0.3f * first_loss) << "the FP16 net trains past the skips";
}

// What loss scaling is for: with a loss weight of 1e-8 the FP16 gradients fall below FP16's
// smallest subnormal (2^-24) and flush to zero at scale 1, so one step changes almost no
// weight; scaled by 2^24 they survive, and the step matches FP32's (lr 1e7 makes it visible).
TEST(LossScaling, KeepsGradientsThatFp16WouldFlushToZero) {
  NativeBackend native;
  NetParameter net = boosted_mlp("");
  net.mutable_layer(net.layer_size() - 1)->add_loss_weight(1e-8f);
  const std::string settings = "base_lr: 10000000 random_seed: 3";
  SolverParameter fp32 = parse_solver_parameter(settings, "solver");
  SolverParameter unscaled = fp32, scaled = fp32;
  unscaled.set_precision(FP16);
  unscaled.set_loss_scale(1);
  scaled.set_precision(FP16);
  scaled.set_loss_scale(16777216);
  Solver a(fp32, net, native), b(unscaled, net, native), c(scaled, net, native);
  std::vector<std::vector<float>> moved;  // each run's weight changes
  for (Solver* s : {&a, &b, &c}) {
    feed(*s);
    const ParamArena& arena = s->net().arena();
    const std::vector<float> before = arena.to_host(arena.data());
    s->step(1);
    std::vector<float> after = arena.to_host(arena.data());
    for (size_t i = 0; i < after.size(); ++i) after[i] -= before[i];
    moved.push_back(after);
  }
  EXPECT_EQ(b.loss_scale_state().skipped, 0);
  EXPECT_EQ(c.loss_scale_state().skipped, 0);
  const double unscaled_error = testing::normalized_error(moved[1], moved[0]);
  const double scaled_error = testing::normalized_error(moved[2], moved[0]);
  std::printf("step against FP32's: normalized error %.3g at scale 1, %.3g at scale 2^24\n",
              unscaled_error, scaled_error);
  EXPECT_GT(unscaled_error, 0.9) << "at scale 1 the gradient is lost";
  // FP16's own rounding (2^-11 on x, W, dy and each result, through two layers) remains.
  EXPECT_LT(scaled_error, 1e-2);
}

// Adam counts the updates made: 4 iterations with the second skipped end where 3 without a
// skip do, the scale aside (512 against 1024: power-of-two scales round alike in FP16 but
// for subnormals, so the weights agree to a normalized 1e-6; counting the skipped iteration
// changes Adam's bias correction by 15% in the last two updates, and the weights by 7e-3).
TEST(LossScaling, AdamDoesNotCountSkippedIterations) {
  NativeBackend native;
  auto adam = [&native](const std::string& passes, int iters) {
    SolverParameter p = fp16_solver("type: \"Adam\"", 1024, 1000);
    p.set_base_lr(0.01f);
    auto solver = std::make_unique<Solver>(p, boosted_mlp(passes), native);
    feed(*solver);
    solver->step(iters);
    return solver;
  };
  const auto skipping = adam("1", 4), straight = adam("", 3);
  EXPECT_EQ(skipping->loss_scale_state().skipped, 1);
  const ParamArena& a = skipping->net().arena();
  const ParamArena& b = straight->net().arena();
  EXPECT_LE(testing::normalized_error(a.to_host(a.data()), b.to_host(b.data())), 1e-6);
}

TEST(LossScaling, TheDisplayAndTheEndOfTrainingReportIt) {
  NativeBackend native;
  LogLines log;
  Solver solver(fp16_solver("display: 3 max_iter: 6"), boosted_mlp("2"), native);
  feed(solver);
  solver.solve();
  EXPECT_THAT(log.text, HasSubstr("FP16 loss scaling: the loss gradient is scaled by 1024 at "
                                  "first, halved on an iteration whose gradients are not finite "
                                  "(its update is skipped), doubled after 3 finite iterations"));
  EXPECT_THAT(log.text, HasSubstr("Iteration 0, loss = "));
  EXPECT_THAT(log.text, HasSubstr(", loss scale = 1024 (0 iterations skipped)"));
  EXPECT_THAT(log.text, HasSubstr(", loss scale = 512 (1 iteration skipped)"));
  EXPECT_THAT(log.text, HasSubstr("FP16 loss scaling: 1 of 6 iterations skipped in all "
                                  "(gradients not finite); the scale is 1024"));
}

// 10 iterations straight against 5, a snapshot, a restore into a new solver and 5 more, with
// overflows on both sides of the snapshot: the same weights, bit for bit, and the same scale.
TEST(LossScaling, AResumedRunRepeatsAnUninterruptedOne) {
  testing::TempDir dir;
  NativeBackend native;
  const NetParameter net = boosted_mlp("1,3,6");
  Solver straight(fp16_solver("", 1024, 2), net, native);
  feed(straight);
  straight.step(10);
  const std::string prefix = dir / "scaled";
  Solver first(fp16_solver("snapshot_prefix: \"" + prefix + "\"", 1024, 2),
               net, native);
  feed(first);
  first.step(5);
  const SnapshotPaths paths = first.snapshot();
  Solver resumed(fp16_solver("", 1024, 2), net, native);
  resumed.restore(paths.state);
  feed(resumed);
  resumed.step(5);
  const ParamArena& a = straight.net().arena();
  const ParamArena& b = resumed.net().arena();
  EXPECT_EQ(testing::compare_bits(a.to_host(a.data()), b.to_host(b.data())), "");
  EXPECT_EQ(testing::compare_bits(a.to_host(a.state(0)), b.to_host(b.state(0))), "");
  const Solver::LossScaleState sa = straight.loss_scale_state(), sb = resumed.loss_scale_state();
  EXPECT_EQ(sa.scale, sb.scale);
  EXPECT_EQ(sa.good_steps, sb.good_steps);
  EXPECT_EQ(sa.skipped, 3);
  EXPECT_EQ(sb.skipped, 3);
}

// Gradients that overflow at every scale halve it every iteration, down to 2^-24: a skipped
// iteration that ran there stops training with the reason, at the next display, or at the
// end of training without display. The scale never goes below 2^-24, so a snapshot of it
// restores.
TEST(LossScaling, AScaleThatCollapsesStopsTrainingWithTheReason) {
  NativeBackend native;
  Solver solver(fp16_solver("display: 1", 2e-7f), boosted_mlp("0,1,2,3,4,5,6,7,8,9"), native);
  feed(solver);
  const std::string error = testing::error_of([&] { solver.step(10); });
  // Iterations 0 and 1 ran at 2e-7 and 1e-7 (halved onto 2^-24), iteration 2 at 2^-24.
  EXPECT_THAT(error, HasSubstr("training diverged at iteration 2: the gradients are not "
                               "finite at any loss scale (3 iterations skipped in all, the last "
                               "at the smallest scale, 2^-24)"));
  EXPECT_THAT(error, HasSubstr("Run that part of the net in FP32 or BF16"));
  EXPECT_EQ(solver.loss_scale_state().scale, std::ldexp(1.0f, -24));

  testing::TempDir dir;
  const std::string prefix = dir / "collapsed";
  Solver quiet(fp16_solver("max_iter: 40 snapshot_prefix: \"" + prefix + "\"", 1),
               boosted_mlp("0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,"
                           "26,27,28,29,30,31,32,33,34,35,36,37,38,39"),
               native);
  feed(quiet);
  EXPECT_THAT(testing::error_of([&] { quiet.solve(); }),
              HasSubstr("training diverged at iteration 40: the gradients are not finite at any "
                        "loss scale (40 iterations skipped"));
  EXPECT_EQ(quiet.loss_scale_state().scale, std::ldexp(1.0f, -24));
  const SnapshotPaths paths = quiet.snapshot();
  Solver resumed(fp16_solver("", 1), boosted_mlp(""), native);
  resumed.restore(paths.state);
  EXPECT_EQ(resumed.loss_scale_state().scale, std::ldexp(1.0f, -24));
  EXPECT_EQ(resumed.loss_scale_state().skipped, 40);
}

TEST(LossScaling, ItsFieldsAreRefusedWithoutFp16Layers) {
  NativeBackend native;
  SolverParameter param = fp16_solver();
  param.set_precision(BF16);
  const std::string error =
      testing::error_of([&] { Solver refused(param, boosted_mlp(""), native); });
  EXPECT_THAT(error, HasSubstr("the solver sets loss_scale, but no layer of the TRAIN net "
                               "'scaled' runs in FP16, so nothing would use it"));
  param.clear_loss_scale();
  param.clear_loss_scale_growth_interval();
  EXPECT_FALSE(Solver(param, boosted_mlp(""), native).scales_loss());
}

}  // namespace
}  // namespace lamina
