// Dropout (inverted): in TRAIN, y = x * mask with mask = 1/(1-ratio) for kept elements and 0
// for dropped ones, so TEST is the identity.
//
// The mask comes from the counter-based generator keyed by the layer's seed and an offset that
// advances by the element count every forward pass: each iteration draws new numbers, and the
// same seed replays the same masks on every backend. The pass count is a PassCounter in
// backend memory that dropout_forward reads and advances, so every pass is the same launch
// (a captured step replays it). Works in place. State (snapshots): the seed and the offset,
// so a resumed run draws the masks an uninterrupted one would. Data parallel (set_worker):
// worker r > 0 keys the generator by a hash of the seed and r, so workers draw independent
// masks (a job of N workers does not draw the masks one worker with N times the batch
// would); the state keeps the job's seed. In a 16-bit precision x, y and their gradients are
// 16-bit (y = round(x * mask), dx = round(dy * mask)); the mask stays FP32.
#include <memory>

#include "lamina/counter_rng.hpp"
#include "lamina/layer.hpp"
#include "lamina/pass_counter_buffer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class DropoutLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"dropout_param"}; }
  bool supports_in_place() const override { return true; }
  // Kept values are scaled by 1/(1-ratio) > 0; dropped ones become 0 but get no gradient.
  bool keeps_positive_in_place() const override { return true; }
  HalfSupport half_support() const override { return HalfSupport::kHalf; }

  void setup(const Tensors& bottom, const Tensors& top) override {
    ratio_ = param_.dropout_param().dropout_ratio();
    LAMINA_REQUIRE(ratio_ >= 0 && ratio_ < 1, where(), "dropout_param.dropout_ratio must be in "
                   "[0, 1), got ", ratio_);
    if (top[0] != bottom[0]) top[0]->reshape(bottom[0]->shape());
    storage_ = bottom[0]->dtype();
    if (phase_ == TRAIN) {
      mask_ = std::make_unique<Tensor>(backend_, bottom[0]->shape(), name() + "/mask");
      counter_ = PassCounterBuffer(backend_);
    }
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t n = bottom[0]->count();
    if (phase_ == TRAIN) {
      const uint64_t seed = rank_ == 0 ? seed_ : counter_hash(seed_, uint64_t(rank_));
      if (is_half(storage_)) {
        backend_.dropout_forward(half_format(storage_), n, ratio_, seed, offset_,
                                 counter_.device(), bottom[0]->half_data(),
                                 mask_->mutable_data(), top[0]->mutable_half_data());
      } else {
        backend_.dropout_forward(n, ratio_, seed, offset_, counter_.device(), bottom[0]->data(),
                                 mask_->mutable_data(), top[0]->mutable_data());
      }
      counter_.advance();
    } else if (top[0] != bottom[0]) {
      copy_values(n, is_half(storage_) ? static_cast<const void*>(bottom[0]->half_data())
                                       : bottom[0]->data(),
                  is_half(storage_) ? static_cast<void*>(top[0]->mutable_half_data())
                                    : top[0]->mutable_data());
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const int64_t n = top[0]->count();
    if (phase_ == TRAIN && is_half(storage_)) {
      backend_.mul(half_format(storage_), n, top[0]->half_diff(), mask_->data(),
                   bottom[0]->mutable_half_diff());
    } else if (phase_ == TRAIN) {
      backend_.mul(n, top[0]->diff(), mask_->data(), bottom[0]->mutable_diff());
    } else if (top[0] != bottom[0]) {
      copy_values(n, is_half(storage_) ? static_cast<const void*>(top[0]->half_diff())
                                       : top[0]->diff(),
                  is_half(storage_) ? static_cast<void*>(bottom[0]->mutable_half_diff())
                                    : bottom[0]->mutable_diff());
    }
  }

  // (seed, offset)
  std::vector<int64_t> state() const override {
    if (phase_ != TRAIN) return {};
    return {int64_t(seed_),
            int64_t(offset_ + uint64_t(counter_.passes()) * uint64_t(mask_->count()))};
  }

  void set_state(const std::vector<int64_t>& state) override {
    if (phase_ != TRAIN) return Layer::set_state(state);
    LAMINA_REQUIRE(state.size() == 2, where(), "the snapshot holds ", state.size(),
                   " state values; Dropout keeps 2 (seed, offset)");
    seed_ = uint64_t(state[0]);
    offset_ = uint64_t(state[1]);
    counter_.restart();
  }

  void replayed(int64_t passes) override { counter_.advance(passes); }

  bool set_worker(int rank, int /*workers*/) override {
    rank_ = rank;
    return true;
  }

 private:
  // n values stored as the bottom is.
  void copy_values(int64_t n, const void* src, void* dst) {
    backend_.copy(dtype_size(storage_) * n, src, dst);
  }

  float ratio_ = 0.5f;
  DType storage_ = DType::kF32;   // of x, y and their gradients
  int rank_ = 0;                  // set_worker
  uint64_t offset_ = 0;           // the random-number counter of pass 0's first element
  PassCounterBuffer counter_;     // TRAIN only: the passes since offset_
  std::unique_ptr<Tensor> mask_;  // TRAIN only; shaped like the bottom
};

}  // namespace

void register_dropout_layer() { register_layer<DropoutLayer>("Dropout"); }

}  // namespace lamina
