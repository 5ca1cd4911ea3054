// Caffe 1.0's solver-level syntax: where the train and test nets come from (net, net_param,
// train_net, train_net_param, test_net, test_net_param), several test nets with their own
// test_iter and test_state, test_compute_loss, the solver's debug_info, snapshot_format and
// snapshot_diff, and the solver state of several test nets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_state.hpp"
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

size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(TestNets, TestNetParamAndTestNetEachWithItsTestIterAndTestState) {
  LogLines log;
  auto solver = Solver::from_file(data_path("two_test_nets_solver.prototxt"), native());
  ASSERT_EQ(solver->num_test_nets(), 2);
  // #0: the inline net with stage "zero"; #1: staged_net.prototxt with stage "accuracy".
  Net& zero = *solver->test_net(0);
  EXPECT_EQ(zero.name(), "inline_test");
  EXPECT_EQ(zero.output_names(), std::vector<std::string>{"zero"});
  Net& staged = *solver->test_net(1);
  EXPECT_EQ(staged.output_names(), (std::vector<std::string>{"loss", "accuracy"}));
  EXPECT_FALSE(staged.has_blob("euclid"));
  EXPECT_EQ(staged.state().stage(0), "accuracy");
  EXPECT_FALSE(solver->net().has_blob("accuracy")) << "the train net is TRAIN";
  // Both view the trained weights.
  EXPECT_EQ(zero.arena().data(), solver->net().arena().data());
  EXPECT_EQ(staged.arena().data(), solver->net().arena().data());

  solver->solve();  // tests at iteration 2, its end
  const auto& history = solver->test_history();
  ASSERT_EQ(history.size(), 2u);
  EXPECT_EQ(history[0].first, 2);
  EXPECT_EQ(history[0].second.net, 0);
  EXPECT_EQ(history[1].second.net, 1);
  EXPECT_EQ(history[0].second.value("zero"), 0.0f);
  ASSERT_TRUE(history[0].second.has_loss);
  EXPECT_EQ(history[0].second.loss, 0.0f);
  // test_compute_loss: the mean of the net's loss, here its one loss of weight 1.
  const TestResult& second = history[1].second;
  ASSERT_TRUE(second.has_loss);
  EXPECT_FLOAT_EQ(second.loss, second.value("loss"));
  EXPECT_GT(second.loss, 0.0f);
  EXPECT_GE(second.value("accuracy"), 0.0f);
  EXPECT_LE(second.value("accuracy"), 1.0f);
  for (const char* line : {"Test net #0 from test_net_param #0 (phase TEST, level 0, stage 'zero')",
                           "Iteration 2, Testing net (#0)", "Iteration 2, Testing net (#1)",
                           "    Test net output #0: zero = 0 (* 1 = 0 loss)",
                           "    Test net output #1: accuracy = ", "Test loss: "})
    EXPECT_THAT(log.text, HasSubstr(line));
  EXPECT_THAT(log.text, HasSubstr("    Test net output #0: loss = " +
                                  [&] {
                                    std::ostringstream v;
                                    v << second.loss << " (* 1 = " << second.loss << " loss)";
                                    return v.str();
                                  }()));
  // test(k) tests one net; test_all every one.
  EXPECT_EQ(solver->test(1).net, 1);
  EXPECT_EQ(solver->test_all().size(), 2u);
  EXPECT_THAT(error_of([&] { solver->test(2); }), HasSubstr("no test net #2; it has 2"));
}

TEST(TestNets, TheGeneralNetIsTestedOncePerTestIterLeftOver) {
  testing::TempDir dir;
  const std::string path = dir.write("solver.prototxt", R"(
    net: ")" + data_path("staged_net.prototxt") + R"("
    test_iter: 1 test_iter: 2
    test_state { stage: "accuracy" } test_state { stage: "euclid" }
    test_interval: 10 base_lr: 0.1 max_iter: 1 random_seed: 1
  )");
  LogLines log;
  auto solver = Solver::from_file(path, native());
  ASSERT_EQ(solver->num_test_nets(), 2);
  EXPECT_EQ(solver->test_net(0)->output_names(),
            (std::vector<std::string>{"loss", "accuracy"}));
  EXPECT_EQ(solver->test_net(1)->output_names(), std::vector<std::string>{"euclid"});
  const std::vector<TestResult> results = solver->test_all();
  EXPECT_FALSE(results[0].has_loss) << "test_compute_loss is off";
  EXPECT_THAT(log.text, Not(HasSubstr("Test loss")));
  // The Euclidean loss of fc (its bias alone: the inputs are 0) against a zero target.
  EXPECT_EQ(results[1].value("euclid"), 0.0f);
}

// A solver file with `fields` (and a learning rate), and the error building its solver gives.
std::string solver_error(const std::string& fields, const std::string& extra_file = {}) {
  testing::TempDir dir;
  if (!extra_file.empty()) dir.write("net.prototxt", extra_file);
  const std::string path = dir.write("solver.prototxt", "base_lr: 0.1\n" + fields);
  std::string message = error_of([&] { Solver::from_file(path, native()); });
  // Errors about a field name the file and its line; "<solver>" and "<dir>" stand for them.
  if (message.rfind(path, 0) == 0) return "<solver>" + message.substr(path.size());
  const std::string dir_path = dir.path().string();
  const size_t at = message.find(dir_path);
  if (at != std::string::npos) message.replace(at, dir_path.size(), "<dir>");
  return message;
}

TEST(SolverNetErrors, SayWhichFieldsToChange) {
  const std::string net = "\"" + data_path("staged_net.prototxt") + "\"";
  struct Case {
    std::string fields;
    std::vector<std::string> message;
  };
  const std::vector<Case> cases = {
      {"max_iter: 1\n", {"<solver>: ", "names no net", "net, net_param, train_net or "
                                                         "train_net_param"}},
      {"net: " + net + "\ntrain_net: " + net + "\n",
       {"<solver>:3: ", "names its train net 2 times (net and train_net)"}},
      {"train_net: " + net + "\ntest_iter: 1\ntest_interval: 1\n",
       {"<solver>:3: ", "names no test net", "test_net or test_net_param"}},
      {"train_net: " + net + "\ntest_net: " + net + "\ntest_iter: 1\ntest_iter: 2\n"
       "test_interval: 1\n", {"<solver>:4: ", "test_iter has 2 value(s) for 1 test net(s)"}},
      {"net: " + net + "\ntest_net: " + net + "\ntest_net: " + net + "\ntest_iter: 1\n"
       "test_interval: 1\n", {"test_iter has 1 value(s) for 2 test net(s)"}},
      {"net: " + net + "\ntest_iter: 1\ntest_iter: 1\ntest_interval: 1\n"
       "test_state { stage: 'a' }\n", {"<solver>:6: ", "test_state is given 1 time(s) for 2"}},
      {"net: " + net + "\ntrain_state { phase: TEST }\n",
       {"<solver>:3: ", "train_state sets phase: TEST", "leave phase out"}},
      {"net: " + net + "\nsnapshot_diff: true\n",
       {"<solver>:3: ", "snapshot_diff is true", "do not store gradients"}},
      {"net: \"net.prototxt\"\n",
       {"<dir>/net.prototxt: the net sets state { phase: TEST } but the solver builds it in "
        "phase TRAIN"}},
  };
  const std::string test_phase_net = R"(state { phase: TEST }
    layer { name: "data" type: "Input" top: "x" input_param { shape { dim: 2 } } })";
  for (const Case& c : cases) {
    const std::string message = solver_error(c.fields, test_phase_net);
    for (const std::string& part : c.message) EXPECT_THAT(message, HasSubstr(part)) << c.fields;
  }
}

TEST(SolverNetErrors, ANetGivenToTheSolverReplacesNetButNotTrainNet) {
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 train_net: 'x.prototxt'", "solver");
  const NetParameter net = read_net_parameter(data_path("staged_net.prototxt"));
  EXPECT_THAT(error_of([&] { Solver(sp, net, native(), "staged_net.prototxt"); }),
              AllOf(HasSubstr("names its train net in train_net but a net was also given"),
                    HasSubstr("give the train net once")));
  // net: in the solver is replaced by the net given.
  const SolverParameter with_net = parse_solver_parameter(
      "base_lr: 0.1 net: 'missing.prototxt' test_iter: 1", "solver");
  Solver solver(with_net, net, native(), "staged_net.prototxt");
  EXPECT_EQ(solver.net().name(), "staged_net");
  EXPECT_EQ(solver.num_test_nets(), 1);
}

// As Caffe: a test net whose every top is read (no outputs) is run and reports nothing; the
// log says so once, when the solver is built.
TEST(TestNets, ATestNetWithoutOutputsRunsAndReportsNothing) {
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 random_seed: 1 test_iter: 2 test_interval: 1 test_net_param { "
      "name: 'quiet' layer { name: 'data' type: 'Input' top: 'x' "
      "input_param { shape { dim: 2 } } } layer { name: 'end' type: 'Silence' bottom: 'x' } }",
      "solver");
  LogLines log;
  Solver solver(sp, read_net_parameter(data_path("staged_net.prototxt")), native(),
                "staged_net.prototxt");
  ASSERT_EQ(solver.num_test_nets(), 1);
  EXPECT_TRUE(solver.test_net(0)->output_names().empty());
  solver.step(3);  // tests at iterations 0, 1 and 2
  ASSERT_EQ(solver.test_history().size(), 3u);
  for (const auto& [iter, result] : solver.test_history()) EXPECT_TRUE(result.outputs.empty());
  EXPECT_EQ(occurrences(log.text, "the TEST net has no outputs to report"), 1u);
  EXPECT_EQ(occurrences(log.text, "Testing net (#0)"), 3u);
  EXPECT_THAT(log.text, Not(HasSubstr("Test net output")));
}

TEST(SolverDebugInfo, LogsTheTrainNetAtDisplayIterationsAsCaffe) {
  SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 debug_info: true display: 2 random_seed: 1", "solver");
  const NetParameter net = read_net_parameter(data_path("staged_net.prototxt"));
  Solver solver(sp, net, native(), "staged_net.prototxt");
  EXPECT_TRUE(solver.net().debug_info());
  LogLines log;
  solver.step(3);  // iterations 0, 1, 2: 0 and 2 are displayed
  EXPECT_EQ(occurrences(log.text, "[Forward] Layer fc, top blob fc data: "), 2u);
  EXPECT_EQ(occurrences(log.text, "[Backward] Layer fc, param blob 0 diff: "), 2u);
  EXPECT_EQ(occurrences(log.text, "[Backward] All net params (data, diff)"), 2u);
}

// debug_info set in the net's own file (not the solver's): Lamina logs every iteration of
// the train net and every pass of the test nets. (Caffe 1.0's solver sets its nets'
// debug_info from its own flag, so there the file's setting logs nothing: docs/prototxt.md.)
TEST(SolverDebugInfo, ANetsOwnDebugInfoLogsEveryIteration) {
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 display: 2 random_seed: 1 test_iter: 2 test_interval: 10", "solver");
  NetParameter net = read_net_parameter(data_path("staged_net.prototxt"));
  net.set_debug_info(true);
  Solver solver(sp, net, native(), "staged_net.prototxt");
  LogLines log;
  solver.step(3);  // iterations 0, 1, 2 (display 0 and 2); a test of 2 passes at iteration 0
  EXPECT_TRUE(solver.net().debug_info());
  EXPECT_EQ(occurrences(log.text, "[Backward] Layer fc, param blob 0 diff: "), 3u);
  EXPECT_EQ(occurrences(log.text, "[Backward] All net params (data, diff)"), 3u);
  EXPECT_EQ(occurrences(log.text, "[Forward] Layer fc, top blob fc data: "), 3u + 2u);
}

TEST(SolverSnapshotFormat, IsLoggedAsARequestLaminaWritesItsOwn) {
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.1 snapshot_format: HDF5", "solver");
  LogLines log;
  Solver solver(sp, read_net_parameter(data_path("staged_net.prototxt")), native());
  EXPECT_THAT(log.text, HasSubstr("snapshot_format: HDF5 is taken as a request; Lamina writes "
                                  "its own snapshot format"));
}

TEST(SolverStateRecords, KeepEachTestNetsLayerStatesApart) {
  ParamArena arena(native(), {});
  SolverState state;
  state.solver_type = "SGD";
  state.loss_ring = {0};
  state.optimizer.push_back({});
  state.train_layers = {{"data", {1, 2}}};
  state.test_layers = {{{"data", {3}}}, {}, {{"data", {4, 5}}, {"drop#2", {6}}}};
  const std::vector<SnapshotRecord> records = encode_solver_state(state, arena);
  std::vector<std::string> names;
  for (const SnapshotRecord& r : records)
    if (r.name.rfind("state/", 0) == 0) names.push_back(r.name);
  EXPECT_THAT(names, ::testing::ElementsAre("state/train/data", "state/test/data",
                                            "state/test2/data", "state/test2/drop#2"));
  SnapshotFile file;
  file.records = records;
  const SolverState back = decode_solver_state(file, "state", arena, "SGD", 1);
  EXPECT_EQ(back.train_layers, state.train_layers);
  ASSERT_EQ(back.test_layers.size(), 3u);
  EXPECT_EQ(back.test_layers[0], state.test_layers[0]);
  EXPECT_TRUE(back.test_layers[1].empty());
  EXPECT_EQ(back.test_layers[2], state.test_layers[2]);
}

}  // namespace
}  // namespace lamina
