// Parameter layouts for tests of the fused update: many parameters of varied sizes, as a
// ResNet has, laid out on kArenaBlock boundaries.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "lamina/backend.hpp"

namespace lamina::testing {

// count segments: every 17th empty, every 5th up to large_max floats, the others up to
// small_max (so under one block, one, or several), with lr_mult and decay_mult varying, and
// two blocks of padding only after every 7th. The arena's size is the end of the last block.
inline std::vector<ParamSegment> varied_segments(int count, int64_t small_max, int64_t large_max,
                                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ParamSegment> segments;
  int64_t offset = 0;
  for (int s = 0; s < count; ++s) {
    const int64_t max = s % 5 == 0 ? large_max : small_max;
    const int64_t size = s % 17 == 0 ? 0 : int64_t(rng() % uint64_t(max)) + 1;
    segments.push_back({offset, size, 0.5f + float(s % 4), float(s % 3)});
    offset += (size + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
    if (s % 7 == 0) offset += 2 * kArenaBlock;
  }
  return segments;
}

// The arena segments were laid out in: the end of the last one's blocks, padding included.
inline int64_t arena_size(const std::vector<ParamSegment>& segments) {
  const ParamSegment& last = segments.back();
  return (last.offset + last.count + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
}

}  // namespace lamina::testing
