// Devices: which ones there are, and the backend a device spec names
// (backend_factory.hpp: "cpu", "cuda", "cuda:N").
#include <vector>

#include <pybind11/stl.h>

#include "handles.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/cuda.hpp"
#include "lamina/cuda_kernels.hpp"

namespace lamina::python {

std::shared_ptr<Backend> backend_for(const std::string& device) {
  const BackendSpec spec = parse_backend_spec(device);
  py::gil_scoped_release unlocked;  // a first CUDA context takes a while
  return make_backend(spec);
}

std::string device_string(const Backend& backend) {
  return cuda::is_cuda(backend) ? "cuda:" + std::to_string(cuda::device(backend)) : "cpu";
}

void add_devices(py::module_& m) {
  m.def("devices", [] {
    std::vector<std::string> specs{"cpu"};
    for (int i = 0; i < cuda_device_count(); ++i) specs.push_back("cuda:" + std::to_string(i));
    return specs;
  }, "The devices a Net or Solver can run on: 'cpu', then 'cuda:N' for each GPU found.");
  m.def("cuda_available", [] { return cuda_device_count() > 0; },
        "Whether a GPU can be used: the CUDA backend is built and finds a device.");
  m.def("cuda_compiled", &cuda_compiled, "Whether this build has the CUDA backend.");
  m.def("device_query", &cuda_device_query,
        "Every GPU's name, compute capability, memory and library versions (as `lamina "
        "device_query` prints them).");
}

}  // namespace lamina::python
