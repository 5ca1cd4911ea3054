// lamina.Solver: training from a solver prototxt (solver.hpp) with Python callbacks at the
// solver's observation points (solver_observer.hpp).
//
// The GIL is released while the solver trains and taken again for each callback. A Python
// exception raised by a callback (or KeyboardInterrupt, checked once per iteration) stops
// training: the observer keeps the exception, throws CallbackRaised through the solver, and
// the binding raises the kept exception once the solver has unwound.
#include <chrono>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include <pybind11/stl.h>

#include "handles.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/io.hpp"
#include "lamina/solver.hpp"
#include "lamina/solver_observer.hpp"
#include "lamina/weights_file.hpp"

namespace lamina::python {

namespace {

// Thrown through the solver when a callback raised; carries nothing (the observer keeps the
// Python exception).
struct CallbackRaised : std::exception {
  const char* what() const noexcept override { return "a Python callback raised"; }
};

py::dict test_outputs(const TestResult& result) {
  py::dict outputs;
  for (const auto& [name, value] : result.outputs) outputs[py::str(name)] = value;
  if (result.has_loss) outputs["test_loss"] = result.loss;
  return outputs;
}

// The callbacks Python set (None: not called) and the exception one of them raised.
class PythonObserver : public SolverObserver {
 public:
  py::object iteration_callback = py::none();
  py::object display_callback = py::none();
  py::object test_callback = py::none();
  py::object snapshot_callback = py::none();
  py::handle solver;  // the Python Solver, passed to every callback (borrowed: it owns us)
  std::unique_ptr<py::error_already_set> raised;

  void on_iteration(const Solver& s) override {
    call(iteration_callback, [&] { return py::make_tuple(solver, s.iter()); });
  }
  void on_display(const Solver&, const LossRecord& record, float learning_rate) override {
    call(display_callback,
         [&] { return py::make_tuple(solver, record.iteration, record.loss, learning_rate); });
  }
  void on_test(const Solver& s, const TestResult& result) override {
    call(test_callback,
         [&] { return py::make_tuple(solver, s.iter(), result.net, test_outputs(result)); });
  }
  void on_snapshot(const Solver& s, const SnapshotPaths& paths) override {
    call(snapshot_callback,
         [&] { return py::make_tuple(solver, s.iter(), paths.weights, paths.state); });
  }

  // Polled by the solver once per iteration: Ctrl-C stops training as a raised callback does.
  // Python is asked at most every 100 ms (taking the GIL each iteration would make training
  // wait for any other Python thread), and not once a callback has raised.
  SolverAction poll_signals() {
    const auto now = std::chrono::steady_clock::now();
    if (raised || now - last_poll_ < std::chrono::milliseconds(100)) return SolverAction::kNone;
    last_poll_ = now;
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() == 0) return SolverAction::kNone;
    raised = std::make_unique<py::error_already_set>();
    return SolverAction::kStop;
  }

  // Raises the exception a callback raised, if any (with the GIL held).
  void raise_kept() {
    if (!raised) return;
    py::error_already_set error = std::move(*raised);
    raised.reset();
    throw error;
  }

 private:
  std::chrono::steady_clock::time_point last_poll_{};
  template <class Arguments>
  void call(const py::object& callback, Arguments arguments) {
    // A pointer comparison: no GIL needed. After one callback raised, the iteration completes
    // without calling Python again, and that exception is the one Python sees.
    if (callback.is_none() || raised) return;
    py::gil_scoped_acquire gil;
    try {
      callback(*arguments());
    } catch (py::error_already_set& error) {
      raised = std::make_unique<py::error_already_set>(std::move(error));
      throw CallbackRaised();
    }
  }
};

struct SolverHandle {
  std::shared_ptr<Backend> backend;  // declared first: destroyed after the solver
  std::unique_ptr<Solver> solver;
  PythonObserver observer;
  std::string device;

  ~SolverHandle() {
    if (solver) solver->remove_observer(observer);
  }

  // Runs `work` (training) without the GIL; a callback's exception wins over whatever the
  // solver threw while unwinding from it.
  template <class Work>
  void run(Work work) {
    std::exception_ptr failure;
    {
      py::gil_scoped_release unlocked;
      try {
        work();
      } catch (...) {
        failure = std::current_exception();
      }
    }
    observer.raise_kept();
    if (failure) std::rethrow_exception(failure);
  }
};
using SolverRef = std::shared_ptr<SolverHandle>;

// The snapshot prefix: the argument, else the file's, else beside the solver file as `lamina
// train` writes them (PATH without its extension); a directory means DIR/<solver file's stem>.
void choose_snapshot_prefix(SolverParameter& param, const std::optional<std::string>& prefix,
                            const std::string& solver_path) {
  namespace fs = std::filesystem;
  if (prefix) param.set_snapshot_prefix(*prefix);
  if (!param.has_snapshot_prefix()) {
    param.set_snapshot_prefix(fs::path(solver_path).replace_extension().string());
  } else if (std::error_code ec; fs::is_directory(param.snapshot_prefix(), ec)) {
    param.set_snapshot_prefix((fs::path(param.snapshot_prefix()) / fs::path(solver_path).stem()).string());
  }
}

SolverRef make_solver(const std::string& path, const std::optional<std::string>& device,
                      const std::optional<std::string>& weights,
                      const std::optional<std::string>& snapshot_prefix) {
  auto handle = std::make_shared<SolverHandle>();
  SolverParameter param = read_solver_parameter(path);
  choose_snapshot_prefix(param, snapshot_prefix, path);
  if (device) parse_backend_spec(*device);  // a bad spec is an Error naming it
  {
    py::gil_scoped_release unlocked;
    handle->backend = make_solver_backend(param, device.value_or(""));
    handle->solver = Solver::create(param, path, *handle->backend);
    handle->solver->add_observer(handle->observer);
    if (weights) {
      Net& net = handle->solver->net();
      load_weights_file(net, *weights, WeightsMatch::kFineTune, "net '" + net.name() + "'");
      handle->solver->protect_file(*weights);
    }
  }
  handle->device = device_string(*handle->backend);
  handle->solver->set_action_source([observer = &handle->observer] { return observer->poll_signals(); });
  return handle;
}

// A callback attribute: None or a callable.
void set_callback(py::object& slot, py::object callback, const char* name) {
  if (!callback.is_none() && !PyCallable_Check(callback.ptr()))
    throw py::type_error(std::string(name) + " must be a callable or None");
  slot = std::move(callback);
}

}  // namespace

void add_solver(py::module_& m) {
  py::class_<SolverHandle, SolverRef> solver(
      m, "Solver",
      "Trains the nets a solver prototxt names, as `lamina train` does. Callbacks (None or "
      "callables, given the solver first): on_iteration(solver, iteration) after every "
      "iteration, on_display(solver, iteration, loss, learning_rate) at display points (the "
      "smoothed loss), on_test(solver, iteration, net_index, outputs) after each test net's "
      "test, on_snapshot(solver, iteration, weights_path, state_path). An exception a "
      "callback raises stops training and propagates.");
  solver
      .def(py::init(&make_solver),
           py::arg("solver"), py::kw_only(), py::arg("device") = py::none(),
           py::arg("weights") = py::none(), py::arg("snapshot_prefix") = py::none())
      .def_property_readonly("iter", [](const SolverRef& s) { return s->solver->iter(); })
      .def_property_readonly("max_iter", [](const SolverRef& s) { return s->solver->param().max_iter(); })
      .def_property_readonly("learning_rate", [](const SolverRef& s) { return s->solver->learning_rate(); })
      .def_property_readonly("device", [](const SolverRef& s) { return s->device; })
      .def_property_readonly("snapshot_prefix",
                             [](const SolverRef& s) { return s->solver->param().snapshot_prefix(); })
      .def_property_readonly("net", [](py::object self) {
        const SolverRef s = self.cast<SolverRef>();
        return solver_net(s->backend, s->solver->net(), self);
      }, "The training net (no copy: its params are the weights being trained)")
      .def_property_readonly("test_nets", [](py::object self) {
        const SolverRef s = self.cast<SolverRef>();
        py::list nets;
        for (int i = 0; i < s->solver->num_test_nets(); ++i)
          nets.append(solver_net(s->backend, *s->solver->test_net(i), self));
        return nets;
      })
      .def("step", [](const SolverRef& s, int iterations) {
        if (iterations < 0) throw py::value_error("step: iterations must be >= 0");
        s->run([&] { s->solver->step(iterations); });
      }, py::arg("iterations"), "Trains `iterations` iterations, with display, tests and "
         "snapshots as the solver file says.")
      .def("solve", [](const SolverRef& s) { s->run([&] { s->solver->solve(); }); },
           "Trains to max_iter, then writes the final snapshot (snapshot_after_train).")
      .def("test", [](const SolverRef& s, int net) {
        if (net < 0 || net >= s->solver->num_test_nets())
          throw py::index_error("test net " + std::to_string(net) + " of " +
                                std::to_string(s->solver->num_test_nets()));
        TestResult result;
        s->run([&] { result = s->solver->test(net); });
        return test_outputs(result);
      }, py::arg("net") = 0, "Tests test net `net` for its test_iter batches: {output: mean} "
         "(and 'test_loss' under test_compute_loss).")
      .def("snapshot", [](const SolverRef& s) {
        SnapshotPaths paths;
        s->run([&] { paths = s->solver->snapshot(); });
        return py::make_tuple(paths.weights, paths.state);
      }, "Writes PREFIX_iter_N.lamina and .solverstate; returns their paths.")
      .def("restore", [](const SolverRef& s, const std::string& state) {
        s->run([&] { s->solver->restore(state); });
      }, py::arg("state"), "Continues from a .solverstate exactly (the same weights and "
         "losses, bit for bit, as a run that was not interrupted).")
      .def_property_readonly("loss_history", [](const SolverRef& s) {
        std::vector<std::pair<int, float>> history;
        for (const LossRecord& r : s->solver->loss_history()) history.emplace_back(r.iteration, r.loss);
        return history;
      }, "[(iteration, smoothed loss)] at each display point")
      .def_property_readonly("test_history", [](const SolverRef& s) {
        py::list history;
        for (const auto& [iteration, result] : s->solver->test_history())
          history.append(py::make_tuple(iteration, result.net, test_outputs(result)));
        return history;
      }, "[(iteration, net_index, outputs)] at each test point");

  // The callback attributes.
  const std::pair<const char*, py::object PythonObserver::*> callbacks[] = {
      {"on_iteration", &PythonObserver::iteration_callback},
      {"on_display", &PythonObserver::display_callback},
      {"on_test", &PythonObserver::test_callback},
      {"on_snapshot", &PythonObserver::snapshot_callback}};
  for (const auto& [name, member] : callbacks) {
    solver.def_property(
        name, [member](const SolverRef& s) { return s->observer.*member; },
        [member, name](py::object self, py::object callback) {
          const SolverRef s = self.cast<SolverRef>();
          set_callback(s->observer.*member, std::move(callback), name);
          s->observer.solver = self;
        });
  }
}

}  // namespace lamina::python
