// A layer's PassCounter (pass_counter.hpp) in backend memory, with the host's copy of its
// count. The layer's operations advance the device counter; the layer advances the host copy
// as passes run (forward) or are replayed (Layer::replayed), so state() reads the position
// without a copy from the device.
#pragma once

#include <cstdint>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

class PassCounterBuffer {
 public:
  PassCounterBuffer() = default;
  // A zeroed counter in backend's memory.
  explicit PassCounterBuffer(Backend& backend)
      : backend_(&backend), buffer_(backend, sizeof(PassCounter)) {
    restart();
  }

  PassCounter* device() const { return buffer_.as<PassCounter>(); }
  int64_t passes() const { return passes_; }  // as the host knows it
  void advance(int64_t passes = 1) { passes_ += passes; }
  // Both counts back to zero (the device's in stream order).
  void restart() {
    passes_ = 0;
    backend_->zero(sizeof(PassCounter), buffer_.get());
  }

 private:
  Backend* backend_ = nullptr;
  Buffer buffer_;
  int64_t passes_ = 0;
};

}  // namespace lamina
