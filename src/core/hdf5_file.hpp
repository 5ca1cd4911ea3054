// HDF5 files as Caffe's data layers use them: named datasets of numbers, read as float
// (HDF5Data) or written as float (HDF5Output), through the HDF5 C library. Every failure is
// a lamina::Error that starts with the caller's context (a layer's where()) and names the
// file and the dataset; HDF5's own error printing is silenced while these functions run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/common.hpp"

namespace lamina {

// One dataset, row-major: dims (rows, ...) and their values.
struct Hdf5Array {
  Shape dims;
  std::vector<float> values;
};

// Reads the datasets `names` of the HDF5 file at path, converted to float by HDF5. A dataset
// must have rank >= 1 and hold floating-point or integer values (Caffe reads both); a
// missing or unreadable file, a missing dataset, rank 0 or another type (strings,
// compounds, ...) is an Error naming the file and the dataset. `what` says what the file is
// in messages ("HDF5 data file").
std::vector<Hdf5Array> read_hdf5(const std::string& context, const std::string& what,
                                 const std::string& path, const std::vector<std::string>& names);

// An HDF5 file created (an existing one truncated) for float datasets; closed by the
// destructor. Owns the file's handle: move-only.
class Hdf5Writer {
 public:
  Hdf5Writer() = default;
  Hdf5Writer(const std::string& context, const std::string& path);
  ~Hdf5Writer();
  Hdf5Writer(Hdf5Writer&& other) noexcept;
  Hdf5Writer& operator=(Hdf5Writer&& other) noexcept;
  Hdf5Writer(const Hdf5Writer&) = delete;
  Hdf5Writer& operator=(const Hdf5Writer&) = delete;

  // Writes dataset `name` (dims, shape_count(dims) values, stored as 32-bit floats),
  // replacing one of that name, and flushes the file so readers see it.
  void write(const std::string& name, const Shape& dims, const float* values);

 private:
  void close() noexcept;

  std::string context_, path_;
  int64_t file_ = -1;  // hid_t
};

}  // namespace lamina
