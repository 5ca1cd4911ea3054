// The solver state file's records: encoding and validation (solver_state.hpp).
#include "lamina/solver_state.hpp"

#include <climits>
#include <cmath>
#include <cstdint>
#include <set>

#include "lamina/step_state.hpp"

namespace lamina {
namespace {

constexpr char kTrainStates[] = "state/train/";
constexpr char kTestStates[] = "state/test";  // then "/" for test net #0, "<k>/" for #k

std::string test_states_prefix(size_t k) {
  return kTestStates + (k == 0 ? std::string() : std::to_string(k)) + "/";
}

// Which test net a record of layer state belongs to, and the layer: "state/test/x" is net
// 0's 'x', "state/test2/x" net 2's; false for other records.
bool test_state_record(const std::string& name, size_t& net, std::string& layer) {
  const std::string prefix = kTestStates;
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  const size_t slash = name.find('/', prefix.size());
  if (slash == std::string::npos) return false;
  const std::string digits = name.substr(prefix.size(), slash - prefix.size());
  if (digits.empty()) {
    net = 0;
  } else {
    if (digits.size() > 4 || digits[0] == '0' ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    net = std::stoul(digits);
  }
  layer = name.substr(slash + 1);
  return true;
}

}  // namespace

std::string optimizer_state_prefix(int k) {
  return k == 0 ? "history/" : "history" + std::to_string(k + 1) + "/";
}

std::vector<SnapshotRecord> encode_solver_state(const SolverState& s, const ParamArena& arena) {
  std::vector<SnapshotRecord> records;
  records.push_back(SnapshotRecord::of_ints("iteration", {s.iteration}));
  records.push_back(SnapshotRecord::of_ints("seed", {int64_t(s.seed)}));
  records.push_back(SnapshotRecord::of_bytes("solver_type", s.solver_type));
  records.push_back(SnapshotRecord::of_bytes("net_name", s.net_name));
  for (size_t k = 0; k < s.optimizer.size(); ++k) {
    const std::vector<float>& array = s.optimizer[k];
    for (const ParamInfo& info : arena.table()) {
      records.push_back(SnapshotRecord::of_floats(
          optimizer_state_prefix(int(k)) + info.name, info.shape,
          std::vector<float>(array.begin() + info.offset, array.begin() + info.offset + info.count)));
    }
  }
  records.push_back(
      SnapshotRecord::of_floats("loss_ring", {int64_t(s.loss_ring.size())}, s.loss_ring));
  records.push_back(SnapshotRecord::of_floats("loss_sum", {1}, {s.loss_sum}));
  records.push_back(SnapshotRecord::of_ints("loss_sum_count", {s.loss_sum_count}));
  for (const auto& [layer, values] : s.train_layers)
    records.push_back(SnapshotRecord::of_ints(kTrainStates + layer, values));
  for (size_t k = 0; k < s.test_layers.size(); ++k)
    for (const auto& [layer, values] : s.test_layers[k])
      records.push_back(SnapshotRecord::of_ints(test_states_prefix(k) + layer, values));
  records.push_back(SnapshotRecord::of_bytes("weights_file", s.weights_file));
  records.push_back(SnapshotRecord::of_ints("weights_crc32", {int64_t(s.weights_crc32)}));
  if (!s.algorithms.empty())
    records.push_back(SnapshotRecord::of_bytes("algorithms", s.algorithms));
  if (s.workers != 1) records.push_back(SnapshotRecord::of_ints("workers", {s.workers}));
  if (s.has_loss_scale) {
    records.push_back(SnapshotRecord::of_floats("loss_scale", {1}, {s.loss_scale}));
    records.push_back(SnapshotRecord::of_ints("loss_scale_counts", {s.good_steps, s.skipped}));
  }
  return records;
}

SolverState decode_solver_state(const SnapshotFile& file, const std::string& path,
                                const ParamArena& arena, const std::string& solver_type,
                                int num_optimizer_arrays) {
  const std::string what = "solver state '" + path + "': ";
  using Type = SnapshotRecord::Type;
  std::set<std::string> used;
  auto get = [&](const std::string& name, Type type, int64_t count) -> const SnapshotRecord& {
    const SnapshotRecord* r = file.find(name);
    LAMINA_REQUIRE(r, what, "missing record '", name, "'; the file is damaged or not a Lamina "
                   "solver state");
    LAMINA_REQUIRE(r->type == type && (count < 0 || r->count() == count), what, "record '",
                   name, "' has the wrong type or size");
    used.insert(name);
    return *r;
  };
  SolverState s;
  s.iteration = get("iteration", Type::kInt64, 1).ints[0];
  LAMINA_REQUIRE(s.iteration >= 0 && s.iteration <= INT_MAX, what, "iteration ", s.iteration,
                 " is out of range");
  s.seed = uint64_t(get("seed", Type::kInt64, 1).ints[0]);
  s.solver_type = get("solver_type", Type::kBytes, -1).bytes;
  LAMINA_REQUIRE(s.solver_type == solver_type, what, "it was written by a ", s.solver_type,
                 " solver, but this solver is ", solver_type, "; resume with the same type, or "
                 "start a new run from its weights (fine-tuning)");
  s.net_name = get("net_name", Type::kBytes, -1).bytes;
  s.weights_file = get("weights_file", Type::kBytes, -1).bytes;
  s.weights_crc32 = uint32_t(get("weights_crc32", Type::kInt64, 1).ints[0]);
  s.loss_ring = get("loss_ring", Type::kFloat32, -1).floats;
  s.loss_sum = get("loss_sum", Type::kFloat32, 1).floats[0];
  s.loss_sum_count = get("loss_sum_count", Type::kInt64, 1).ints[0];
  if (file.find("algorithms")) s.algorithms = get("algorithms", Type::kBytes, -1).bytes;
  if (file.find("workers")) s.workers = get("workers", Type::kInt64, 1).ints[0];
  LAMINA_REQUIRE(s.workers >= 1 && s.workers <= INT_MAX, what, "workers ", s.workers,
                 " is out of range; the file is damaged");
  if (file.find("loss_scale") || file.find("loss_scale_counts")) {
    s.has_loss_scale = true;
    s.loss_scale = get("loss_scale", Type::kFloat32, 1).floats[0];
    const std::vector<int64_t>& counts = get("loss_scale_counts", Type::kInt64, 2).ints;
    s.good_steps = counts[0];
    s.skipped = counts[1];
    LAMINA_REQUIRE(std::isfinite(s.loss_scale) && s.loss_scale >= kSmallestLossScale, what,
                   "loss_scale ", s.loss_scale, " is not a finite number of at least 2^-24; "
                   "the file is damaged");
    LAMINA_REQUIRE(s.good_steps >= 0 && s.good_steps <= INT32_MAX && s.skipped >= 0 &&
                   s.skipped <= s.iteration, what, "loss_scale_counts (", s.good_steps, ", ",
                   s.skipped, ") are out of range; the file is damaged");
  }
  LAMINA_REQUIRE(s.loss_sum_count >= 0 && s.loss_sum_count <= s.iteration, what,
                 "loss_sum_count ", s.loss_sum_count, " is not between 0 and the iteration, ",
                 s.iteration, "; the file is damaged");

  // The optimizer's arrays, keyed like the weights.
  for (int k = 0; k < num_optimizer_arrays; ++k) {
    const std::string prefix = optimizer_state_prefix(k);
    WeightsLoadReport report;
    s.optimizer.push_back(
        arena_from_records(arena, file, path, prefix, WeightsMatch::kExact, &report));
    for (const std::string& name : report.loaded) used.insert(prefix + name);
  }
  // Layer states of the train net and the test nets.
  for (const SnapshotRecord& r : file.records) {
    const std::string train = kTrainStates;
    size_t net = 0;
    std::string layer;
    Net::LayerStates* states = nullptr;
    if (r.name.compare(0, train.size(), train) == 0) {
      states = &s.train_layers;
      layer = r.name.substr(train.size());
    } else if (test_state_record(r.name, net, layer)) {
      if (s.test_layers.size() <= net) s.test_layers.resize(net + 1);
      states = &s.test_layers[net];
    } else {
      continue;
    }
    LAMINA_REQUIRE(r.type == Type::kInt64, what, "record '", r.name, "' is not int64");
    (*states)[layer] = r.ints;
    used.insert(r.name);
  }
  for (const SnapshotRecord& r : file.records) {
    if (used.count(r.name)) continue;
    if (r.name.rfind("history", 0) == 0)
      fail(what, "it holds '", r.name, "', which no parameter of the net matches; it was "
           "written for a different net");
    fail(what, "unknown record '", r.name, "'");
  }
  return s;
}

}  // namespace lamina
