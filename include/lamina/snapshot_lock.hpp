// One writer per snapshot prefix: two runs that write PREFIX_iter_N.* at once would replace
// each other's snapshots, and a resume would mix them. A run takes SnapshotPrefixLock for its
// prefix before it writes the first snapshot and holds it until it ends.
//
// The lock is flock(LOCK_EX | LOCK_NB) on PREFIX.lock, opened with O_CLOEXEC (a child the
// run starts does not inherit it). It is released when the object is destroyed, and by the
// kernel when the process dies however it dies (SIGKILL, OOM killer), so a crash leaves no
// stale lock. The holder writes its pid and command line into the file; a second run reads
// them to say which process holds the prefix.
//
// The file stays after release: removing it would race with a run that has just opened it
// (that run would lock the removed file while a third run creates and locks a new one, and
// both would believe they hold the prefix). Its content is then stale but harmless: only the
// flock counts, and the next holder rewrites the content.
//
// flock is per open file description: a second SnapshotPrefixLock on the same prefix is
// refused even inside the holding process. A fork()ed child shares the holder's open file
// description, and with it the lock, until it execs or exits. On NFS, Linux maps flock to a
// POSIX byte-range lock, which the server enforces across machines.
//
// Solver::solve() takes it for snapshot_prefix before training starts and holds it until it
// returns.
#pragma once

#include <string>

namespace lamina {

class SnapshotPrefixLock {
 public:
  // Locks PREFIX.lock, creating it when absent. Throws Error naming the prefix and the
  // holder (pid and command line, as it wrote them) when another lock holds it, and naming
  // the lock file and the system's reason when it cannot be created or opened.
  explicit SnapshotPrefixLock(const std::string& prefix);
  ~SnapshotPrefixLock();
  SnapshotPrefixLock(SnapshotPrefixLock&& other) noexcept;
  SnapshotPrefixLock& operator=(SnapshotPrefixLock&& other) noexcept;
  SnapshotPrefixLock(const SnapshotPrefixLock&) = delete;
  SnapshotPrefixLock& operator=(const SnapshotPrefixLock&) = delete;

  const std::string& prefix() const { return prefix_; }
  const std::string& path() const { return path_; }  // PREFIX.lock

  // The lock file of a prefix.
  static std::string lock_path(const std::string& prefix) { return prefix + ".lock"; }

 private:
  void release() noexcept;

  std::string prefix_;
  std::string path_;
  int fd_ = -1;
};

}  // namespace lamina
