// Builds without MPI: the job is one process; asking for MPI says how to build with it.
#include <cstdlib>

#include "lamina/common.hpp"
#include "lamina/communicator.hpp"

namespace lamina {

namespace {
[[noreturn]] void no_mpi() {
  fail("this Lamina was built without MPI; install Open MPI (apt-get install libopenmpi-dev "
       "openmpi-bin) and configure with -DLAMINA_USE_MPI=ON");
}
}  // namespace

bool mpi_compiled() { return false; }
Communicator& mpi_world() { no_mpi(); }
int mpi_local_rank() { no_mpi(); }
void mpi_abort_job() {}

}  // namespace lamina
