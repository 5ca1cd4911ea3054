// The one place that turns a name into a backend. Programs (the lamina tool, the examples,
// the benchmarks) and the solver's configuration name a backend by a spec string:
//
//   "cpu"      the Native backend (host memory, OpenBLAS)
//   "cuda:N"   the CUDA backend on device N (N >= 0); "cuda" is "cuda:0"
//
// A command line's --gpu value maps onto a spec: N >= 0 is "cuda:N", -1 is "cpu" (and, for
// a solver, overrides solver_mode: GPU). Anything else is an Error naming the value.
#pragma once

#include <memory>
#include <string>

#include "lamina/backend.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

struct BackendSpec {
  enum class Kind { kCpu, kCuda };
  Kind kind = Kind::kCpu;
  int device = 0;  // kCuda: the device number, >= 0

  std::string str() const;  // "cpu" or "cuda:N"
};

// Parses "cpu", "cuda" or "cuda:N". Anything else (an empty string, "cuda:", "cuda:-1",
// "cuda:x", "gpu") is an Error naming the spec and listing the accepted forms.
BackendSpec parse_backend_spec(const std::string& spec);

// The backend a spec names. "cuda:N" without device N (or in a build without CUDA) throws the
// CUDA backend's Error, which says what devices were found.
std::unique_ptr<Backend> make_backend(const std::string& spec);
std::unique_ptr<Backend> make_backend(const BackendSpec& spec);

// The spec for a --gpu value given as text: "-1" is "cpu", "N" (N >= 0) is "cuda:N". A value
// that is not an integer, or is below -1, is an Error naming `flag` and the value.
std::string backend_spec_from_gpu(const std::string& value, const std::string& flag = "--gpu");

// The spec a solver asks for: "cuda:<device_id>" when solver_mode is GPU, else "cpu". A
// negative device_id is an Error naming the field.
std::string solver_backend_spec(const SolverParameter& param);

// The backend for a solver. A non-empty override_spec (from a command line's --gpu) wins
// over solver_mode and device_id and is written back into param: "cuda:N" sets solver_mode
// GPU and device_id N; "cpu" sets solver_mode CPU and clears device_id. Without one, a GPU
// the solver's fields ask for that cannot be used is an Error that says the fields chose it.
std::unique_ptr<Backend> make_solver_backend(SolverParameter& param,
                                             const std::string& override_spec = {});

}  // namespace lamina
