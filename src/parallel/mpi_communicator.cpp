// The MPI communicator (builds with LAMINA_USE_MPI): the processes mpirun started, summing
// host memory with MPI_Allreduce. The world is initialised once, on first use, and finalised
// at exit; an error in one process aborts the job (mpi_abort_job) so no other one waits
// forever in a collective.
// The C interface only (mpi.h would otherwise declare the removed C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <cstdlib>
#include <algorithm>
#include <cstdio>
#include <memory>
#include <mutex>

#include "lamina/common.hpp"
#include "lamina/communicator.hpp"

namespace lamina {
namespace {

void check(int status, const char* what) {
  if (status == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(status, text, &length);
  fail("MPI ", what, " failed: ", std::string(text, length));
}

int world_value(int (*query)(MPI_Comm, int*)) {
  int value = 0;
  check(query(MPI_COMM_WORLD, &value), "query of the world");
  return value;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator()
      : Communicator(world_value(MPI_Comm_rank), world_value(MPI_Comm_size)) {}

  std::string description() const override {
    return "MPI, " + std::to_string(size()) + " worker" + (size() == 1 ? "" : "s");
  }
  void all_reduce_sum(float* data, int64_t count) override {
    for (int64_t done = 0; done < count;) {  // MPI counts are ints
      const int n = int(std::min<int64_t>(count - done, 1 << 30));
      check(MPI_Allreduce(MPI_IN_PLACE, data + done, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
            "all-reduce");
      done += n;
    }
  }
  void broadcast(float* data, int64_t count, int root) override {
    broadcast_host(data, count * int64_t(sizeof(float)), root);
  }
  void all_reduce_sum_host(double* data, int64_t count) override {
    LAMINA_REQUIRE(count <= (1 << 30), "an MPI host sum takes at most 2^30 values");
    check(MPI_Allreduce(MPI_IN_PLACE, data, int(count), MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
          "all-reduce");
  }
  void broadcast_host(void* data, int64_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    for (int64_t done = 0; done < bytes;) {
      const int n = int(std::min<int64_t>(bytes - done, 1 << 30));
      check(MPI_Bcast(p + done, n, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
      done += n;
    }
  }
};

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

bool mpi_compiled() { return true; }


Communicator& mpi_world() {
  static std::once_flag once;
  static std::unique_ptr<MpiCommunicator> world;
  std::call_once(once, [] {
    int ready = 0;
    MPI_Initialized(&ready);
    if (!ready) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "initialisation");
      std::atexit(finalize_at_exit);
    }
    // Errors come back as statuses (check() turns them into lamina::Error), not aborts
    // without a message.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    world = std::make_unique<MpiCommunicator>();
  });
  return *world;
}

int mpi_local_rank() {
  MPI_Comm local;
  mpi_world();
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local),
        "split by machine");
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

void mpi_abort_job() {
  int ready = 0, finalized = 0;
  MPI_Initialized(&ready);
  MPI_Finalized(&finalized);
  if (!ready || finalized) return;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::fprintf(stderr, "lamina: worker %d failed; stopping every process of the job\n", rank);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

}  // namespace lamina
