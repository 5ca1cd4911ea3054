// A metrics file of a training run: every displayed iteration and every test result, one
// record a line, flushed as it is written, so the file can be read (lamina plot) while
// training runs and after a crash. `lamina train --metrics FILE` and `mnist --metrics FILE`
// write one (docs/seeing_training.md).
//
// Two formats, chosen by the file's extension:
//   .csv    a header line, then one row per record; a field is empty where the record has
//           no such value. Columns: kind, iteration, epoch, wall_s, loss, lr, samples_per_s,
//           net, then the test nets' outputs other than loss (accuracy, ...).
//   .jsonl  one JSON object per line with the same keys, only those the record has.
// Records:
//   train   at a display iteration: the smoothed loss the display shows, the learning rate,
//           samples/s since the previous train record (the display reads the loss from the
//           device, so the iterations before it are done);
//   test    after a test: `net` (its index) and its outputs, `loss` its loss output (or the
//           test_compute_loss loss when it has none);
//   resume  where a resumed run began appending (iteration: the one it resumed from).
// wall_s is seconds of training: a resumed run goes on from the last record it keeps. epoch
// is iteration / iterations per epoch (empty when the program does not know it).
//
// A run that resumes from a snapshot appends to its metrics file; read_metrics drops the
// records a crashed or stopped run wrote after that snapshot, which the resumed run logs
// again. A run that starts at iteration 0 refuses a file that already holds records.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "lamina/solver_observer.hpp"

namespace lamina {

struct MetricsRecord {
  std::string kind;  // "train", "test" or "resume"
  std::map<std::string, double> values;  // every numeric field the record has
  bool has(const std::string& name) const { return values.count(name) > 0; }
  // The value of `name`; an Error naming the record when it has none.
  double at(const std::string& name) const;
};

struct MetricsOptions {
  double iterations_per_epoch = 0;   // 0: no epoch column values
  double samples_per_iteration = 0;  // the global batch (x iter_size); 0: no samples/s
  std::function<double()> clock;     // seconds on a monotonic clock; default steady_clock
};

class MetricsLog : public SolverObserver {
 public:
  // Opens `path` (.csv or .jsonl) for `solver`'s run from its current iteration on: a new
  // file, or (a resumed solver, iter() > 0) an existing one to append to, whose CSV columns
  // must be this run's. An incomplete last line (a crash while writing) is cut off first.
  MetricsLog(const std::string& path, Solver& solver, MetricsOptions options = {});
  ~MetricsLog() override;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void on_display(const Solver& solver, const LossRecord& record, float learning_rate) override;
  void on_test(const Solver& solver, const TestResult& result) override;
  // A train record of a loss the program read itself (mnist's mean over an epoch).
  void record_train(const Solver& solver, double loss, double learning_rate);

  const std::string& path() const { return path_; }

 private:
  void write(const MetricsRecord& record);
  double wall_s() const;

  std::string path_;
  bool csv_;
  std::vector<std::string> columns_;  // CSV
  FILE* file_ = nullptr;
  MetricsOptions options_;
  double start_s_;
  double wall_offset_s_ = 0;  // a resumed run's training time before it
  int64_t last_iteration_;    // samples/s: since this iteration and time
  double last_s_;
};

// The records of a metrics file in order, with those a resumed run logged again replaced
// (a resume record drops the earlier records at or after its iteration; the resume records
// themselves are left out) and an incomplete last line left out. Errors name the file and
// line.
std::vector<MetricsRecord> read_metrics(const std::string& path);

}  // namespace lamina
