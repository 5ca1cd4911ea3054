// Reading IDX files, the format of MNIST and Fashion-MNIST, plain or gzip-compressed.
//
// An IDX file is a 4-byte magic number 0x0000TTDD (TT the element type, 0x08 for unsigned
// bytes; DD the number of dimensions), DD big-endian uint32 dimensions, then the values in
// row-major order. MNIST labels are 0x00000801 (N), images 0x00000803 (N, H, W).
// Every problem (a path that is not a readable regular file (file_access.hpp), bad magic,
// unsupported type, absurd dimensions, truncation) throws lamina::Error naming the file and
// what is wrong. A header announcing more values than the file can hold (plain: its size;
// gzip: 1032 times it, the most deflate expands) is refused before any value is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lamina {

struct IdxArray {
  std::vector<int64_t> dims;    // e.g. (N, H, W) for images, (N) for labels
  std::vector<uint8_t> values;  // product(dims) bytes, row-major
};

// Reads a whole IDX file of unsigned bytes; a ".gz" file (or any gzip stream) is inflated.
IdxArray read_idx(const std::string& path);

// Reads only the header: the dimensions, e.g. to count samples without loading them.
std::vector<int64_t> read_idx_dims(const std::string& path);

}  // namespace lamina
