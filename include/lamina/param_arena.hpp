// ParamArena: every learnable parameter of one trained net in one buffer (llm.c's layout).
//
// Conventions:
//   - Four kinds of array share one layout of count() floats: the weights (data), their
//     gradients (diff), and the optimizer's state arrays (state(k): SGD's history, Adam's
//     first and second moments, ...). Parameter i occupies [offset, offset + count) of each;
//     every parameter starts on a kArenaBlock boundary, and the padding between parameters
//     is zero and stays zero.
//   - Gradients accumulate with += (shared parameters, iter_size); zero_diff() is the one
//     memset per iteration. Layers see parameters as Tensor views bound into data and diff.
//   - The table (name, shape, lr_mult, decay_mult, offset) is fixed once the arena exists:
//     snapshots, the fused update and a test net sharing the weights all read it.
//   - A net builds its arena; a test net shares its training net's arena through the
//     shared_ptr handle, so it evaluates exactly the weights being trained.
//   - The update's layout (the segment table and the block table, backend.hpp's
//     UpdateLayout) lives in backend memory, uploaded once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lamina/backend.hpp"
#include "lamina/common.hpp"
#include "lamina/tensor.hpp"

namespace lamina {

struct ParamInfo {
  std::string name;   // "<layer>/<role>" or the shared name from param { name }
  Shape shape;
  float lr_mult = 1;
  float decay_mult = 1;
  int64_t offset = 0;  // in floats from the start of the arena (set by the arena)
  int64_t count = 0;
  std::string layer;   // the first layer that declared it: messages, gradient buckets
};

class ParamArena {
 public:
  // Lays the table's parameters out (assigning offset and count) and allocates the weights
  // and the gradients, zeroed. Names must be unique. Throws when the total exceeds
  // kMaxElements.
  ParamArena(Backend& backend, std::vector<ParamInfo> table);
  ParamArena(const ParamArena&) = delete;
  ParamArena& operator=(const ParamArena&) = delete;

  const std::vector<ParamInfo>& table() const { return table_; }
  const ParamInfo* find(const std::string& name) const;  // nullptr when absent
  int64_t count() const { return count_; }                // floats, padding included

  float* data() { return data_.as<float>(); }
  const float* data() const { return data_.as<float>(); }
  float* diff() { return diff_.as<float>(); }
  const float* diff() const { return diff_.as<float>(); }
  void zero_diff();
  // Whether the gradients are zero from zero_diff() with no backward pass since (Net::backward
  // takes it: the pass's layers may then write their unshared gradients with =). Another
  // write into diff() between zero_diff() and the backward pass must call
  // gradients_written() (from_host into diff() does).
  bool take_diff_zeroed() { return std::exchange(diff_zeroed_, false); }
  void gradients_written() { diff_zeroed_ = false; }

  // Optimizer state: `arrays` arrays of count() floats each, zeroed. The solver asks for as
  // many as its rule keeps (SGD 1, Adam 2); asking again for the same number keeps them.
  void allocate_state(int arrays);
  int num_state() const { return int(state_.size()); }
  float* state(int k);
  const float* state(int k) const;

  // The 16-bit copy of the weights, in the arena's layout, that layers running in 16 bits
  // read (Tensor::half_copy). The first call allocates it (the net, when it is built); an
  // arena has one format, and asking for the other is an Error.
  uint16_t* half_copy(Half format);
  bool has_half_copy() const { return half_copy_.get() != nullptr; }
  Half half_format() const { return half_format_; }  // the copy's, once it has one
  // Rounds every weight into the 16-bit copy, one pass over the arena (no-op without one).
  // A net without a solver runs it before each forward pass; in training the update writes
  // the copy and the solver runs this where weights are written otherwise (a restore, a
  // broadcast, before each step() and test() call; docs/precision.md).
  void refresh_half_copy();

  // The arena as the fused update reads it: the segment table (offset, count, lr_mult,
  // decay_mult per parameter) and the block table, in backend memory.
  const UpdateLayout& layout() const { return layout_; }
  // The same for count floats from element first, both on kArenaBlock boundaries (a
  // gradient bucket): an update of that part of the arena only.
  UpdateLayout layout_part(int64_t first, int64_t count) const;

  // Whole-array copies between an array of this arena (data(), diff(), state(k)) and the
  // host: snapshots, diagnosis and tests. to_host waits for the device.
  std::vector<float> to_host(const float* array) const;
  void from_host(const std::vector<float>& values, float* array);

 private:
  Backend& backend_;
  std::vector<ParamInfo> table_;
  int64_t count_ = 0;
  Buffer data_;
  Buffer diff_;
  std::vector<Buffer> state_;
  Buffer half_copy_;  // empty until a layer runs in 16 bits
  Half half_format_ = Half::kBF16;
  Buffer segments_;  // the segment table, then the block table
  UpdateLayout layout_;
  bool diff_zeroed_ = false;  // take_diff_zeroed
};

}  // namespace lamina
