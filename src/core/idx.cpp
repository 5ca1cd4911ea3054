// IDX reading through zlib: gzopen/gzread read gzip and uncompressed files alike.
#include "lamina/idx.hpp"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iomanip>
#include <limits>
#include <sstream>

#include "lamina/common.hpp"

namespace lamina {
namespace {

constexpr uint8_t kUnsignedByte = 0x08;
constexpr int kMaxDims = 8;
constexpr int64_t kMaxValues = int64_t(1) << 40;  // 1 TiB: anything larger is a corrupt header

std::string hex32(uint32_t v) {
  std::ostringstream out;
  out << "0x" << std::hex << std::setw(8) << std::setfill('0') << v;
  return out.str();
}

// Owner of an open gzFile.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    errno = 0;
    // "train-images-idx3-ubyte" may be stored compressed as "train-images-idx3-ubyte.gz".
    const bool use_gz = access(path.c_str(), F_OK) != 0 && access((path + ".gz").c_str(), F_OK) == 0;
    if (use_gz) path_ = path + ".gz";
    file_ = gzopen(path_.c_str(), "rb");
    if (!file_) {
      const std::string reason = errno ? std::strerror(errno) : "out of memory";
      fail("cannot open IDX file '", path, "': ", reason,
           ". For MNIST run scripts/fetch_mnist.sh (it writes data/mnist), or point the "
           "prototxt's mnist_data_param images/labels at your own copy");
    }
    gzbuffer(file_, 1 << 20);
  }
  ~GzFile() { gzclose(file_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads up to bytes into dst; returns how many were read (fewer only at the end).
  int64_t read(void* dst, int64_t bytes) {
    int64_t done = 0;
    while (done < bytes) {
      const unsigned chunk = static_cast<unsigned>(std::min<int64_t>(bytes - done, 1 << 30));
      const int got = gzread(file_, static_cast<char*>(dst) + done, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_, &code);
        fail("IDX file '", path_, "': read error: ", message ? message : "unknown",
             " (a damaged .gz file?)");
      }
      if (got == 0) break;
      done += got;
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

// Reads and validates the magic number and dimensions; returns the number of values.
std::vector<int64_t> read_header(GzFile& file, const std::string& path) {
  unsigned char magic[4];
  const int64_t got = file.read(magic, 4);
  LAMINA_REQUIRE(got == 4, "IDX file '", path, "' is truncated: expected 4 bytes of magic ",
                 "number, found ", got);
  const uint32_t value = (uint32_t(magic[0]) << 24) | (uint32_t(magic[1]) << 16) |
                         (uint32_t(magic[2]) << 8) | magic[3];
  const int num_dims = magic[3];
  LAMINA_REQUIRE(magic[0] == 0 && magic[1] == 0 && num_dims >= 1 && num_dims <= kMaxDims,
                 "IDX file '", path, "' has bad magic number ", hex32(value), ", expected ",
                 "0x00000801 (labels) or 0x00000803 (images); is it an IDX file?");
  LAMINA_REQUIRE(magic[2] == kUnsignedByte, "IDX file '", path, "' has unsupported type 0x",
                 std::hex, int(magic[2]), std::dec, " (magic ", hex32(value),
                 "); only unsigned bytes (0x08) are supported");

  std::vector<unsigned char> raw(4 * num_dims);
  const int64_t have = file.read(raw.data(), int64_t(raw.size()));
  LAMINA_REQUIRE(have == int64_t(raw.size()), "IDX file '", path, "' is truncated: expected ",
                 raw.size(), " bytes of dimensions, found ", have);
  std::vector<int64_t> dims(num_dims);
  int64_t count = 1;
  for (int i = 0; i < num_dims; ++i) {
    const unsigned char* b = &raw[4 * i];
    dims[i] = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | b[3];
    LAMINA_REQUIRE(dims[i] > 0, "IDX file '", path, "' has dimension ", i, " equal to 0; ",
                   "the header is damaged");
    LAMINA_REQUIRE(count <= kMaxValues / dims[i], "IDX file '", path, "' has absurd ",
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
  LAMINA_REQUIRE(have == expected, "IDX file '", path, "' is truncated: dimensions ",
                 shape_string(array.dims), " need ", expected, " bytes of values, only ",
                 have, " available (an interrupted download? run scripts/fetch_mnist.sh "
                 "again)");
  return array;
}

}  // namespace lamina
