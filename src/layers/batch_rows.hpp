// The rows of a device-resident float table that each forward pass of a data layer takes,
// chosen on the device by a PassCounter, so every pass is the same launches with the same
// arguments (a captured step replays them) and nothing is copied from the host per pass.
//
// gather_batch (backend.hpp) picks the pass's samples by a BatchOrder but gathers only uint8
// columns. So each of the S samples is stored once as its number in three base-256 digits
// (digits_, (S, 3) uint8); a pass gathers the batch's digits as floats (B, 3), a gemv with
// the place values (1, 256, 65536) turns them into the row numbers (B) as floats (exact:
// every partial sum is an integer below 2^24), and gather_rows (kTensorOps) copies each
// top's rows. Three launches, then one per top.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "lamina/backend.hpp"
#include "lamina/pass_counter_buffer.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

class BatchRows {
 public:
  // Row numbers are floats with 24 exact bits.
  static constexpr int64_t kMaxSamples = int64_t{1} << 24;

  // A table of `samples` rows read `batch` rows a pass, in order and wrapping around from
  // sample `first` (BatchOrder without shuffle); the counter restarts. where: the layer.
  void shape(Backend& backend, const std::string& where, int64_t samples, int64_t batch,
             int64_t first = 0) {
    LAMINA_REQUIRE(samples > 0 && samples <= kMaxSamples, where, "holds ", samples,
                   " samples; a device-resident table takes 1 to 2^24");
    stale_ = stale_ || recorded_;  // the arrays move
    backend_ = &backend;
    samples_ = samples;
    batch_ = batch;
    first_ = first;
    std::vector<uint8_t> digits(size_t(samples) * 3);
    for (int64_t s = 0; s < samples; ++s)
      for (int d = 0; d < 3; ++d) digits[size_t(s) * 3 + d] = uint8_t(s >> (8 * d));
    digits_ = Buffer(backend, digits.size());
    backend.copy_from_host(digits.size(), digits.data(), digits_.get());
    const std::array<float, 3> place = {1.0f, 256.0f, 65536.0f};
    place_ = Buffer(backend, sizeof(place));
    backend.copy_from_host(sizeof(place), place.data(), place_.get());
    digit_rows_ = Buffer(backend, sizeof(float) * size_t(batch) * 3);  // (B, 3)
    index_ = Buffer(backend, sizeof(float) * size_t(batch));           // (B)
    counter_ = PassCounterBuffer(backend);
  }
  bool shaped() const { return backend_ != nullptr; }
  int64_t samples() const { return samples_; }

  // This pass's row numbers into index(); advances the counter (device and host).
  void next() {
    backend_->gather_batch(order(), GatherTop{digits_.as<uint8_t>(), 3, 1.0f,
                                            digit_rows_.as<float>()}, GatherTop{});
    backend_->gemv(Transpose::kNo, batch_, 3, 1.0f, digit_rows_.as<float>(),
                   place_.as<float>(), 0.0f, index_.as<float>());
    counter_.advance();
  }
  // dst (B, cols) = the pass's rows of src (S, cols); after next().
  void gather(int64_t cols, const float* src, float* dst) const {
    backend_->gather_rows(batch_, cols, index_.as<float>(), samples_, src, dst);
  }

  // The passes since the counter restarted, as the host counts them.
  int64_t passes() const { return counter_.passes(); }
  // The sample the next pass starts at, as the host counts passes.
  int64_t position() const { return order().cursor(counter_.passes()); }
  // Pass 0's first sample: an argument of the operations, which recordings keep.
  int64_t first() const { return first_; }
  // Captured steps (Layer::prepare_replay): whether a recording of the layer's passes may be
  // replayed. It may not once shape() moved the arrays after one was made, or after
  // forget_recordings() (an argument a recording keeps changed).
  bool prepare_replay() {
    recorded_ = true;
    return !stale_;
  }
  void forget_recordings() { stale_ = stale_ || recorded_; }
  // The next pass starts at sample first; the counter restarts.
  void restart(int64_t first) {
    first_ = first;
    counter_.restart();
  }
  void replayed(int64_t passes) { counter_.advance(passes); }

 private:
  BatchOrder order() const {
    BatchOrder o;
    o.counter = counter_.device();
    o.first = first_;
    o.batch = batch_;
    o.samples = samples_;
    return o;
  }

  Backend* backend_ = nullptr;
  bool recorded_ = false;  // a replay was prepared
  bool stale_ = false;     // the arrays or first_ changed since
  int64_t samples_ = 0, batch_ = 0, first_ = 0;
  Buffer digits_;      // (S, 3) uint8: each sample's number, least significant digit first
  Buffer place_;       // (3) float: 1, 256, 65536
  Buffer digit_rows_;  // (B, 3) float: the pass's digits
  Buffer index_;       // (B) float: the pass's row numbers
  PassCounterBuffer counter_;
};

}  // namespace lamina
