// Opening the files a user names: net and solver prototxt, IDX data, weights, solver state.
// One place turns every hostile path into one lamina::Error that names the path, what the
// file is used as ("net file", "IDX data file", ...) and the problem:
//
//   - missing, unreadable, a symlink loop (ELOOP), a name too long (ENAMETOOLONG), a part
//     of the path that is a file (ENOTDIR): the system's reason and a hint;
//   - anything but a regular file (a directory, a FIFO, a character device such as
//     /dev/zero or /dev/null, a block device, a socket) is refused by what it is. The path
//     is stat'd before it is opened, so a device is never opened, and opened with
//     O_NONBLOCK (cleared once fstat confirms a regular file), so a FIFO swapped in between
//     cannot block either;
//   - the size is taken by fstat once, at open. Readers never read more than that, so a file
//     that grows while it is read cannot grow memory; a text file larger than
//     kMaxTextFileBytes is refused before it is read, naming its size and the bound.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace lamina {

// The bound on a text file (net or solver prototxt): 64 MiB. The largest real prototxt
// files are a few hundred KiB; a bigger file is the wrong file.
constexpr int64_t kMaxTextFileBytes = int64_t(64) << 20;

// A regular file opened for reading: the owner of its descriptor.
class InputFile {
 public:
  // Opens path or throws. what: the file's use in messages ("net file"); if_missing: a
  // sentence added when the file does not exist (how to get it), or empty.
  InputFile(std::string path, std::string what, std::string if_missing = {});
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  // Bytes, as fstat said at open.
  int64_t size() const { return size_; }
  // "<what> '<path>': ", the start of every message about this file.
  std::string prefix() const;
  // Hands the descriptor over (to zlib's gzdopen, which closes it); -1 once released.
  int release();

  // Reads up to n bytes at the current position, retrying EINTR and short reads; fewer only
  // at the end of the file. Throws on a read error.
  size_t read(void* dst, size_t n);
  // The whole file from the start: size() bytes at most, whatever the file does meanwhile
  // (fewer if it shrank). A file over max_bytes is refused, with both figures, before it is
  // read.
  std::string read_all(int64_t max_bytes);

 private:
  std::string path_, what_;
  int fd_ = -1;
  int64_t size_ = 0;
};

// The path as messages show it: quoted, and shortened to its start and end (with its
// length) when it is longer than a screen, as an ENAMETOOLONG path may be.
std::string quoted_path(const std::string& path);

}  // namespace lamina
