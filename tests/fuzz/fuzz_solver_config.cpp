// Fuzz target: solver prototxt text -> SolverParameter -> check_solver_parameter, read from a
// file so that refusals also exercise the file:line lookup (field_location).
//
// Every input must be parsed and checked or refused with a lamina::Error. A parameter the
// checks accept must keep their promise: the learning rate at every iteration up to
// max_iter is a finite float >= 0 (probed at the ends, the middle, and around each stepsize
// and stepvalue; every policy is monotonic). Anything else is a bug.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "lamina/io.hpp"
#include "lamina/lr_policy.hpp"
#include "lamina/solver_config.hpp"

namespace lamina::fuzz {
namespace {

void run(const uint8_t* data, size_t size) {
  static const bool quiet = (quiet_logging(), true);
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string path = write_file("solver.prototxt", text.data(), text.size());
  SolverParameter p;
  try {
    p = parse_solver_parameter(text, path);
    check_solver_parameter(p, path);
  } catch (const Error& e) {
    rejected("solver", e);
    return;
  }
  accepted("solver");
  const int64_t last = p.max_iter();
  std::vector<int64_t> probes = {0, 1, last / 2, last - 1, last};
  for (int64_t at : {int64_t(p.stepsize()) - 1, int64_t(p.stepsize()), int64_t(p.stepsize()) + 1})
    probes.push_back(at);
  for (int32_t value : p.stepvalue()) probes.push_back(value);
  for (int64_t it : probes) {
    if (it < 0 || it > last) continue;
    const double rate = learning_rate(p, it);
    if (!(rate >= 0 && rate <= std::numeric_limits<float>::max())) {  // NaN fails too
      std::fprintf(stderr, "accepted solver gives learning rate %g at iteration %lld\n",
                   double(rate), static_cast<long long>(it));
      std::abort();
    }
  }
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
