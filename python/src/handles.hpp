// What the Python classes of the module `lamina` hold (docs/python.md), and the functions
// that add each part of the module.
//
// Ownership: a Net built in Python owns its backend and its lamina::Net (NetHandle); a
// Solver's nets belong to the solver, and their handle keeps the Python Solver alive
// (NetHandle::owner). Blobs and parameters hold their net's handle, and a NumPy view of one
// holds the Blob or Param as its base, so a view keeps the whole net alive.
//
// Threads: the GIL is released while Lamina computes (forward, backward, training, weights
// files); a net or solver is used by one thread at a time.
#pragma once

#include <memory>
#include <string>

#include <pybind11/pybind11.h>

#include "lamina/backend.hpp"
#include "lamina/net.hpp"
#include "lamina/param_arena.hpp"
#include "lamina/tensor.hpp"

namespace lamina::python {

namespace py = pybind11;

struct NetHandle {
  std::shared_ptr<Backend> backend;  // declared first: destroyed after the net
  std::unique_ptr<Net> owned;        // a net built in Python; null for a solver's
  Net* net = nullptr;
  py::object owner;                  // the Python Solver a solver's net belongs to
  std::string device;                // "cpu", "cuda:0"
};
using NetRef = std::shared_ptr<NetHandle>;

// A blob of a net (lamina.Blob).
struct BlobRef {
  NetRef net;
  Tensor* tensor;
};

// A learnable parameter, one entry of the net's parameter arena (lamina.Param).
struct ParamRef {
  NetRef net;
  const ParamInfo* info;  // an entry of the arena's table, fixed for the arena's life
};

// The parts of the module, each in its own file.
void add_devices(py::module_& m);  // devices.cpp
void add_blobs(py::module_& m);    // blobs.cpp
void add_net(py::module_& m);      // net.cpp
void add_solver(py::module_& m);   // solver.cpp
void add_weights(py::module_& m);  // weights.cpp

// The backend a device spec names ("cpu", "cuda", "cuda:N"; backend_factory.hpp).
std::shared_ptr<Backend> backend_for(const std::string& device);
// A backend's device as a spec names it: "cpu" or "cuda:N".
std::string device_string(const Backend& backend);
// The Python Net of a solver's net: no copy, kept alive with the solver.
py::object solver_net(std::shared_ptr<Backend> backend, Net& net, py::object solver);

}  // namespace lamina::python
