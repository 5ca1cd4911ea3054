// Metrics files (metrics_log.hpp): what a run logs reads back as the solver's own histories
// (the displayed losses, the learning rates, the test outputs), in CSV and JSON lines, with
// training time from the clock; a run resumed from a snapshot appends, a crash's incomplete
// line is cut off and the records after the snapshot are replaced; mistakes are refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "lamina/io.hpp"
#include "lamina/metrics_log.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using testing::error_of;

const char* kNet = R"(
  name: "metrics"
  layer { name: "data" type: "DummyData" top: "x" top: "t" top: "label"
          dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } shape { dim: 4 }
                             data_filler { type: "gaussian" std: 1 }
                             data_filler { type: "constant" value: 0.5 }
                             data_filler { type: "constant" value: 0 } } }
  layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y"
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
  layer { name: "accuracy" type: "Accuracy" bottom: "y" bottom: "label" top: "accuracy"
          include { phase: TEST } }
)";

// Advances a fake clock by a second after every iteration.
struct Ticker : SolverObserver {
  double seconds = 0;
  void on_iteration(const Solver&) override { seconds += 1; }
};

std::unique_ptr<Solver> make_solver(const testing::TempDir& dir, NativeBackend& backend,
                                    int max_iter) {
  const std::string settings =
      "base_lr: 0.1 lr_policy: \"step\" gamma: 0.5 stepsize: 3 display: 2 max_iter: " +
      std::to_string(max_iter) + " test_iter: 1 test_interval: 3 snapshot: 4 random_seed: 1 " +
      "snapshot_prefix: \"" + dir / "run" + "\"";
  return std::make_unique<Solver>(parse_solver_parameter(settings, "solver.prototxt"),
                                  parse_net_parameter(kNet, "net.prototxt"), backend);
}

// Trains `solver` to its max_iter with a metrics file at `path` (1 s per iteration, 4
// samples each, 10 iterations an epoch).
void train_logged(Solver& solver, const std::string& path) {
  Ticker ticker;
  MetricsLog log(path, solver, MetricsOptions{10, 4, [&] { return ticker.seconds; }});
  solver.add_observer(ticker);
  solver.add_observer(log);
  solver.solve();
  solver.remove_observer(log);
  solver.remove_observer(ticker);
}

// The records of `records` that the solver's histories hold from iteration `from` on, as
// "train 2 loss=... lr=..." and "test 3 accuracy=... loss=..." lines, in the order logged.
std::vector<std::string> expected_lines(const Solver& solver, int from) {
  std::vector<std::string> lines;
  size_t t = 0;
  const auto& tests = solver.test_history();
  auto test_line = [](int iteration, const TestResult& r) {
    return "test " + std::to_string(iteration) + " accuracy=" +
           std::to_string(r.value("accuracy")) + " loss=" + std::to_string(r.value("loss"));
  };
  for (const LossRecord& record : solver.loss_history()) {
    // A test at an iteration comes before its display.
    for (; t < tests.size() && tests[t].first <= record.iteration; ++t)
      if (tests[t].first >= from) lines.push_back(test_line(tests[t].first, tests[t].second));
    if (record.iteration < from) continue;
    const double lr = 0.1 * std::pow(0.5, record.iteration / 3);
    lines.push_back("train " + std::to_string(record.iteration) +
                    " loss=" + std::to_string(record.loss) + " lr=" + std::to_string(lr));
  }
  for (; t < tests.size(); ++t)
    if (tests[t].first >= from) lines.push_back(test_line(tests[t].first, tests[t].second));
  return lines;
}

std::vector<std::string> lines_of(const std::vector<MetricsRecord>& records, int from, int to) {
  std::vector<std::string> lines;
  for (const MetricsRecord& r : records) {
    const int iteration = int(r.at("iteration"));
    if (iteration < from || iteration >= to) continue;
    if (r.kind == "train")
      lines.push_back("train " + std::to_string(iteration) + " loss=" +
                      std::to_string(float(r.at("loss"))) + " lr=" + std::to_string(r.at("lr")));
    else
      lines.push_back("test " + std::to_string(iteration) + " accuracy=" +
                      std::to_string(float(r.at("accuracy"))) + " loss=" +
                      std::to_string(float(r.at("loss"))));
  }
  return lines;
}

class MetricsFormat : public ::testing::TestWithParam<const char*> {};

TEST_P(MetricsFormat, ReadsBackWhatTheSolverLoggedWithEpochsTimesAndRates) {
  NativeBackend backend;
  testing::TempDir dir;
  const std::string path = dir / (std::string("run") + GetParam());
  auto solver = make_solver(dir, backend, 6);
  train_logged(*solver, path);
  const std::vector<MetricsRecord> records = read_metrics(path);
  // Tests at 0, 3 and 6 (the end), displays at 0, 2, 4.
  ASSERT_EQ(records.size(), 6u);
  EXPECT_EQ(lines_of(records, 0, 100), expected_lines(*solver, 0));
  for (const MetricsRecord& r : records) {
    const double iteration = r.at("iteration");
    EXPECT_DOUBLE_EQ(r.at("wall_s"), iteration) << r.kind << " " << iteration;  // 1 s each
    EXPECT_DOUBLE_EQ(r.at("epoch"), iteration / 10);
    if (r.kind == "test") EXPECT_EQ(r.at("net"), 0);
    // samples/s since the last display: 4 samples a second (none at the first display).
    if (r.kind == "train" && iteration > 0) EXPECT_DOUBLE_EQ(r.at("samples_per_s"), 4);
    if (r.kind == "train" && iteration == 0) EXPECT_FALSE(r.has("samples_per_s"));
  }
}

TEST_P(MetricsFormat, AResumedRunAppendsAndReplacesTheRecordsAfterItsSnapshot) {
  NativeBackend backend;
  testing::TempDir dir;
  const std::string path = dir / (std::string("run") + GetParam());
  auto first = make_solver(dir, backend, 6);
  train_logged(*first, path);
  // A crash while writing a record leaves half a line.
  std::ofstream(path, std::ios::app) << (std::string(GetParam()) == ".csv" ? "train,5,0." : "{\"ki");
  // A fresh run refuses the file; one resumed from the snapshot at 4 appends.
  auto fresh = make_solver(dir, backend, 8);
  EXPECT_THAT(error_of([&] { MetricsLog(path, *fresh, {}); }),
              HasSubstr("already holds records and this run starts at iteration 0"));
  auto second = make_solver(dir, backend, 8);
  second->restore(dir / "run_iter_4.solverstate");
  train_logged(*second, path);
  const std::string text = read_text_file(path);
  EXPECT_EQ(text.find("train,5,0.\n"), std::string::npos);
  EXPECT_EQ(text.find("{\"ki\n"), std::string::npos);
  const std::vector<MetricsRecord> records = read_metrics(path);
  // Before 4 the first run's records; from 4 on the second's (the first's test at 6 and
  // display at 4 are gone): displays at 4 and 6, a test at 6.
  std::vector<std::string> expected = expected_lines(*first, 0);
  expected.resize(4);  // test 0, train 0, train 2, test 3
  EXPECT_EQ(lines_of(records, 0, 4), expected);
  EXPECT_EQ(lines_of(records, 4, 100), expected_lines(*second, 4));
  ASSERT_EQ(records.size(), 7u);
  // Training time goes on from the last record kept (the test at 3, at 3 s): the second run's
  // display at 4 comes at its 0 s, 6 at its 2 s.
  EXPECT_DOUBLE_EQ(records[4].at("wall_s"), 3);
  EXPECT_EQ(records[4].at("iteration"), 4);
  EXPECT_DOUBLE_EQ(records.back().at("wall_s"), 5);
}

INSTANTIATE_TEST_SUITE_P(CsvAndJsonLines, MetricsFormat, ::testing::Values(".csv", ".jsonl"),
                         [](const auto& info) { return std::string(info.param + 1); });

TEST(MetricsLog, RefusesOtherFormatsAndForeignColumns) {
  NativeBackend backend;
  testing::TempDir dir;
  auto solver = make_solver(dir, backend, 4);
  EXPECT_THAT(error_of([&] { MetricsLog(dir / "run.txt", *solver, {}); }),
              HasSubstr("'" + dir / "run.txt" + "': name it *.csv or *.jsonl"));
  solver->step(4);
  solver->snapshot();
  std::ofstream(dir / "other.csv") << "kind,iteration,top5\ntrain,2,0.5\n";
  EXPECT_THAT(error_of([&] { MetricsLog(dir / "other.csv", *solver, {}); }),
              HasSubstr("has the columns 'kind,iteration,top5', this run's are "
                        "'kind,iteration,epoch,wall_s,loss,lr,samples_per_s,net,accuracy'"));
  std::ofstream(dir / "bad.jsonl") << "{\"kind\":\"train\",\"iteration\":2}\n{\"kind\" 3}\n";
  EXPECT_THAT(error_of([&] { read_metrics(dir / "bad.jsonl"); }),
              HasSubstr("metrics file '" + dir / "bad.jsonl" +
                        "', line 2: expected ':' at column 9"));
}

}  // namespace
}  // namespace lamina
