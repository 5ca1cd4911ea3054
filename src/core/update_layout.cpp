// block_segments: the table through which the fused update finds each element's segment in
// one pass (backend.hpp, UpdateLayout). Segments start on kArenaBlock boundaries and do not
// overlap, so a block holds elements of at most one segment: the table is exact, and a block
// past a segment's last element (the padding up to the next parameter) is -1.
#include <glog/logging.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "lamina/backend.hpp"

namespace lamina {

std::vector<int32_t> block_segments(const std::vector<ParamSegment>& segments, int64_t n) {
  CHECK(n >= 0 && n % kArenaBlock == 0)
      << "the arena's " << n << " floats are not a multiple of " << kArenaBlock;
  CHECK_LE(segments.size(), size_t{INT32_MAX});
  std::vector<int32_t> table(n / kArenaBlock, -1);
  int64_t free_from = 0;  // the first element no earlier segment holds
  for (size_t s = 0; s < segments.size(); ++s) {
    const ParamSegment& seg = segments[s];
    CHECK(seg.offset % kArenaBlock == 0 && seg.offset >= free_from && seg.count >= 0 &&
          seg.count <= n - seg.offset)
        << "segment " << s << " [" << seg.offset << ", +" << seg.count << ") is not aligned "
        << "to " << kArenaBlock << " floats, overlaps or precedes the segment before it (which "
        << "ends at " << free_from << "), or leaves the arena of " << n;
    const int64_t first = seg.offset / kArenaBlock;
    const int64_t end = (seg.offset + seg.count + kArenaBlock - 1) / kArenaBlock;
    std::fill(table.begin() + first, table.begin() + end, static_cast<int32_t>(s));
    free_from = seg.offset + seg.count;
  }
  return table;
}

}  // namespace lamina
