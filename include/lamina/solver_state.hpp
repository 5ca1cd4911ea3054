// The solver state file (.solverstate): what a resumed run needs beyond the weights, as
// records of the snapshot container (snapshot.hpp). docs/snapshots.md describes its use.
//
// Records: iteration, seed, solver_type, net_name, weights_file (the weights file written
// with it, by name, beside the state file), weights_crc32 (that file's CRC-32), loss_ring
// (average_loss floats), loss_sum, loss_sum_count, the optimizer's state arrays as the
// arena holds them, one record per parameter (history/<param> and, for Adam, AdamW and
// AdaDelta, history2/<param>, shaped as the parameter), and each stateful layer's state by its
// key (Net::layer_key: state/train/<layer>, state/test/<layer> for test net #0,
// state/test<k>/<layer> for test net #k), and algorithms: the backend's algorithm choices
// (Backend::algorithm_choices; optional, empty on the CPU and in states written before it),
// and workers: the data-parallel job's worker count (optional, written when not 1), and
// loss_scale and loss_scale_counts (good steps in a row, skipped iterations): FP16's
// dynamic loss scale (optional, written when the solver scales the loss).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/net.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/snapshot.hpp"

namespace lamina {

struct SolverState {
  int64_t iteration = 0;
  uint64_t seed = 0;
  std::string solver_type;
  std::string net_name;
  std::string weights_file;
  uint32_t weights_crc32 = 0;
  std::vector<float> loss_ring;
  float loss_sum = 0;
  int64_t loss_sum_count = 0;
  std::vector<std::vector<float>> optimizer;  // the arena's state(k), arena layout
  Net::LayerStates train_layers;
  std::vector<Net::LayerStates> test_layers;  // per test net
  std::string algorithms;  // Backend::algorithm_choices when it was written
  int64_t workers = 1;     // the data-parallel job that wrote it (docs/distributed.md)
  bool has_loss_scale = false;  // the solver scaled the loss (FP16)
  float loss_scale = 1;
  int64_t good_steps = 0, skipped = 0;
};

// The record prefix of optimizer state array k: "history/", "history2/".
std::string optimizer_state_prefix(int k);

// The records of a state; `arena` gives the parameter table the optimizer arrays follow.
std::vector<SnapshotRecord> encode_solver_state(const SolverState& state,
                                                const ParamArena& arena);

// Reads and validates a solver state file's records for a solver of type solver_type that
// keeps num_optimizer_arrays state arrays over `arena`: every record present with its type
// and size, written by that solver type, an optimizer record for every parameter in its
// shape, and no record it does not know. Throws an Error naming `path` and the problem;
// changes nothing.
SolverState decode_solver_state(const SnapshotFile& file, const std::string& path,
                                const ParamArena& arena, const std::string& solver_type,
                                int num_optimizer_arrays);

}  // namespace lamina
