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

#include "lamina/cuda_kernels.hpp"
#include "lamina/solver.hpp"

namespace lamina {

void Solver::init_replays() {
  if (!param_.cuda_graph() || !backend_.can_capture()) return;
  std::string blocker = net_->capture_blocker();
  for (const auto& test : test_nets_)
    if (blocker.empty()) blocker = test->capture_blocker();
  // debug_info reads every layer's values back to the host between its operations.
  bool debug = param_.debug_info() || net_->debug_info();
  for (const auto& test : test_nets_) debug = debug || test->debug_info();
  if (blocker.empty() && debug)
    blocker = "debug_info is on (it reads every layer's values back to the host, layer by "
              "layer)";
  // LAMINA_CHECK_KERNELS waits for each kernel of a layer defined outside Lamina.
  if (blocker.empty() && cuda::kernel_checks())
    blocker = "LAMINA_CHECK_KERNELS=1 is set (the kernels of layers defined outside Lamina "
              "are waited for and checked one by one)";
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
  for (auto& graph : test_graphs_) graph.reset();
}

bool Solver::replay_step() {
  if (!graphs_ || !step_warm_) return false;
  return replay(*net_, param_.iter_size(), "the training step", step_graph_,
                step_graph_generation_, [this] {
                  forward_backward_advance();
                  apply_update();
                });
}

bool Solver::replay_test(int k) {
  if (!graphs_ || !test_warm_[k]) return false;
  const std::string what = num_test_nets() > 1 ? "the test of net #" + std::to_string(k)
                                               : std::string("the test");
  return replay(*test_nets_[k], test_passes(k), what.c_str(), test_graphs_[k],
                test_graph_generations_[k], [this, k] { run_test_passes(k); });
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
