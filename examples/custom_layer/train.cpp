// Trains square_net.prototxt, which uses the Square layer defined in square_layer.cpp.
// Nothing in Lamina's sources knows about Square: linking square_layer.cpp registers it.
//   build/examples/custom_layer/custom_layer_train [solver.prototxt]
#include <glog/logging.h>

#include <cstdio>

#include "lamina/backend_factory.hpp"
#include "lamina/io.hpp"
#include "lamina/solver.hpp"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  const std::string solver_path =
      argc > 1 ? argv[1] : std::string(LAMINA_SOURCE_DIR) + "/examples/custom_layer/square_solver.prototxt";
  try {
    lamina::SolverParameter param = lamina::read_solver_parameter(solver_path);
    std::unique_ptr<lamina::Backend> backend = lamina::make_solver_backend(param);
    auto solver = lamina::Solver::create(param, solver_path, *backend);
    solver->solve();
    std::printf("test accuracy with the Square layer: %.2f%%\n",
                100 * solver->test_history().back().second.value("accuracy"));
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "custom_layer_train: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
