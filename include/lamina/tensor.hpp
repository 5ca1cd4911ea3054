// Tensor: an N-d float32 array with a gradient ("diff"), living in a backend's memory.
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

  // Owns count floats of backend memory (zero-filled).
  Memory(Backend& backend, int64_t count);
  // A view of count floats at ptr in backend memory (a parameter in the arena).
  Memory(Backend& backend, float* ptr, int64_t count);  // its host mirror is never trusted

  int64_t count() const { return count_; }
  Backend& backend() const { return *backend_; }
  Residency residency() const { return residency_; }

  // Backend memory. The device copy must be current (else: call to_device()).
  const float* get() const;
  float* mutable_get();  // marks the host mirror stale
  // The host mirror. It must be current (else: call to_host()).
  const float* host() const;
  float* mutable_host();  // marks the device copy stale

  void to_host();    // copy device -> host if the host mirror is stale
  void to_device();  // copy host -> device if the device copy is stale
  // The device copy was written behind the accessors (a replayed CUDA graph): the host
  // mirror is stale.
  void mark_device_written();

 private:
  Backend* backend_;
  int64_t count_;
  Buffer owned_;          // empty for views
  float* device_;         // backend memory (owned_ or a view)
  std::vector<float> host_;  // mirror; unused on host backends
  Residency residency_ = Residency::kBoth;
  bool is_view_ = false;
};

class Tensor {
 public:
  Tensor(Backend& backend, Shape shape, std::string name = {});
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
  const float* data() const { return data_->get(); }
  float* mutable_data() { return data_->mutable_get(); }
  const float* diff() const { return diff_->get(); }
  float* mutable_diff() { return diff_->mutable_get(); }
  Memory& data_memory() { return *data_; }
  Memory& diff_memory() { return *diff_; }
  const Memory& data_memory() const { return *data_; }  // the same object for shared data

  // Aliasing: this tensor uses other's memory (Flatten, Reshape, Split forward).
  void share_data(const Tensor& other);
  void share_diff(const Tensor& other);
  // Gives a tensor created without memory its own (zeroed) memory on backend.
  void allocate(Backend& backend);
  // Parameters: data and diff become views into the net's arenas.
  void bind(Backend& backend, float* data, float* diff);

  // Explicit whole-array transfers, for tests, tools and data feeding.
  std::vector<float> copy_data_to_host() const;
  std::vector<float> copy_diff_to_host() const;
  void copy_data_from_host(const std::vector<float>& values);
  void copy_diff_from_host(const std::vector<float>& values);

 private:
  std::string name_;
  Shape shape_;
  int64_t count_ = 0;
  Backend* backend_ = nullptr;
  std::shared_ptr<Memory> data_;
  std::shared_ptr<Memory> diff_;
};

using Tensors = std::vector<Tensor*>;

}  // namespace lamina
