// The training progress line (training_progress.hpp): its fields and widths, durations, the
// rate and ETA on a fake clock, how often the bar is redrawn, lines printed above it, the
// log mode's plain lines without control characters, and that watching training (the line
// and a metrics file) adds no transfer or synchronisation on a device.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "forwarding_backend.hpp"
#include "lamina/io.hpp"
#include "lamina/metrics_log.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/solver.hpp"
#include "lamina/training_progress.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::error_of;

TEST(ProgressLine, DurationsReadAsClockTimes) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(7.4), "7s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(245), "4:05");
  EXPECT_EQ(format_duration(3723), "1:02:03");
  EXPECT_EQ(format_duration(3 * 86400 + 4 * 3600 + 5 * 60 + 6), "3d 04:05");
  EXPECT_EQ(format_duration(-1), "-");
  EXPECT_EQ(format_duration(std::nan("")), "-");
}

ProgressStatus full_status() {
  ProgressStatus s;
  s.iteration = 1200;
  s.max_iter = 10000;
  s.epoch = 1.28;
  s.loss = 0.081234;
  s.learning_rate = 0.00932;
  s.samples_per_s = 2345.4;
  s.elapsed_s = 42;
  s.eta_s = 312;
  return s;
}

TEST(ProgressLine, ShowsEveryFieldWhenThereIsRoom) {
  EXPECT_EQ(format_progress(full_status(), 0),
            "iter 1200/10000 12% | epoch 1.28 | loss 0.08123 | lr 0.00932 | 2345 samples/s | "
            "42s elapsed | ETA 5:12");
  // With a width, the bar of iterations done comes first: 12% of 20 cells is 2.
  EXPECT_EQ(format_progress(full_status(), 200).substr(0, 24), "[==>                 ] i");
}

TEST(ProgressLine, FitsTheWidthDroppingTheLeastNeededFieldsFirst) {
  const ProgressStatus s = full_status();
  const std::string full = format_progress(s, 0);
  for (int width = 10; width <= 140; ++width) {
    const std::string line = format_progress(s, width);
    EXPECT_LE(int(line.size()), width) << line;
  }
  // Just too narrow for the bar: it goes, and everything else stays.
  EXPECT_EQ(format_progress(s, int(full.size())), full);
  // Narrower: elapsed, then lr, epoch, samples/s and loss go; iteration and ETA stay.
  const std::string no_elapsed = format_progress(s, int(full.size()) - 1);
  EXPECT_THAT(no_elapsed, Not(HasSubstr("elapsed")));
  EXPECT_THAT(no_elapsed, HasSubstr("lr 0.00932"));
  EXPECT_EQ(format_progress(s, 45), "iter 1200/10000 12% | loss 0.08123 | ETA 5:12");
  EXPECT_EQ(format_progress(s, 40), "iter 1200/10000 12% | ETA 5:12");
  EXPECT_EQ(format_progress(s, 26), "iter 1200/10000 12% | ETA ");
}

TEST(ProgressLine, LeavesOutWhatIsNotKnown) {
  ProgressStatus s;
  s.iteration = 5;
  s.elapsed_s = 3;
  EXPECT_EQ(format_progress(s, 0), "iter 5 | 3s elapsed");
  s.max_iter = 10;
  EXPECT_EQ(format_progress(s, 0), "iter 5/10 50% | 3s elapsed | ETA -");
  s.iteration = 10;
  EXPECT_EQ(format_progress(s, 0), "iter 10/10 100% | 3s elapsed | ETA 0s");
}

TEST(ProgressLine, RateIsOverTheWindow) {
  RateMeter meter(10);
  EXPECT_EQ(meter.rate(), -1);
  meter.add(0, 0);
  EXPECT_EQ(meter.rate(), -1);
  meter.add(1, 100);  // a slow start (warm-up)
  EXPECT_DOUBLE_EQ(meter.rate(), 100);
  for (int t = 2; t <= 30; ++t) meter.add(t, 100 + 200 * (t - 1));
  EXPECT_DOUBLE_EQ(meter.rate(), 200);  // the warm-up left the window
}

// A solver of a small MLP on the CPU (its inputs all zero), and a fake clock that the test advances.
struct Fixture {
  NativeBackend backend;
  std::unique_ptr<Solver> solver;
  double clock = 100;
  explicit Fixture(const std::string& solver_settings) {
    solver = std::make_unique<Solver>(parse_solver_parameter(solver_settings, "solver.prototxt"),
                                      parse_net_parameter(testing::kSmallMlp, "net.prototxt"),
                                      backend);
  }
  ProgressOptions options(ProgressMode mode, FILE* stream) {
    ProgressOptions o;
    o.mode = mode;
    o.stream = stream;
    o.iterations_per_epoch = 10;
    o.samples_per_iteration = 8;
    o.clock = [this] { return clock; };
    o.width = [] { return 120; };
    return o;
  }
};

std::string contents(FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string out;
  for (int c; (c = std::fgetc(file)) != EOF;) out += char(c);
  return out;
}

TEST(ProgressDisplay, BarRedrawsAtMostEveryQuarterSecondWithRateAndEta) {
  Fixture f("base_lr: 0.1 display: 5 max_iter: 100 random_seed: 1");
  FILE* out = std::tmpfile();
  ProgressDisplay display(*f.solver, f.options(ProgressMode::kBar, out));
  EXPECT_EQ(display.mode(), ProgressMode::kBar);
  f.solver->add_observer(display);
  // 40 iterations of 1/64 s each (64 iterations/s, 512 samples/s): the bar is drawn after
  // the first iteration, then once a quarter second (16 iterations) has passed: 3 times.
  for (int i = 0; i < 40; ++i) {
    f.clock += 1.0 / 64;
    f.solver->step(1);
  }
  const std::string drawn = contents(out);
  EXPECT_EQ(std::count(drawn.begin(), drawn.end(), '\r'), 3) << drawn;
  EXPECT_THAT(drawn, HasSubstr("\r[======>             ] iter 33/100 33% | epoch 3.30 | loss "));
  EXPECT_THAT(drawn, HasSubstr(" | lr 0.1 | 512 samples/s | 1s elapsed | ETA 1s\033[K"));
  // 60 iterations left at 64 per second.
  const ProgressStatus s = display.status(f.solver->iter());
  EXPECT_DOUBLE_EQ(s.samples_per_s, 512);
  EXPECT_DOUBLE_EQ(s.eta_s, 60.0 / 64);
  EXPECT_DOUBLE_EQ(s.epoch, 4.0);
  EXPECT_DOUBLE_EQ(s.elapsed_s, 40.0 / 64);
  EXPECT_FLOAT_EQ(float(s.loss), f.solver->loss_history().back().loss);
  display.finish();
  f.solver->remove_observer(display);
  std::fclose(out);
}

TEST(ProgressDisplay, LinesPrintAboveTheBar) {
  Fixture f("base_lr: 0.1 display: 5 max_iter: 100 random_seed: 1");
  FILE* out = std::tmpfile();
  ProgressDisplay display(*f.solver, f.options(ProgressMode::kBar, out));
  f.solver->add_observer(display);
  f.solver->step(1);
  // The bar is erased, the line written, the bar drawn again below it.
  display.print("Test net output #0: accuracy = 0.5");
  display.finish();
  const std::string text = contents(out);
  EXPECT_NE(text.find("\r\033[KTest net output #0: accuracy = 0.5\n[>"), std::string::npos)
      << text;
  EXPECT_EQ(text.back(), '\n');
  f.solver->remove_observer(display);
  std::fclose(out);
}

TEST(ProgressDisplay, LogModeWritesPlainLinesAtDisplayIterations) {
  Fixture f("base_lr: 0.1 display: 5 max_iter: 20 random_seed: 1");
  FILE* out = std::tmpfile();
  {
    ProgressDisplay display(*f.solver, f.options(ProgressMode::kLog, out));
    f.solver->add_observer(display);
    for (int i = 0; i < 20; ++i) {
      f.clock += 0.5;
      f.solver->step(1);
    }
    display.print("a line of the program's");
    f.solver->remove_observer(display);
  }
  const std::string text = contents(out);
  std::fclose(out);
  // Displays at 0, 5, 10, 15, then the program's line; no control characters anywhere.
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5) << text;
  for (char c : text) EXPECT_TRUE(c == '\n' || (c >= 32 && c < 127)) << int(c);
  EXPECT_THAT(text, HasSubstr("iter 10/20 50% | epoch 1.00 | loss "));
  EXPECT_THAT(text, HasSubstr(" | lr 0.1 | 16 samples/s | 6s elapsed | ETA 5s\n"));
  EXPECT_THAT(text, HasSubstr("a line of the program's\n"));
}

TEST(ProgressDisplay, AutoIsPlainLinesWhereTheStreamIsNoTerminal) {
  FILE* file = std::tmpfile();
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kAuto, file), ProgressMode::kLog);
  EXPECT_EQ(resolve_progress_mode(ProgressMode::kNone, file), ProgressMode::kNone);
  std::fclose(file);
  EXPECT_EQ(parse_progress_mode("bar", "--progress"), ProgressMode::kBar);
  EXPECT_THAT(error_of([] { parse_progress_mode("fancy", "--progress"); }),
              HasSubstr("--progress must be auto, bar, log or none; got 'fancy'"));
}

// A NativeBackend posing as a device (the solver reads the loss only at display iterations),
// counting its transfers and synchronisations.
class CountingDevice final : public testing::CountingBackend {
 public:
  bool is_host() const override { return false; }
  void synchronize() override {
    ++synchronizations;
    CountingBackend::synchronize();
  }
  int64_t synchronizations = 0;
};

TEST(ProgressDisplay, WatchingTrainingAddsNoTransferOrSynchronisation) {
  const std::string settings =
      "base_lr: 0.1 display: 10 max_iter: 40 test_iter: 2 test_interval: 15 random_seed: 1";
  auto train = [&](bool watched) {
    CountingDevice device;
    Solver solver(parse_solver_parameter(settings, "solver.prototxt"),
                  parse_net_parameter(testing::kSmallMlp, "net.prototxt"), device);
    testing::TempDir dir;
    FILE* out = std::tmpfile();
    std::unique_ptr<ProgressDisplay> display;
    std::unique_ptr<MetricsLog> metrics;
    if (watched) {
      ProgressOptions options;
      options.mode = ProgressMode::kBar;
      options.stream = out;
      options.redraw_seconds = 0;  // every iteration
      options.samples_per_iteration = 8;
      display = std::make_unique<ProgressDisplay>(solver, options);
      metrics = std::make_unique<MetricsLog>(dir / "run.csv", solver, MetricsOptions{0, 8, {}});
      solver.add_observer(*display);
      solver.add_observer(*metrics);
    }
    const testing::CountingBackend::Transfers before = device.transfers();
    const int64_t synchronizations = device.synchronizations;
    solver.step(40);
    const std::vector<int64_t> counts = {device.transfers().to_host - before.to_host,
                                         device.transfers().bytes - before.bytes,
                                         device.synchronizations - synchronizations};
    if (watched) {
      EXPECT_EQ(read_metrics(dir / "run.csv").size(), 4u + 3u);  // displays 0-30, tests 15, 30
      EXPECT_NE(contents(out).find("iter 40/40 100%"), std::string::npos);
      solver.remove_observer(*display);
      solver.remove_observer(*metrics);
      display->finish();
    }
    std::fclose(out);
    return counts;
  };
  const std::vector<int64_t> alone = train(false);
  EXPECT_GT(alone[0], 0);  // the display's reads of the loss, the tests' of their outputs
  EXPECT_EQ(train(true), alone);
}

}  // namespace
}  // namespace lamina
