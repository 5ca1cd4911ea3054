// Training progress for a person watching: one status line (iteration of max_iter, epoch,
// smoothed loss, learning rate, samples/s, elapsed time and ETA), redrawn in place on a
// terminal, or written as plain lines where the output is a file.
//
// ProgressDisplay is a SolverObserver (solver_observer.hpp): it reads the clock and the
// host's iteration count after each iteration and redraws at most every redraw_seconds,
// so it adds no device synchronisation. The loss it shows is the one the solver displays
// (on_display, every `display` iterations), or one the program sets (set_loss). samples/s
// is measured over the last ~20 s of iterations, sampled at each redraw (on a device the
// host may run a few iterations ahead of it, which a window of seconds averages out); the
// ETA is the iterations left at that rate.
//
// Modes (--progress of `lamina train` and `mnist`):
//   bar   the status line on the terminal, redrawn in place ("\r", erase to the end of the
//         line); whatever the program prints through print() (and with route_glog, glog's
//         lines: test results, snapshots, warnings) goes above it. The solver's own
//         "Iteration N, loss = ..." lines are left out: the bar shows their values.
//   log   at each display iteration, the same fields as one plain line (no control
//         characters), for files and CI logs.
//   none  nothing.
//   auto  bar when the stream is a terminal, else log.
#pragma once

#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "lamina/solver_observer.hpp"

namespace lamina {

enum class ProgressMode { kAuto, kBar, kLog, kNone };

// "auto", "bar", "log" or "none"; anything else is an Error naming `flag`.
ProgressMode parse_progress_mode(const std::string& text, const std::string& flag);
// kAuto made concrete: kBar when `stream` is a terminal, else kLog. Others are returned as
// they are.
ProgressMode resolve_progress_mode(ProgressMode mode, FILE* stream);

// What one status line shows. Fields that are not known yet are left out of the line.
struct ProgressStatus {
  int64_t iteration = 0;
  int64_t max_iter = 0;
  double epoch = -1;  // < 0: unknown
  double loss = std::numeric_limits<double>::quiet_NaN();  // NaN: none displayed yet
  double learning_rate = -1;  // < 0: unknown
  double samples_per_s = -1;  // < 0: not measured yet
  double elapsed_s = 0;
  double eta_s = -1;  // < 0: unknown
};

// "7s", "4:05", "1:02:03", "3d 04:05" (no more than 7 characters; "-" for a negative or
// non-finite time).
std::string format_duration(double seconds);

// The status line, at most `width` columns (0: no limit, no bar): a bar of the iterations
// done when there is room, then "iter 1200/10000 12%", epoch, loss, lr, samples/s, elapsed
// time and ETA, separated by " | ". When the line would be too wide, the bar, then the
// elapsed time, lr, epoch, samples/s, loss go, in that order; ETA and the iteration stay.
std::string format_progress(const ProgressStatus& status, int width);

// Iterations per second over a sliding window of (time, iteration) samples.
class RateMeter {
 public:
  explicit RateMeter(double window_s = 20) : window_s_(window_s) {}
  void add(double time_s, int64_t iteration);
  // Iterations per second over the window (at least its last two samples); -1 before two
  // samples that are apart in time and iterations.
  double rate() const;

 private:
  double window_s_;
  std::deque<std::pair<double, int64_t>> samples_;
};

struct ProgressOptions {
  ProgressMode mode = ProgressMode::kAuto;
  FILE* stream = stderr;  // where the bar or the log lines go
  int64_t max_iter = -1;  // -1: the solver's max_iter
  double iterations_per_epoch = 0;   // 0: the epoch is not shown
  double samples_per_iteration = 0;  // the global batch (x iter_size); 0: no samples/s
  double redraw_seconds = 0.25;
  // Seconds on a monotonic clock; default steady_clock (tests pass a fake one).
  std::function<double()> clock;
  // The terminal's columns; default: asked of `stream` (80 when it does not say).
  std::function<int()> width;
  // Bar mode: glog's lines print above the bar instead of tearing it (while the display
  // lives; only when glog logs to stderr, FLAGS_logtostderr, as Lamina's programs do).
  bool route_glog = false;
};

class ProgressDisplay : public SolverObserver {
 public:
  // The display of `solver`'s training from its current iteration on.
  ProgressDisplay(const Solver& solver, ProgressOptions options);
  ~ProgressDisplay() override;
  ProgressDisplay(const ProgressDisplay&) = delete;
  ProgressDisplay& operator=(const ProgressDisplay&) = delete;

  ProgressMode mode() const { return mode_; }

  void on_iteration(const Solver& solver) override;
  void on_display(const Solver& solver, const LossRecord& record, float learning_rate) override;

  // A loss to show, from a program that reads its own (mnist's per-epoch mean); in log mode
  // it prints a line, as a display iteration does.
  void set_loss(double loss);
  // Prints `line` (no newline) to `out` (default: the display's stream): in bar mode above
  // the status line, which is drawn again below it.
  void print(const std::string& line, FILE* out = nullptr);
  // Draws the final status and ends its line; later output goes below it. Called by the
  // destructor when not before.
  void finish();
  // The status now (what the next line shows).
  ProgressStatus status(int64_t iteration);

 private:
  class GlogRoute;
  void redraw(int64_t iteration);  // bar mode
  void log_line(int64_t iteration);  // log mode: the status as one plain line
  double now() const { return clock_(); }

  ProgressMode mode_;
  FILE* stream_;
  int64_t max_iter_;
  double iterations_per_epoch_;
  double samples_per_iteration_;
  double redraw_seconds_;
  std::function<double()> clock_;
  std::function<int()> width_;
  double learning_rate_;  // the solver's, as last read (finish() may outlive the solver)
  double start_s_;
  double next_draw_s_;
  int64_t last_iteration_;
  double loss_ = std::numeric_limits<double>::quiet_NaN();
  RateMeter rate_;
  std::mutex mutex_;  // the stream: the solver's thread and glog's (any thread)
  std::string line_;  // the status line on the terminal now; empty: none drawn
  bool finished_ = false;
  std::unique_ptr<GlogRoute> glog_;
};

}  // namespace lamina
