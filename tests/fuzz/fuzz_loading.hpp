// Loading fuzzed weights into a net (fuzz_weights, fuzz_caffemodel): in every matching mode
// (exact, require-all, fine-tune), a load that fails with a lamina::Error must leave the
// net's weights as they were (snapshot.hpp, caffe_weights.hpp); one that changes them
// aborts, as a bug. The net runs on a host backend: its arena is read in place.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_util.hpp"
#include "lamina/net.hpp"
#include "lamina/snapshot.hpp"

namespace lamina::fuzz {

inline std::vector<float> arena_values(const Net& net) {
  const float* w = net.arena().data();
  return std::vector<float>(w, w + net.arena().count());
}

// load(match) for each mode; afterwards the weights are `initial` again, for the next input.
template <class Load>
void load_in_every_mode(Net& net, const char* stage, const std::vector<float>& initial,
                        Load load) {
  for (WeightsMatch match : {WeightsMatch::kExact, WeightsMatch::kRequireAll,
                             WeightsMatch::kFineTune}) {
    const std::vector<float> before = arena_values(net);
    try {
      load(match);
      accepted(stage);
    } catch (const Error& e) {
      rejected(stage, e);
      const std::vector<float> after = arena_values(net);
      if (std::memcmp(after.data(), before.data(), sizeof(float) * before.size()) != 0) {
        std::fprintf(stderr, "BUG: %s failed but changed the weights\n", stage);
        std::abort();
      }
    }
  }
  std::memcpy(net.arena().data(), initial.data(), sizeof(float) * initial.size());
}

}  // namespace lamina::fuzz
