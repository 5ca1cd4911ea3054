// A counter-based random generator: the value for (seed, counter) is a pure function, so
// every backend, thread and kernel draws the same numbers with no state to carry.
#pragma once

#include <cstdint>

#include "lamina/host_device.hpp"

namespace lamina {

// splitmix64's finaliser applied to seed and counter.
LAMINA_HOST_DEVICE inline uint64_t counter_hash(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 random bits (exact in float).
LAMINA_HOST_DEVICE inline float counter_uniform(uint64_t seed, uint64_t counter) {
  return static_cast<float>(counter_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

}  // namespace lamina
