// How `lamina train` becomes a data-parallel job (docs/distributed.md):
//
//   --gpu 0,1 / --gpu all   this process launches one worker process per GPU (launcher.hpp)
//                           and waits for them; each worker gets --gpu N and an NCCL id.
//   mpirun ... --gpu local  each process takes the GPU of its rank on its machine; NCCL's
//                           communicator is set up through MPI.
//   mpirun ... (CPU)        the gradients are summed with MPI.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/communicator.hpp"
#include "lamina/lamina.pb.h"

namespace lamina::cli {

// When --gpu names several GPUs (and this process is neither a worker nor under mpirun):
// launches the workers and returns the job's exit status. nullopt: this process trains.
// stop_signals: the signals whose effect is to stop (WorkerSpec::stop_signals).
std::optional<int> launch_job(const std::string& gpu, int argc, char** argv,
                              const std::vector<int>& stop_signals);

// The single --gpu value this process trains with ("" or "-1" or "N"): --gpu local under
// mpirun becomes this process's local rank. Other values pass through; a list that reaches
// here (under mpirun) is an Error.
std::string gpu_of_this_process(const std::string& gpu);

// This process's communicator for `backend` (whose solver parameter is `param`, with the
// device chosen), or null when it trains alone. Worker 0 logs; the others log only warnings
// and errors from here on.
std::shared_ptr<Communicator> join_job(Backend& backend, const SolverParameter& param);

// " (worker R of N)" in a job, "" alone: for error messages.
std::string worker_label();
// The --gpu value that started the job (a worker's own is one device), for resume hints.
std::string job_gpu(const std::string& own);
// Stops the other processes of an MPI job after an error here (no-op otherwise).
void abort_job();

}  // namespace lamina::cli
