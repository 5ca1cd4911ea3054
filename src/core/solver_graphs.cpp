// Captured steps: the solver records one training iteration (forward and backward passes,
// loss bookkeeping, the step state's advance, the update) and one test's forward passes with
// Backend::capture, and replays them (one CUDA graph launch each). This works because every
// value that changes between iterations lives in backend memory (step_state.hpp,
// pass_counter.hpp): a replay launches exactly what a direct run would, and the results are
// the same bit for bit.
//
// Host work a replay skips is done around it: layers prepare their inputs (a data layer's
// new epoch) before and advance their host positions after (Layer::prepare_replay,
// replayed). A recording is dropped, and made again, when the net's layer states are
// restored (Net::generation) or a workspace it uses moved (CapturedOps::valid).
#include <glog/logging.h>

#include "lamina/solver.hpp"

namespace lamina {

void Solver::init_replays() {
  if (!param_.cuda_graph() || !backend_.can_capture()) return;
  std::string blocker = net_->capture_blocker();
  if (blocker.empty() && test_net_) blocker = test_net_->capture_blocker();
  if (!blocker.empty()) {
    LOG(INFO) << "CUDA graphs off: " << blocker << "; every operation is launched directly";
    return;
  }
  graphs_ = true;
}

void Solver::stop_replaying(const std::string& why) {
  LOG(WARNING) << "CUDA graphs off: " << why << "; every operation is launched directly from "
               << "now on (cuda_graph: false avoids the attempt)";
  graphs_ = false;
  step_graph_.reset();
  test_graph_.reset();
}

bool Solver::replay_step() {
  if (!graphs_ || !step_warm_) return false;
  return replay(*net_, param_.iter_size(), "the training step", step_graph_,
                step_graph_generation_, [this] {
                  forward_backward_advance();
                  apply_update();
                });
}

bool Solver::replay_test() {
  if (!graphs_ || !test_warm_) return false;
  return replay(*test_net_, test_passes(), "the test", test_graph_, test_graph_generation_,
                [this] { run_test_passes(); });
}

bool Solver::replay(Net& net, int passes, const char* what, std::unique_ptr<CapturedOps>& graph,
                    int64_t& generation, const std::function<void()>& ops) {
  if (graph && (generation != net.generation() || !graph->valid())) graph.reset();
  if (!net.prepare_replay(passes)) return false;
  if (graph) {
    graph->launch();
    net.replayed(passes);
    return true;
  }
  // Recording runs the layers' host code once, advancing their positions as if the passes
  // ran; the launch below then runs them. If recording fails, the positions go back.
  const Net::LayerStates states = net.layer_states();
  try {
    graph = backend_.capture(ops);
  } catch (const Error& e) {
    net.set_layer_states(states, std::string("the net before recording ") + what);
    stop_replaying(std::string("recording ") + what + " failed: " + e.what());
    return false;
  } catch (...) {
    net.set_layer_states(states, std::string("the net before recording ") + what);
    throw;
  }
  generation = net.generation();
  LOG(INFO) << "Recorded " << what << " as a CUDA graph of " << graph->operations()
            << " operations; it is replayed from now on";
  graph->launch();
  return true;
}

}  // namespace lamina
