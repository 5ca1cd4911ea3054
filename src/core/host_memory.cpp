// Available host memory: /proc/meminfo and the cgroup memory limits (see host_memory.hpp).
#include "lamina/host_memory.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "lamina/common.hpp"

namespace lamina {
namespace {

struct Available {
  uint64_t bytes;
  std::string source;  // what set the figure, for the message
};

// The first line of a small file, or "" when it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The value after `key` in a "key value" file (meminfo's "MemAvailable:  123 kB", cgroup's
// memory.stat "inactive_file 123"), times `unit`.
std::optional<uint64_t> keyed_value(const std::string& path, const std::string& key,
                                    uint64_t unit) {
  std::ifstream in(path);
  std::string name;
  uint64_t value = 0;
  while (in >> name >> value) {
    if (name == key) return value * unit;
    in.ignore(1 << 20, '\n');
  }
  return std::nullopt;
}

// A number in a cgroup file; empty for "max" (v2's no limit), a missing file or anything else.
std::optional<uint64_t> number_in(const std::string& path) {
  const std::string text = first_line(path);
  if (text.empty() || text.size() > 19 || text.find_first_not_of("0123456789") != std::string::npos)
    return {};
  return std::stoull(text);
}

// The room under the memory limit of the cgroup at dir: limit - (usage - inactive file
// cache); empty when the cgroup has no limit (or is not there).
std::optional<uint64_t> cgroup_room(const std::string& dir, bool v2) {
  const auto limit = number_in(dir + (v2 ? "/memory.max" : "/memory.limit_in_bytes"));
  const auto usage = number_in(dir + (v2 ? "/memory.current" : "/memory.usage_in_bytes"));
  // v1 writes "no limit" as a number near 2^63.
  if (!limit || !usage || *limit >= (uint64_t{1} << 62)) return {};
  const uint64_t cache = keyed_value(dir + "/memory.stat",
                                     v2 ? "inactive_file" : "total_inactive_file", 1)
                             .value_or(0);
  const uint64_t used = *usage - std::min(*usage, cache);
  return *limit - std::min(*limit, used);
}

// The smallest room under a limit of the process's memory cgroup and its ancestors. A path
// that is not under the mount (a container that sees its own cgroup as the root) falls back
// to the ancestors that are, the root at least.
std::optional<Available> cgroup_available(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::optional<Available> best;
  std::string line;
  while (std::getline(in, line)) {
    // "0::/path" (v2) or "4:memory:/path" (v1; the controllers are a comma-separated list).
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = "," + line.substr(a + 1, b - a - 1) + ",";
    const bool v2 = controllers == ",,";
    if (!v2 && controllers.find(",memory,") == std::string::npos) continue;
    const std::string mount = root + (v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/memory");
    for (std::string path = line.substr(b + 1);; path = path.substr(0, path.rfind('/'))) {
      if (const auto room = cgroup_room(mount + path, v2)) {
        if (!best || *room < best->bytes)
          best = Available{*room, "the memory limit of cgroup " + (path.empty() ? "/" : path)};
      }
      if (path.empty() || path == "/") break;
    }
  }
  return best;
}

std::optional<Available> available(const std::string& root) {
  const auto meminfo = keyed_value(root + "/proc/meminfo", "MemAvailable:", 1024);
  if (!meminfo) return {};
  Available result{*meminfo, "MemAvailable in /proc/meminfo"};
  const auto cgroup = cgroup_available(root);
  if (cgroup && cgroup->bytes < result.bytes) result = *cgroup;
  return result;
}

}  // namespace

std::optional<uint64_t> available_host_memory(const std::string& root) {
  const auto a = available(root);
  if (!a) return {};
  return a->bytes;
}

std::string readable_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " bytes";
  static const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = double(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f %s", value, units[unit]);
  return text;
}

void require_host_memory(uint64_t bytes, const std::string& what, const std::string& root) {
  // The small allocations since the last check (already made, so already counted out of the
  // available memory), which this one joins.
  static std::atomic<uint64_t> unchecked{0};
  if (bytes < kHostMemoryCheckBytes) {
    const uint64_t pending = unchecked.fetch_add(bytes) + bytes;
    if (pending < kHostMemoryCheckBytes) return;
    bytes = pending;
  }
  unchecked = 0;
  const auto a = available(root);
  if (!a || bytes <= a->bytes) return;
  fail("could not allocate ", what, ": it needs ", readable_bytes(bytes), " of memory, but ",
       readable_bytes(a->bytes),
       " is available (", a->source, "); reduce the batch size or the size of the layers, "
       "or free memory");
}

}  // namespace lamina
