// How much host memory the process can still use, checked before large host allocations so
// that a net too large for the machine is refused with the figures instead of meeting the
// OOM killer (Linux overcommits: an allocation succeeds, and touching its pages kills).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace lamina {

// Allocations smaller than this are checked together, once their sum reaches it (a check
// reads /proc), so that many small tensors cannot add up to more than the machine has.
constexpr uint64_t kHostMemoryCheckBytes = uint64_t{1} << 20;

// Bytes the process can still allocate and touch without swapping: MemAvailable from
// /proc/meminfo (swap counts for nothing), lowered to the room left under the memory limit
// of the process's cgroup or any ancestor (v1 or v2; reclaimable file cache counts as room).
// Empty when /proc/meminfo cannot be read. `root` prefixes every path (tests; "" is the
// system's own).
std::optional<uint64_t> available_host_memory(const std::string& root = "");

// "37.3 GiB", "64.0 MiB", "512 bytes".
std::string readable_bytes(uint64_t bytes);

// Throws an Error "could not allocate <what>: it needs 37.3 GiB of memory, but 20.1 GiB is
// available (...)" when bytes exceed the available host memory. An allocation below
// kHostMemoryCheckBytes is added to those since the last check and checked with them when
// they reach it; refuses nothing when the available memory is unknown. `root` as above.
void require_host_memory(uint64_t bytes, const std::string& what, const std::string& root = "");

}  // namespace lamina
