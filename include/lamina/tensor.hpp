// Tensor: an N-d array with a gradient ("diff"), living in a backend's memory, stored in
// FP32 or, in a layer that runs in 16 bits, in BF16 or FP16 (its DType).
//
// Each of data and diff is a Memory: an array in the backend's memory, optionally mirrored
// on the host. Residency is explicit: which copy is current is tracked, and copies happen
// only in to_host()/to_device() (counted by the backend), never behind an accessor. On a
// host backend both sides are the same memory and always current.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"

namespace lamina {

// How a tensor's values are stored: FP32, or the 16 bits of a Half format (rounding.hpp).
enum class DType { kF32, kBF16, kFP16 };

inline bool is_half(DType t) { return t != DType::kF32; }
inline Half half_format(DType t) { return t == DType::kFP16 ? Half::kFP16 : Half::kBF16; }
inline DType dtype_of(Half h) { return h == Half::kFP16 ? DType::kFP16 : DType::kBF16; }
inline size_t dtype_size(DType t) { return is_half(t) ? 2 : 4; }
inline const char* dtype_name(DType t) {
  return t == DType::kF32 ? "FP32" : (t == DType::kBF16 ? "BF16" : "FP16");
}

// Move-only owner of n bytes of a backend's memory.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& backend, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  // At least bytes on backend: reallocates only when it holds fewer (the values are then
  // undefined), so a layer set up again for smaller shapes (Layer::reshape) keeps its arrays.
  void reserve(Backend& backend, size_t bytes) {
    if (bytes_ < bytes || backend_ != &backend) *this = Buffer(backend, bytes);
  }

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  Backend* backend_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

class Memory {
 public:
  enum class Residency { kDevice, kHost, kBoth };

  // Owns count values of backend memory stored as dtype (zero-filled).
  Memory(Backend& backend, int64_t count, DType dtype = DType::kF32);
  // A view of count values at ptr in backend memory (a parameter in the arena, or its
  // 16-bit copy); its host mirror is never trusted.
  Memory(Backend& backend, void* ptr, int64_t count, DType dtype = DType::kF32);

  int64_t count() const { return count_; }
  DType dtype() const { return dtype_; }
  size_t bytes() const { return dtype_size(dtype_) * size_t(count_); }
  Backend& backend() const { return *backend_; }
  Residency residency() const { return residency_; }

  // Backend memory of an FP32 array. The device copy must be current (else: call
  // to_device()).
  const float* get() const;
  float* mutable_get();  // marks the host mirror stale
  // The same, of a 16-bit array (BF16 or FP16 bits).
  const uint16_t* get_half() const;
  uint16_t* mutable_get_half();
  // The host mirror of an FP32 array. It must be current (else: call to_host()).
  const float* host() const;
  float* mutable_host();  // marks the device copy stale
  // The first n values as floats, whatever the storage (16-bit values exactly); waits for
  // the device.
  std::vector<float> download(int64_t n);
  // Stores the first n values (values.size() must be n; name is the tensor's, for the
  // error), rounded to the storage (to nearest even) when it is 16-bit.
  void upload(const std::vector<float>& values, int64_t n, const std::string& name);

  void to_host();    // copy device -> host if the host mirror is stale
  void to_device();  // copy host -> device if the device copy is stale
  // The device copy was written behind the accessors (a replayed CUDA graph): the host
  // mirror is stale.
  void mark_device_written();

 private:
  Backend* backend_;
  int64_t count_;
  DType dtype_;
  Buffer owned_;          // empty for views
  void* device_;          // backend memory (owned_ or a view)
  std::vector<float> host_;  // mirror of an FP32 array; unused on host backends
  Residency residency_ = Residency::kBoth;
  bool is_view_ = false;
};

class Tensor {
 public:
  Tensor(Backend& backend, Shape shape, std::string name = {}, DType dtype = DType::kF32);
  // A tensor with a shape but no memory yet (parameters before the net binds the arena).
  Tensor(Shape shape, std::string name);

  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;

  const std::string& name() const { return name_; }
  const Shape& shape() const { return shape_; }
  int num_axes() const { return static_cast<int>(shape_.size()); }
  int64_t count() const { return count_; }
  int64_t count(int start_axis, int end_axis) const;  // product of dims [start, end)
  int64_t dim(int axis) const;                          // negative counts from the end
  int canonical_axis(int axis) const;                   // throws when out of range
  std::string shape_string() const { return lamina::shape_string(shape_); }

  // Changes the shape. Reallocates when the count grows; keeps the memory otherwise.
  void reshape(const Shape& shape);

  bool has_memory() const { return data_ != nullptr; }
  // How data and diff are stored; data() and diff() are for FP32 tensors, half_data() and
  // half_diff() for 16-bit ones (each checks).
  DType dtype() const { return data_ ? data_->dtype() : dtype_; }
  const float* data() const { return data_->get(); }
  float* mutable_data() { return data_->mutable_get(); }
  const float* diff() const { return diff_->get(); }
  float* mutable_diff() { return diff_->mutable_get(); }
  const uint16_t* half_data() const { return data_->get_half(); }
  uint16_t* mutable_half_data() { return data_->mutable_get_half(); }
  const uint16_t* half_diff() const { return diff_->get_half(); }
  uint16_t* mutable_half_diff() { return diff_->mutable_get_half(); }
  // A parameter's 16-bit copy of its FP32 values, which layers running in 16 bits read
  // (bound by the net; ParamArena::refresh_half_copy says when it is written).
  const uint16_t* half_copy() const;
  Memory& data_memory() { return *data_; }
  Memory& diff_memory() { return *diff_; }
  const Memory& data_memory() const { return *data_; }  // the same object for shared data

  // Aliasing: this tensor uses other's memory (Flatten, Reshape, Split forward), and so its
  // storage type.
  void share_data(const Tensor& other);
  void share_diff(const Tensor& other);
  // Gives a tensor created without memory its own (zeroed) memory on backend.
  void allocate(Backend& backend);
  // Parameters: data and diff become views into the net's arenas.
  void bind(Backend& backend, float* data, float* diff);
  // Parameters of a layer running in 16 bits: the view of their 16-bit copy.
  void bind_half_copy(uint16_t* copy, Half format);

  // Explicit whole-array transfers, for tests, tools and data feeding: floats whatever the
  // storage (16-bit values read exactly, written rounded to nearest even).
  std::vector<float> copy_data_to_host() const;
  std::vector<float> copy_diff_to_host() const;
  void copy_data_from_host(const std::vector<float>& values);
  void copy_diff_from_host(const std::vector<float>& values);

 private:
  std::string name_;
  Shape shape_;
  int64_t count_ = 0;
  DType dtype_ = DType::kF32;  // until memory exists
  Backend* backend_ = nullptr;
  std::shared_ptr<Memory> data_;
  std::shared_ptr<Memory> diff_;
  std::shared_ptr<Memory> half_copy_;  // parameters of 16-bit layers
};

using Tensors = std::vector<Tensor*>;

}  // namespace lamina
