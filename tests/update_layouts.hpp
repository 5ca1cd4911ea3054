// Parameter layouts for tests of the fused update: many parameters of varied sizes, as a
// ResNet has, laid out on kArenaBlock boundaries.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/tensor.hpp"

namespace lamina::testing {

// count segments: every 17th empty, every 5th up to large_max floats, the others up to
// small_max (so under one block, one, or several), with lr_mult and decay_mult varying, and
// two blocks of padding only after every 7th. The arena's size is the end of the last block.
inline std::vector<ParamSegment> varied_segments(int count, int64_t small_max, int64_t large_max,
                                                 uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ParamSegment> segments;
  int64_t offset = 0;
  for (int s = 0; s < count; ++s) {
    const int64_t max = s % 5 == 0 ? large_max : small_max;
    const int64_t size = s % 17 == 0 ? 0 : int64_t(rng() % uint64_t(max)) + 1;
    segments.push_back({offset, size, 0.5f + float(s % 4), float(s % 3)});
    offset += (size + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
    if (s % 7 == 0) offset += 2 * kArenaBlock;
  }
  return segments;
}

// The values that change from one update to the next, as a test gives them, and the
// StepState they make (in host memory; upload it for a device backend).
struct TestStep {
  float lr = 0;
  float grad_scale = 1;
  int64_t step = 1;  // 1-based update count
};

inline StepState step_state(const UpdateArgs& a, const TestStep& t) {
  StepState s;
  s.iter = t.step - 1;
  s.lr = t.lr;
  s.grad_scale = t.grad_scale;
  const bool adam = a.rule == UpdateRule::kAdam || a.rule == UpdateRule::kAdamW;
  s.correction = adam ? adam_correction(a.momentum, a.momentum2, t.step) : 0.0f;
  return s;
}

// A StepState in a backend's memory, set from the host before each update a test makes.
class DeviceStep {
 public:
  explicit DeviceStep(Backend& be) : be_(be), buffer_(be, sizeof(StepState)) {}
  const StepState* set(const UpdateArgs& a, const TestStep& t) {
    const StepState s = step_state(a, t);
    be_.copy_from_host(sizeof(StepState), &s, buffer_.get());
    return get();
  }
  StepState* get() { return buffer_.as<StepState>(); }

 private:
  Backend& be_;
  Buffer buffer_;
};

// The arena segments were laid out in: the end of the last one's blocks, padding included.
inline int64_t arena_size(const std::vector<ParamSegment>& segments) {
  const ParamSegment& last = segments.back();
  return (last.offset + last.count + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
}

}  // namespace lamina::testing
