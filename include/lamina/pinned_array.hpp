// An array of T in a backend's pinned host memory (Backend::allocate_pinned): host memory
// that Backend::upload copies from without the host waiting for the copy. Move-only owner.
#pragma once

#include <cstddef>
#include <utility>

#include "lamina/backend.hpp"

namespace lamina {

template <class T>
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(Backend& backend, size_t count)
      : backend_(&backend),
        data_(static_cast<T*>(backend.allocate_pinned(count * sizeof(T)))),
        count_(count) {}
  ~PinnedArray() {
    if (backend_ != nullptr) backend_->deallocate_pinned(data_);
  }
  PinnedArray(PinnedArray&& o) noexcept
      : backend_(std::exchange(o.backend_, nullptr)),
        data_(std::exchange(o.data_, nullptr)),
        count_(std::exchange(o.count_, 0)) {}
  PinnedArray& operator=(PinnedArray&& o) noexcept {
    PinnedArray gone(std::move(*this));
    backend_ = std::exchange(o.backend_, nullptr);
    data_ = std::exchange(o.data_, nullptr);
    count_ = std::exchange(o.count_, 0);
    return *this;
  }
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;

  T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }
  T& operator[](size_t i) const { return data_[i]; }

 private:
  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace lamina
