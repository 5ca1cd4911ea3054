// Data-parallel training (docs/distributed.md), run as a job of two worker processes:
//   - under `mpirun -np 2` (ctest: DataParallel.MpiCpu): CPU workers, gradients summed by MPI;
//   - alone on a machine with 2 or more GPUs: it launches itself as two workers (GPUs 0 and
//     1), their gradients summed by NCCL;
//   - alone otherwise: every test skips, saying why.
// NcclOneWorker runs on any machine with a GPU: a job of one worker.
// Every worker runs every test; a failure on any worker fails the job. The reference is one
// worker trained alone with the batch of both, in the same process.
#include <glog/logging.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "../tools/launcher.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/communicator.hpp"
#include "lamina/cuda.hpp"
#include "lamina/solver.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

struct Job {
  Communicator* comm = nullptr;  // null: the tests skip
  std::string backend;           // "cpu" or "cuda:<rank>"
  std::string skip_reason;
} g_job;

#define REQUIRE_JOB() \
  if (!g_job.comm) GTEST_SKIP() << g_job.skip_reason

// MnistData -> Linear(hidden) -> ReLU -> Linear(10) -> softmax loss; a TEST phase with
// accuracy when test_batch > 0.
NetParameter mlp(int batch, int hidden = 64, int test_batch = 0) {
  const std::string dir = testing::mnist_dir();
  std::string text = R"(
    name: "dp_mlp"
    layer { name: "mnist" type: "MnistData" top: "data" top: "label" include { phase: TRAIN }
            transform_param { scale: 0.00390625 }
            mnist_data_param { images: ")" + dir + R"(/train-images-idx3-ubyte"
                               labels: ")" + dir + R"(/train-labels-idx1-ubyte"
                               batch_size: )" + std::to_string(batch) + R"( shuffle: true } })";
  if (test_batch > 0) {
    text += R"(
    layer { name: "mnist" type: "MnistData" top: "data" top: "label" include { phase: TEST }
            transform_param { scale: 0.00390625 }
            mnist_data_param { images: ")" + dir + R"(/t10k-images-idx3-ubyte"
                               labels: ")" + dir + R"(/t10k-labels-idx1-ubyte"
                               batch_size: )" + std::to_string(test_batch) + R"( } })";
  }
  text += R"(
    layer { name: "fc1" type: "Linear" bottom: "data" top: "fc1"
            inner_product_param { num_output: )" + std::to_string(hidden) + R"(
                                  weight_filler { type: "xavier" } } }
    layer { name: "relu1" type: "ReLU" bottom: "fc1" top: "fc1" }
    layer { name: "fc2" type: "Linear" bottom: "fc1" top: "scores"
            inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "scores" bottom: "label" top: "loss" })";
  if (test_batch > 0) {
    text += R"(
    layer { name: "accuracy" type: "Accuracy" bottom: "scores" bottom: "label" top: "accuracy"
            include { phase: TEST } })";
  }
  NetParameter net;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &net));
  return net;
}

SolverParameter sgd(int max_iter) {
  SolverParameter p;
  p.set_base_lr(0.05f);
  p.set_momentum(0.9f);
  p.set_lr_policy("fixed");
  p.set_max_iter(max_iter);
  p.set_display(0);
  p.set_random_seed(7);
  p.set_weight_decay(0.0005f);
  return p;
}

std::vector<float> weights(Solver& solver) {
  return solver.net().arena().to_host(solver.net().arena().data());
}

// Every worker holds worker 0's weights, bit for bit.
void expect_worker_zeros_weights(Solver& job) {
  std::vector<float> mine = weights(job), first = mine;
  g_job.comm->broadcast_host(first.data(), int64_t(first.size() * sizeof(float)), 0);
  EXPECT_EQ(mine, first);
}

TEST(DataParallel, TwoWorkersEqualOneWorkerWithTheBatchOfBoth) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  const int n = g_job.comm->size();
  Solver job(sgd(100), mlp(32), *backend, {}, g_job.comm);
  EXPECT_EQ(job.workers(), n);
  job.step(100);
  Solver alone(sgd(100), mlp(32 * n), *backend);
  alone.step(100);
  const double rel = testing::normalized_error(weights(job), weights(alone));
  std::cout << "[worker " << g_job.comm->rank() << "] " << n << " workers x batch 32 vs 1 x "
            << 32 * n << ", 100 iterations: relative difference of the weights " << rel << "\n";
  EXPECT_LT(rel, 1e-5);
  expect_worker_zeros_weights(job);
}

// The solver paths a bucket can go wrong on: the side lane's step state (the default),
// clipping (the norm of the summed gradient), iter_size (buckets in the last pass only);
// each replayed as a CUDA graph and run directly.
struct BucketCase {
  const char* name;
  float clip;
  int iter_size;
  bool graph;
  int display = 0;  // display steps run directly, between replays, and read the gradients
};
const BucketCase kBucketCases[] = {
    {"side lane, CUDA graph", 0, 1, true}, {"side lane, direct", 0, 1, false},
    {"clipping, CUDA graph", 0.5f, 1, true}, {"iter_size 2, CUDA graph", 0, 2, true},
    {"side lane, CUDA graph, display every 7", 0, 1, true, 7}};

SolverParameter bucket_solver(const BucketCase& c, int max_iter) {
  SolverParameter p = sgd(max_iter);
  p.set_gradient_bucket_mb(1e-6f);  // a bucket per parameter
  p.set_clip_gradients(c.clip);
  p.set_iter_size(c.iter_size);
  p.set_cuda_graph(c.graph);
  p.set_display(c.display);
  return p;
}

// A job whose steps should be replayed replays them (else the test would pass on direct
// steps).
void expect_replays(Solver& job, const Backend& backend, const BucketCase& c) {
  if (!c.graph || backend.is_host()) return;
  EXPECT_TRUE(job.replays_steps());
  EXPECT_GT(job.step_operations(), 0);
}

// The gradient summed in buckets, beside the backward pass with NCCL (MPI sums once after
// it): the same weights as one worker with the batch of both.
TEST(DataParallel, BucketsSummedBesideBackwardEqualOneWorkerWithTheBatchOfBoth) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  const int n = g_job.comm->size();
  for (const BucketCase& c : kBucketCases) {
    SCOPED_TRACE(c.name);
    Solver job(bucket_solver(c, 40), mlp(32, 256), *backend, {}, g_job.comm);
    job.step(40);
    expect_replays(job, *backend, c);
    Solver alone(bucket_solver(c, 40), mlp(32 * n, 256), *backend);
    alone.step(40);
    EXPECT_LT(testing::normalized_error(weights(job), weights(alone)), 1e-5);
    expect_worker_zeros_weights(job);
  }
}

// A job of one GPU worker over NCCL, on any machine with a GPU: the collective lane (forked
// from both lanes, an event after each sum), direct and captured, leaves the weights of
// training alone bit for bit. (With one worker the sum changes nothing, so this checks the
// lane's set-up and capture, not its ordering: that needs two workers.)
TEST(NcclOneWorker, BucketsBesideBackwardTrainAsAlone) {
  if (!nccl_compiled() || cuda_device_count() < 1)
    GTEST_SKIP() << "needs a GPU and a build with NCCL (found " << cuda_device_count()
                 << " GPUs, NCCL " << (nccl_compiled() ? "built" : "not built") << ")";
  const std::string device =
      g_job.backend.rfind("cuda:", 0) == 0 ? g_job.backend.substr(5) : std::string("0");
  auto backend = make_backend("cuda:" + device);
  auto comm = make_nccl_communicator(std::stoi(device), 0, 1, nccl_new_id());
  for (const BucketCase& c : kBucketCases) {
    SCOPED_TRACE(c.name);
    Solver job(bucket_solver(c, 30), mlp(32, 256), *backend, {}, comm.get());
    job.step(30);
    expect_replays(job, *backend, c);
    Solver alone(bucket_solver(c, 30), mlp(32, 256), *backend);
    alone.step(30);
    EXPECT_EQ(weights(job), weights(alone));
  }
}

// Without random_seed each process would draw its own: worker 0's is the job's.
TEST(DataParallel, WithoutARandomSeedEveryWorkerTakesWorkerZeros) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  SolverParameter p = sgd(10);
  p.clear_random_seed();
  Solver job(p, mlp(32), *backend, {}, g_job.comm);
  job.step(10);
  uint64_t seed = job.seed();
  g_job.comm->broadcast_host(&seed, sizeof(seed), 0);
  EXPECT_EQ(job.seed(), seed);
  expect_worker_zeros_weights(job);
}

TEST(DataParallel, DisplayedLossAndTestOutputsAreThoseOfTheWholeJob) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  const int n = g_job.comm->size();
  SolverParameter p = sgd(20);
  p.set_display(10);
  p.set_average_loss(1);
  p.add_test_iter(20);  // 20 batches of 50 test images, 20 / n on each worker
  p.set_test_interval(20);
  Solver job(p, mlp(32, 64, 50), *backend, {}, g_job.comm);
  job.solve();
  Solver alone(p, mlp(32 * n, 64, 50), *backend);
  alone.solve();
  ASSERT_EQ(job.loss_history().size(), alone.loss_history().size());
  for (size_t i = 0; i < job.loss_history().size(); ++i)
    EXPECT_NEAR(job.loss_history()[i].loss, alone.loss_history()[i].loss, 1e-5);
  ASSERT_FALSE(job.test_history().empty());
  const TestResult& a = job.test_history().back().second;
  const TestResult& b = alone.test_history().back().second;
  EXPECT_NEAR(a.value("accuracy"), b.value("accuracy"), 1e-6);
  EXPECT_NEAR(a.value("loss"), b.value("loss"), 1e-5);
}

TEST(DataParallel, AWorkerWithAnotherNetIsNamedByEveryWorker) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  const int hidden = g_job.comm->rank() == 1 ? 32 : 64;
  try {
    Solver job(sgd(10), mlp(32, hidden), *backend, {}, g_job.comm);
    FAIL() << "workers with different nets were accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("worker 1 has another net than worker 0"),
              std::string::npos) << e.what();
  }
}

// Worker 0's path of a temporary directory it owns (the workers share the file system).
std::string job_directory(std::unique_ptr<testing::TempDir>& owner) {
  std::string dir(512, '\0');
  if (g_job.comm->rank() == 0) {
    owner = std::make_unique<testing::TempDir>();
    const std::string made = owner->path().string();
    std::copy(made.begin(), made.end(), dir.begin());
  }
  g_job.comm->broadcast_host(dir.data(), int64_t(dir.size()), 0);
  return dir.c_str();
}

// Waits until every worker has come here.
void barrier() { sum_over_workers(*g_job.comm, {1.0}); }

TEST(DataParallel, WorkerZeroSnapshotsAndTheJobResumesExactlyOnlyOnAsManyWorkers) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  std::unique_ptr<testing::TempDir> owner;
  const std::string dir = job_directory(owner);
  SolverParameter p = sgd(40);
  p.set_snapshot_prefix(dir + "/dp");
  p.set_snapshot(20);
  p.set_snapshot_after_train(false);
  {
    Solver first(p, mlp(32), *backend, {}, g_job.comm);
    first.step(20);
  }
  barrier();
  const std::string state = dir + "/dp_iter_20.solverstate";
  ASSERT_TRUE(std::filesystem::exists(state));
  Solver straight(p, mlp(32), *backend, {}, g_job.comm);
  straight.step(40);
  Solver resumed(p, mlp(32), *backend, {}, g_job.comm);
  resumed.restore(state);
  resumed.step(20);
  EXPECT_EQ(weights(resumed), weights(straight)) << "the resumed job differs";
  // Alone, the state is refused: its data order and global batch are a 2-worker job's.
  Solver alone(p, mlp(64), *backend);
  const std::string error = testing::error_of([&] { alone.restore(state); });
  EXPECT_NE(error.find("data-parallel job of " + std::to_string(g_job.comm->size()) + " workers"),
            std::string::npos) << error;
  barrier();  // worker 0 removes the directory only when every worker is done with it
}

TEST(DataParallel, AStopAskedOfOneWorkerStopsEveryWorkerAtTheSameIteration) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  SolverParameter p = sgd(100);
  p.set_display(5);  // on a GPU the workers agree on actions at display iterations
  Solver job(p, mlp(32), *backend, {}, g_job.comm);
  int polls = 0;
  job.set_action_source([&] {
    ++polls;
    return g_job.comm->rank() == 1 && polls == 3 ? SolverAction::kStop : SolverAction::kNone;
  });
  job.solve();
  EXPECT_TRUE(job.stopped_early());
  const std::vector<double> iters = sum_over_workers(*g_job.comm, {double(job.iter())});
  EXPECT_EQ(iters[0], double(job.iter() * g_job.comm->size())) << "the workers stopped apart";
  EXPECT_LE(job.iter(), 5);
}

TEST(DataParallel, AJobOfAnotherSizeThanTheDataAllowsIsRefused) {
  REQUIRE_JOB();
  auto backend = make_backend(g_job.backend);
  SolverParameter p = sgd(10);
  p.add_test_iter(3);  // 3 test batches do not split over 2 workers
  p.set_test_interval(5);
  const std::string error = testing::error_of(
      [&] { Solver job(p, mlp(32, 64, 50), *backend, {}, g_job.comm); });
  EXPECT_NE(error.find("test_iter 3 does not split evenly"), std::string::npos) << error;
}

}  // namespace
}  // namespace lamina

// The job: this process's place in it, or the launch of two GPU workers.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  google::InitGoogleLogging(argv[0]);
  using namespace lamina;
  std::unique_ptr<Communicator> nccl;
  if (launched_by_mpi()) {
    if (!mpi_compiled()) {
      g_job.skip_reason = "this Lamina was built without MPI";
    } else {
      g_job.comm = &mpi_world();
      g_job.backend = "cpu";
    }
  } else if (const char* rank = std::getenv(cli::kWorkerRankVariable)) {
    const int r = std::atoi(rank);
    nccl = make_nccl_communicator(r, r, std::atoi(std::getenv(cli::kWorkerCountVariable)),
                                  nccl_id_from_hex(std::getenv("LAMINA_NCCL_ID")));
    g_job.comm = nccl.get();
    g_job.backend = "cuda:" + std::to_string(r);
  } else if (cuda_device_count() >= 2 && nccl_compiled()) {
    cli::WorkerSpec spec;
    spec.program = "/proc/self/exe";
    spec.env = {{"LAMINA_NCCL_ID", nccl_id_to_hex(nccl_new_id())}};
    for (int r = 0; r < 2; ++r) {
      spec.args.push_back(std::vector<std::string>(argv + 1, argv + argc));
      spec.labels.push_back("GPU " + std::to_string(r));
    }
    std::cout << "Launching two workers on GPUs 0 and 1 (NCCL)" << std::endl;
    return cli::launch_workers(spec);
  } else {
    g_job.skip_reason = "needs a job: run under mpirun -np 2 (CPU workers) or on a machine with "
                        "2 GPUs and NCCL (found " + std::to_string(cuda_device_count()) + " GPUs)";
  }
  if (g_job.comm && g_job.comm->rank() != 0) FLAGS_minloglevel = google::GLOG_WARNING;
  return RUN_ALL_TESTS();
}
