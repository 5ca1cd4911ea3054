// The backend factory: specs ("cpu", "cuda:N"), --gpu values and the solver's solver_mode /
// device_id, with every malformed form an Error that names it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "lamina/backend_factory.hpp"
#include "lamina/cuda.hpp"
#include "lamina/io.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;

TEST(BackendFactory, CpuIsTheNativeBackendAndComputes) {
  std::unique_ptr<Backend> backend = make_backend("cpu");
  ASSERT_NE(backend, nullptr);
  EXPECT_TRUE(backend->is_host());
  EXPECT_EQ(backend->name(), "native");
  Buffer x(*backend, 4 * sizeof(float)), y(*backend, 4 * sizeof(float));
  backend->fill(4, 2.0f, static_cast<float*>(x.get()));
  backend->fill(4, 1.0f, static_cast<float*>(y.get()));
  backend->axpy(4, 3.0f, static_cast<const float*>(x.get()), static_cast<float*>(y.get()));
  EXPECT_EQ(static_cast<float*>(y.get())[3], 7.0f);
}

TEST(BackendFactory, ParsesEveryAcceptedForm) {
  EXPECT_EQ(parse_backend_spec("cpu").kind, BackendSpec::Kind::kCpu);
  const BackendSpec cuda = parse_backend_spec("cuda");
  EXPECT_EQ(cuda.kind, BackendSpec::Kind::kCuda);
  EXPECT_EQ(cuda.device, 0);
  EXPECT_EQ(cuda.str(), "cuda:0");
  const BackendSpec third = parse_backend_spec("cuda:3");
  EXPECT_EQ(third.kind, BackendSpec::Kind::kCuda);
  EXPECT_EQ(third.device, 3);
  EXPECT_EQ(third.str(), "cuda:3");
  EXPECT_EQ(parse_backend_spec("cpu").str(), "cpu");
}

TEST(BackendFactory, MalformedSpecsAreErrorsNamingTheSpecAndTheAcceptedForms) {
  for (const std::string spec : {"cuda:", "cuda:-1", "cuda:x", "gpu", "", "CPU", "cuda:1x",
                                  "cuda: 1", "cuda:+1", "cuda:99999999999", "cpu:0", "cuda0"}) {
    SCOPED_TRACE(spec);
    const std::string message = error_of([&] { make_backend(spec); });
    EXPECT_THAT(message, AllOf(HasSubstr("'" + spec + "'"), HasSubstr("'cpu'"),
                               HasSubstr("'cuda:N'")));
  }
}

TEST(BackendFactory, AGpuThatIsNotThereIsTheCudaBackendsError) {
  const int missing = cuda_device_count();  // one past the last device
  const std::string spec = "cuda:" + std::to_string(missing);
  EXPECT_THAT(error_of([&] { make_backend(spec); }),
              HasSubstr("GPU " + std::to_string(missing) + " was requested"));
  if (missing == 0)
    EXPECT_THAT(error_of([] { make_backend("cuda"); }), HasSubstr("GPU 0 was requested"));
}

TEST(BackendFactory, CudaSpecGivesADeviceBackendWhenThereIsOne) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present";
  std::unique_ptr<Backend> backend = make_backend("cuda:0");
  EXPECT_FALSE(backend->is_host());
  EXPECT_FALSE(make_backend("cuda")->is_host());
}

TEST(BackendFactory, GpuFlagValues) {
  EXPECT_EQ(backend_spec_from_gpu("-1"), "cpu");
  EXPECT_EQ(backend_spec_from_gpu("0"), "cuda:0");
  EXPECT_EQ(backend_spec_from_gpu("12"), "cuda:12");
  EXPECT_THAT(error_of([] { backend_spec_from_gpu("-2"); }),
              AllOf(HasSubstr("--gpu -2"), HasSubstr("-1 for the CPU")));
  for (const std::string value : {"abc", "1.5", "", "0x1", " 1", "1 ", "+1", "--1",
                                  "99999999999"}) {
    SCOPED_TRACE(value);
    EXPECT_THAT(error_of([&] { backend_spec_from_gpu(value); }),
                AllOf(HasSubstr("--gpu must be an integer"), HasSubstr("'" + value + "'")));
  }
  EXPECT_THAT(error_of([] { backend_spec_from_gpu("x", "--device"); }),
              HasSubstr("--device must be an integer"));
}

TEST(BackendFactory, SolverSpecFollowsSolverModeAndDeviceId) {
  SolverParameter param;
  EXPECT_EQ(solver_backend_spec(param), "cpu");
  param.set_device_id(2);  // without solver_mode: GPU the solver refuses it, not the factory
  EXPECT_EQ(solver_backend_spec(param), "cpu");
  param.set_solver_mode(SolverParameter::GPU);
  EXPECT_EQ(solver_backend_spec(param), "cuda:2");
  param.set_device_id(-1);
  EXPECT_THAT(error_of([&] { solver_backend_spec(param); }),
              AllOf(HasSubstr("device_id"), HasSubstr("-1")));
}

TEST(BackendFactory, CpuOverrideWinsOverSolverModeGpuAndTheSolverAcceptsIt) {
  const std::string solver_path = testing::source_dir() + "/tests/data/input_solver.prototxt";
  SolverParameter param = read_solver_parameter(solver_path);
  param.set_solver_mode(SolverParameter::GPU);
  param.set_device_id(3);
  std::unique_ptr<Backend> backend = make_solver_backend(param, "cpu");
  EXPECT_TRUE(backend->is_host());
  EXPECT_EQ(param.solver_mode(), SolverParameter::CPU);
  EXPECT_FALSE(param.has_device_id());
  // The param written back is one the solver takes with that backend.
  auto solver = Solver::create(param, solver_path, *backend);
  solver->step(1);
  EXPECT_EQ(solver->iter(), 1);
}

TEST(BackendFactory, GpuOverrideIsWrittenBackIntoTheParam) {
  SolverParameter param;
  const int missing = cuda_device_count();
  const std::string spec = "cuda:" + std::to_string(missing);
  EXPECT_THAT(error_of([&] { make_solver_backend(param, spec); }),
              HasSubstr("GPU " + std::to_string(missing) + " was requested"));
  EXPECT_EQ(param.solver_mode(), SolverParameter::GPU);
  EXPECT_EQ(param.device_id(), missing);
}

TEST(BackendFactory, NoOverrideFollowsTheSolverFile) {
  SolverParameter param;
  EXPECT_TRUE(make_solver_backend(param)->is_host());
  param.set_solver_mode(SolverParameter::GPU);
  param.set_device_id(cuda_device_count());
  // The error says that the solver's fields chose the GPU, and how they choose the CPU.
  EXPECT_THAT(error_of([&] { make_solver_backend(param); }),
              AllOf(HasSubstr("was requested"),
                    HasSubstr("the solver's solver_mode is GPU, device_id " +
                              std::to_string(param.device_id()) +
                              "; solver_mode: CPU trains on the CPU")));
  EXPECT_THAT(error_of([&] { make_solver_backend(param, "gpu"); }),
              HasSubstr("unknown backend 'gpu'"));
}

}  // namespace
}  // namespace lamina
