#include "lamina/snapshot_lock.hpp"

#include <fcntl.h>
#include <glog/logging.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "lamina/common.hpp"

namespace lamina {
namespace {

// What a holder writes into the lock file: "pid <pid>\ncommand <command line>\n".
constexpr size_t kMaxCommandChars = 1024;
constexpr size_t kMaxLockFileBytes = 4096;  // what a refused run reads of the file

// This process's command line, arguments separated by spaces, at most kMaxCommandChars.
std::string own_command_line() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string text;
  char c;
  while (text.size() < kMaxCommandChars && in.get(c)) text += c == '\0' ? ' ' : c;
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text.empty() ? "unknown" : text;
}

// Printable ASCII only: the file may hold anything, and its text goes to a terminal.
std::string printable(const std::string& text) {
  std::string out = text;
  for (char& c : out)
    if (c < 0x20 || c > 0x7e) c = '?';
  return out;
}

// "process 1234 (lamina train --solver s.prototxt)" from the holder's lock file content.
std::string describe_holder(const std::string& content) {
  std::istringstream lines(content);
  std::string line, pid, command;
  while (std::getline(lines, line)) {
    if (line.rfind("pid ", 0) == 0) pid = line.substr(4);
    if (line.rfind("command ", 0) == 0) command = line.substr(8);
  }
  if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos)
    return "another process (its lock file does not say which; it may be starting)";
  return "process " + pid + (command.empty() ? "" : " (" + printable(command) + ")");
}

std::string read_lock_file(int fd) {
  std::string content(kMaxLockFileBytes, '\0');
  const ssize_t n = ::pread(fd, content.data(), content.size(), 0);
  content.resize(n > 0 ? size_t(n) : 0);
  return content;
}

}  // namespace

SnapshotPrefixLock::SnapshotPrefixLock(const std::string& prefix)
    : prefix_(prefix), path_(lock_path(prefix)) {
  LAMINA_REQUIRE(!prefix.empty(), "an empty snapshot prefix cannot be locked");
  // O_NONBLOCK: opening a FIFO someone put at PATH does not wait for a writer. O_NOFOLLOW: a
  // symbolic link at PATH is refused, so its target is never truncated.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW,
               0644);
  if (fd_ < 0) {
    const int error = errno;
    if (error == ELOOP)
      fail("snapshot prefix '", prefix_, "': its lock file '", path_, "' is a symbolic link; "
           "remove it or choose another snapshot_prefix");
    fail("snapshot prefix '", prefix_, "': cannot open its lock file '", path_, "': ",
         std::strerror(error));
  }
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    release();
    fail("snapshot prefix '", prefix_, "': its lock file '", path_, "' is not a regular file; "
         "remove it or choose another snapshot_prefix");
  }
  int status;
  do {
    status = ::flock(fd_, LOCK_EX | LOCK_NB);
  } while (status != 0 && errno == EINTR);
  if (status != 0) {
    const int error = errno;
    const std::string holder = error == EWOULDBLOCK ? describe_holder(read_lock_file(fd_)) : "";
    release();
    if (error == EWOULDBLOCK)
      fail("snapshot prefix '", prefix_, "' is in use: ", holder, " holds its lock file '",
           path_, "' and writes snapshots there; wait until it ends, or give this run "
           "another snapshot_prefix");
    fail("snapshot prefix '", prefix_, "': cannot lock '", path_, "': ", std::strerror(error));
  }
  // Who holds it, for the message of a run that is refused. The lock works without it, so a
  // failure here (a full disk) is only a warning.
  const std::string content =
      "pid " + std::to_string(::getpid()) + "\ncommand " + own_command_line() + "\n";
  if (::ftruncate(fd_, 0) != 0 ||
      ::pwrite(fd_, content.data(), content.size(), 0) != ssize_t(content.size()))
    LOG(WARNING) << "could not record this process in " << path_ << ": " << std::strerror(errno);
}

SnapshotPrefixLock::~SnapshotPrefixLock() { release(); }

SnapshotPrefixLock::SnapshotPrefixLock(SnapshotPrefixLock&& other) noexcept
    : prefix_(std::move(other.prefix_)),
      path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)) {}

SnapshotPrefixLock& SnapshotPrefixLock::operator=(SnapshotPrefixLock&& other) noexcept {
  if (this != &other) {
    release();
    prefix_ = std::move(other.prefix_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
  }
  return *this;
}

// Closing the descriptor releases the flock (the last descriptor of the open file
// description: it is O_CLOEXEC and never duplicated).
void SnapshotPrefixLock::release() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

}  // namespace lamina
