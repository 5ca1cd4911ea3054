// Fuzz target: bytes -> a .solverstate -> Solver::restore, then one training step from
// what was restored. Two solvers (SGD and Adam) train the same small net, whose data layer
// (MnistData on tiny files, shuffled) and Dropout keep layer states, and which has a TEST
// net; the weights file that the seed state names lies beside it, as a snapshot leaves it.
//
// Each input is tried twice: as the bytes of a file, and as numbers written over those of a
// valid state (which stays well-formed, so restore's checks of iteration, seed, loss ring
// and every layer's position see hostile values rather than a damaged file).
//
// Every malformed state must end in a lamina::Error that leaves the solver as it was
// (iteration, weights, layer states: Solver::restore's promise); anything else is a bug.
// A state that restores must also train for a step, or fail with a lamina::Error.
// Seeds: LAMINA_FUZZ_WRITE_SEEDS=DIR writes both solvers' snapshots.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/solver.hpp"

namespace lamina::fuzz {
namespace {

// 12 images of 3x2 pixels and their labels, covering all ten classes. The weights are frozen
// (lr_mult 0) so that they stay the fillers' values, the same on every machine: a seed state
// names its weights file by CRC-32, which training on another CPU's BLAS would change.
std::string tiny_net() {
  std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, 12, 0, 0, 0, 3, 0, 0, 0, 2};
  std::vector<uint8_t> labels = {0, 0, 8, 1, 0, 0, 0, 12};
  for (int i = 0; i < 12 * 6; ++i) images.push_back(uint8_t(i * 37));
  for (int i = 0; i < 12; ++i) labels.push_back(uint8_t(i % 10));
  const std::string img = write_file("images-idx3-ubyte", images.data(), images.size());
  const std::string lbl = write_file("labels-idx1-ubyte", labels.data(), labels.size());
  const std::string files = "images: '" + img + "' labels: '" + lbl + "' ";
  return R"(
name: "fuzz_solver"
layer { name: "mnist" type: "MnistData" top: "data" top: "label" include { phase: TRAIN }
        mnist_data_param { )" + files + R"( batch_size: 4 shuffle: true } }
layer { name: "mnist" type: "MnistData" top: "data" top: "label" include { phase: TEST }
        mnist_data_param { )" + files + R"( batch_size: 5 } }
layer { name: "ip1" type: "Linear" bottom: "data" inner_product_param { num_output: 5 }
        param { lr_mult: 0 } param { lr_mult: 0 } }
layer { name: "drop" type: "Dropout" dropout_param { dropout_ratio: 0.3 } }
layer { name: "ip2" type: "Linear" inner_product_param { num_output: 10 }
        param { lr_mult: 0 } param { lr_mult: 0 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" }
layer { name: "acc" type: "Accuracy" bottom: "ip2" bottom: "label" include { phase: TEST } }
)";
}

struct Fixture {
  NativeBackend backend;
  std::unique_ptr<Solver> solver;
  std::string good_state;  // a snapshot of the solver, restored after every input
  SnapshotFile good;       // its records
};

std::unique_ptr<Fixture> make_fixture(const std::string& type, const NetParameter& net) {
  auto fx = std::make_unique<Fixture>();
  SolverParameter param = parse_solver_parameter(
      "base_lr: 0.01 momentum: 0.9 max_iter: 1000 average_loss: 3 random_seed: 7 "
      "test_iter: 1 test_interval: 100000 test_initialization: false type: '" + type + "'",
      "fuzz_solverstate");
  param.set_snapshot_prefix((scratch_dir() / type).string());
  fx->solver = std::make_unique<Solver>(param, net, fx->backend, "fuzz_solverstate");
  fx->solver->step(5);  // mid-epoch: every layer state is non-trivial
  const SnapshotPaths paths = fx->solver->snapshot();
  fx->good_state = paths.state;
  fx->good = read_snapshot_file(paths.state, SnapshotKind::kSolverState);
  // Not *.solverstate, which .gitignore keeps out of the repository.
  write_seed("seed-" + type + ".state", read_text_file(paths.state));
  return fx;
}

const std::vector<std::unique_ptr<Fixture>>& fixtures() {
  static const std::vector<std::unique_ptr<Fixture>> all = [] {
    quiet_logging();
    const NetParameter net = parse_net_parameter(tiny_net(), "fuzz_solverstate");
    std::vector<std::unique_ptr<Fixture>> made;
    made.push_back(make_fixture("SGD", net));
    made.push_back(make_fixture("Adam", net));
    return made;
  }();
  return all;
}

// What restore() promises to leave alone when it fails.
struct Observed {
  int iter;
  std::vector<float> weights;
  Net::LayerStates train, test;
};
Observed observe(Solver& s) {
  const float* w = s.net().arena().data();
  return {s.iter(), std::vector<float>(w, w + s.net().arena().count()), s.net().layer_states(),
          s.test_net()->layer_states()};
}
bool same(const Observed& a, const Observed& b) {
  return a.iter == b.iter && a.train == b.train && a.test == b.test &&
         a.weights.size() == b.weights.size() &&
         std::memcmp(a.weights.data(), b.weights.data(), sizeof(float) * a.weights.size()) == 0;
}

// The good state's int64 values (but the weights checksum) and loss values, replaced in
// record order by the input's bytes as far as they go.
std::string numbers_over(const SnapshotFile& good, const uint8_t* data, size_t size) {
  std::vector<SnapshotRecord> records = good.records;
  size_t at = 0;
  for (SnapshotRecord& r : records) {
    if (r.name == "weights_crc32") continue;
    for (int64_t& v : r.ints) {
      if (at + sizeof v > size) break;
      std::memcpy(&v, data + at, sizeof v);
      at += sizeof v;
    }
    if (r.name != "loss_ring" && r.name != "loss_sum") continue;
    for (float& v : r.floats) {
      if (at + sizeof v > size) break;
      std::memcpy(&v, data + at, sizeof v);
      at += sizeof v;
    }
  }
  return encode_snapshot(SnapshotKind::kSolverState, records);
}

// Restores bytes; on success trains a step, then goes back to the good state.
void try_restore(Fixture& fx, const std::string& bytes) {
  const std::string path = write_file("input.solverstate", bytes.data(), bytes.size());
  Solver& solver = *fx.solver;
  const Observed before = observe(solver);
  try {
    solver.restore(path);
    accepted("restore");
  } catch (const Error& e) {
    rejected("restore", e);
    if (!same(observe(solver), before)) {
      std::fprintf(stderr, "BUG: Solver::restore failed but changed the solver\n");
      std::abort();
    }
    return;
  }
  try {
    solver.step(1);
    accepted("step after restore");
  } catch (const Error& e) {
    rejected("step after restore", e);
  }
  solver.restore(fx.good_state);  // the next input starts from the same solver
}

void run(const uint8_t* data, size_t size) {
  for (const auto& fx : fixtures()) {
    try_restore(*fx, with_valid_crc(data, size));
    try_restore(*fx, numbers_over(fx->good, data, size));
  }
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
