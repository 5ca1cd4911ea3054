// Communicator: the workers of a data-parallel job and the collectives between them
// (docs/distributed.md). Each worker is a process with its own copy of the net; NCCL sums the
// gradients of GPU workers, MPI those of CPU workers and starts processes across machines.
// Lamina has no transport of its own.
//
//   MPI     make_mpi_communicator(): the processes mpirun started, over host memory (the
//           Native backend's).
//   NCCL    make_nccl_communicator(): GPU workers, over device memory, in stream order (on
//           the device's main stream, or beside it for the gradient buckets): nothing waits
//           for the host, and a CUDA graph can capture the gradient all-reduces. Set up
//           through MPI (mpirun) or from an id the launcher of `lamina train --gpu 0,1`
//           hands each worker.
//
// Every worker calls every collective in the same order (a collective one worker skips
// hangs the others; the launcher or mpirun then stops the job: docs/distributed.md).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace lamina {

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // "NCCL, 2 workers", for the log.
  virtual std::string description() const = 0;

  // ---- in the memory of the backend the communicator serves ----
  // Sums `count` floats of every worker in place.
  virtual void all_reduce_sum(float* data, int64_t count) = 0;
  // Every worker's `count` floats become root's.
  virtual void broadcast(float* data, int64_t count, int root) = 0;

  // ---- the gradient all-reduce beside the backward pass (gradient_buckets.hpp) ----
  // Whether all_reduce_sum_beside runs beside the backend's later operations (NCCL: on a
  // stream of its own). When not, the solver sums the whole arena once, after backward.
  virtual bool reduces_beside() const { return false; }
  // A backward pass with sums beside it begins: the backend's later operations leave the
  // sums what they need to run beside them (NCCL: SMs, CudaContext::leave_sms) until the
  // sums are joined (join_beside, or a backend wait such as synchronize or copy_to_host).
  virtual void start_beside() {}
  // Sums `count` floats of backend memory in place, after every operation issued so far on
  // the backend (both lanes) and beside those issued after it; nothing waits for the host.
  virtual void all_reduce_sum_beside(float* data, int64_t count) { all_reduce_sum(data, count); }
  // Every operation issued on the backend after this waits for the sums issued beside.
  virtual void join_beside() {}
  // The sums of one pass one by one, so that the update of a bucket's parameters can start
  // once its sum is done: prepare_beside(sums) at set-up, for up to `sums` per pass;
  // wait_beside(k) makes every operation issued on the backend after it wait for the k-th
  // sum issued beside since start_beside() (from 0). Without sums beside, nothing to wait.
  virtual void prepare_beside(int /*sums*/) {}
  virtual void wait_beside(int /*k*/) {}

  // ---- in host memory (start-up, test results, display points; may wait) ----
  virtual void all_reduce_sum_host(double* data, int64_t count) = 0;
  virtual void broadcast_host(void* data, int64_t bytes, int root) = 0;

 protected:
  Communicator(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_, size_;
};

// ---- checks and agreements every worker makes together (communicator.cpp) ----
// Throws on every worker, naming the workers whose `what` differs from worker 0's (a net,
// a solver, a data set): "workers 1, 3 have another <label> than worker 0".
void require_same_on_all_workers(Communicator& comm, const std::string& what,
                                 const std::string& label);
// Worker 0's value of x.
uint64_t broadcast_value(Communicator& comm, uint64_t x);
// The sum over workers of each value (host).
std::vector<double> sum_over_workers(Communicator& comm, std::vector<double> values);

// ---- MPI (builds with LAMINA_USE_MPI; otherwise these say how to get it) ----
bool mpi_compiled();
// Whether this process was started by mpirun/mpiexec (its environment says so).
bool launched_by_mpi();
// Initialises MPI once (MPI_Init_thread; MPI_Finalize at exit) and returns the world's
// communicator over host memory.
Communicator& mpi_world();
// The rank of this process among those of its machine (for --gpu local).
int mpi_local_rank();
// After an error this process has reported: aborts every process of the MPI job
// (MPI_Abort); returns only when MPI is not in use.
void mpi_abort_job();

// ---- NCCL (CUDA builds with LAMINA_USE_NCCL) ----
bool nccl_compiled();
using NcclId = std::array<char, 128>;  // ncclUniqueId
// A new id for a job's communicator (made once, by the process that starts the workers).
NcclId nccl_new_id();
std::string nccl_id_to_hex(const NcclId& id);
NcclId nccl_id_from_hex(const std::string& hex);
// Worker `rank` of `size` on CUDA device `device`, joining the job of `id`.
std::unique_ptr<Communicator> make_nccl_communicator(int device, int rank, int size,
                                                     const NcclId& id);
// The same, with the id made by worker 0 and sent over `host` (MPI).
std::unique_ptr<Communicator> make_nccl_communicator(int device, Communicator& host);

}  // namespace lamina
