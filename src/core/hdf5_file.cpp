// Reading and writing HDF5 datasets as float (hdf5_file.hpp), on the HDF5 C API.
#include "core/hdf5_file.hpp"

#include <hdf5.h>

#include <type_traits>
#include <utility>

#include "lamina/file_access.hpp"
#include "lamina/host_memory.hpp"

namespace lamina {
namespace {

static_assert(std::is_same_v<hid_t, int64_t>, "Hdf5Writer keeps hid_t as an int64_t");

// Silences HDF5's printing of its error stack for the scope (its failures become Errors).
class QuietErrors {
 public:
  QuietErrors() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietErrors() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietErrors(const QuietErrors&) = delete;
  QuietErrors& operator=(const QuietErrors&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

// An HDF5 object's handle, closed by close_ (H5Fclose, H5Dclose, ...) when it goes.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// Whether a link of that name exists in the file (false for a malformed path too).
bool has_dataset(hid_t file, const std::string& name) {
  return !name.empty() && H5Lexists(file, name.c_str(), H5P_DEFAULT) > 0;
}

const char* class_name(H5T_class_t c) {
  switch (c) {
    case H5T_STRING: return "strings";
    case H5T_COMPOUND: return "compound records";
    case H5T_ENUM: return "enumeration values";
    case H5T_BITFIELD: return "bit fields";
    case H5T_OPAQUE: return "opaque values";
    case H5T_REFERENCE: return "references";
    case H5T_VLEN: return "variable-length sequences";
    case H5T_ARRAY: return "arrays";
    case H5T_TIME: return "times";
    default: return "a type that is not a number";
  }
}

Hdf5Array read_dataset(const std::string& context, const std::string& where, hid_t file,
                       const std::string& name) {
  LAMINA_REQUIRE(has_dataset(file, name), context, where, "has no dataset '", name,
                 "'; each top of HDF5Data reads the dataset of its name");
  Handle dataset(H5Dopen2(file, name.c_str(), H5P_DEFAULT), H5Dclose);
  LAMINA_REQUIRE(dataset.ok(), context, where, "'", name, "' is not a dataset");
  Handle type(H5Dget_type(dataset.get()), H5Tclose);
  const H5T_class_t type_class = type.ok() ? H5Tget_class(type.get()) : H5T_NO_CLASS;
  LAMINA_REQUIRE(type_class == H5T_FLOAT || type_class == H5T_INTEGER, context, where,
                 "dataset '", name, "' holds ", class_name(type_class),
                 "; HDF5Data reads floating-point or integer datasets");
  Handle space(H5Dget_space(dataset.get()), H5Sclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  LAMINA_REQUIRE(rank >= 1, context, where, "dataset '", name, "' has rank ", rank,
                 "; it needs at least one axis (its rows)");
  std::vector<hsize_t> dims(rank);
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  Hdf5Array array;
  uint64_t count = 1;
  for (hsize_t d : dims) {
    LAMINA_REQUIRE(d == 0 || count <= (uint64_t{1} << 40) / d, context, where, "dataset '",
                   name, "' is too large to read (more than 2^40 values)");
    count *= d;
    array.dims.push_back(int64_t(d));
  }
  require_host_memory(4 * count, context + where + "dataset '" + name + "' as floats");
  array.values.resize(size_t(count));
  if (array.values.empty()) return array;
  LAMINA_REQUIRE(H5Dread(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT,
                         array.values.data()) >= 0,
                 context, where, "reading dataset '", name, "' ", shape_string(array.dims),
                 " as float failed");
  return array;
}

}  // namespace

std::vector<Hdf5Array> read_hdf5(const std::string& context, const std::string& what,
                                 const std::string& path, const std::vector<std::string>& names) {
  std::string where;
  try {
    where = InputFile(path, what).prefix();  // missing, a directory, ...
  } catch (const Error& e) {
    fail(context, e.what());
  }
  QuietErrors quiet;
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  LAMINA_REQUIRE(file.ok(), context, where, "not an HDF5 file (H5Fopen failed)");
  std::vector<Hdf5Array> arrays;
  for (const std::string& name : names)
    arrays.push_back(read_dataset(context, where, file.get(), name));
  return arrays;
}

Hdf5Writer::Hdf5Writer(const std::string& context, const std::string& path)
    : context_(context), path_(path) {
  QuietErrors quiet;
  file_ = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  LAMINA_REQUIRE(file_ >= 0, context, "cannot create the HDF5 file ", quoted_path(path),
                 " (H5Fcreate failed: is its directory there and writable?)");
}

Hdf5Writer::~Hdf5Writer() { close(); }

Hdf5Writer::Hdf5Writer(Hdf5Writer&& other) noexcept
    : context_(std::move(other.context_)), path_(std::move(other.path_)),
      file_(std::exchange(other.file_, -1)) {}

Hdf5Writer& Hdf5Writer::operator=(Hdf5Writer&& other) noexcept {
  if (this != &other) {
    close();
    context_ = std::move(other.context_);
    path_ = std::move(other.path_);
    file_ = std::exchange(other.file_, -1);
  }
  return *this;
}

void Hdf5Writer::close() noexcept {
  if (file_ >= 0) H5Fclose(file_);
  file_ = -1;
}

void Hdf5Writer::write(const std::string& name, const Shape& dims, const float* values) {
  LAMINA_REQUIRE(file_ >= 0, context_, "the HDF5 file is not open");
  QuietErrors quiet;
  const std::string where = "HDF5 file " + quoted_path(path_) + ": dataset '" + name + "' ";
  if (has_dataset(file_, name)) {
    LAMINA_REQUIRE(H5Ldelete(file_, name.c_str(), H5P_DEFAULT) >= 0, context_, where,
                   "could not be replaced");
  }
  const std::vector<hsize_t> extent(dims.begin(), dims.end());
  Handle space(H5Screate_simple(int(extent.size()), extent.data(), nullptr), H5Sclose);
  Handle dataset(H5Dcreate2(file_, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT,
                            H5P_DEFAULT, H5P_DEFAULT),
                 H5Dclose);
  LAMINA_REQUIRE(space.ok() && dataset.ok(), context_, where, shape_string(dims),
                 " could not be created");
  LAMINA_REQUIRE(shape_count(dims) == 0 || H5Dwrite(dataset.get(), H5T_NATIVE_FLOAT, H5S_ALL,
                                                    H5S_ALL, H5P_DEFAULT, values) >= 0,
                 context_, where, "could not be written (is the disk full?)");
  H5Fflush(file_, H5F_SCOPE_LOCAL);
}

}  // namespace lamina
