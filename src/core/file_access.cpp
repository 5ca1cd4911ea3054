// Opening the files a user names; the rules are in file_access.hpp.
#include "lamina/file_access.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "lamina/common.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

constexpr size_t kLongestShownPath = 512;  // longer paths are shown by their start and end

// "70000000 bytes (66.8 MiB)"
std::string bytes_and_mib(int64_t bytes) {
  return std::to_string(bytes) + " bytes (" + readable_bytes(uint64_t(bytes)) + ")";
}

// What a file that is not a regular file is, and what to do instead; "" for a regular file.
std::string not_regular(mode_t mode) {
  if (S_ISREG(mode)) return {};
  if (S_ISDIR(mode)) return "is a directory, not a file (give the path of a file in it)";
  if (S_ISFIFO(mode))
    return "is a named pipe (FIFO), not a regular file; Lamina does not wait for a writer "
           "(write the data to a file and give that)";
  if (S_ISCHR(mode))
    return "is a character device (like /dev/zero, /dev/null or a terminal), not a regular "
           "file";
  if (S_ISBLK(mode)) return "is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

// The longest name between slashes, for ENAMETOOLONG.
size_t longest_name(const std::string& path) {
  size_t longest = 0, start = 0;
  while (start <= path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    longest = std::max(longest, end - start);
    start = end + 1;
  }
  return longest;
}

// A hint for errno `error` from stat (on_stat) or open of path; "" when none helps.
std::string open_hint(int error, const std::string& path, bool on_stat,
                      const std::string& if_missing) {
  switch (error) {
    case ENOENT: {
      std::string hint;
      char cwd[PATH_MAX];
      if (path[0] != '/' && ::getcwd(cwd, sizeof(cwd)))
        hint = std::string(" (relative to the working directory '") + cwd + "')";
      return if_missing.empty() ? hint : hint + ". " + if_missing;
    }
    case ENOTDIR: return " (a part of the path before the last '/' is a file, not a directory)";
    case ELOOP:
      return " (symbolic links on the path form a loop or nest too deep; `readlink -f` or "
             "`ls -l` shows where they lead)";
    case ENAMETOOLONG:
      if (path.size() >= PATH_MAX)
        return " (the path has " + std::to_string(path.size()) + " bytes; at most " +
               std::to_string(PATH_MAX - 1) + " are allowed)";
      return " (a name in it has " + std::to_string(longest_name(path)) + " bytes; a name " +
             "between slashes may have at most " + std::to_string(NAME_MAX) + ")";
    case EACCES:
      return on_stat ? " (a directory on the path does not let this user through: check its "
                       "permissions)"
                     : " (this user may not read it: check its permissions with `ls -l`)";
    case EMFILE:
    case ENFILE: return " (too many files are open: raise `ulimit -n`)";
    default: return "";
  }
}

}  // namespace

std::string quoted_path(const std::string& path) {
  if (path.size() <= kLongestShownPath) return "'" + path + "'";
  const size_t half = kLongestShownPath / 4;
  return "'" + path.substr(0, half) + "..." + path.substr(path.size() - half) + "' (" +
         std::to_string(path.size()) + " bytes)";
}

InputFile::InputFile(std::string path, std::string what, std::string if_missing)
    : path_(std::move(path)), what_(std::move(what)) {
  if (path_.empty()) fail(what_, ": the path is empty");
  // stat first: a device or FIFO is refused without being opened.
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0) {
    const int error = errno;
    fail(prefix(), "cannot open: ", std::strerror(error),
         open_hint(error, path_, true, if_missing));
  }
  std::string problem = not_regular(st.st_mode);
  if (!problem.empty()) fail(prefix(), problem);
  // O_NONBLOCK: should the path have become a FIFO since, open must not wait for a writer.
  fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) {
    const int error = errno;
    fail(prefix(), "cannot open: ", std::strerror(error),
         open_hint(error, path_, false, if_missing));
  }
  if (::fstat(fd_, &st) != 0) {
    problem = std::string("cannot stat: ") + std::strerror(errno);
  } else {
    problem = not_regular(st.st_mode);
  }
  if (problem.empty() && ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK) != 0)
    problem = std::string("cannot clear O_NONBLOCK: ") + std::strerror(errno);
  if (!problem.empty()) {
    ::close(fd_);
    fd_ = -1;
    fail(prefix(), problem);
  }
  size_ = int64_t(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}


std::string InputFile::prefix() const { return what_ + " " + quoted_path(path_) + ": "; }

int InputFile::release() {
  const int fd = fd_;
  fd_ = -1;
  return fd;
}

size_t InputFile::read(void* dst, size_t n) {
  LAMINA_REQUIRE(fd_ >= 0, prefix(), "read after the file was handed over");
  size_t done = 0;
  while (done < n) {
    const size_t chunk = std::min(n - done, size_t(1) << 30);
    const ssize_t got = ::read(fd_, static_cast<char*>(dst) + done, chunk);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) fail(prefix(), "read error: ", std::strerror(errno));
    if (got == 0) break;
    done += size_t(got);
  }
  return done;
}

std::string InputFile::read_all(int64_t max_bytes) {
  if (size_ > max_bytes)
    fail(prefix(), "is ", bytes_and_mib(size_), ", more than the ", bytes_and_mib(max_bytes),
         " a ", what_, " may have; is it the right file?");
  if (fd_ >= 0 && ::lseek(fd_, 0, SEEK_SET) != 0)
    fail(prefix(), "cannot seek to its start: ", std::strerror(errno));
  std::string bytes(size_t(size_), '\0');
  bytes.resize(read(bytes.data(), bytes.size()));  // never past the size stat'd at open
  return bytes;
}

}  // namespace lamina
