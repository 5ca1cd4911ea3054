// SPP: Caffe's spatial pyramid pooling, spp_param (pyramid_height, pool MAX or AVE).
//
//   bottom (N, C, H, W)  ->  top (N, C sum over levels of OH_l OW_l), or with pyramid_height
//   1 the one level's pooling (N, C, 1, 1), as Caffe gives it.
// Level l = 0 .. pyramid_height - 1 pools into bins = 2^l per axis, as Caffe's Pooling
// with kernel = ceil(H / bins), stride = kernel, pad = (kernel bins - H + 1) / 2 (and the
// same for W): Caffe's output size (rounded up, without a window starting in the padding)
// is then bins, and average windows divide by their size clipped to the padded bottom.
// Each level's (N, C, bins, bins) is flattened per sample and the levels are concatenated
// in order along axis 1. Caffe's Pooling refuses a pad as large as the kernel: a level
// with more bins than the bottom has room for is an error naming the largest height that
// fits. The bottom gradient (written with =) is the sum of the levels' pooling gradients,
// level 0 first. STOCHASTIC is refused, as Pooling refuses it. FP32.
#include <algorithm>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

// One pyramid level: its pooling, and where its values sit in a sample's top row.
struct Level {
  PoolGeometry g;
  int64_t cols;    // C OH OW values per sample
  int64_t offset;  // the first of them in the sample's row
};

class SppLayer : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"spp_param"}; }
  std::vector<Operation> operations() const override {
    return {Operation::kPooling, Operation::kRowCopy};
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const SPPParameter& p = param_.spp_param();
    const Tensor& x = *bottom[0];
    require_nchw(where(), x);
    LAMINA_REQUIRE(p.has_pyramid_height() && p.pyramid_height() >= 1, where(),
                   "spp_param.pyramid_height must be set to the number of pyramid levels "
                   "(1 or more)");
    LAMINA_REQUIRE(p.pool() != SPPParameter::STOCHASTIC, where(), "spp_param.pool: STOCHASTIC "
                   "is not supported (Pooling does not support it yet); use MAX or AVE");
    method_ = p.pool() == SPPParameter::MAX ? PoolMethod::kMax : PoolMethod::kAverage;
    levels_.clear();
    total_ = 0;
    int64_t largest = 0;  // pooled values of one level, for the shared level array
    for (int64_t l = 0; l < int64_t{p.pyramid_height()}; ++l) {
      levels_.push_back(make_level(x, l, p.pyramid_height()));
      Level& level = levels_.back();
      level.offset = total_;
      total_ += level.cols;
      largest = std::max(largest, level.cols);
    }
    const int64_t n = x.dim(0);
    if (levels_.size() == 1) {
      top[0]->reshape({n, x.dim(1), levels_[0].g.out_h, levels_[0].g.out_w});
    } else {
      top[0]->reshape({n, total_});
      pooled_ = Buffer(backend_, sizeof(float) * n * largest);
      dx_ = Buffer(backend_, sizeof(float) * x.count());
    }
    if (method_ == PoolMethod::kMax) mask_ = Buffer(backend_, sizeof(int32_t) * n * total_);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    if (levels_.size() == 1) {
      backend_.pool_forward(method_, levels_[0].g, x, y, mask(levels_[0]));
      return;
    }
    for (const Level& level : levels_) {
      backend_.pool_forward(method_, level.g, x, pooled_.as<float>(), mask(level));
      backend_.copy_rows(level.g.n, level.cols, pooled_.as<float>(), level.cols,
                         y + level.offset, total_);
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* dy = top[0]->diff();
    float* dx = bottom[0]->mutable_diff();
    if (levels_.size() == 1) {
      backend_.pool_backward(method_, levels_[0].g, dy, mask(levels_[0]), dx);
      return;
    }
    for (size_t l = 0; l < levels_.size(); ++l) {
      const Level& level = levels_[l];
      backend_.copy_rows(level.g.n, level.cols, dy + level.offset, total_, pooled_.as<float>(),
                         level.cols);
      float* out = l == 0 ? dx : dx_.as<float>();
      backend_.pool_backward(method_, level.g, pooled_.as<float>(), mask(level), out);
      if (l > 0) backend_.axpy(bottom[0]->count(), 1.0f, out, dx);
    }
  }

 private:
  // Level l of a pyramid of `height` levels over x (N, C, H, W).
  Level make_level(const Tensor& x, int64_t l, int64_t height) const {
    const int64_t bins = int64_t{1} << std::min<int64_t>(l, 40);
    const auto axis = [&](int64_t in, int64_t& kernel, int64_t& pad) {
      kernel = (in + bins - 1) / bins;
      pad = (kernel * bins - in + 1) / 2;
      return pad < kernel;
    };
    PoolGeometry g{x.dim(0), x.dim(1), x.dim(2), x.dim(3), 0, 0, 0, 0, 0, 0, 0, 0};
    const bool fits_h = axis(g.h, g.kh, g.pad_h), fits_w = axis(g.w, g.kw, g.pad_w);
    LAMINA_REQUIRE(fits_h && fits_w, where(), "spp_param.pyramid_height ", height, " is too large for "
                   "bottom '", x.name(), "' ", x.shape_string(), ": level ", l, "'s ", bins, "x",
                   bins, " bins need a ", g.kh, "x", g.kw, " kernel padded by ", g.pad_h, "x",
                   g.pad_w, ", and pooling needs the pad smaller than the kernel; use a "
                   "pyramid_height of at most ", l);
    g.stride_h = g.kh, g.stride_w = g.kw;
    g.out_h = pooled_size(g.h, g.kh, g.stride_h, g.pad_h, true);
    g.out_w = pooled_size(g.w, g.kw, g.stride_w, g.pad_w, true);
    return Level{g, g.c * g.out_h * g.out_w, 0};
  }
  int32_t* mask(const Level& level) const {
    return method_ == PoolMethod::kMax ? mask_.as<int32_t>() + level.g.n * level.offset
                                       : nullptr;
  }

  PoolMethod method_ = PoolMethod::kMax;
  std::vector<Level> levels_;
  int64_t total_ = 0;  // values per sample over all levels
  Buffer pooled_;      // one level's pooling, or its gradient (N, C, OH, OW); 2+ levels
  Buffer dx_;          // a level's bottom gradient (N, C, H, W), added to the bottom's
  Buffer mask_;        // max: each level's arg-max (N, C, OH, OW), level after level
};

}  // namespace

void register_spp_layer() { register_layer<SppLayer>("SPP"); }

}  // namespace lamina
