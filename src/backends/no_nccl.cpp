// Builds without NCCL: GPU workers cannot sum their gradients; asking for them says how to
// build with it.
#include "lamina/common.hpp"
#include "lamina/communicator.hpp"

namespace lamina {
namespace {
[[noreturn]] void no_nccl() {
  fail("this Lamina was built without NCCL, which data-parallel training on GPUs needs; "
       "install NCCL (it comes with the CUDA toolkit's repository: libnccl-dev) and "
       "configure with -DLAMINA_USE_NCCL=ON");
}
}  // namespace

bool nccl_compiled() { return false; }
NcclId nccl_new_id() { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(int, int, int, const NcclId&) { no_nccl(); }
std::unique_ptr<Communicator> make_nccl_communicator(int, Communicator&) { no_nccl(); }

}  // namespace lamina
