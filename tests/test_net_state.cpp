// Caffe 1.0's net-level syntax: the old input header, NetState rules (phase, level, stage,
// not_stage in include and exclude), force_backward and propagate_down, layers sharing a
// name, debug_info's log lines, engine hints and ParamSpec.share_mode. The nets are in
// tests/data/ where they stand for a file a user writes; small error cases are inline.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/net.hpp"
#include "lamina/net_state.hpp"
#include "lamina/solver.hpp"
#include "syntax_tests.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;
using testing::error_of;
using testing::data_path;
using testing::LogLines;
using testing::native;

Net build(const std::string& text, Phase phase = TRAIN) {
  return Net(parse_net_parameter(text, "net.prototxt"), phase, native(), 1);
}

int index_of(Net& net, const std::string& name) {
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).name() == name) return i;
  throw Error("no layer '" + name + "'");
}

double sum_abs(const std::vector<float>& values) {
  double sum = 0;
  for (float v : values) sum += std::abs(double(v));
  return sum;
}

// ---------------------------------------------------------------------------------------
// The old input header

TEST(InputHeader, FourInputDimBecomeAnInputLayerNamedInput) {
  const std::string path = data_path("input_dim_net.prototxt");
  Net net(read_net_parameter(path), TEST, native(), 1, nullptr, path);
  EXPECT_EQ(net.layer(0).type(), "Input");
  EXPECT_EQ(net.layer(0).name(), "input");
  EXPECT_EQ(net.blob("data").shape(), Shape({2, 3, 4, 4}));
  EXPECT_EQ(net.blob("conv").shape(), Shape({2, 5, 2, 2}));
  EXPECT_EQ(net.blob("pool").shape(), Shape({2, 5, 1, 1}));
  net.blob("data").copy_data_from_host(testing::random_values(2 * 3 * 4 * 4, 3));
  net.forward();
  // The pool of each channel is the largest of its 2x2 rectified convolution outputs.
  const std::vector<float> conv = net.blob("conv").copy_data_to_host();
  const std::vector<float> pool = net.blob("pool").copy_data_to_host();
  for (int k = 0; k < 10; ++k)
    EXPECT_EQ(pool[k], *std::max_element(conv.begin() + 4 * k, conv.begin() + 4 * k + 4));
}

TEST(InputHeader, TwoInputsWithInputShapeTrain) {
  const std::string path = data_path("input_shape_net.prototxt");
  Net net(read_net_parameter(path), TRAIN, native(), 1, nullptr, path);
  EXPECT_EQ(net.blob("data").shape(), Shape({3, 4}));
  EXPECT_EQ(net.blob("target").shape(), Shape({3, 2}));
  net.blob("data").copy_data_from_host(testing::random_values(12, 5));
  net.blob("target").copy_data_from_host({1, 0, 0, 1, 1, 1});
  net.forward();
  net.arena().zero_diff();
  net.backward();
  EXPECT_GT(net.loss(), 0.0f);
  EXPECT_GT(sum_abs(net.arena().to_host(net.arena().diff())), 0.0);
}

TEST(InputHeader, CountsThatDoNotMatchSayWhatToWrite) {
  struct Case {
    const char* header;
    std::vector<const char*> message;
  };
  const std::vector<Case> cases = {
      {R"(input: "data" input_dim: 1 input_dim: 2 input_dim: 3)",
       {"names 1 input(s) ('data')", "gives 3 input_dim values", "four (num, channels"}},
      {R"(input: "a" input: "b" input_shape { dim: 1 })",
       {"names 2 input(s) ('a', 'b')", "gives 1 input_shape", "one input_shape"}},
      {R"(input: "a" input_shape { dim: 1 } input_dim: 1 input_dim: 1 input_dim: 1 input_dim: 1)",
       {"both input_shape and input_dim"}},
      {R"(input_shape { dim: 1 })", {"no input names the blob", "input: \"data\""}},
      {R"(input: "a")", {"gives 0 input_shape"}},
  };
  for (const Case& c : cases) {
    const std::string message = error_of([&] {
      build(std::string(c.header) + R"(
        layer { name: "r" type: "ReLU" bottom: "a" top: "r" })");
    });
    for (const char* part : c.message) EXPECT_THAT(message, HasSubstr(part)) << c.header;
  }
  // From a file: the file and the line of the field.
  testing::TempDir dir;
  const std::string path = dir.write("bad.prototxt", "name: \"bad\"\ninput: \"data\"\n"
                                                     "input_dim: 1\ninput_dim: 2\n");
  const std::string message = error_of([&] {
    Net net(read_net_parameter(path), TEST, native(), 1, nullptr, path);
  });
  EXPECT_THAT(message, StartsWith(path + ":3: "));
}

// ---------------------------------------------------------------------------------------
// NetState rules

struct StateCase {
  Phase phase;
  int level;
  std::vector<std::string> stages;
  std::set<std::string> kept;  // the ReLUs of net_state_net.prototxt the state keeps
};

TEST(NetStateRules, KeepTheLayersCaffesFilterNetKeeps) {
  const std::set<std::string> all = {
      "always", "train_only", "deploy", "deploy_and_fast", "deploy_or_fast", "not_deploy",
      "level_2_up", "level_1_down", "test_level_1_to_3", "no_fast", "no_test_deploy"};
  const std::vector<StateCase> cases = {
      {TRAIN, 0, {}, {"always", "train_only", "not_deploy", "level_1_down", "no_fast",
                      "no_test_deploy"}},
      {TEST, 0, {"deploy"}, {"always", "deploy", "deploy_or_fast", "level_1_down", "no_fast"}},
      {TEST, 2, {"deploy", "fast"}, {"always", "deploy", "deploy_and_fast", "deploy_or_fast",
                                     "level_2_up", "test_level_1_to_3"}},
      {TRAIN, 5, {"fast"}, {"always", "train_only", "deploy_or_fast", "not_deploy",
                            "level_2_up"}},
      {TEST, 4, {}, {"always", "not_deploy", "level_2_up", "no_fast", "no_test_deploy"}},
      {TEST, 1, {"other"}, {"always", "not_deploy", "level_1_down", "test_level_1_to_3",
                            "no_fast", "no_test_deploy"}},
  };
  const std::string path = data_path("net_state_net.prototxt");
  for (const StateCase& c : cases) {
    NetParameter param = read_net_parameter(path);
    param.mutable_state()->set_level(c.level);
    for (const std::string& s : c.stages) param.mutable_state()->add_stage(s);
    Net net(param, c.phase, native(), 1, nullptr, path);
    std::set<std::string> kept;
    for (const std::string& name : all)
      if (net.has_blob(name)) kept.insert(name);
    EXPECT_EQ(kept, c.kept) << state_string(net.state());
    EXPECT_EQ(net.state().phase(), c.phase);
    EXPECT_EQ(net.state().level(), c.level);
  }
}

TEST(NetStateRules, MergedStateTakesTheSolversLevelAndAddsItsStages) {
  NetState own;
  own.set_level(1);
  own.add_stage("a");
  NetState solver;
  solver.add_stage("b");
  NetState merged = merged_state(TEST, own, &solver);
  EXPECT_EQ(merged.level(), 1) << "the solver's state sets no level";
  EXPECT_THAT(std::vector<std::string>(merged.stage().begin(), merged.stage().end()),
              ::testing::ElementsAre("a", "b"));
  solver.set_level(3);
  merged = merged_state(TRAIN, own, &solver);
  EXPECT_EQ(merged.level(), 3);
  EXPECT_EQ(merged.phase(), TRAIN);
  EXPECT_EQ(merged_state(TEST, own, nullptr).level(), 1);
}

TEST(NetStateRules, IncludeAndExcludeOnOneLayerIsAnError) {
  const std::string message = error_of([] {
    build(R"(
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 } } }
      layer { name: "r" type: "ReLU" bottom: "x" top: "r"
              include { phase: TRAIN } exclude { stage: "a" } })");
  });
  EXPECT_THAT(message, AllOf(HasSubstr("layer 'r' (ReLU)"), HasSubstr("both include and exclude")));
}

// As Caffe's Net: the phase the net is built for replaces its state's, which is logged;
// the layers are chosen by the built phase.
TEST(NetStateRules, AStatePhaseIsReplacedByTheBuildsAndLogged) {
  const std::string text = R"(name: "phased" state { phase: TRAIN level: 2 stage: "s" }
      layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 } } }
      layer { name: "train_only" type: "ReLU" bottom: "x" top: "r" include { phase: TRAIN } }
      layer { name: "test_only" type: "TanH" bottom: "x" top: "t" include { phase: TEST } })";
  LogLines log;
  Net net = build(text, TEST);
  EXPECT_EQ(net.state().phase(), TEST);
  EXPECT_EQ(net.state().level(), 2);
  EXPECT_EQ(net.state().stage(0), "s");
  EXPECT_TRUE(net.has_blob("t"));
  EXPECT_FALSE(net.has_blob("r"));
  EXPECT_THAT(log.text, HasSubstr("net: the net 'phased' sets state { phase: TRAIN } but is "
                                  "built as a TEST net; its state's phase is replaced by TEST"));
  // The same phase: nothing to say.
  LogLines quiet;
  EXPECT_NO_THROW(build(text, TRAIN));
  EXPECT_THAT(quiet.text, Not(HasSubstr("is replaced by")));
}

TEST(NetStateRules, ANetWithNoLayerInItsStateSaysWhichState) {
  const std::string message = error_of([] {
    build(R"(state { stage: "x" }
      layer { name: "data" type: "Input" top: "x" include { stage: "y" }
              input_param { shape { dim: 2 } } })");
  });
  EXPECT_THAT(message, HasSubstr("no layers in its state (phase TRAIN, level 0, stage 'x')"));
}

// ---------------------------------------------------------------------------------------
// force_backward and propagate_down

// x (2, 3) -> fc1 -> h -> Sigmoid -> a -> fc2 -> y -> EuclideanLoss(y, t); h also feeds
// "side", a Sigmoid whose output counts in no loss. `extra` goes into fc1 and fc2.
std::string backward_net(const std::string& header, const std::string& fc1_extra,
                         const std::string& fc2_extra) {
  return header + R"(
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
    layer { name: "fc1" type: "InnerProduct" bottom: "x" top: "h" )" + fc1_extra + R"(
            inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "act" type: "Sigmoid" bottom: "h" top: "a" }
    layer { name: "fc2" type: "InnerProduct" bottom: "a" top: "y" )" + fc2_extra + R"(
            inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
    layer { name: "side" type: "Sigmoid" bottom: "h" top: "side" })";
}

struct Gradients {
  double x, fc1_weight, fc2_weight;
};

Gradients run_backward(Net& net) {
  net.blob("x").copy_data_from_host(testing::random_values(6, 17));
  net.blob("t").copy_data_from_host({1, -1, 0.5f, 2});
  net.forward();
  net.arena().zero_diff();
  net.backward();
  auto weight_grad = [&](const std::string& layer) {
    return sum_abs(net.layer(index_of(net, layer)).params()[0].tensor->copy_diff_to_host());
  };
  return {sum_abs(net.blob("x").copy_diff_to_host()), weight_grad("fc1"), weight_grad("fc2")};
}

TEST(Backward, ByDefaultTheInputGetsNoGradientAndOutputsOffTheLossRunNoBackward) {
  Net net = build(backward_net("", "", ""));
  EXPECT_FALSE(net.bottom_needs_gradient(index_of(net, "fc1"), 0));
  EXPECT_FALSE(net.layer_needs_backward(index_of(net, "side")));
  const Gradients g = run_backward(net);
  EXPECT_EQ(g.x, 0.0);
  EXPECT_GT(g.fc1_weight, 0.0);
  EXPECT_GT(g.fc2_weight, 0.0);
}

TEST(Backward, ForceBackwardRunsEveryLayerAndGivesTheInputItsGradient) {
  Net net = build(backward_net("force_backward: true", "", ""));
  for (int i = 0; i < net.num_layers(); ++i)
    if (net.layer(i).type() != "Input") EXPECT_TRUE(net.layer_needs_backward(i)) << i;
  EXPECT_TRUE(net.bottom_needs_gradient(index_of(net, "fc1"), 0));
  EXPECT_TRUE(net.bottom_needs_gradient(index_of(net, "side"), 0));
  const Gradients forced = run_backward(net);
  EXPECT_GT(forced.x, 0.0);
  // The same gradient as asked for with propagate_down: true on fc1's bottom.
  Net asked = build(backward_net("", "propagate_down: true", ""));
  EXPECT_TRUE(asked.bottom_needs_gradient(index_of(asked, "fc1"), 0));
  EXPECT_FALSE(asked.layer_needs_backward(index_of(asked, "side")));
  const Gradients g = run_backward(asked);
  EXPECT_DOUBLE_EQ(g.x, forced.x);
  EXPECT_DOUBLE_EQ(g.fc1_weight, forced.fc1_weight);
}

TEST(Backward, PropagateDownFalseSkipsTheGradientAndEveryLayerOnlyItFeeds) {
  Net net = build(backward_net("", "", "propagate_down: false"));
  EXPECT_FALSE(net.bottom_needs_gradient(index_of(net, "fc2"), 0));
  EXPECT_TRUE(net.layer_needs_backward(index_of(net, "fc2"))) << "its weights still learn";
  EXPECT_FALSE(net.layer_needs_backward(index_of(net, "act")));
  EXPECT_FALSE(net.layer_needs_backward(index_of(net, "fc1")))
      << "no gradient reaches its top, so it has nothing to compute";
  const Gradients g = run_backward(net);
  EXPECT_GT(g.fc2_weight, 0.0);
  EXPECT_EQ(g.fc1_weight, 0.0);
  EXPECT_EQ(g.x, 0.0);
}

TEST(Backward, PropagateDownErrorsSayWhatToFix) {
  const std::string count = error_of([] {
    build(backward_net("", "propagate_down: true propagate_down: false", ""));
  });
  EXPECT_THAT(count, AllOf(HasSubstr("layer 'fc1'"), HasSubstr("2 propagate_down value(s) for 1 "
                                                               "bottom(s)")));
  const std::string label = error_of([] {
    build(R"(
      layer { name: "data" type: "Input" top: "x" top: "label"
              input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
      layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "label" top: "loss"
              propagate_down: true propagate_down: true })");
  });
  EXPECT_THAT(label, AllOf(HasSubstr("layer 'loss'"), HasSubstr("no gradient for bottom 1 "
                                                                "('label')")));
}

// ---------------------------------------------------------------------------------------
// Layers that share a name

constexpr const char* kSameNames = R"(
  layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
  layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y1" inner_product_param { num_output: 3 } }
  layer { name: "ip" type: "InnerProduct" bottom: "y1" top: "y2" inner_product_param { num_output: 3 } }
  layer { name: "ip#2" type: "InnerProduct" bottom: "y2" top: "y3" inner_product_param { num_output: 2 } }
  layer { name: "drop" type: "Dropout" bottom: "y3" top: "y3" }
  layer { name: "drop" type: "Dropout" bottom: "y3" top: "y3" }
  layer { name: "loss" type: "EuclideanLoss" bottom: "y3" bottom: "y3" top: "loss" }
)";

TEST(DuplicateNames, AreAcceptedAndKeptApartByTheirKeys) {
  Net net = build(kSameNames);
  std::vector<std::string> names, keys;
  for (int i = 0; i < net.num_layers(); ++i) {
    if (net.layer(i).type() == "Split") continue;
    names.push_back(net.layer(i).name());
    keys.push_back(net.layer_key(i));
  }
  EXPECT_THAT(names, ::testing::ElementsAre("data", "ip", "ip", "ip#2", "drop", "drop", "loss"));
  EXPECT_THAT(keys, ::testing::ElementsAre("data", "ip", "ip##2", "ip#2", "drop", "drop#2",
                                           "loss"));
  // Every parameter its own (no accidental sharing), named by the keys.
  std::vector<std::string> params;
  std::set<int64_t> offsets;
  for (const ParamInfo& p : net.arena().table()) {
    params.push_back(p.name + " " + shape_string(p.shape));
    offsets.insert(p.offset);
  }
  EXPECT_THAT(params, ::testing::ElementsAre("ip/weight (3, 3)", "ip/bias (3)",
                                             "ip##2/weight (3, 3)", "ip##2/bias (3)",
                                             "ip#2/weight (2, 3)", "ip#2/bias (2)"));
  EXPECT_EQ(offsets.size(), 6u);
  // Each Dropout's state under its own key, and restored to its own layer.
  const Net::LayerStates states = net.layer_states();
  ASSERT_EQ(states.size(), 2u);
  ASSERT_TRUE(states.count("drop") && states.count("drop#2"));
  EXPECT_NE(states.at("drop"), states.at("drop#2"));
  Net::LayerStates swapped = {{"drop", states.at("drop#2")}, {"drop#2", states.at("drop")}};
  net.set_layer_states(swapped, "swapped");
  EXPECT_EQ(net.layer_states(), swapped);
}

TEST(DuplicateNames, ASolverSnapshotResumesWithEachLayersOwnValues) {
  testing::TempDir dir;
  SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 random_seed: 3 snapshot_prefix: '" + dir / "run" + "'", "solver");
  Solver first(sp, parse_net_parameter(kSameNames, "same.prototxt"), native());
  first.net().blob("x").copy_data_from_host(testing::random_values(6, 2));
  first.step(2);
  const SnapshotPaths paths = first.snapshot();
  Solver second(sp, parse_net_parameter(kSameNames, "same.prototxt"), native());
  second.restore(paths.state);
  EXPECT_EQ(second.net().layer_states(), first.net().layer_states());
  EXPECT_EQ(second.net().arena().to_host(second.net().arena().data()),
            first.net().arena().to_host(first.net().arena().data()));
}

// ---------------------------------------------------------------------------------------
// debug_info

std::string mean_abs_text(const std::vector<float>& values) {
  std::ostringstream out;
  out << sum_abs(values) / double(values.size());
  return out.str();
}

TEST(DebugInfo, LogsCaffesLinesWithTheMeanAbsoluteValues) {
  Net net = build(R"(debug_info: true
    layer { name: "data" type: "Input" top: "x" top: "t"
            input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 2 } } }
    layer { name: "fc1" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 4 } }
    layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
    layer { name: "fc2" type: "InnerProduct" bottom: "h" top: "y" param { name: "w2" }
            inner_product_param { num_output: 2 } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" })");
  EXPECT_FALSE(net.layer_fused(index_of(net, "relu"))) << "debug_info keeps every layer apart";
  net.blob("x").copy_data_from_host(testing::random_values(6, 4));
  net.blob("t").copy_data_from_host({1, 2, 3, 4});
  LogLines log;
  net.forward();
  net.arena().zero_diff();
  net.backward();
  Layer& fc1 = net.layer(index_of(net, "fc1"));
  Layer& fc2 = net.layer(index_of(net, "fc2"));
  const std::vector<std::string> expected = {
      "    [Forward] Layer relu, top blob h data: " +
          mean_abs_text(net.blob("h").copy_data_to_host()),
      "    [Forward] Layer fc2, top blob y data: " +
          mean_abs_text(net.blob("y").copy_data_to_host()),
      "    [Forward] Layer fc2, param blob w2 data: " +
          mean_abs_text(fc2.params()[0].tensor->copy_data_to_host()),
      "    [Forward] Layer fc2, param blob 1 data: ",
      "    [Backward] Layer fc2, bottom blob h diff: ",
      // ReLU in place: the last gradient written to h is its own.
      "    [Backward] Layer relu, bottom blob h diff: " +
          mean_abs_text(net.blob("h").copy_diff_to_host()),
      "    [Backward] Layer fc2, param blob 0 diff: " +
          mean_abs_text(fc2.params()[0].tensor->copy_diff_to_host()),
      "    [Backward] Layer fc1, param blob 0 diff: " +
          mean_abs_text(fc1.params()[0].tensor->copy_diff_to_host()),
      "    [Backward] Layer loss, bottom blob y diff: ",
      "    [Backward] All net params (data, diff): L1 norm = (",
  };
  for (const std::string& line : expected) EXPECT_THAT(log.text, HasSubstr(line));
  EXPECT_THAT(log.text, Not(HasSubstr("bottom blob x diff"))) << "x gets no gradient";
  // Off: nothing logged.
  net.set_debug_info(false);
  LogLines quiet;
  net.forward();
  EXPECT_THAT(quiet.text, Not(HasSubstr("[Forward]")));
}

// ---------------------------------------------------------------------------------------
// engine fields

TEST(EngineFields, AreAcceptedAndLoggedOnceAsAHint) {
  const std::string path = data_path("input_dim_net.prototxt");
  LogLines log;
  Net net(read_net_parameter(path), TEST, native(), 1, nullptr, path);
  EXPECT_THAT(log.text, AllOf(HasSubstr("engine fields are hints (conv: "
                                        "convolution_param.engine: CUDNN; relu: "
                                        "relu_param.engine: CAFFE; pool: "
                                        "pooling_param.engine: CUDNN)"),
                              HasSubstr("Lamina runs its own CUDA backend")));
  size_t lines = 0;
  for (size_t at = log.text.find("engine fields"); at != std::string::npos;
       at = log.text.find("engine fields", at + 1))
    ++lines;
  EXPECT_EQ(lines, 1u);
}

// ---------------------------------------------------------------------------------------
// share_mode

std::string shared_weights(const std::string& mode, int second_outputs) {
  return R"(
    layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 dim: 4 } } }
    layer { name: "a" type: "InnerProduct" bottom: "x" top: "y" param { name: "w" }
            inner_product_param { num_output: 6 bias_term: false } }
    layer { name: "b" type: "InnerProduct" bottom: "y" top: "z" param { name: "w" )" + mode +
         R"( } inner_product_param { num_output: )" + std::to_string(second_outputs) +
         R"( bias_term: false } })";
}

TEST(ShareMode, StrictNeedsTheShapePermissiveTheCount) {
  // a's weight is (6, 4), b's (4, 6): 24 values each.
  const std::string strict = error_of([] { build(shared_weights("", 4)); });
  EXPECT_THAT(strict, AllOf(HasSubstr("layer 'b'"), HasSubstr("shape (6, 4)"),
                            HasSubstr("(4, 6)"), HasSubstr("share_mode: PERMISSIVE")));
  EXPECT_THAT(error_of([] { build(shared_weights("share_mode: STRICT", 4)); }),
              HasSubstr("share_mode: PERMISSIVE"));
  Net net = build(shared_weights("share_mode: PERMISSIVE", 4));
  ASSERT_EQ(net.arena().table().size(), 1u);
  Tensor& a = *net.layer(index_of(net, "a")).params()[0].tensor;
  Tensor& b = *net.layer(index_of(net, "b")).params()[0].tensor;
  EXPECT_EQ(a.data(), b.data());
  EXPECT_EQ(b.shape(), Shape({4, 6}));
  const std::string count = error_of([] { build(shared_weights("share_mode: PERMISSIVE", 3)); });
  EXPECT_THAT(count, AllOf(HasSubstr("24 values"), HasSubstr("18"), HasSubstr("same count")));
}

}  // namespace
}  // namespace lamina
