// The solver's configuration: the update rule a SolverParameter names, and the checks that
// refuse, before any net is built, every value the solver could not apply or that would make
// training meaningless. The accepted ranges are listed in docs/prototxt.md ("A solver").
//
// Each error names the field and, when the parameter was read from a file (`source`), the
// file and the line where the field is written: "solver.prototxt:4: momentum is 1; ...".
#pragma once

#include <string>

#include <google/protobuf/message.h>

#include "lamina/backend.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// The update rule `type` names (SGD, Nesterov, Adam, AdamW, RMSProp, AdaGrad, AdaDelta), or,
// where type is left out, Caffe's older enum solver_type (SGD, NESTEROV, ADAGRAD, RMSPROP,
// ADADELTA, ADAM). An unknown type, or type and solver_type naming different rules, is an
// Error naming source:line.
UpdateRule parse_solver_type(const SolverParameter& p, const std::string& source = {});

// The rule's name as `type` writes it ("AdaDelta"); solver states record it.
const char* solver_type_name(UpdateRule rule);

// Who runs the tests. kSolve: only solve() does (lamina train, Solver::from_file), every
// test_interval iterations, so test_iter without test_interval would build a test net that
// never runs. kCaller: the program may also call Solver::test() itself (the Solver
// constructor), so test_iter alone (the number of test batches) is meaningful.
enum class TestRunner { kSolve, kCaller };

// Throws an Error for the first field whose value the solver refuses: unknown names, values
// that are not finite or outside their range, fields the chosen lr_policy or type needs and
// lacks or does not use, settings that contradict each other (test_interval without
// test_iter), and an empty snapshot_prefix where snapshots are asked for.
// source: the solver file p was read from (or a name for it; empty for none).
void check_solver_parameter(const SolverParameter& p, const std::string& source = {},
                            TestRunner tests = TestRunner::kSolve);

// Where a top-level field of a message read from the text-format file `path` is written:
// "path:line" (index: which value of a repeated field), just "path" when the line is unknown
// (the field is not in the file, path is a name rather than a readable file, or the file no
// longer parses), and "" for an empty path. Reads the file again: meant for error messages.
std::string field_location(const std::string& path, const google::protobuf::Message& prototype,
                           const std::string& field, int index = -1);

}  // namespace lamina
