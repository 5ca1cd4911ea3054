// Learning-rate policies as free functions (lr_policy.hpp): every policy against values
// worked out by hand at several iterations, including its boundaries, with no net or solver.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/lr_policy.hpp"
#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;

struct PolicyCase {
  const char* name;
  const char* settings;               // a solver prototxt
  std::map<int64_t, double> expected;  // iteration -> rate
};

class LrPolicyValues : public ::testing::TestWithParam<PolicyCase> {};

TEST_P(LrPolicyValues, MatchTheClosedFormAtEachIteration) {
  const PolicyCase& c = GetParam();
  const SolverParameter p = parse_solver_parameter(c.settings, c.name);
  for (const auto& [iter, rate] : c.expected)  // base_lr and gamma are floats: 1e-6
    EXPECT_NEAR(learning_rate(p, iter), rate, 1e-12 + 1e-6 * rate) << "iteration " << iter;
}

// The backend's advance of the step state follows the same schedule: at each iteration the
// rate is the policy's, the iteration advances by one, Adam's bias correction is for the
// next update, and the gradient scale is 1/iter_size, clipped to clip_gradients.
TEST_P(LrPolicyValues, AdvanceStepFollowsTheSchedule) {
  const PolicyCase& c = GetParam();
  const SolverParameter p = parse_solver_parameter(c.settings, c.name);
  NativeBackend backend;
  StepSchedule schedule;
  schedule.lr = lr_schedule(p);  // host memory: the Native backend's
  for (const auto& [iter, rate] : c.expected) {
    StepState state;
    state.iter = iter;
    backend.advance_step(schedule, &state);
    EXPECT_EQ(state.lr, float(learning_rate(p, iter))) << "iteration " << iter;
    EXPECT_NEAR(state.lr, rate, 1e-12 + 1e-6 * rate) << "iteration " << iter;
    EXPECT_EQ(state.iter, iter + 1);
    EXPECT_EQ(state.grad_scale, 1.0f);
    EXPECT_EQ(state.correction, 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(
    LrPolicy, LrPolicyValues,
    ::testing::Values(
        PolicyCase{"fixed", "base_lr: 0.01", {{0, 0.01}, {1, 0.01}, {1000000, 0.01}}},
        // base_lr * gamma ^ floor(iter / stepsize): drops at 3, 6, 9, ...
        PolicyCase{"step",
                   "base_lr: 0.1 lr_policy: 'step' gamma: 0.5 stepsize: 3",
                   {{0, 0.1}, {2, 0.1}, {3, 0.05}, {5, 0.05}, {6, 0.025}, {10, 0.0125}}},
        // Past INT_MAX: the iteration is an int64.
        PolicyCase{"step_int64",
                   "base_lr: 1 lr_policy: 'step' gamma: 0.5 stepsize: 1000000000",
                   {{2999999999, 0.25}, {3000000000, 0.125}}},
        // Drops by gamma at each stepvalue, the stepvalue itself included.
        PolicyCase{"multistep",
                   "base_lr: 1 lr_policy: 'multistep' gamma: 0.1 stepvalue: 5 stepvalue: 8",
                   {{0, 1}, {4, 1}, {5, 0.1}, {7, 0.1}, {8, 0.01}, {100, 0.01}}},
        PolicyCase{"exp", "base_lr: 2 lr_policy: 'exp' gamma: 0.5",
                   {{0, 2}, {1, 1}, {3, 0.25}, {10, 2.0 / 1024}}},
        // Caffe's LeNet: 0.01 (1 + 1e-4 iter) ^ -0.75; 2^-0.75 and 4^-0.75 at 1e4 and 3e4.
        PolicyCase{"inv",
                   "base_lr: 0.01 lr_policy: 'inv' gamma: 0.0001 power: 0.75",
                   {{0, 0.01},
                    {10000, 0.01 * 0.59460355750136051},
                    {30000, 0.01 * 0.35355339059327379}}},
        // (1 - iter / max_iter) ^ power, 0 from max_iter on.
        PolicyCase{"poly",
                   "base_lr: 0.1 lr_policy: 'poly' power: 2 max_iter: 10",
                   {{0, 0.1}, {5, 0.025}, {9, 0.001}, {10, 0}, {15, 0}}},
        PolicyCase{"poly_sqrt",
                   "base_lr: 0.1 lr_policy: 'poly' power: 0.5 max_iter: 100",
                   {{0, 0.1}, {75, 0.05}, {99, 0.01}}},
        // Falls through base_lr / 2 at stepsize when gamma < 0 ...
        PolicyCase{"sigmoid_decay",
                   "base_lr: 1 lr_policy: 'sigmoid' gamma: -1 stepsize: 10",
                   {{0, 1 / (1 + std::exp(-10.0))}, {10, 0.5}, {20, 1 / (1 + std::exp(10.0))}}},
        // ... and rises through it when gamma > 0 (a warm-up).
        PolicyCase{"sigmoid_rise",
                   "base_lr: 0.2 lr_policy: 'sigmoid' gamma: 0.5 stepsize: 4",
                   {{0, 0.2 / (1 + std::exp(2.0))}, {4, 0.1}, {8, 0.2 / (1 + std::exp(-2.0))}}},
        // base_lr (1 + cos(pi iter / max_iter)) / 2, 0 from max_iter on.
        PolicyCase{"cosine",
                   "base_lr: 0.2 lr_policy: 'cosine' max_iter: 100",
                   {{0, 0.2}, {25, 0.1 * (1 + std::sqrt(0.5))}, {50, 0.1}, {100, 0}, {200, 0}}}),
    [](const ::testing::TestParamInfo<PolicyCase>& info) { return std::string(info.param.name); });

TEST(AdvanceStep, ScalesForIterSizeClipsAndCorrectsForAdam) {
  NativeBackend backend;
  StepSchedule schedule;
  schedule.lr.base_lr = 0.1;
  schedule.iter_scale = 0.25f;  // iter_size 4
  StepState state;
  state.iter = 9;
  backend.advance_step(schedule, &state);
  EXPECT_EQ(state.grad_scale, 0.25f);  // no clipping: grad_sumsq is not read
  // Clipping at 2: the averaged gradient's norm sqrt(400) / 4 = 5 is scaled to 2.
  schedule.clip = 2.0f;
  state.grad_sumsq = 400.0f;
  backend.advance_step(schedule, &state);
  EXPECT_FLOAT_EQ(state.grad_scale, 0.25f * 2.0f / 5.0f);
  state.grad_sumsq = 16.0f;  // norm 1: below the threshold, unchanged
  backend.advance_step(schedule, &state);
  EXPECT_EQ(state.grad_scale, 0.25f);
  // Adam's correction for update t = iter + 1 = 13.
  schedule.adam = true;
  schedule.beta1 = 0.9f;
  schedule.beta2 = 0.999f;
  backend.advance_step(schedule, &state);
  const double t = 13;
  EXPECT_FLOAT_EQ(state.correction, float(std::sqrt(1 - std::pow(double(0.999f), t)) /
                                          (1 - std::pow(double(0.9f), t))));
  EXPECT_EQ(state.iter, 13);
  // The iteration's loss goes to the ring's slot for the iteration and into the running sum.
  float loss = 2.5f, sum = 1.0f;
  std::vector<float> ring(5, -1.0f);
  schedule.loss = &loss;
  schedule.ring = ring.data();
  schedule.ring_len = 5;
  schedule.loss_sum = &sum;
  backend.advance_step(schedule, &state);  // iteration 13: slot 3
  loss = 0.5f;
  backend.advance_step(schedule, &state);  // iteration 14: slot 4
  EXPECT_EQ(ring, (std::vector<float>{-1.0f, -1.0f, -1.0f, 2.5f, 0.5f}));
  EXPECT_EQ(sum, 4.0f);
  EXPECT_EQ(state.iter, 15);
}

TEST(LrPolicy, NamesAndFieldsOfEveryPolicy) {
  struct Expected {
    const char* name;
    LrPolicy policy;
    LrPolicyFields fields;
  };
  const Expected all[] = {
      {"fixed", LrPolicy::kFixed, {}},
      {"step", LrPolicy::kStep, {true, false, true, false, false}},
      {"multistep", LrPolicy::kMultistep, {true, false, false, true, false}},
      {"exp", LrPolicy::kExp, {true, false, false, false, false}},
      {"inv", LrPolicy::kInv, {true, true, false, false, false}},
      {"poly", LrPolicy::kPoly, {false, true, false, false, true}},
      {"sigmoid", LrPolicy::kSigmoid, {true, false, true, false, false}},
      {"cosine", LrPolicy::kCosine, {false, false, false, false, true}},
  };
  for (const Expected& e : all) {
    ASSERT_EQ(find_lr_policy(e.name), e.policy) << e.name;
    const LrPolicyFields f = lr_policy_fields(e.policy);
    EXPECT_EQ(f.gamma, e.fields.gamma) << e.name;
    EXPECT_EQ(f.power, e.fields.power) << e.name;
    EXPECT_EQ(f.stepsize, e.fields.stepsize) << e.name;
    EXPECT_EQ(f.stepvalue, e.fields.stepvalue) << e.name;
    EXPECT_EQ(f.max_iter, e.fields.max_iter) << e.name;
    EXPECT_THAT(kLrPolicyNames, HasSubstr(e.name));
  }
  EXPECT_EQ(find_lr_policy("Step"), std::nullopt);  // names are case-sensitive, as in Caffe
  EXPECT_EQ(find_lr_policy("linear"), std::nullopt);
}

TEST(LrPolicy, UnknownPolicyIsAnErrorListingTheKnownOnes) {
  const SolverParameter p = parse_solver_parameter("base_lr: 0.1 lr_policy: 'linear'", "s");
  EXPECT_THAT(testing::error_of([&] { learning_rate(p, 0); }),
              ::testing::AllOf(HasSubstr("'linear'"), HasSubstr(kLrPolicyNames)));
}

}  // namespace
}  // namespace lamina
