// Snapshot files: the container (encode, decode, validate) and atomic writes. Weights files
// (the arena as records) are in weights.cpp.
// The format is in snapshot.hpp; docs/snapshots.md says how the solver uses it.
#include "lamina/snapshot.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <glog/logging.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <set>
#include <sstream>

#include "lamina/file_access.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

constexpr char kWeightsMagic[8] = {'L', 'A', 'M', 'I', 'N', 'A', 'W', '\0'};
constexpr char kStateMagic[8] = {'L', 'A', 'M', 'I', 'N', 'A', 'S', '\0'};
constexpr uint32_t kMaxNameLength = 4096;
constexpr int kMaxDims = 8;

const char* magic_of(SnapshotKind kind) {
  return kind == SnapshotKind::kWeights ? kWeightsMagic : kStateMagic;
}

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

// ---- little-endian encoding ----

class Writer {
 public:
  explicit Writer(std::string& out) : out_(out) {}
  void u8(uint8_t v) { out_.push_back(char(v)); }
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  // 4- or 8-byte values, bulk-copied on little-endian hosts.
  template <class T>
  void array(const T* values, size_t n) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "4- or 8-byte values");
    if (little_endian_host()) {
      raw(values, n * sizeof(T));
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      uint64_t bits = 0;
      std::memcpy(&bits, &values[i], sizeof(T));
      put(bits, sizeof(T));
    }
  }

 private:
  void put(uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) out_.push_back(char((v >> (8 * i)) & 0xff));
  }
  std::string& out_;
};

uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Bounds-checked reading of a payload; every failure names the file and the record.
class Reader {
 public:
  Reader(const std::string& bytes, size_t begin, size_t end, std::string prefix)
      : data_(reinterpret_cast<const unsigned char*>(bytes.data())), pos_(begin), end_(end),
        prefix_(std::move(prefix)) {}

  size_t remaining() const { return end_ - pos_; }
  bool done() const { return pos_ == end_; }
  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail(prefix_, what, " needs ", n, " bytes but only ", remaining(),
           " remain in the payload; the file is damaged");
  }
  uint64_t uint(int bytes, const std::string& what) {
    need(bytes, what);
    const uint64_t v = get_le(data_ + pos_, bytes);
    pos_ += bytes;
    return v;
  }
  const unsigned char* take(uint64_t n, const std::string& what) {
    need(n, what);
    const unsigned char* p = data_ + pos_;
    pos_ += n;
    return p;
  }

 private:
  const unsigned char* data_;
  size_t pos_, end_;
  std::string prefix_;
};

// zlib's CRC-32 of n bytes, fed in pieces that fit its uInt length.
uint32_t crc32_of(const void* data, size_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    const uInt chunk = uInt(std::min<size_t>(n, size_t(1) << 30));
    crc = crc32(crc, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return uint32_t(crc);
}

std::string hex32(uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return out.str();
}

// The first bytes of a file, printable characters as they are, others as \xNN.
std::string show_bytes(const std::string& bytes, size_t n) {
  std::string s;
  for (size_t i = 0; i < std::min(n, bytes.size()); ++i) {
    const unsigned char c = bytes[i];
    if (c >= 32 && c < 127) {
      s += char(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      s += buf;
    }
  }
  return s;
}

size_t element_size(SnapshotRecord::Type type) {
  switch (type) {
    case SnapshotRecord::Type::kFloat32: return 4;
    case SnapshotRecord::Type::kInt64: return 8;
    case SnapshotRecord::Type::kBytes: return 1;
  }
  return 0;
}

// A hint for errno `error` from creating or writing a file atomically (snapshots, weights,
// a mean image; the path of a snapshot is snapshot_prefix's); "" when none helps.
std::string errno_hint(int error) {
  switch (error) {
    case ENOSPC:
    case EDQUOT: return " (the disk is full: free space or write elsewhere (snapshot_prefix))";
    case EFBIG: return " (the file-size limit (ulimit -f) was reached: raise it)";
    case ENOENT: return " (the directory does not exist: create it or change the path)";
    case ENOTDIR: return " (a part of the path is a file, not a directory: change the path)";
    case EISDIR: return " (a directory has this name: move it or change the path)";
    case ELOOP:
      return " (symbolic links on the path form a loop: `readlink -f` shows where they lead)";
    case ENAMETOOLONG:
      return " (the path is too long: at most 4095 bytes in all and 255 in each name between "
             "slashes, counting the suffix Lamina adds; shorten the path)";
    case EACCES:
    case EPERM:
    case EROFS: return " (the directory is not writable: change its permissions or the path)";
    default: return "";
  }
}

std::string directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

const char* snapshot_kind_name(SnapshotKind kind) {
  return kind == SnapshotKind::kWeights ? "weights" : "solver state";
}

SnapshotRecord SnapshotRecord::of_floats(std::string name, Shape shape,
                                         std::vector<float> values) {
  SnapshotRecord r;
  r.name = std::move(name);
  r.type = Type::kFloat32;
  r.shape = std::move(shape);
  r.floats = std::move(values);
  CHECK_EQ(int64_t(r.floats.size()), shape_count(r.shape)) << r.name;
  return r;
}

SnapshotRecord SnapshotRecord::of_ints(std::string name, std::vector<int64_t> values) {
  SnapshotRecord r;
  r.name = std::move(name);
  r.type = Type::kInt64;
  r.shape = {int64_t(values.size())};
  r.ints = std::move(values);
  return r;
}

SnapshotRecord SnapshotRecord::of_bytes(std::string name, std::string value) {
  SnapshotRecord r;
  r.name = std::move(name);
  r.type = Type::kBytes;
  r.shape = {int64_t(value.size())};
  r.bytes = std::move(value);
  return r;
}

const SnapshotRecord* SnapshotFile::find(const std::string& name) const {
  for (const SnapshotRecord& r : records)
    if (r.name == name) return &r;
  return nullptr;
}

// ---------------------------------------------------------------------------------------
// The container

std::string encode_snapshot(SnapshotKind kind, const std::vector<SnapshotRecord>& records,
                            uint32_t* checksum) {
  size_t payload = 0;
  for (const SnapshotRecord& r : records)
    payload += 4 + r.name.size() + 4 + 8 * r.shape.size() + r.count() * element_size(r.type);
  std::string out;
  out.reserve(kSnapshotHeaderBytes + payload + kSnapshotTrailerBytes);
  Writer w(out);
  w.raw(magic_of(kind), 8);
  w.u32(kSnapshotFormatVersion);
  w.u32(0);
  w.u64(payload);
  for (const SnapshotRecord& r : records) {
    CHECK(!r.name.empty() && r.name.size() <= kMaxNameLength) << "record name '" << r.name << "'";
    CHECK(r.shape.size() <= size_t(kMaxDims)) << r.name;
    const int64_t count = r.count();
    w.u32(uint32_t(r.name.size()));
    w.raw(r.name.data(), r.name.size());
    w.u8(uint8_t(r.type));
    w.u8(uint8_t(r.shape.size()));
    w.u16(0);
    for (int64_t d : r.shape) w.u64(uint64_t(d));
    switch (r.type) {
      case SnapshotRecord::Type::kFloat32:
        CHECK_EQ(int64_t(r.floats.size()), count) << r.name;
        w.array(r.floats.data(), r.floats.size());
        break;
      case SnapshotRecord::Type::kInt64:
        CHECK_EQ(int64_t(r.ints.size()), count) << r.name;
        w.array(r.ints.data(), r.ints.size());
        break;
      case SnapshotRecord::Type::kBytes:
        CHECK_EQ(int64_t(r.bytes.size()), count) << r.name;
        w.raw(r.bytes.data(), r.bytes.size());
        break;
    }
  }
  CHECK_EQ(out.size(), kSnapshotHeaderBytes + payload) << "snapshot payload size";
  const uint32_t crc = crc32_of(out.data(), out.size());
  w.u32(crc);
  if (checksum) *checksum = crc;
  return out;
}

SnapshotFile decode_snapshot(const std::string& bytes, SnapshotKind kind,
                             const std::string& source, bool verify_checksum) {
  const std::string what = std::string(snapshot_kind_name(kind)) + " file '" + source + "': ";
  const char* magic = magic_of(kind);
  const char* other = magic_of(kind == SnapshotKind::kWeights ? SnapshotKind::kSolverState
                                                              : SnapshotKind::kWeights);
  const size_t head = std::min<size_t>(bytes.size(), 8);
  if (std::memcmp(bytes.data(), other, head) == 0 && head == 8) {
    fail(what, "this is a Lamina ",
         snapshot_kind_name(kind == SnapshotKind::kWeights ? SnapshotKind::kSolverState
                                                           : SnapshotKind::kWeights),
         " file, not a ", snapshot_kind_name(kind), " file",
         kind == SnapshotKind::kWeights
             ? " (resuming reads a .solverstate; weights are read from a .lamina)"
             : " (weights are read from a .lamina; resuming reads a .solverstate)");
  }
  if (bytes.empty()) fail(what, "the file is empty (0 bytes)");
  if (std::memcmp(bytes.data(), magic, head) != 0) {
    fail(what, "bad magic: expected \"", std::string(magic, 7), "\", found \"",
         show_bytes(bytes, 8), "\"; this is not a Lamina ", snapshot_kind_name(kind), " file");
  }
  const size_t minimum = kSnapshotHeaderBytes + kSnapshotTrailerBytes;
  if (bytes.size() < minimum)
    fail(what, "truncated: ", bytes.size(), " bytes, less than the ", minimum,
         " of an empty file");
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  SnapshotFile file;
  file.kind = kind;
  file.version = uint32_t(get_le(p + 8, 4));
  const uint32_t flags = uint32_t(get_le(p + 12, 4));
  const uint64_t payload = get_le(p + 16, 8);
  if (file.version == 0) fail(what, "invalid format version 0");
  if (file.version > kSnapshotFormatVersion)
    fail(what, "format version ", file.version, " is newer than this Lamina reads (",
         kSnapshotFormatVersion, "); read it with the Lamina that wrote it, or a newer one");
  if (flags != 0) fail(what, "unknown flags ", hex32(flags), " in the header");
  const uint64_t available = bytes.size() - minimum;
  if (payload > available)
    fail(what, "truncated: the header announces ", payload, " bytes of payload and a 4-byte ",
         "checksum (", payload + minimum, " bytes in all), the file has ", bytes.size());
  if (payload < available)
    fail(what, "has ", available - payload, " unexpected bytes after its checksum (", bytes.size(),
         " bytes where the header announces ", payload + minimum, ")");
  file.checksum = uint32_t(get_le(p + kSnapshotHeaderBytes + payload, 4));
  if (verify_checksum) {
    const uint32_t computed = crc32_of(p, kSnapshotHeaderBytes + payload);
    if (computed != file.checksum)
      fail(what, "checksum mismatch: the file says ", hex32(file.checksum), ", its contents give ",
           hex32(computed), "; the file is corrupt");
  }

  Reader in(bytes, kSnapshotHeaderBytes, kSnapshotHeaderBytes + payload, what);
  std::set<std::string> names;
  for (int index = 0; !in.done(); ++index) {
    const std::string at = "record " + std::to_string(index);
    const uint64_t length = in.uint(4, at + " name length");
    if (length == 0 || length > kMaxNameLength)
      fail(what, at, " has a name of ", length, " bytes (1 to ", kMaxNameLength, " allowed)");
    SnapshotRecord r;
    const unsigned char* name = in.take(length, at + " name");
    r.name.assign(reinterpret_cast<const char*>(name), length);
    const std::string rat = at + " ('" + r.name + "')";
    const uint64_t type = in.uint(1, rat + " type");
    if (type < 1 || type > 3) fail(what, rat, " has unknown type ", type);
    r.type = SnapshotRecord::Type(type);
    const uint64_t dims = in.uint(1, rat + " dimensions");
    if (dims > uint64_t(kMaxDims)) fail(what, rat, " has ", dims, " dimensions (at most ", kMaxDims, ")");
    if (in.uint(2, rat + " reserved field") != 0) fail(what, rat, " has a non-zero reserved field");
    for (uint64_t d = 0; d < dims; ++d) {
      const uint64_t v = in.uint(8, rat + " dimension");
      if (v > uint64_t(INT64_MAX)) fail(what, rat, " has a negative dimension");
      r.shape.push_back(int64_t(v));
    }
    if (r.type == SnapshotRecord::Type::kBytes && dims != 1)
      fail(what, rat, " is a byte string with ", dims, " dimensions (1 expected)");
    int64_t count = 0;
    try {
      count = shape_count(r.shape);
    } catch (const Error&) {
      fail(what, rat, " has shape ", shape_string(r.shape), ", too many elements");
    }
    const size_t size = element_size(r.type);
    if (uint64_t(count) > in.remaining() / size)
      fail(what, rat, " of shape ", shape_string(r.shape), " needs ", uint64_t(count) * size,
           " bytes but only ", in.remaining(), " remain; the file is damaged");
    const unsigned char* data = in.take(uint64_t(count) * size, rat + " values");
    switch (r.type) {
      case SnapshotRecord::Type::kFloat32:
        r.floats.resize(count);
        if (little_endian_host()) {
          if (count > 0) std::memcpy(r.floats.data(), data, count * 4);  // data() may be null
        } else {
          for (int64_t i = 0; i < count; ++i) {
            const uint32_t bits = uint32_t(get_le(data + 4 * i, 4));
            std::memcpy(&r.floats[i], &bits, 4);
          }
        }
        break;
      case SnapshotRecord::Type::kInt64:
        r.ints.resize(count);
        for (int64_t i = 0; i < count; ++i) r.ints[i] = int64_t(get_le(data + 8 * i, 8));
        break;
      case SnapshotRecord::Type::kBytes:
        r.bytes.assign(reinterpret_cast<const char*>(data), count);
        break;
    }
    if (!names.insert(r.name).second) fail(what, rat, ": the name appears twice");
    file.records.push_back(std::move(r));
  }
  return file;
}

SnapshotFile read_snapshot_file(const std::string& path, SnapshotKind kind) {
  InputFile file(path, std::string(snapshot_kind_name(kind)) + " file");
  // The header first: a foreign file (a data set given as --weights) is refused by its magic,
  // and a damaged one by the length its header announces, before the rest is read.
  const size_t minimum = kSnapshotHeaderBytes + kSnapshotTrailerBytes;
  std::string bytes(size_t(std::min<int64_t>(file.size(), kSnapshotHeaderBytes)), '\0');
  bytes.resize(file.read(bytes.data(), bytes.size()));
  if (file.size() <= int64_t(minimum)) return decode_snapshot(file.read_all(minimum), kind, path);
  if (bytes.size() < kSnapshotHeaderBytes || std::memcmp(bytes.data(), magic_of(kind), 8) != 0)
    return decode_snapshot(bytes, kind, path);  // refuses it: bad magic (or it shrank)
  const uint64_t payload = get_le(reinterpret_cast<const unsigned char*>(bytes.data()) + 16, 8);
  const uint64_t size = uint64_t(file.size());
  if (payload > size - minimum)
    fail(file.prefix(), "truncated: the header announces ", payload, " bytes of payload (",
         minimum, " more with the header and checksum), the file has ", size);
  if (payload < size - minimum)
    fail(file.prefix(), "has ", size - minimum - payload, " unexpected bytes after its checksum (",
         size, " bytes where the header announces ", payload + minimum, ")");
  // The bytes, then the records decoded from them: about twice the file.
  require_host_memory(2 * size, "the " + std::string(snapshot_kind_name(kind)) + " file '" +
                                    path + "' (" + readable_bytes(size) + ")");
  return decode_snapshot(file.read_all(file.size()), kind, path);  // at most the size stat'd
}

// ---------------------------------------------------------------------------------------
// Atomic writes

void write_fully(int fd, const void* data, size_t size, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  size_t done = 0;
  while (done < size) {
    const size_t chunk = std::min<size_t>(size - done, size_t(1) << 30);
    const ssize_t n = ::write(fd, p + done, chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int error = errno;
      fail("cannot write ", quoted_path(path), ": ", std::strerror(error), errno_hint(error));
    }
    if (n == 0) fail("cannot write ", quoted_path(path), ": the write made no progress");
    done += size_t(n);
  }
}

std::string snapshot_stem(const std::string& prefix, int64_t iter) {
  return prefix + "_iter_" + std::to_string(iter);
}

std::string temporary_path(const std::string& path) {
  return path + ".tmp-" + std::to_string(::getpid());
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = temporary_path(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    fail("cannot write ", quoted_path(path), ": cannot create ", quoted_path(tmp), ": ",
         std::strerror(error), errno_hint(error));
  }
  auto give_up = [&](const std::string& step, int error) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot write ", quoted_path(path), ": ", step, ": ", std::strerror(error),
         errno_hint(error));
  };
  try {
    write_fully(fd, bytes.data(), bytes.size(), tmp);
  } catch (const Error& e) {
    ::close(fd);
    ::unlink(tmp.c_str());
    fail("cannot write ", quoted_path(path), " (", e.what(), ")");
  }
  if (::fsync(fd) != 0) give_up("fsync of " + quoted_path(tmp), errno);
  if (::close(fd) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    fail("cannot write ", quoted_path(path), ": close of ", quoted_path(tmp), ": ",
         std::strerror(error), errno_hint(error));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(tmp.c_str());
    fail("cannot write ", quoted_path(path), ": rename from ", quoted_path(tmp), ": ",
         std::strerror(error), errno_hint(error));
  }
  // Make the rename itself durable. Some file systems cannot sync a directory (EINVAL);
  // the file is in place either way.
  const std::string dir = directory_of(path);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    if (::fsync(dfd) != 0 && errno != EINVAL && errno != EROFS)
      LOG(WARNING) << "fsync of directory '" << dir << "' failed: " << std::strerror(errno);
    ::close(dfd);
  }
}

void check_writable(const std::string& prefix, int64_t max_iter) {
  // write_file_atomically's temporary for the last solver state: the longest name written.
  const std::string probe = temporary_path(snapshot_stem(prefix, max_iter) + ".solverstate");
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int error = errno;
    fail("cannot write snapshots to ", quoted_path(prefix + "*"), " in directory ",
         quoted_path(directory_of(prefix)), ": ", std::strerror(error), errno_hint(error),
         error == ENAMETOOLONG ? " (the longest name it writes is " +
                                     quoted_path(std::filesystem::path(probe).filename().string()) + ")"
                               : std::string());
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace lamina
