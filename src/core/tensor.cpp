#include "lamina/tensor.hpp"

#include <glog/logging.h>

#include <utility>

#include "lamina/host_memory.hpp"

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

Memory::Memory(Backend& backend, int64_t count)
    : backend_(&backend), count_(count), owned_(backend, sizeof(float) * count) {
  device_ = owned_.as<float>();
  if (count > 0) backend.zero(sizeof(float) * count, device_);
  residency_ = backend.is_host() ? Residency::kBoth : Residency::kDevice;
}

Memory::Memory(Backend& backend, float* ptr, int64_t count)
    : backend_(&backend), count_(count), device_(ptr), is_view_(true) {
  residency_ = backend.is_host() ? Residency::kBoth : Residency::kDevice;
}

const float* Memory::get() const {
  CHECK(residency_ != Residency::kHost)
      << "the host copy was modified; call to_device() before using it on " << backend_->name();
  return device_;
}

float* Memory::mutable_get() {
  CHECK(residency_ != Residency::kHost)
      << "the host copy was modified; call to_device() before using it on " << backend_->name();
  if (!backend_->is_host()) residency_ = Residency::kDevice;
  return device_;
}

const float* Memory::host() const {
  if (backend_->is_host()) return device_;
  CHECK(residency_ != Residency::kDevice) << "the host copy is stale; call to_host() first";
  return host_.data();
}

float* Memory::mutable_host() {
  if (backend_->is_host()) return device_;
  CHECK(residency_ != Residency::kDevice) << "the host copy is stale; call to_host() first";
  residency_ = Residency::kHost;
  return host_.data();
}

void Memory::to_host() {
  if (backend_->is_host() || residency_ == Residency::kHost) return;
  // A view (a parameter in the arena) is also written through the arena's own pointer (the
  // solver's update), so its mirror is never trusted: every to_host() reads it again.
  if (residency_ == Residency::kBoth && !is_view_) return;
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

Tensor::Tensor(Backend& backend, Shape shape, std::string name)
    : name_(std::move(name)), backend_(&backend) {
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
    require_host_memory(2 * sizeof(float) * uint64_t(count),
                        "tensor '" + name_ + "' " + lamina::shape_string(shape) +
                            " with its gradient");
  }
  shape_ = shape;
  count_ = count;
  if (grow) {
    data_ = std::make_shared<Memory>(*backend_, count);
    diff_ = std::make_shared<Memory>(*backend_, count);
  }
}

void Tensor::share_data(const Tensor& other) {
  CHECK_EQ(count_, other.count_) << "sharing data between " << name_ << " and " << other.name_;
  data_ = other.data_;
}

void Tensor::share_diff(const Tensor& other) {
  CHECK_EQ(count_, other.count_) << "sharing diff between " << name_ << " and " << other.name_;
  diff_ = other.diff_;
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

namespace {
std::vector<float> download(Memory& memory, int64_t count) {
  memory.to_host();
  const float* p = memory.host();
  return std::vector<float>(p, p + count);
}
void upload(Memory& memory, const std::vector<float>& values, int64_t count,
            const std::string& name) {
  LAMINA_REQUIRE(static_cast<int64_t>(values.size()) == count, "tensor '", name, "' holds ",
                 count, " values, got ", values.size());
  memory.backend().copy_from_host(sizeof(float) * count, values.data(), memory.mutable_get());
}
}  // namespace

std::vector<float> Tensor::copy_data_to_host() const { return download(*data_, count_); }
std::vector<float> Tensor::copy_diff_to_host() const { return download(*diff_, count_); }
void Tensor::copy_data_from_host(const std::vector<float>& v) { upload(*data_, v, count_, name_); }
void Tensor::copy_diff_from_host(const std::vector<float>& v) { upload(*diff_, v, count_, name_); }

}  // namespace lamina
