// Fuzz target: bytes -> the content of a snapshot prefix's lock file, held by another open
// file description -> SnapshotPrefixLock's refusal, then a lock taken once it is released.
// Whatever the file holds (another process wrote it), the refusal is a lamina::Error whose
// message is bounded and printable, and the next holder replaces the content with its own
// record; anything else is a bug.
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "fuzz_util.hpp"
#include "lamina/common.hpp"
#include "lamina/snapshot_lock.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace lamina;
  fuzz::quiet_logging();
  const std::string prefix = (fuzz::scratch_dir() / "run").string();
  const std::string path = fuzz::write_file("run.lock", data, size);
  const int holder = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (holder < 0 || ::flock(holder, LOCK_EX | LOCK_NB) != 0) std::abort();
  try {
    SnapshotPrefixLock second(prefix);
    std::abort();  // a held lock was taken twice
  } catch (const Error& e) {
    const std::string message = e.what();
    if (message.size() > 8192) std::abort();
    for (char c : message)
      if (c < 0x20 || c > 0x7e) std::abort();  // the file's bytes reach a terminal
    fuzz::rejected("SnapshotPrefixLock (held)", e);
  }
  ::close(holder);
  {
    SnapshotPrefixLock lock(prefix);  // released: must succeed
    std::ifstream in(path, std::ios::binary);
    std::stringstream content;
    content << in.rdbuf();
    if (content.str().rfind("pid " + std::to_string(::getpid()) + "\ncommand ", 0) != 0)
      std::abort();  // the old content was not replaced
    fuzz::accepted("SnapshotPrefixLock (released)");
  }
  return 0;
}
