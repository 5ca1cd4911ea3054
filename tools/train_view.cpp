#include "train_view.hpp"

namespace lamina::cli {

double samples_per_iteration(Solver& solver) {
  Net& net = solver.net();
  if (net.num_layers() == 0 || net.layer_tops(0).empty()) return 0;
  const Shape& shape = net.layer_tops(0)[0]->shape();
  if (shape.empty()) return 0;
  return double(shape[0]) * solver.param().iter_size() * solver.workers();
}

double iterations_per_epoch(Solver& solver) {
  // The data layers' state (a snapshot record, so its layout stays): MnistData's is (seed,
  // epoch, cursor, samples), Data's and ImageData's (seed, position, records).
  Net& net = solver.net();
  for (int i = 0; i < net.num_layers(); ++i) {
    const Layer& layer = net.layer(i);
    const std::vector<int64_t> state = layer.state();
    int64_t samples = 0;
    if (layer.type() == "MnistData" && state.size() == 4) samples = state[3];
    if ((layer.type() == "Data" || layer.type() == "ImageData") && state.size() == 3)
      samples = state[2];
    const double per_iteration = samples_per_iteration(solver);
    if (samples > 0 && per_iteration > 0) return double(samples) / per_iteration;
  }
  return 0;
}

TrainView::TrainView(Solver& solver, const std::string& progress, const std::string& metrics,
                     bool speaks)
    : solver_(solver) {
  const ProgressMode mode = parse_progress_mode(progress, "--progress");
  if (!speaks) return;
  const double per_epoch = iterations_per_epoch(solver);
  const double samples = samples_per_iteration(solver);
  if (!metrics.empty()) {
    metrics_ = std::make_unique<MetricsLog>(metrics, solver, MetricsOptions{per_epoch, samples, {}});
    solver.add_observer(*metrics_);
  }
  if (mode != ProgressMode::kNone) {
    ProgressOptions options;
    options.mode = mode;
    options.iterations_per_epoch = per_epoch;
    options.samples_per_iteration = samples;
    options.route_glog = true;
    display_ = std::make_unique<ProgressDisplay>(solver, options);
    solver.add_observer(*display_);
  }
}

TrainView::~TrainView() {
  if (display_) solver_.remove_observer(*display_);
  if (metrics_) solver_.remove_observer(*metrics_);
}

void TrainView::finish() {
  if (display_) display_->finish();
}

std::vector<TestResult> final_test_results(Solver& solver) {
  const auto& history = solver.test_history();
  const size_t nets = size_t(solver.num_test_nets());
  std::vector<TestResult> results;
  for (size_t i = history.size() >= nets ? history.size() - nets : 0; i < history.size(); ++i)
    if (history[i].first == solver.iter()) results.push_back(history[i].second);
  if (results.size() == nets) return results;
  return solver.test_all();  // the last test was earlier, or there was none
}

}  // namespace lamina::cli
