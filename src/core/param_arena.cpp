// The parameter arena: layout, allocation, optimizer state and host copies.
#include "lamina/param_arena.hpp"

#include <glog/logging.h>

#include <algorithm>
#include <set>

#include "lamina/host_memory.hpp"

namespace lamina {

ParamArena::ParamArena(Backend& backend, std::vector<ParamInfo> table)
    : backend_(backend), table_(std::move(table)) {
  std::set<std::string> names;
  for (ParamInfo& info : table_) {
    CHECK(names.insert(info.name).second) << "parameter '" << info.name << "' appears twice";
    info.count = shape_count(info.shape);
    const int64_t padded = (info.count + kArenaBlock - 1) / kArenaBlock * kArenaBlock;
    LAMINA_REQUIRE(count_ <= kMaxElements - padded, "layer '", info.layer, "': parameter '",
                   info.name, "' ", shape_string(info.shape), " makes the parameters exceed ",
                   kMaxElements, " values in all");
    info.offset = count_;
    count_ += padded;
  }
  // Before any of it is touched: weights and gradients (host memory on a host backend) and
  // the host array the net's fillers write, each count_ floats.
  if (!table_.empty()) {
    const ParamInfo& largest = *std::max_element(
        table_.begin(), table_.end(),
        [](const ParamInfo& a, const ParamInfo& b) { return a.count < b.count; });
    require_host_memory(uint64_t(backend_.is_host() ? 3 : 1) * sizeof(float) * count_,
                        "the parameter arena (" + std::to_string(count_) +
                            " values: weights, gradients and the fillers' host array; the "
                            "largest parameter is '" + largest.name + "' " +
                            shape_string(largest.shape) + " of layer '" + largest.layer + "')");
  }
  data_ = Buffer(backend_, sizeof(float) * count_);
  diff_ = Buffer(backend_, sizeof(float) * count_);
  if (count_ > 0) {
    backend_.zero(sizeof(float) * count_, data());
    zero_diff();
  }
  std::vector<ParamSegment> segments;
  for (const ParamInfo& info : table_)
    segments.push_back({info.offset, info.count, info.lr_mult, info.decay_mult});
  const std::vector<int32_t> blocks = block_segments(segments, count_);
  const size_t segment_bytes = sizeof(ParamSegment) * segments.size();
  segments_ = Buffer(backend_, segment_bytes + sizeof(int32_t) * blocks.size());
  if (!segments.empty()) {
    backend_.copy_from_host(segment_bytes, segments.data(), segments_.get());
    backend_.copy_from_host(sizeof(int32_t) * blocks.size(), blocks.data(),
                            static_cast<char*>(segments_.get()) + segment_bytes);
  }
  const ParamSegment* seg_table = segments_.as<ParamSegment>();
  layout_ = UpdateLayout{count_, seg_table, int(segments.size()),
                         reinterpret_cast<const int32_t*>(seg_table + segments.size())};
}

UpdateLayout ParamArena::layout_part(int64_t first, int64_t count) const {
  CHECK(first >= 0 && count >= 0 && first + count <= count_ && first % kArenaBlock == 0 &&
        count % kArenaBlock == 0)
      << "[" << first << ", +" << count << ") is not a part of the arena of " << count_
      << " floats on " << kArenaBlock << "-float boundaries";
  UpdateLayout part = layout_;
  part.first = first;
  part.n = count;
  return part;
}

const ParamInfo* ParamArena::find(const std::string& name) const {
  for (const ParamInfo& info : table_)
    if (info.name == name) return &info;
  return nullptr;
}

void ParamArena::zero_diff() {
  if (count_ > 0) backend_.zero(sizeof(float) * count_, diff());
  diff_zeroed_ = true;
}

void ParamArena::allocate_state(int arrays) {
  CHECK_GE(arrays, 0);
  if (arrays == num_state()) return;
  state_.clear();
  for (int k = 0; k < arrays; ++k) {
    state_.emplace_back(backend_, sizeof(float) * count_);
    if (count_ > 0) backend_.zero(sizeof(float) * count_, state_.back().get());
  }
}

float* ParamArena::state(int k) {
  CHECK(k >= 0 && k < num_state()) << "optimizer state " << k << " of " << num_state();
  return state_[k].as<float>();
}

const float* ParamArena::state(int k) const {
  CHECK(k >= 0 && k < num_state()) << "optimizer state " << k << " of " << num_state();
  return state_[k].as<float>();
}

uint16_t* ParamArena::half_copy(Half format) {
  if (half_copy_.get() == nullptr) {
    half_copy_ = Buffer(backend_, sizeof(uint16_t) * count_);
    half_format_ = format;
    if (count_ > 0) backend_.zero(sizeof(uint16_t) * count_, half_copy_.get());
  }
  LAMINA_REQUIRE(half_format_ == format, "the weights have a ",
                 dtype_name(dtype_of(half_format_)), " copy already; every layer of "
                 "a net, and of the nets that share its weights, that runs in 16 bits must use "
                 "the same format (BF16 or FP16)");
  return half_copy_.as<uint16_t>();
}

void ParamArena::refresh_half_copy() {
  if (half_copy_.get() != nullptr && count_ > 0)
    backend_.to_half(half_format_, count_, data(), half_copy_.as<uint16_t>());
}

std::vector<float> ParamArena::to_host(const float* array) const {
  std::vector<float> host(count_);
  if (count_ > 0) backend_.copy_to_host(sizeof(float) * count_, array, host.data());
  return host;
}

void ParamArena::from_host(const std::vector<float>& values, float* array) {
  if (array == diff()) gradients_written();
  CHECK_EQ(int64_t(values.size()), count_) << "arena copy of the wrong size";
  if (count_ > 0) backend_.copy_from_host(sizeof(float) * count_, values.data(), array);
}

}  // namespace lamina
