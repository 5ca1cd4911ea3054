// What `lamina train` shows and records while it trains: --progress (training_progress.hpp)
// and --metrics (metrics_log.hpp), on worker 0 of a data-parallel job only, and the final
// test results it reports at the end.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lamina/metrics_log.hpp"
#include "lamina/solver.hpp"
#include "lamina/training_progress.hpp"

namespace lamina::cli {

// The epoch of the training net's data: its first data layer's samples (MnistData, Data,
// ImageData report them in their state) over the samples an iteration takes (the batch x
// iter_size x workers); 0 when the net's data does not say.
double iterations_per_epoch(Solver& solver);
// The samples an iteration trains on, over all workers.
double samples_per_iteration(Solver& solver);

class TrainView {
 public:
  // progress: --progress's value; metrics: --metrics's file (empty: none). Only `speaks`
  // (worker 0, or training alone) shows or writes anything.
  TrainView(Solver& solver, const std::string& progress, const std::string& metrics,
            bool speaks);
  ~TrainView();
  TrainView(const TrainView&) = delete;
  TrainView& operator=(const TrainView&) = delete;
  // Ends the status line; the metrics file stays open until the view is destroyed.
  void finish();
  // Whether a status line is redrawn in place on stderr (--progress bar, or auto there).
  bool draws_status_line() const { return display_ && display_->mode() == ProgressMode::kBar; }

 private:
  Solver& solver_;
  std::unique_ptr<ProgressDisplay> display_;
  std::unique_ptr<MetricsLog> metrics_;
};

// Each test net's results at the solver's iteration: the last test's where it ran at that
// iteration, else a test now (a collective in a data-parallel job: every worker calls it).
std::vector<TestResult> final_test_results(Solver& solver);

}  // namespace lamina::cli
