// What every worker of a data-parallel job checks and agrees on together, over any
// Communicator: start-up consistency, values only worker 0 chooses, sums of host values.
#include "lamina/communicator.hpp"

#include <zlib.h>

#include <cstdlib>

#include "lamina/common.hpp"

namespace lamina {

bool launched_by_mpi() {
  // Open MPI's mpirun, and the PMI/PMIx process managers (MPICH's mpiexec, Slurm's srun).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"})
    if (std::getenv(name)) return true;
  return false;
}

std::string nccl_id_to_hex(const NcclId& id) {
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (char c : id) {
    hex += digits[(unsigned char)c >> 4];
    hex += digits[(unsigned char)c & 15];
  }
  return hex;
}

NcclId nccl_id_from_hex(const std::string& hex) {
  NcclId id{};
  LAMINA_REQUIRE(hex.size() == 2 * id.size(), "an NCCL id is ", 2 * id.size(),
                 " hexadecimal digits, got ", hex.size());
  auto digit = [&](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    fail("an NCCL id is hexadecimal digits, got '", c, "'");
  };
  for (size_t i = 0; i < id.size(); ++i) id[i] = char(digit(hex[2 * i]) * 16 + digit(hex[2 * i + 1]));
  return id;
}

uint64_t broadcast_value(Communicator& comm, uint64_t x) {
  comm.broadcast_host(&x, sizeof(x), 0);
  return x;
}

std::vector<double> sum_over_workers(Communicator& comm, std::vector<double> values) {
  if (!values.empty()) comm.all_reduce_sum_host(values.data(), int64_t(values.size()));
  return values;
}

void require_same_on_all_workers(Communicator& comm, const std::string& what,
                                 const std::string& label) {
  // Worker 0's length and hash, then each worker's verdict at its own rank: every worker
  // learns who differs, so all of them stop with the same message.
  // The same on every machine and build (std::hash is not).
  const uint64_t crc = crc32(0L, reinterpret_cast<const Bytef*>(what.data()), uInt(what.size()));
  uint64_t mine[2] = {uint64_t(what.size()), crc};
  uint64_t first[2] = {mine[0], mine[1]};
  comm.broadcast_host(first, sizeof(first), 0);
  std::vector<double> differs(comm.size(), 0.0);
  differs[comm.rank()] = (first[0] != mine[0] || first[1] != mine[1]) ? 1.0 : 0.0;
  differs = sum_over_workers(comm, differs);
  std::string who;
  int count = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (differs[r] == 0) continue;
    who += (who.empty() ? "" : ", ") + std::to_string(r);
    ++count;
  }
  LAMINA_REQUIRE(count == 0, count == 1 ? "worker " : "workers ", who, count == 1 ? " has" : " have",
                 " another ", label, " than worker 0; every worker of a data-parallel job "
                 "must be started with the same files");
}

}  // namespace lamina
