// Dropout (inverted): in TRAIN, y = x * mask with mask = 1/(1-ratio) for kept elements and 0
// for dropped ones, so TEST is the identity.
//
// The mask comes from the layer's draws (pass_random.hpp: the counter-based generator keyed
// by the layer's seed, at an offset that advances by the element count every forward pass):
// each iteration draws new numbers, and the same seed replays the same masks on every
// backend. The pass count is a PassCounter in backend memory that dropout_forward reads and
// advances, so every pass is the same launch (a captured step replays it). Set up again for
// a new shape (behind a Filter), the draws go on after those already made. Works in place.
// State (snapshots): the seed and the offset, so a resumed run draws the masks an
// uninterrupted one would. Data parallel (set_worker): worker r > 0 keys the generator by a
// hash of the seed and r, so workers draw independent masks (a job of N workers does not
// draw the masks one worker with N times the batch would); the state keeps the job's seed.
// In a 16-bit precision x, y and their gradients are 16-bit (y = round(x * mask),
// dx = round(dy * mask)); the mask stays FP32.
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "pass_random.hpp"

namespace lamina {
namespace {

class DropoutLayer : public DrawingLayer {
 public:
  using DrawingLayer::DrawingLayer;
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
    if (phase_ != TRAIN) return;
    const int64_t n = bottom[0]->count();
    mask_.reserve(backend_, sizeof(float) * n);
    random_.shape(backend_, n, 1);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const int64_t n = bottom[0]->count();
    if (phase_ == TRAIN) {
      const uint64_t seed = random_.seed(), offset = random_.offset();
      if (is_half(storage_)) {
        backend_.dropout_forward(half_format(storage_), n, ratio_, seed, offset,
                                 random_.counter(0), bottom[0]->half_data(), mask(),
                                 top[0]->mutable_half_data());
      } else {
        backend_.dropout_forward(n, ratio_, seed, offset, random_.counter(0), bottom[0]->data(),
                                 mask(), top[0]->mutable_data());
      }
      random_.advance();
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
      backend_.mul(half_format(storage_), n, top[0]->half_diff(), mask(),
                   bottom[0]->mutable_half_diff());
    } else if (phase_ == TRAIN) {
      backend_.mul(n, top[0]->diff(), mask(), bottom[0]->mutable_diff());
    } else if (top[0] != bottom[0]) {
      copy_values(n, is_half(storage_) ? static_cast<const void*>(top[0]->half_diff())
                                       : top[0]->diff(),
                  is_half(storage_) ? static_cast<void*>(bottom[0]->mutable_half_diff())
                                    : bottom[0]->mutable_diff());
    }
  }

 private:
  // n values stored as the bottom is.
  void copy_values(int64_t n, const void* src, void* dst) {
    backend_.copy(dtype_size(storage_) * n, src, dst);
  }

  float* mask() const { return mask_.as<float>(); }

  float ratio_ = 0.5f;
  DType storage_ = DType::kF32;  // of x, y and their gradients
  Buffer mask_;                  // TRAIN only: the bottom's count of FP32 values
};

}  // namespace

void register_dropout_layer() { register_layer<DropoutLayer>("Dropout"); }

}  // namespace lamina
