// The extension module lamina._lamina, which the package lamina (python/lamina/__init__.py)
// re-exports: lamina.Error, logging, and the parts added by the files beside this one
// (arrays, devices, blobs, net, solver, weights). docs/python.md describes the API.
#include <cstdlib>

#include <glog/logging.h>

#include "arrays.hpp"
#include "handles.hpp"
#include "lamina/common.hpp"
#include "lamina/version.hpp"

namespace lamina::python {

namespace {

// Lamina logs through glog. In Python: to stderr, warnings and errors only unless
// set_log_level (or GLOG_minloglevel in the environment) says otherwise.
void init_logging() {
  if (!google::IsGoogleLoggingInitialized()) google::InitGoogleLogging("lamina");
  FLAGS_logtostderr = true;
  if (!std::getenv("GLOG_minloglevel")) FLAGS_minloglevel = google::GLOG_WARNING;
}

void set_log_level(const std::string& level) {
  if (level == "info") {
    FLAGS_minloglevel = google::GLOG_INFO;
  } else if (level == "warning") {
    FLAGS_minloglevel = google::GLOG_WARNING;
  } else if (level == "error") {
    FLAGS_minloglevel = google::GLOG_ERROR;
  } else {
    throw py::value_error("log level must be 'info', 'warning' or 'error'; got '" + level + "'");
  }
}

}  // namespace

}  // namespace lamina::python

PYBIND11_MODULE(_lamina, m) {
  namespace py = pybind11;
  namespace lp = lamina::python;
  m.doc() = "Lamina's nets and solvers on NumPy arrays (docs/python.md)";
  m.attr("__version__") = lamina::version();
  // Every lamina::Error (a user's mistake: a bad prototxt, a missing file, a wrong shape, no
  // GPU) arrives as lamina.Error with Lamina's message.
  py::register_exception<lamina::Error>(m, "Error", PyExc_RuntimeError);
  lp::init_logging();
  m.def("set_log_level", &lp::set_log_level, py::arg("level"),
        "What Lamina logs to stderr: 'info' (the solver's progress, as the lamina tool "
        "prints it), 'warning' (the default) or 'error'.");
  lp::add_arrays(m);
  lp::add_devices(m);
  lp::add_blobs(m);
  lp::add_net(m);
  lp::add_solver(m);
  lp::add_weights(m);
}
