// The solver's configuration checks (solver_config.hpp), without a net: every value refused
// names its field (and the file and line when read from a file); every value Caffe's own
// solver files use is accepted.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_config.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

// The message check_solver_parameter gives for settings, "" when it accepts them.
std::string refusal(const std::string& settings, const std::string& source = "solver") {
  const SolverParameter p = parse_solver_parameter(settings, source);
  try {
    check_solver_parameter(p, source);
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}


// ---------------------------------------------------------------------------------------
// Refused values

struct RefusedCase {
  const char* name;
  const char* settings;
  std::vector<const char*> message_has;
};

class SolverConfigRefuses : public ::testing::TestWithParam<RefusedCase> {};

TEST_P(SolverConfigRefuses, WithAMessageNamingTheField) {
  const RefusedCase& c = GetParam();
  const std::string message = refusal(c.settings);
  ASSERT_NE(message, "") << c.settings << " was accepted";
  // Not read from a file: the source name leads, without a line.
  EXPECT_THAT(message, StartsWith("solver: "));
  for (const char* part : c.message_has) EXPECT_THAT(message, HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    SolverConfig, SolverConfigRefuses,
    ::testing::Values(
        // base_lr
        RefusedCase{"BaseLrMissing", "momentum: 0.9", {"base_lr is not set"}},
        RefusedCase{"BaseLrZero", "base_lr: 0", {"base_lr is 0", "> 0"}},
        RefusedCase{"BaseLrNegative", "base_lr: -0.01", {"base_lr is -0.01", "> 0"}},
        RefusedCase{"BaseLrNaN", "base_lr: nan", {"base_lr is nan", "finite"}},
        RefusedCase{"BaseLrInf", "base_lr: inf", {"base_lr is inf", "finite"}},
        RefusedCase{"BaseLrOverflowsAFloat", "base_lr: 1e39", {"base_lr is inf", "3.4e38"}},
        // momentum, momentum2, rms_decay, delta
        RefusedCase{"MomentumOne", "base_lr: 0.1 momentum: 1", {"momentum is 1", "[0, 1)"}},
        RefusedCase{"MomentumNegative", "base_lr: 0.1 momentum: -0.5",
                    {"momentum is -0.5", "[0, 1)"}},
        RefusedCase{"MomentumNaN", "base_lr: 0.1 momentum: nan", {"momentum is nan"}},
        RefusedCase{"NesterovMomentumAboveOne", "type: 'Nesterov' base_lr: 0.1 momentum: 1.5",
                    {"momentum is 1.5", "[0, 1)"}},
        RefusedCase{"AdamBeta1One", "type: 'Adam' base_lr: 0.1 momentum: 1",
                    {"momentum is 1", "beta1"}},
        RefusedCase{"AdamBeta2One", "type: 'Adam' base_lr: 0.1 momentum2: 1",
                    {"momentum2 is 1", "beta2", "[0, 1)"}},
        RefusedCase{"AdamWBeta2Negative", "type: 'AdamW' base_lr: 0.1 momentum2: -0.1",
                    {"momentum2 is -0.1"}},
        RefusedCase{"RmsDecayOne", "type: 'RMSProp' base_lr: 0.1 rms_decay: 1",
                    {"rms_decay is 1", "[0, 1)"}},
        RefusedCase{"RmsDecayNegative", "type: 'RMSProp' base_lr: 0.1 rms_decay: -0.9",
                    {"rms_decay is -0.9"}},
        RefusedCase{"RMSPropWithMomentum", "type: 'RMSProp' base_lr: 0.1 momentum: 0.9",
                    {"momentum is 0.9", "RMSProp", "its decay is rms_decay"}},
        RefusedCase{"AdaGradWithMomentum", "type: 'AdaGrad' base_lr: 0.1 momentum: 0.5",
                    {"momentum is 0.5", "AdaGrad"}},
        RefusedCase{"RMSPropEnumWithMomentum", "solver_type: RMSPROP base_lr: 0.1 momentum: 0.5",
                    {"momentum is 0.5", "RMSProp takes no momentum", "rms_decay"}},
        RefusedCase{"AdaDeltaMomentumOne", "type: 'AdaDelta' base_lr: 1 momentum: 1",
                    {"momentum is 1", "[0, 1)", "AdaDelta's decay"}},
        RefusedCase{"AdaDeltaMomentumNegative", "type: 'AdaDelta' base_lr: 1 momentum: -0.1",
                    {"momentum is -0.1", "[0, 1)"}},
        RefusedCase{"AdaDeltaDeltaZero", "type: 'AdaDelta' base_lr: 1 momentum: 0.95 delta: 0",
                    {"delta is 0", "> 0", "AdaDelta"}},
        RefusedCase{"AdaDeltaEnumDeltaNegative",
                    "solver_type: ADADELTA base_lr: 1 momentum: 0.95 delta: -1e-6",
                    {"delta is -1e-06", "AdaDelta's denominator"}},
        RefusedCase{"Momentum2WithAdaDelta", "type: 'AdaDelta' base_lr: 1 momentum2: 0.9",
                    {"momentum2 is set but solver type AdaDelta does not use it"}},
        RefusedCase{"RmsDecayWithAdaDeltaEnum", "solver_type: ADADELTA base_lr: 1 rms_decay: 0.9",
                    {"rms_decay is set but solver type AdaDelta does not use it"}},
        // type and Caffe's older solver_type
        RefusedCase{"TypeAndSolverTypeDisagree", "type: 'AdaGrad' solver_type: ADAM base_lr: 1",
                    {"solver_type is ADAM but type is 'AdaGrad'", "different rules"}},
        RefusedCase{"AdamWAndSolverTypeAdam", "type: 'AdamW' solver_type: ADAM base_lr: 1",
                    {"solver_type is ADAM but type is 'AdamW'"}},
        RefusedCase{"SGDWrittenAndSolverTypeNesterov",
                    "type: 'SGD' solver_type: NESTEROV base_lr: 1",
                    {"solver_type is NESTEROV but type is 'SGD'"}},
        RefusedCase{"Momentum2WithSGD", "base_lr: 0.1 momentum2: 0.9",
                    {"momentum2 is set but solver type SGD does not use it"}},
        RefusedCase{"RmsDecayWithAdam", "type: 'Adam' base_lr: 0.1 rms_decay: 0.9",
                    {"rms_decay is set but solver type Adam does not use it"}},
        RefusedCase{"DeltaWithNesterov", "type: 'Nesterov' base_lr: 0.1 delta: 1e-6",
                    {"delta is set but solver type Nesterov does not use it"}},
        RefusedCase{"AdamDeltaZero", "type: 'Adam' base_lr: 0.1 delta: 0", {"delta is 0", "> 0"}},
        RefusedCase{"RMSPropDeltaNegative", "type: 'RMSProp' base_lr: 0.1 delta: -1e-8",
                    {"delta is -1e-08", "> 0"}},
        RefusedCase{"AdaGradDeltaInf", "type: 'AdaGrad' base_lr: 0.1 delta: inf",
                    {"delta is inf"}},
        // weight decay, clipping
        RefusedCase{"WeightDecayNegative", "base_lr: 0.1 weight_decay: -0.0005",
                    {"weight_decay is -0.0005", ">= 0"}},
        RefusedCase{"WeightDecayNaN", "base_lr: 0.1 weight_decay: nan", {"weight_decay is nan"}},
        RefusedCase{"WeightDecayInf", "base_lr: 0.1 weight_decay: -inf", {"weight_decay is -inf"}},
        RefusedCase{"ClipGradientsNegative", "base_lr: 0.1 clip_gradients: -1",
                    {"clip_gradients is -1", "leave clip_gradients out"}},
        RefusedCase{"ClipGradientsNaN", "base_lr: 0.1 clip_gradients: nan",
                    {"clip_gradients is nan"}},
        // the policies' fields
        RefusedCase{"GammaNaN", "base_lr: 0.1 lr_policy: 'step' gamma: nan stepsize: 10",
                    {"gamma is nan"}},
        RefusedCase{"StepGammaZero", "base_lr: 0.1 lr_policy: 'step' gamma: 0 stepsize: 10",
                    {"gamma is 0", "'step'", "> 0"}},
        RefusedCase{"ExpGammaNegative", "base_lr: 0.1 lr_policy: 'exp' gamma: -0.5",
                    {"gamma is -0.5", "'exp'", "> 0"}},
        RefusedCase{"MultistepGammaNegative",
                    "base_lr: 0.1 lr_policy: 'multistep' gamma: -0.1 stepvalue: 10",
                    {"gamma is -0.1", "'multistep'"}},
        RefusedCase{"InvGammaZero", "base_lr: 0.1 lr_policy: 'inv' gamma: 0 power: 0.75",
                    {"gamma is 0", "'inv'", "gamma > 0"}},
        RefusedCase{"SigmoidGammaZero", "base_lr: 0.1 lr_policy: 'sigmoid' gamma: 0 stepsize: 10",
                    {"gamma is 0", "'sigmoid'"}},
        RefusedCase{"InvPowerInf", "base_lr: 0.1 lr_policy: 'inv' gamma: 0.1 power: inf",
                    {"power is inf"}},
        RefusedCase{"InvPowerNegative", "base_lr: 0.1 lr_policy: 'inv' gamma: 0.1 power: -1",
                    {"power is -1", "'inv'", "power > 0"}},
        RefusedCase{"PolyPowerZero", "base_lr: 0.1 lr_policy: 'poly' power: 0 max_iter: 10",
                    {"power is 0", "'poly'"}},
        RefusedCase{"PolyMaxIterZero", "base_lr: 0.1 lr_policy: 'poly' power: 1",
                    {"'poly' needs max_iter > 0"}},
        RefusedCase{"ExpRateOverflows", "base_lr: 0.1 lr_policy: 'exp' gamma: 2 max_iter: 1000",
                    // 0.1 * 2^131 < FLT_MAX < 0.1 * 2^132
                    {"gamma is 2", "overflow", "at iteration 132", "max_iter is 1000"}},
        RefusedCase{"StepRateOverflows",
                    "base_lr: 1 lr_policy: 'step' gamma: 1e20 stepsize: 5 max_iter: 100",
                    {"gamma is 1e+20", "overflow", "at iteration 10 "}},
        RefusedCase{"StepWithoutStepsize", "base_lr: 0.1 lr_policy: 'step' gamma: 0.5",
                    {"lr_policy 'step' needs stepsize"}},
        RefusedCase{"MultistepWithoutStepvalue", "base_lr: 0.1 lr_policy: 'multistep' gamma: 0.5",
                    {"lr_policy 'multistep' needs stepvalue"}},
        RefusedCase{"StepsizeWithFixed", "base_lr: 0.1 stepsize: 10",
                    {"stepsize is set but lr_policy 'fixed' does not use it"}},
        RefusedCase{"GammaWithCosine", "base_lr: 0.1 lr_policy: 'cosine' max_iter: 9 gamma: 0.1",
                    {"gamma is set but lr_policy 'cosine' does not use it"}},
        RefusedCase{"StepsizeZero", "base_lr: 0.1 lr_policy: 'step' gamma: 0.1 stepsize: 0",
                    {"stepsize is 0", "> 0"}},
        RefusedCase{"SigmoidStepsizeNegative",
                    "base_lr: 0.1 lr_policy: 'sigmoid' gamma: -0.1 stepsize: -5",
                    {"stepsize is -5"}},
        RefusedCase{"StepvalueNegative",
                    "base_lr: 0.1 lr_policy: 'multistep' gamma: 0.1 stepvalue: -5",
                    {"stepvalue -5 is negative"}},
        RefusedCase{"StepvalueDecreasing",
                    "base_lr: 0.1 lr_policy: 'multistep' gamma: 0.1 stepvalue: 20 stepvalue: 10",
                    {"stepvalue must increase", "20 then 10"}},
        RefusedCase{"StepvalueRepeated",
                    "base_lr: 0.1 lr_policy: 'multistep' gamma: 0.1 stepvalue: 10 stepvalue: 10",
                    {"stepvalue must increase", "10 then 10"}},
        // the run
        RefusedCase{"RandomSeedMinusOne", "base_lr: 0.1 random_seed: -1",
                    {"random_seed is -1", ">= 0", "leave random_seed out"}},
        RefusedCase{"RandomSeedNegative", "base_lr: 0.1 random_seed: -42", {"random_seed is -42"}},
        RefusedCase{"TestIterWithoutTestInterval", "base_lr: 0.1 test_iter: 10",
                    {"test_iter is set", "test_interval"}},
        RefusedCase{"TestIntervalWithoutTestIter", "base_lr: 0.1 test_interval: 10",
                    {"test_interval is 10", "test_iter"}},
        RefusedCase{"TestIntervalNegative", "base_lr: 0.1 test_interval: -1",
                    {"test_interval must be >= 0"}},
        RefusedCase{"TestInitializationWithoutTests", "base_lr: 0.1 test_initialization: true",
                    {"test_initialization is set", "test_interval"}},
        RefusedCase{"TestIterZero", "base_lr: 0.1 test_iter: 0 test_interval: 10",
                    {"test_iter must be > 0"}},
        RefusedCase{"SecondTestIterZero",
                    "base_lr: 0.1 test_iter: 1 test_iter: 0 test_interval: 10",
                    {"test_iter must be > 0, got 0"}},
        RefusedCase{"SnapshotDiff", "base_lr: 0.1 snapshot_diff: true",
                    {"snapshot_diff", "do not store gradients"}},
        RefusedCase{"MaxIterNegative", "base_lr: 0.1 max_iter: -1", {"max_iter must be >= 0"}},
        RefusedCase{"DisplayNegative", "base_lr: 0.1 display: -10", {"display must be >= 0"}},
        RefusedCase{"AverageLossZero", "base_lr: 0.1 average_loss: 0",
                    {"average_loss must be >= 1"}},
        RefusedCase{"IterSizeZero", "base_lr: 0.1 iter_size: 0", {"iter_size must be >= 1"}},
        RefusedCase{"DeviceIdNegative", "base_lr: 0.1 solver_mode: GPU device_id: -1",
                    {"device_id is -1", ">= 0"}},
        RefusedCase{"DeviceIdOnTheCpu", "base_lr: 0.1 device_id: 1",
                    {"device_id is set but solver_mode is CPU"}},
        RefusedCase{"SnapshotNegative", "base_lr: 0.1 snapshot: -5", {"snapshot must be >= 0"}},
        RefusedCase{"SnapshotWithoutPrefix", "base_lr: 0.1 snapshot: 10",
                    {"snapshot is 10", "snapshot_prefix is not set"}},
        RefusedCase{"EmptyPrefixWithSnapshot", "base_lr: 0.1 snapshot: 100 snapshot_prefix: ''",
                    {"snapshot_prefix is \"\"", "snapshot is 100", "leave snapshot_prefix out",
                     "beside the solver file"}},
        RefusedCase{"EmptyPrefixAtTheEnd", "base_lr: 0.1 snapshot_prefix: ''",
                    {"snapshot_prefix is \"\"", "snapshot_after_train is true (the default)",
                     "snapshot_after_train: false"}},
        RefusedCase{"EmptyPrefixAtTheEndExplicit",
                    "base_lr: 0.1 snapshot_prefix: '' snapshot_after_train: true",
                    {"snapshot_after_train is true,"}},
        // names
        RefusedCase{"UnknownType", "base_lr: 0.1 type: 'Adamax'", {"type 'Adamax' is unknown"}},
        RefusedCase{"UnknownPolicy", "base_lr: 0.1 lr_policy: 'linear'",
                    {"lr_policy 'linear' is unknown", "cosine"}},
        RefusedCase{"UnknownRegularization", "base_lr: 0.1 regularization_type: 'L3'",
                    {"regularization_type 'L3'"}}),
    [](const ::testing::TestParamInfo<RefusedCase>& info) { return std::string(info.param.name); });

// Every float field of SolverParameter, present or added later, is refused when not finite,
// by name, before any other check can misread it.
TEST(SolverConfig, EveryFloatFieldMustBeFinite) {
  namespace pb = google::protobuf;
  const pb::Descriptor* descriptor = SolverParameter::descriptor();
  int checked = 0;
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const pb::FieldDescriptor* field = descriptor->field(i);
    if (field->cpp_type() != pb::FieldDescriptor::CPPTYPE_FLOAT) continue;
    ASSERT_FALSE(field->is_repeated()) << "extend this test to repeated " << field->name();
    for (const float bad : {NAN, INFINITY, -INFINITY}) {
      SolverParameter p = parse_solver_parameter("base_lr: 0.1", "s");
      p.GetReflection()->SetFloat(&p, field, bad);
      const std::string message = testing::error_of([&] { check_solver_parameter(p, "s"); });
      EXPECT_THAT(message, HasSubstr(field->name() + " is ")) << "value " << bad;
      EXPECT_THAT(message, HasSubstr("finite")) << field->name() << " = " << bad;
    }
    ++checked;
  }
  EXPECT_GE(checked, 8);  // base_lr, gamma, power, momentum, momentum2, rms_decay, delta, ...
}

// ---------------------------------------------------------------------------------------
// Accepted values

TEST(SolverConfig, AcceptsWhatCaffeRequiresAndTheBoundaryValues) {
  for (const char* settings : {
           // Caffe's RMSPropSolver and AdaGradSolver require momentum 0.
           "type: 'RMSProp' base_lr: 0.01 momentum: 0 rms_decay: 0.98",
           "type: 'AdaGrad' base_lr: 0.01 momentum: 0 delta: 1e-8",
           "type: 'RMSProp' base_lr: 0.01 rms_decay: 0",
           "solver_type: RMSPROP base_lr: 0.01 momentum: 0 rms_decay: 0.98",
           // Caffe's examples/mnist/lenet_adadelta_solver.prototxt; momentum 0 too.
           "type: 'AdaDelta' base_lr: 1 momentum: 0.95 delta: 1e-6 weight_decay: 0.0005",
           "solver_type: ADADELTA base_lr: 1 momentum: 0.95 delta: 1e-6",
           "type: 'AdaDelta' base_lr: 1 momentum: 0",
           "type: 'AdaDelta' base_lr: 1 momentum: 0.999999",
           // type and solver_type naming the same rule.
           "type: 'AdaDelta' solver_type: ADADELTA base_lr: 1 momentum: 0.9",
           "type: 'SGD' solver_type: SGD base_lr: 1",
           "type: 'Adam' solver_type: ADAM base_lr: 0.001",
           "base_lr: 0.1 momentum: 0",
           "base_lr: 0.1 momentum: 0.999",
           "type: 'Adam' base_lr: 0.001 momentum: 0 momentum2: 0",
           "base_lr: 1e-30 weight_decay: 0",
           "base_lr: 0.1 clip_gradients: 0",  // 0: no clipping
           "base_lr: 0.1 clip_gradients: 35",
           "base_lr: 0.1 random_seed: 0",
           "base_lr: 0.1 random_seed: 9223372036854775807",
           "base_lr: 0.1 test_iter: 1 test_interval: 1 test_initialization: false",
           "base_lr: 0.1 snapshot_prefix: '' snapshot_after_train: false",  // no snapshots
           "base_lr: 0.1 snapshot: 0 snapshot_prefix: 'out/run'",
           "base_lr: 0.1 solver_mode: GPU device_id: 3",
           // Rates that grow, but stay finite up to max_iter.
           "base_lr: 0.1 lr_policy: 'exp' gamma: 2 max_iter: 131",
           "base_lr: 0.1 lr_policy: 'step' gamma: 10 stepsize: 100 max_iter: 1000",
           "base_lr: 0.1 lr_policy: 'multistep' gamma: 0.1 stepvalue: 0 stepvalue: 1000",
           "base_lr: 0.1 lr_policy: 'sigmoid' gamma: 0.05 stepsize: 100",  // a warm-up
           "base_lr: 0.1 lr_policy: 'sigmoid' gamma: -0.05 stepsize: 100",
           "base_lr: 0.1 lr_policy: 'poly' power: 0.5 max_iter: 1",
           "base_lr: 0.1 lr_policy: 'cosine' max_iter: 2147483647",
       }) {
    EXPECT_EQ(refusal(settings), "") << settings;
  }
}

// A program that calls Solver::test() itself may give test_iter alone (the MNIST example and
// the benchmarks do); solve() alone would never run that test net.
TEST(SolverConfig, TestIterAloneOnlyWhenTheCallerRunsTheTests) {
  const SolverParameter alone = parse_solver_parameter("base_lr: 0.1 test_iter: 100", "s");
  EXPECT_NO_THROW(check_solver_parameter(alone, "s", TestRunner::kCaller));
  EXPECT_THAT(testing::error_of([&] { check_solver_parameter(alone, "s", TestRunner::kSolve); }),
              HasSubstr("test_iter is set but no test_interval"));
  const SolverParameter interval = parse_solver_parameter("base_lr: 0.1 test_interval: 5", "s");
  EXPECT_THAT(
      testing::error_of([&] { check_solver_parameter(interval, "s", TestRunner::kCaller); }),
      HasSubstr("test_interval is 5: give test_iter"));
}

// Every solver file the project ships, and Caffe's LeNet solver as Caffe writes it (less the
// fields about files and devices), passes.
TEST(SolverConfig, AcceptsTheShippedSolverFiles) {
  int files = 0;
  for (const char* dir : {"models", "examples"}) {
    for (const auto& entry : fs::recursive_directory_iterator(testing::source_dir() + "/" + dir)) {
      const std::string path = entry.path().string();
      const std::string suffix = "_solver.prototxt";
      if (path.size() < suffix.size() ||
          path.compare(path.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      EXPECT_NO_THROW(check_solver_parameter(read_solver_parameter(path), path)) << path;
      ++files;
    }
  }
  EXPECT_GE(files, 4);
  EXPECT_EQ(refusal("test_iter: 100 test_interval: 500 base_lr: 0.01 momentum: 0.9 "
                    "weight_decay: 0.0005 lr_policy: 'inv' gamma: 0.0001 power: 0.75 "
                    "display: 100 max_iter: 10000"),
            "");
}

// RMSProp with Caffe's `momentum: 0` trains exactly as RMSProp without it.
TEST(SolverConfig, RMSPropWithMomentumZeroTrainsAsWithout) {
  const NetParameter net = parse_net_parameter(R"(
    name: "tiny"
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
    layer { name: "fc" type: "Linear" bottom: "x" top: "y"
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" })",
                                               "tiny");
  NativeBackend backend;
  std::vector<float> weights[2];
  const char* extra[2] = {"", " momentum: 0"};
  for (int k = 0; k < 2; ++k) {
    Solver solver(parse_solver_parameter(std::string("type: 'RMSProp' base_lr: 0.01 "
                                                     "rms_decay: 0.9 random_seed: 5") + extra[k],
                                         "s"),
                  net, backend);
    solver.net().blob("x").copy_data_from_host(testing::random_values(12, 1));
    solver.net().blob("t").copy_data_from_host(testing::random_values(8, 2));
    solver.step(3);
    for (int i = 0; i < solver.net().num_layers(); ++i)
      for (const auto& param : solver.net().layer(i).params()) {
        const std::vector<float> values = param.tensor->copy_data_to_host();
        weights[k].insert(weights[k].end(), values.begin(), values.end());
      }
  }
  ASSERT_EQ(weights[0].size(), 8u);  // (2, 3) weights, 2 biases
  EXPECT_EQ(weights[0], weights[1]);
}

// ---------------------------------------------------------------------------------------
// file:line

TEST(SolverConfig, ErrorsFromAFileNameTheFileAndTheFieldsLine) {
  TempDir dir;
  struct FileCase {
    const char* text;
    int line;
    const char* message;
  };
  for (const FileCase& c : std::vector<FileCase>{
           {"# a solver\nnet: \"net.prototxt\"\nbase_lr: 0.01\nmomentum: 1.5\n", 4,
            "momentum is 1.5"},
           {"base_lr: 0.01\n\nrandom_seed: -1\nmax_iter: 10\n", 3, "random_seed is -1"},
           {"base_lr: 0.01\nlr_policy: \"multistep\"\ngamma: 0.1\nstepvalue: 100\n"
            "stepvalue: 300\nstepvalue: 200\n", 6, "stepvalue must increase"},
           {"base_lr: 0.01\ntest_interval: 100\ntest_iter: 1\ntest_iter: 0\n", 4,
            "test_iter must be > 0"},
           {"base_lr: 0.01\nmax_iter: 10\ntest_iter: 50\n", 3, "test_iter is set"},
           {"type: \"RMSProp\"\nbase_lr: 0.01\nmomentum: 0.9\n", 3, "its decay is rms_decay"},
           {"base_lr: 0.01\nsnapshot_prefix: \"\"\n", 2, "snapshot_prefix is \"\""},
           {"max_iter: 10\n  base_lr: nan\n", 2, "base_lr is nan"},
           {"base_lr: 0.01 type: \"Adamax\"\n", 1, "'Adamax'"},
           {"type: \"Adam\"\nbase_lr: 0.01\nsolver_type: SGD\n", 3, "solver_type is SGD"},
           {"solver_type: ADADELTA\nbase_lr: 1\nmomentum: 1\n", 3, "momentum is 1"},
       }) {
    const std::string path = dir.write("solver.prototxt", c.text);
    const std::string message = testing::error_of(
        [&] { check_solver_parameter(read_solver_parameter(path), path); });
    EXPECT_THAT(message, AllOf(StartsWith(path + ":" + std::to_string(c.line) + ": "),
                               HasSubstr(c.message)))
        << c.text;
  }
}

TEST(SolverConfig, AFieldNotInTheFileNamesTheFileAlone) {
  TempDir dir;
  // poly needs max_iter, which the file does not give.
  const std::string path =
      dir.write("poly.prototxt", "base_lr: 0.01\nlr_policy: \"poly\"\npower: 1\n");
  SolverParameter p = read_solver_parameter(path);
  EXPECT_THAT(testing::error_of([&] { check_solver_parameter(p, path); }),
              StartsWith(path + ": lr_policy 'poly' needs max_iter"));
  // A value changed after reading (as lamina train's flags do) is still found by its field.
  p.set_max_iter(10);
  p.set_momentum(2);
  EXPECT_THAT(testing::error_of([&] { check_solver_parameter(p, path); }),
              StartsWith(path + ": momentum is 2"));
}

// The empty prefix says where snapshots would go with the field left out.
TEST(SolverConfig, EmptySnapshotPrefixSaysWhereSnapshotsWouldGo) {
  TempDir dir;
  const std::string path = dir.write("mlp_solver.prototxt",
                                     "base_lr: 0.01\nsnapshot: 100\nsnapshot_prefix: \"\"\n");
  EXPECT_THAT(testing::error_of(
                  [&] { check_solver_parameter(read_solver_parameter(path), path); }),
              HasSubstr("writes them beside the solver file, named after it (" +
                        (dir.path() / "mlp_solver").string() + "_iter_N.{lamina,solverstate})"));
}

// Solver::from_file checks the solver before it reads the net, and names the solver's line.
TEST(SolverConfig, SolverFromFileRefusesBeforeReadingTheNet) {
  TempDir dir;
  const std::string path = dir.write(
      "solver.prototxt", "net: \"no_such_net.prototxt\"\nbase_lr: 0.01\nweight_decay: -1\n");
  NativeBackend backend;
  EXPECT_THAT(testing::error_of([&] { Solver::from_file(path, backend); }),
              AllOf(StartsWith(path + ":3: weight_decay is -1"),
                    ::testing::Not(HasSubstr("no_such_net"))));
}

TEST(SolverConfig, FieldLocationFallsBackToThePath) {
  TempDir dir;
  const SolverParameter& type = SolverParameter::default_instance();
  const std::string good = dir.write("good.prototxt", "base_lr: 0.1\n\nmax_iter: 5\n");
  EXPECT_EQ(field_location(good, type, "max_iter"), good + ":3");
  EXPECT_EQ(field_location(good, type, "momentum"), good);       // not in the file
  EXPECT_EQ(field_location(good, type, "no_such_field"), good);  // not in the message
  EXPECT_EQ(field_location("", type, "max_iter"), "");
  EXPECT_EQ(field_location("a name", type, "max_iter"), "a name");
  const std::string broken = dir.write("broken.prototxt", "base_lr: 0.1\nmax_iter: {\n");
  EXPECT_EQ(field_location(broken, type, "base_lr"), broken);
  EXPECT_EQ(field_location(dir.path().string(), type, "base_lr"), dir.path().string());
  // A FIFO is not opened (that would wait for a writer).
  const std::string fifo = (dir.path() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(field_location(fifo, type, "base_lr"), fifo);
  // Repeated fields: each value's own line.
  const std::string steps =
      dir.write("steps.prototxt", "stepvalue: 1\nstepvalue: 2\n\nstepvalue: 3\n");
  EXPECT_EQ(field_location(steps, type, "stepvalue", 0), steps + ":1");
  EXPECT_EQ(field_location(steps, type, "stepvalue", 2), steps + ":4");
}

TEST(SolverConfig, ParseSolverTypeNamesEveryRule) {
  const std::pair<const char*, UpdateRule> all[] = {
      {"SGD", UpdateRule::kSGD},         {"Nesterov", UpdateRule::kNesterov},
      {"Adam", UpdateRule::kAdam},       {"AdamW", UpdateRule::kAdamW},
      {"RMSProp", UpdateRule::kRMSProp}, {"AdaGrad", UpdateRule::kAdaGrad},
      {"AdaDelta", UpdateRule::kAdaDelta}};
  for (const auto& [name, rule] : all) {
    SolverParameter p;
    p.set_type(name);
    EXPECT_EQ(parse_solver_type(p), rule) << name;
    EXPECT_STREQ(solver_type_name(rule), name);
  }
  EXPECT_EQ(parse_solver_type(SolverParameter()), UpdateRule::kSGD);  // the default
  SolverParameter sgd;
  sgd.set_type("sgd");
  EXPECT_THAT(testing::error_of([&] { parse_solver_type(sgd, "x.prototxt"); }),
              AllOf(StartsWith("x.prototxt: solver type 'sgd' is unknown"), HasSubstr("SGD")));
}

// Caffe's older enum field: each value's rule where type is left out.
TEST(SolverConfig, SolverTypeEnumNamesItsRuleWhereTypeIsLeftOut) {
  const std::pair<SolverParameter::SolverType, UpdateRule> all[] = {
      {SolverParameter::SGD, UpdateRule::kSGD},
      {SolverParameter::NESTEROV, UpdateRule::kNesterov},
      {SolverParameter::ADAGRAD, UpdateRule::kAdaGrad},
      {SolverParameter::RMSPROP, UpdateRule::kRMSProp},
      {SolverParameter::ADADELTA, UpdateRule::kAdaDelta},
      {SolverParameter::ADAM, UpdateRule::kAdam}};
  ASSERT_EQ(std::size(all), size_t(SolverParameter::SolverType_ARRAYSIZE));
  for (const auto& [value, rule] : all) {
    SolverParameter p;
    p.set_solver_type(value);
    EXPECT_EQ(parse_solver_type(p), rule) << SolverParameter::SolverType_Name(value);
    p.set_type(solver_type_name(rule));  // both, agreeing
    EXPECT_EQ(parse_solver_type(p), rule) << SolverParameter::SolverType_Name(value);
  }
  // Read from text, as a Caffe solver file writes it.
  EXPECT_EQ(parse_solver_type(parse_solver_parameter("solver_type: ADADELTA base_lr: 1", "s")),
            UpdateRule::kAdaDelta);
}

}  // namespace
}  // namespace lamina
