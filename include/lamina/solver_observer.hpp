// SolverObserver: what a program watching training is told, as it happens.
//
// A progress display, a metrics log or a Python callback registers an observer with
// Solver::add_observer and is called from the thread running step()/solve(), at the points
// where the solver has the values on the host anyway: no callback adds a device
// synchronisation or copy. on_iteration is called after every iteration with host values
// only (the iteration count); on_display at display iterations, with the loss the display
// line shows; on_test after each test net's test; on_snapshot after a snapshot is written.
//
// In a data-parallel job every worker's solver calls its own observers; the values passed
// are the job's (the loss and test outputs are averaged over the workers). on_snapshot is
// called on worker 0 alone, which writes the job's snapshots. Programs usually observe
// worker 0 alone (Solver::rank() == 0).
//
// An observer may add or remove observers, itself included, while it is called. An exception
// it throws leaves step()/solve() and the solver stays usable: from on_iteration, on_display
// and on_snapshot once the iteration that called it is complete (its update applied, its
// periodic snapshot written, its actions taken; the first such exception is rethrown), from
// on_test at once, before the iteration the test preceded, which the next step() starts with.
#pragma once

namespace lamina {

class Solver;
struct LossRecord;
struct TestResult;
struct SnapshotPaths;

class SolverObserver {
 public:
  virtual ~SolverObserver() = default;
  // After iteration solver.iter() - 1 completed (the update issued; on a device it may
  // still be running).
  virtual void on_iteration(const Solver& /*solver*/) {}
  // At a display iteration: the smoothed loss (record.loss) the display line shows, and the
  // learning rate of that iteration's update.
  virtual void on_display(const Solver& /*solver*/, const LossRecord& /*record*/,
                          float /*learning_rate*/) {}
  // After test net result.net was tested at iteration solver.iter().
  virtual void on_test(const Solver& /*solver*/, const TestResult& /*result*/) {}
  // After a snapshot's two files were written (periodic, requested, at the end, or by
  // Solver::snapshot()).
  virtual void on_snapshot(const Solver& /*solver*/, const SnapshotPaths& /*paths*/) {}
};

}  // namespace lamina
