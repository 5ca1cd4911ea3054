// The nets a solver trains and tests, from the fields of its SolverParameter, as Caffe 1.0's
// Solver::InitTrainNet and InitTestNets choose them.
//
// The train net: exactly one of net, net_param, train_net, train_net_param. The test nets,
// in this order: one per test_net_param, one per test_net, then, with net or net_param (the
// general net), one more per test_iter left over (a solver with net and one test_iter tests
// the general net's TEST phase). test_iter has one value per test net (with a general net,
// at least one per test_net_param and test_net); test_state is absent or has one per test
// net. Each net's state (net_state.hpp): phase TRAIN, or TEST for a test net unless its
// test_state says otherwise; the level and stages of the net file's own state with those of
// train_state / test_state merged over them. train_state's phase, if set, must be TRAIN.
//
// Net files (net, train_net, test_net) are read relative to the solver file (unless absolute
// or found as given). Errors name the solver file and the line of the field.
#pragma once

#include <string>
#include <vector>

#include "lamina/lamina.pb.h"

namespace lamina {

struct SolverNet {
  NetParameter param;  // its state set (phase, level, stages)
  std::string source;  // the net file it was read from ("" for a net written in the solver)
  std::string origin;  // where the solver names it, for the log: "test_net_param #0"
};

struct SolverNets {
  SolverNet train;
  std::vector<SolverNet> tests;  // in the order of test_iter and test_state
};

// solver_path: the solver file p was read from (or a name for it; empty for none).
SolverNets solver_nets(const SolverParameter& p, const std::string& solver_path);

// The same with `net` (read from `source`) as the general net, in place of the solver's own
// net or net_param; train_net and train_net_param may not be given with it. Relative
// test_net paths are read relative to `source`.
SolverNets solver_nets(const SolverParameter& p, const NetParameter& net,
                       const std::string& source);

}  // namespace lamina
