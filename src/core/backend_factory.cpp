#include "lamina/backend_factory.hpp"

#include <charconv>
#include <system_error>

#include "lamina/common.hpp"
#include "lamina/cuda.hpp"
#include "lamina/native_backend.hpp"

namespace lamina {
namespace {

constexpr const char* kAcceptedForms =
    "the accepted forms are 'cpu', 'cuda' (device 0) and 'cuda:N' (device N >= 0)";

// The whole of text as a decimal int (an optional '-', then digits; no spaces, no '+'),
// or false when it is not one or does not fit.
bool parse_int(const std::string& text, int* value) {
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, *value);
  return !text.empty() && ec == std::errc() && ptr == end;
}

}  // namespace

std::string BackendSpec::str() const {
  return kind == Kind::kCpu ? std::string("cpu") : "cuda:" + std::to_string(device);
}

BackendSpec parse_backend_spec(const std::string& spec) {
  if (spec == "cpu") return {BackendSpec::Kind::kCpu, 0};
  if (spec == "cuda") return {BackendSpec::Kind::kCuda, 0};
  const std::string cuda = "cuda:";
  if (spec.compare(0, cuda.size(), cuda) == 0) {
    const std::string number = spec.substr(cuda.size());
    int device = 0;
    LAMINA_REQUIRE(parse_int(number, &device) && number[0] != '-', "backend '", spec,
                   "': the device after 'cuda:' must be a number >= 0; ", kAcceptedForms);
    return {BackendSpec::Kind::kCuda, device};
  }
  fail("unknown backend '", spec, "'; ", kAcceptedForms);
}

std::unique_ptr<Backend> make_backend(const BackendSpec& spec) {
  if (spec.kind == BackendSpec::Kind::kCpu) return std::make_unique<NativeBackend>();
  return make_cuda_backend(spec.device);
}

std::unique_ptr<Backend> make_backend(const std::string& spec) {
  return make_backend(parse_backend_spec(spec));
}

std::string backend_spec_from_gpu(const std::string& value, const std::string& flag) {
  int gpu = 0;
  LAMINA_REQUIRE(parse_int(value, &gpu), flag, " must be an integer: a GPU device number "
                 "(0, 1, ...) or -1 for the CPU; got '", value, "'");
  LAMINA_REQUIRE(gpu >= -1, flag, " ", value, " is not a device: give a GPU device number "
                 "(0, 1, ...) or -1 for the CPU");
  return gpu == -1 ? BackendSpec{}.str() : BackendSpec{BackendSpec::Kind::kCuda, gpu}.str();
}

std::string solver_backend_spec(const SolverParameter& param) {
  if (param.solver_mode() != SolverParameter::GPU) return BackendSpec{}.str();
  LAMINA_REQUIRE(param.device_id() >= 0, "device_id must be >= 0 (a GPU device number), got ",
                 param.device_id());
  return BackendSpec{BackendSpec::Kind::kCuda, param.device_id()}.str();
}

std::unique_ptr<Backend> make_solver_backend(SolverParameter& param,
                                             const std::string& override_spec) {
  if (!override_spec.empty()) {
    const BackendSpec spec = parse_backend_spec(override_spec);
    if (spec.kind == BackendSpec::Kind::kCuda) {
      param.set_solver_mode(SolverParameter::GPU);
      param.set_device_id(spec.device);
    } else {
      param.set_solver_mode(SolverParameter::CPU);
      param.clear_device_id();
    }
  }
  const std::string spec = solver_backend_spec(param);
  if (!override_spec.empty() || param.solver_mode() != SolverParameter::GPU)
    return make_backend(spec);
  try {
    return make_backend(spec);
  } catch (const Error& e) {
    // The GPU came from the solver's fields: say so, and how the fields choose the CPU.
    fail(e.what(), " (the solver's solver_mode is GPU, device_id ", param.device_id(),
         "; solver_mode: CPU trains on the CPU)");
  }
}

}  // namespace lamina
