// SolverObserver: the solver tells its observers of every iteration, display, test and
// snapshot, with the values it logs and records (loss_history, test_history), in order; an
// observer that throws stops training after its iteration, and the solver trains on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

const char* kNet = R"(
  name: "observed"
  layer { name: "data" type: "DummyData" top: "x" top: "t"
          dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                             data_filler { type: "gaussian" std: 1 }
                             data_filler { type: "constant" value: 0.5 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y"
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
)";

// Every call, as one line: "iteration 3", "display 2 0.41 0.1", "test 3", "snapshot 4".
struct Recorder : SolverObserver {
  std::vector<std::string> events;
  std::vector<float> display_losses, test_losses;
  int throw_at = -1;          // on_iteration throws when the solver reaches this iteration
  int throw_at_display = -1;  // on_display throws at this display iteration
  void on_iteration(const Solver& s) override {
    events.push_back("iteration " + std::to_string(s.iter()));
    if (s.iter() == throw_at) throw Error("stop here");
  }
  void on_display(const Solver& s, const LossRecord& r, float lr) override {
    EXPECT_EQ(r.iteration, s.iter());
    events.push_back("display " + std::to_string(r.iteration) + " lr " + std::to_string(lr));
    display_losses.push_back(r.loss);
    if (r.iteration == throw_at_display) throw Error("stop at the display");
  }
  void on_test(const Solver& s, const TestResult& result) override {
    events.push_back("test " + std::to_string(s.iter()) + " net " + std::to_string(result.net));
    test_losses.push_back(result.value("loss"));
  }
  void on_snapshot(const Solver& s, const SnapshotPaths& paths) override {
    EXPECT_TRUE(std::filesystem::exists(paths.state)) << paths.state;
    EXPECT_EQ(paths.state, s.last_snapshot().state);
    events.push_back("snapshot " + std::to_string(s.iter()));
  }
};

std::unique_ptr<Solver> make_solver(const testing::TempDir& dir, NativeBackend& backend) {
  const std::string settings =
      "base_lr: 0.1 lr_policy: \"step\" gamma: 0.5 stepsize: 3 display: 2 max_iter: 5 "
      "test_iter: 1 test_interval: 3 snapshot: 4 random_seed: 1 snapshot_prefix: \"" +
      dir / "observed" + "\"";
  return std::make_unique<Solver>(parse_solver_parameter(settings, "solver.prototxt"),
                                  parse_net_parameter(kNet, "net.prototxt"), backend);
}

TEST(SolverObserver, HearsEveryIterationDisplayTestAndSnapshotInOrder) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Recorder recorder;
  solver->add_observer(recorder);
  solver->solve();
  // Display at 0, 2, 4 (lr 0.1 until 3, then 0.05), tests at 0 and 3, each before that
  // iteration runs; a snapshot once iteration 4 is reached (periodic) and at the end (5).
  const std::vector<std::string> expected = {
      "test 0 net 0", "display 0 lr 0.100000", "iteration 1", "iteration 2",
      "display 2 lr 0.100000", "iteration 3", "test 3 net 0", "iteration 4", "snapshot 4",
      "display 4 lr 0.050000", "iteration 5", "snapshot 5"};
  EXPECT_EQ(recorder.events, expected);
  ASSERT_EQ(recorder.display_losses.size(), solver->loss_history().size());
  for (size_t i = 0; i < recorder.display_losses.size(); ++i)
    EXPECT_EQ(recorder.display_losses[i], solver->loss_history()[i].loss);
  ASSERT_EQ(recorder.test_losses.size(), solver->test_history().size());
  for (size_t i = 0; i < recorder.test_losses.size(); ++i)
    EXPECT_EQ(recorder.test_losses[i], solver->test_history()[i].second.value("loss"));
}

TEST(SolverObserver, AThrowingObserverStopsAfterItsIterationAndTrainingGoesOn) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Recorder recorder;
  recorder.throw_at = 2;
  solver->add_observer(recorder);
  EXPECT_THAT(error_of([&] { solver->step(5); }), HasSubstr("stop here"));
  EXPECT_EQ(solver->iter(), 2);  // the iteration that called it completed
  solver->remove_observer(recorder);
  solver->step(1);
  EXPECT_EQ(solver->iter(), 3);
  EXPECT_EQ(recorder.events.back(), "iteration 2");  // removed: not called again
}

// The step state advanced on the device before the display: the iteration completes, and a
// run continued after the exception trains as one that was never interrupted.
TEST(SolverObserver, AnExceptionAtADisplayCompletesItsIteration) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Recorder recorder;
  recorder.throw_at_display = 2;
  solver->add_observer(recorder);
  EXPECT_THAT(error_of([&] { solver->step(5); }), HasSubstr("stop at the display"));
  EXPECT_EQ(solver->iter(), 3);
  solver->step(2);
  auto uninterrupted = make_solver(dir, backend);
  uninterrupted->step(5);
  ASSERT_EQ(solver->iter(), uninterrupted->iter());
  const ParamArena& a = solver->net().arena();
  const ParamArena& b = uninterrupted->net().arena();
  EXPECT_EQ(a.to_host(a.data()), b.to_host(b.data()));  // bit for bit
  EXPECT_EQ(solver->loss_history().back().loss, uninterrupted->loss_history().back().loss);
}

// The iteration completes before the exception leaves: its periodic snapshot is written.
TEST(SolverObserver, AnExceptionAtASnapshotIterationKeepsTheSnapshot) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Recorder recorder;
  recorder.throw_at = 4;  // snapshot: 4
  solver->add_observer(recorder);
  EXPECT_THAT(error_of([&] { solver->step(5); }), HasSubstr("stop here"));
  EXPECT_EQ(solver->iter(), 4);
  EXPECT_EQ(recorder.events.back(), "snapshot 4");
  EXPECT_TRUE(std::filesystem::exists(dir / "observed_iter_4.solverstate"));
}

// An observer that removes itself while called; the others are still called, in order.
struct Leaver : SolverObserver {
  Solver* solver = nullptr;
  int calls = 0;
  void on_iteration(const Solver&) override {
    if (++calls == 2) solver->remove_observer(*this);
  }
};

TEST(SolverObserver, AnObserverMayRemoveItselfWhileCalled) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Leaver leaver;
  leaver.solver = solver.get();
  Recorder recorder;
  solver->add_observer(leaver);
  solver->add_observer(recorder);
  solver->step(3);
  EXPECT_EQ(leaver.calls, 2);
  const std::vector<std::string> iterations = {"iteration 1", "iteration 2", "iteration 3"};
  std::vector<std::string> seen;
  for (const std::string& e : recorder.events)
    if (e.rfind("iteration", 0) == 0) seen.push_back(e);
  EXPECT_EQ(seen, iterations);
}

TEST(SolverObserver, AddingTheSameObserverTwiceIsAnError) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend);
  Recorder recorder;
  solver->add_observer(recorder);
  EXPECT_THAT(error_of([&] { solver->add_observer(recorder); }), HasSubstr("already added"));
}

}  // namespace
}  // namespace lamina
