#include "lamina/tensor.hpp"

#include <glog/logging.h>

#include <utility>

#include "lamina/host_memory.hpp"
#include "lamina/rounding.hpp"

namespace lamina {

// ---- Buffer ----

Buffer::Buffer(Backend& backend, size_t bytes) : backend_(&backend), bytes_(bytes) {
  if (backend.is_host()) require_host_memory(bytes, "an array");
  if (bytes > 0) ptr_ = backend.allocate(bytes);
}

Buffer::~Buffer() {
  if (ptr_) backend_->deallocate(ptr_);
}

Buffer::Buffer(Buffer&& other) noexcept
    : backend_(std::exchange(other.backend_, nullptr)),
      ptr_(std::exchange(other.ptr_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    if (ptr_) backend_->deallocate(ptr_);
    backend_ = std::exchange(other.backend_, nullptr);
    ptr_ = std::exchange(other.ptr_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

// ---- Memory ----

Memory::Memory(Backend& backend, int64_t count, DType dtype)
    : backend_(&backend), count_(count), dtype_(dtype),
      owned_(backend, dtype_size(dtype) * count) {
  device_ = owned_.get();
  if (count > 0) backend.zero(bytes(), device_);
  residency_ = backend.is_host() ? Residency::kBoth : Residency::kDevice;
}

Memory::Memory(Backend& backend, void* ptr, int64_t count, DType dtype)
    : backend_(&backend), count_(count), dtype_(dtype), device_(ptr), is_view_(true) {
  residency_ = backend.is_host() ? Residency::kBoth : Residency::kDevice;
}

namespace {
// An array's storage must be what its accessor reads: a layer reading a 16-bit tensor as
// floats (or the other way round) is a bug in the layer.
void check_dtype(DType have, bool half) {
  CHECK(is_half(have) == half) << "an array stored in " << dtype_name(have) << " read as "
                               << (half ? "16-bit values" : "FP32 values");
}
}  // namespace

const float* Memory::get() const {
  check_dtype(dtype_, false);
  CHECK(residency_ != Residency::kHost)
      << "the host copy was modified; call to_device() before using it on " << backend_->name();
  return static_cast<const float*>(device_);
}

float* Memory::mutable_get() {
  const float* p = get();
  if (!backend_->is_host()) residency_ = Residency::kDevice;
  return const_cast<float*>(p);
}

const uint16_t* Memory::get_half() const {
  check_dtype(dtype_, true);
  return static_cast<const uint16_t*>(device_);  // 16-bit arrays have no host mirror
}

uint16_t* Memory::mutable_get_half() { return const_cast<uint16_t*>(get_half()); }

const float* Memory::host() const {
  check_dtype(dtype_, false);
  if (backend_->is_host()) return static_cast<const float*>(device_);
  CHECK(residency_ != Residency::kDevice) << "the host copy is stale; call to_host() first";
  return host_.data();
}

float* Memory::mutable_host() {
  const float* p = host();
  if (!backend_->is_host()) residency_ = Residency::kHost;
  return const_cast<float*>(p);
}

std::vector<float> Memory::download(int64_t n) {
  CHECK_LE(n, count_);
  if (!is_half(dtype_)) {
    to_host();
    const float* p = host();
    return std::vector<float>(p, p + n);
  }
  std::vector<uint16_t> bits(n);
  backend_->copy_to_host(2 * size_t(n), device_, bits.data());
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = dtype_ == DType::kFP16 ? fp16_to_float(bits[i]) : bf16_to_float(bits[i]);
  return values;
}

void Memory::upload(const std::vector<float>& values, int64_t n, const std::string& name) {
  LAMINA_REQUIRE(static_cast<int64_t>(values.size()) == n, "tensor '", name, "' holds ", n,
                 " values, got ", values.size());
  CHECK_LE(n, count_);
  if (!is_half(dtype_)) {
    backend_->copy_from_host(sizeof(float) * n, values.data(), mutable_get());
    return;
  }
  std::vector<uint16_t> bits(n);
  for (int64_t i = 0; i < n; ++i)
    bits[i] = dtype_ == DType::kFP16 ? float_to_fp16(values[i]) : float_to_bf16(values[i]);
  backend_->copy_from_host(2 * size_t(n), bits.data(), mutable_get_half());
}

void Memory::to_host() {
  if (backend_->is_host() || residency_ == Residency::kHost) return;
  // A view (a parameter in the arena) is also written through the arena's own pointer (the
  // solver's update), so its mirror is never trusted: every to_host() reads it again.
  if (residency_ == Residency::kBoth && !is_view_) return;
  check_dtype(dtype_, false);
  if (host_.size() < size_t(count_)) {
    require_host_memory(sizeof(float) * count_, "the host copy of an array of " +
                        std::to_string(count_) + " values");
  }
  host_.resize(count_);
  backend_->copy_to_host(sizeof(float) * count_, device_, host_.data());
  residency_ = Residency::kBoth;
}

void Memory::mark_device_written() {
  if (!backend_->is_host()) residency_ = Residency::kDevice;
}

void Memory::to_device() {
  if (backend_->is_host() || residency_ != Residency::kHost) return;
  backend_->copy_from_host(sizeof(float) * count_, host_.data(), device_);
  residency_ = Residency::kBoth;
}

// ---- Tensor ----

Tensor::Tensor(Backend& backend, Shape shape, std::string name, DType dtype)
    : name_(std::move(name)), dtype_(dtype), backend_(&backend) {
  reshape(shape);
}

Tensor::Tensor(Shape shape, std::string name)
    : name_(std::move(name)), shape_(std::move(shape)), count_(shape_count(shape_)) {}

int Tensor::canonical_axis(int axis) const {
  const int n = num_axes();
  LAMINA_REQUIRE(axis >= -n && axis < n, "axis ", axis, " is out of range for tensor '", name_,
                 "' of shape ", shape_string());
  return axis < 0 ? axis + n : axis;
}

int64_t Tensor::dim(int axis) const { return shape_[canonical_axis(axis)]; }

int64_t Tensor::count(int start_axis, int end_axis) const {
  CHECK(0 <= start_axis && start_axis <= end_axis && end_axis <= num_axes());
  int64_t c = 1;
  for (int i = start_axis; i < end_axis; ++i) c *= shape_[i];
  return c;
}

void Tensor::reshape(const Shape& shape) {
  const int64_t count = shape_count(shape);
  CHECK(backend_) << "tensor '" << name_ << "' has no backend";
  const bool grow = !data_ || data_->count() < count;
  // Data and diff are zero-filled, so both are touched at once: check them together, before
  // anything changes.
  if (grow && backend_->is_host()) {
    require_host_memory(2 * dtype_size(dtype()) * uint64_t(count),
                        "tensor '" + name_ + "' " + lamina::shape_string(shape) +
                            " with its gradient");
  }
  shape_ = shape;
  count_ = count;
  if (grow) {
    const DType t = dtype();
    data_ = std::make_shared<Memory>(*backend_, count, t);
    diff_ = std::make_shared<Memory>(*backend_, count, t);
  }
}

void Tensor::share_data(const Tensor& other) {
  CHECK_EQ(count_, other.count_) << "sharing data between " << name_ << " and " << other.name_;
  data_ = other.data_;  // and so its storage type (dtype() reads the memory's)
}

void Tensor::share_diff(const Tensor& other) {
  CHECK_EQ(count_, other.count_) << "sharing diff between " << name_ << " and " << other.name_;
  CHECK(other.diff_->dtype() == dtype()) << "sharing the " << dtype_name(other.diff_->dtype())
                                         << " diff of " << other.name_ << " with " << name_
                                         << ", stored in " << dtype_name(dtype());
  diff_ = other.diff_;
}

const uint16_t* Tensor::half_copy() const {
  CHECK(half_copy_) << "parameter '" << name_ << "' has no 16-bit copy: the net binds one for "
                    << "the parameters of layers that run in BF16 or FP16";
  return half_copy_->get_half();
}

void Tensor::bind_half_copy(uint16_t* copy, Half format) {
  CHECK(backend_) << "bind parameter '" << name_ << "' before its 16-bit copy";
  half_copy_ = std::make_shared<Memory>(*backend_, copy, count_, dtype_of(format));
}

void Tensor::allocate(Backend& backend) {
  backend_ = &backend;
  data_.reset();
  reshape(Shape(shape_));
}

void Tensor::bind(Backend& backend, float* data, float* diff) {
  backend_ = &backend;
  data_ = std::make_shared<Memory>(backend, data, count_);
  diff_ = std::make_shared<Memory>(backend, diff, count_);
}

// A tensor's memory may hold more than count_ values (it shrank): transfer the first count_.
std::vector<float> Tensor::copy_data_to_host() const { return data_->download(count_); }
std::vector<float> Tensor::copy_diff_to_host() const { return diff_->download(count_); }
void Tensor::copy_data_from_host(const std::vector<float>& v) { data_->upload(v, count_, name_); }
void Tensor::copy_diff_from_host(const std::vector<float>& v) { diff_->upload(v, count_, name_); }

}  // namespace lamina
