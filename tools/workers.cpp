// `lamina train` as a data-parallel job: launching one worker per GPU, or joining the job
// mpirun started (workers.hpp).
#include "workers.hpp"

#include <glog/logging.h>

#include <cstdlib>
#include <iostream>
#include <set>
#include <sstream>

#include "launcher.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/common.hpp"
#include "lamina/cuda.hpp"

namespace lamina::cli {
namespace {

// Set by the launcher in each worker's environment.
constexpr const char* kNcclIdVariable = "LAMINA_NCCL_ID";
constexpr const char* kJobGpuVariable = "LAMINA_JOB_GPU";

std::string g_label;  // worker_label()

const char* env(const char* name) { return std::getenv(name); }

bool is_worker() { return env(kWorkerRankVariable) != nullptr; }

int env_int(const char* name) {
  const char* value = env(name);
  char* end = nullptr;
  const long v = value ? std::strtol(value, &end, 10) : -1;
  LAMINA_REQUIRE(value && *end == '\0' && v >= 0, "the environment variable ", name, " is '",
                 value ? value : "", "'; it is set by `lamina train --gpu 0,1` for its workers");
  return int(v);
}

// The devices of a --gpu list: "all", or numbers separated by commas. Empty when `gpu`
// names at most one device.
std::vector<int> listed_devices(const std::string& gpu) {
  if (gpu == "all") {
    std::vector<int> all(lamina::cuda_device_count());
    for (size_t i = 0; i < all.size(); ++i) all[i] = int(i);
    LAMINA_REQUIRE(!all.empty(), "--gpu all: no GPU can be used (lamina device_query says why)");
    return all.size() > 1 ? all : std::vector<int>{};
  }
  if (gpu.find(',') == std::string::npos) return {};
  std::vector<int> devices;
  std::set<int> seen;
  std::stringstream items(gpu);
  for (std::string item; std::getline(items, item, ',');) {
    const BackendSpec spec = parse_backend_spec(backend_spec_from_gpu(item, "--gpu"));
    LAMINA_REQUIRE(spec.kind == BackendSpec::Kind::kCuda, "--gpu ", gpu, ": a list names GPUs "
                   "(0,1,...); data-parallel training on CPUs runs under mpirun (mpirun -np 4 "
                   "lamina train --solver S)");
    LAMINA_REQUIRE(seen.insert(spec.device).second, "--gpu ", gpu, " names GPU ", spec.device,
                   " twice; each worker needs a GPU of its own");
    devices.push_back(spec.device);
  }
  return devices;
}

}  // namespace

std::optional<int> launch_job(const std::string& gpu, int argc, char** argv,
                              const std::vector<int>& stop_signals) {
  if (is_worker()) return std::nullopt;
  const std::vector<int> devices = listed_devices(gpu);
  if (devices.empty()) return std::nullopt;
  LAMINA_REQUIRE(!launched_by_mpi(), "--gpu ", gpu, " under mpirun: mpirun starts one process "
                 "per GPU; give --gpu local (each takes the GPU of its rank on its machine)");
  LAMINA_REQUIRE(nccl_compiled(), "--gpu ", gpu, ": this Lamina was built without NCCL, which "
                 "data-parallel training on GPUs needs; install NCCL (libnccl-dev) and "
                 "configure with -DLAMINA_USE_NCCL=ON");
  const int count = lamina::cuda_device_count();
  for (int device : devices) {
    LAMINA_REQUIRE(device < count, "--gpu ", gpu, ": there is no GPU ", device, "; ",
                   count == 0 ? std::string("no GPU can be used (lamina device_query says why)")
                              : "the GPUs are 0 to " + std::to_string(count - 1));
  }
  WorkerSpec spec;
  spec.program = "/proc/self/exe";
  spec.argv0 = argv[0];
  spec.stop_signals = stop_signals;
  spec.grace_seconds = 30;  // the workers end together, after worker 0's last snapshot
  spec.env = {{kNcclIdVariable, nccl_id_to_hex(nccl_new_id())}, {kJobGpuVariable, gpu}};
  for (int device : devices) {
    // The same command line with this worker's device.
    std::vector<std::string> args;
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--gpu" && i + 1 < argc) {
        args.push_back("--gpu");
        args.push_back(std::to_string(device));
        ++i;
      } else if (arg.rfind("--gpu=", 0) == 0) {
        args.push_back("--gpu=" + std::to_string(device));
      } else {
        args.push_back(arg);
      }
    }
    spec.args.push_back(args);
    spec.labels.push_back("GPU " + std::to_string(device));
  }
  std::cout << "Launching " << devices.size() << " workers, one per GPU (" << gpu << ")"
            << std::endl;
  return launch_workers(spec);
}

std::string gpu_of_this_process(const std::string& gpu) {
  if (gpu == "local") {
    LAMINA_REQUIRE(launched_by_mpi(), "--gpu local is for processes started by mpirun (each "
                   "takes the GPU of its rank on its machine); alone, give --gpu N, or --gpu "
                   "0,1 for one worker per GPU");
    return std::to_string(mpi_local_rank());
  }
  LAMINA_REQUIRE(is_worker() || listed_devices(gpu).empty(), "--gpu ", gpu, " names several "
                 "GPUs; under mpirun give --gpu local");
  return gpu == "all" ? "0" : gpu;  // all of one GPU
}

std::shared_ptr<Communicator> join_job(Backend& backend, const SolverParameter& param) {
  std::shared_ptr<Communicator> comm;
  if (is_worker()) {
    LAMINA_REQUIRE(!backend.is_host(), "a worker of `lamina train --gpu 0,1` trains on a GPU");
    const char* id = env(kNcclIdVariable);
    LAMINA_REQUIRE(id, "the environment variable ", kNcclIdVariable, " is not set; it is set "
                   "by `lamina train --gpu 0,1` for its workers");
    comm = make_nccl_communicator(param.device_id(), env_int(kWorkerRankVariable),
                                  env_int(kWorkerCountVariable), nccl_id_from_hex(id));
  } else if (launched_by_mpi()) {
    Communicator& world = mpi_world();
    if (backend.is_host()) {
      comm = std::shared_ptr<Communicator>(&world, [](Communicator*) {});  // lives until exit
    } else {
      comm = make_nccl_communicator(param.device_id(), world);
    }
  }
  if (!comm) return nullptr;
  g_label = " (worker " + std::to_string(comm->rank()) + " of " + std::to_string(comm->size()) + ")";
  if (comm->rank() != 0) FLAGS_minloglevel = google::GLOG_WARNING;  // worker 0 logs the job
  return comm;
}

std::string worker_label() { return g_label; }

std::string job_gpu(const std::string& own) {
  const char* job = env(kJobGpuVariable);
  return job ? job : own;
}

void abort_job() { mpi_abort_job(); }

}  // namespace lamina::cli
