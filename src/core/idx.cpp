// IDX reading through zlib: gzopen/gzread read gzip and uncompressed files alike.
#include "lamina/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <iomanip>
#include <limits>
#include <sstream>

#include "lamina/common.hpp"
#include "lamina/file_access.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr int kMaxDims = 8;
constexpr int64_t kMaxValues = int64_t(1) << 40;  // 1 TiB: anything larger is a corrupt header
// Deflate expands at most 1032:1; a gzip file cannot inflate to more than this many bytes
// per byte on disk (plus its headers' slack).
constexpr int64_t kMaxDeflateRatio = 1032;

std::string hex32(uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return out.str();
}

// Owner of an open gzFile, opened through InputFile: a directory, FIFO or device is refused
// before zlib sees it (gzopen on a FIFO would wait for a writer).
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    // "train-images-idx3-ubyte" may be stored compressed as "train-images-idx3-ubyte.gz".
    const bool use_gz = access(path.c_str(), F_OK) != 0 && access((path + ".gz").c_str(), F_OK) == 0;
    if (use_gz) path_ = path + ".gz";
    InputFile file(path_, "IDX data file",
                   "For MNIST run scripts/fetch_mnist.sh (it writes data/mnist), or point the "
                   "prototxt's mnist_data_param images/labels at your own copy");
    size_ = file.size();
    const int fd = file.release();
    file_ = gzdopen(fd, "rb");
    if (!file_) {
      ::close(fd);
      fail("IDX data file '", path_, "': cannot read: out of memory");
    }
    gzbuffer(file_, 1 << 20);
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  const std::string& path() const { return path_; }
  // Bytes on disk (compressed for a gzip file), as fstat said at open.
  int64_t size() const { return size_; }
  // Whether the file is read as it is (not a gzip stream); exact once the header is read.
  bool plain() { return gzdirect(file_) == 1; }

  // Reads up to bytes into dst; returns how many were read (fewer only at the end).
  int64_t read(void* dst, int64_t bytes) {
    int64_t done = 0;
    while (done < bytes) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(bytes - done, 1 << 30));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        fail("IDX data file '", path_, "': read error: ", message ? message : "unknown",
             " (a damaged .gz file?)");
      }
      if (got == 0) break;
      done += got;
    }
    return done;
  }

 private:
  std::string path_;
  int64_t size_ = 0;
  gzFile file_ = nullptr;
};

// Reads and validates the magic number and dimensions; returns the number of values.
std::vector<int64_t> read_header(GzFile& file, const std::string& path) {
  unsigned char magic[4];
  const int64_t got = file.read(magic, 4);
  LAMINA_REQUIRE(got == 4, "IDX data file '", path, "' is truncated: expected 4 bytes of magic ",
                 "number, found ", got);
  const uint32_t value = (uint32_t(magic[0]) << 24) | (uint32_t(magic[1]) << 16) |
                         (uint32_t(magic[2]) << 8) | magic[3];
  const int num_dims = magic[3];
  LAMINA_REQUIRE(magic[0] == 0 && magic[1] == 0 && num_dims >= 1 && num_dims <= kMaxDims,
                 "IDX data file '", path, "' has bad magic number ", hex32(value), ", expected ",
                 "0x00000801 (labels) or 0x00000803 (images); is it an IDX file?");
  LAMINA_REQUIRE(magic[2] == kUnsignedByte, "IDX data file '", path, "' has unsupported type 0x",
                 std::hex, int(magic[2]), std::dec, " (magic ", hex32(value),
                 "); only unsigned bytes (0x08) are supported");

  std::vector<unsigned char> raw(4 * num_dims);
  const int64_t have = file.read(raw.data(), int64_t(raw.size()));
  LAMINA_REQUIRE(have == int64_t(raw.size()), "IDX data file '", path, "' is truncated: expected ",
                 raw.size(), " bytes of dimensions, found ", have);
  std::vector<int64_t> dims(num_dims);
  int64_t count = 1;
  for (int i = 0; i < num_dims; ++i) {
    const unsigned char* b = &raw[4 * i];
    dims[i] = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    LAMINA_REQUIRE(dims[i] > 0, "IDX data file '", path, "' has dimension ", i, " equal to 0; ",
                   "the header is damaged");
    LAMINA_REQUIRE(count <= kMaxValues / dims[i], "IDX data file '", path, "' has absurd ",
                   "dimensions ", shape_string(dims), " (more than 2^40 values); the header ",
                   "is damaged");
    count *= dims[i];
  }
  return dims;
}

}  // namespace

std::vector<int64_t> read_idx_dims(const std::string& path) {
  GzFile file(path);
  return read_header(file, path);
}

IdxArray read_idx(const std::string& path) {
  GzFile file(path);
  IdxArray array;
  array.dims = read_header(file, path);
  int64_t expected = 1;
  for (int64_t d : array.dims) expected *= d;
  auto truncated = [&](int64_t available) {
    fail("IDX data file '", file.path(), "' is truncated: dimensions ", shape_string(array.dims),
         " need ", expected, " bytes of values, only ", available, " available (an "
         "interrupted download? run scripts/fetch_mnist.sh again)");
  };
  // Refuse a header that announces more values than the file can hold before reading any;
  // then no more than the file's size (stat'd at open) is read, even if it grows meanwhile.
  const int64_t header = 4 + 4 * int64_t(array.dims.size());
  if (file.plain()) {
    const int64_t available = std::max<int64_t>(file.size() - header, 0);
    if (expected > available) truncated(available);
  } else {
    LAMINA_REQUIRE(expected / kMaxDeflateRatio <= file.size(), "IDX data file '", file.path(),
                   "': dimensions ", shape_string(array.dims), " need ", expected, " bytes of ",
                   "values, more than a gzip file of ", file.size(), " bytes can inflate to ",
                   "(at most ", kMaxDeflateRatio, " bytes per byte); the file is damaged");
  }
  require_host_memory(uint64_t(expected), "the values of IDX data file '" + file.path() + "' (" +
                                              shape_string(array.dims) + ")");
  // Grow as data arrives, doubling from 64 KiB up to 64 MiB steps, so a lying header cannot
  // make a 12-byte file allocate a terabyte, or even 64 MiB, up front.
  constexpr int64_t kFirstChunk = int64_t(64) << 10;
  constexpr int64_t kMaxChunk = int64_t(64) << 20;
  int64_t have = 0;
  while (have < expected) {
    const int64_t want =
        std::min({expected - have, std::max(have, kFirstChunk), kMaxChunk});
    array.values.resize(size_t(have + want));
    const int64_t got = file.read(array.values.data() + have, want);
    have += got;
    if (got < want) break;
  }
  if (have != expected) truncated(have);  // a gzip stream that ends early, or a file that shrank
  return array;
}

}  // namespace lamina
