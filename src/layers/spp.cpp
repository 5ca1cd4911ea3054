// SPP: Caffe's spatial pyramid pooling, spp_param (pyramid_height, pool MAX, AVE or
// STOCHASTIC).
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
// level 0 first. STOCHASTIC pools each level as Pooling does (pool_method.hpp), and so
// needs levels without pad (H and W divisible by 2^l, as in Caffe, whose Pooling refuses a
// pad with it); in TRAIN the levels draw from one PassRandom, level l taking the numbers of
// its place in the top (N offset_l onwards of each pass's N x total) with its own counter.
// Caffe builds its levels' Pooling layers without the net's phase, so they sample in TEST
// too; here the levels follow the SPP layer's phase. FP32.
#include <algorithm>
#include <vector>

#include "lamina/layer.hpp"
#include "lamina/registry.hpp"
#include "pool_method.hpp"
#include "spatial.hpp"

namespace lamina {
namespace {

// One pyramid level: its pooling, and where its values sit in a sample's top row.
struct Level {
  PoolGeometry g;
  int64_t cols;    // C OH OW values per sample
  int64_t offset;  // the first of them in the sample's row
};

// random_: TRAIN stochastic pooling's draws, a counter per level (state: seed and offset).
class SppLayer : public DrawingLayer {
 public:
  using DrawingLayer::DrawingLayer;
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
    kind_ = pool_kind(p, phase_);
    levels_.clear();
    total_ = 0;
    int64_t largest = 0;  // pooled values of one level, for the shared level array
    for (int64_t l = 0; l < int64_t{p.pyramid_height()}; ++l) {
      levels_.push_back(make_level(x, l, p.pyramid_height()));
      Level& level = levels_.back();
      LAMINA_REQUIRE(p.pool() != SPPParameter::STOCHASTIC || (level.g.pad_h == 0 &&
                     level.g.pad_w == 0), where(), "spp_param.pool: STOCHASTIC takes no pad "
                     "(Caffe pads only MAX and AVE pooling), but level ", l, "'s ",
                     level.g.out_h, "x", level.g.out_w, " bins over bottom '", x.name(), "' ",
                     x.shape_string(), " need a pad of ", level.g.pad_h, "x", level.g.pad_w,
                     "; give the bottom a height and width that ", level.g.out_h,
                     " divides, or use a pyramid_height of at most ", l);
      level.offset = total_;
      total_ += level.cols;
      largest = std::max(largest, level.cols);
    }
    const int64_t n = x.dim(0);
    if (levels_.size() == 1) {
      top[0]->reshape({n, x.dim(1), levels_[0].g.out_h, levels_[0].g.out_w});
    } else {
      top[0]->reshape({n, total_});
      pooled_.reserve(backend_, sizeof(float) * n * largest);
      dx_.reserve(backend_, sizeof(float) * x.count());
    }
    if (uses_mask(kind_)) mask_.reserve(backend_, sizeof(int32_t) * n * total_);
    if (kind_ == PoolKind::kSampled) random_.shape(backend_, n * total_, int(levels_.size()));
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    const float* x = bottom[0]->data();
    float* y = top[0]->mutable_data();
    if (levels_.size() == 1) {
      pool_forward(backend_, kind_, levels_[0].g, draws(0), x, y, mask(levels_[0]));
    } else {
      for (size_t l = 0; l < levels_.size(); ++l) {
        const Level& level = levels_[l];
        pool_forward(backend_, kind_, level.g, draws(l), x, pooled_.as<float>(), mask(level));
        backend_.copy_rows(level.g.n, level.cols, pooled_.as<float>(), level.cols,
                           y + level.offset, total_);
      }
    }
    random_.advance();
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    if (!propagate[0]) return;
    const float* x = bottom[0]->data();
    const float* dy = top[0]->diff();
    float* dx = bottom[0]->mutable_diff();
    if (levels_.size() == 1) {
      pool_backward(backend_, kind_, levels_[0].g, x, dy, mask(levels_[0]), dx);
      return;
    }
    for (size_t l = 0; l < levels_.size(); ++l) {
      const Level& level = levels_[l];
      backend_.copy_rows(level.g.n, level.cols, dy + level.offset, total_, pooled_.as<float>(),
                         level.cols);
      float* out = l == 0 ? dx : dx_.as<float>();
      pool_backward(backend_, kind_, level.g, x, pooled_.as<float>(), mask(level), out);
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
    LAMINA_REQUIRE(fits_h && fits_w, where(), "spp_param.pyramid_height ", height,
                   " is too large for bottom '", x.name(), "' ", x.shape_string(), ": level ", l, "'s ", bins, "x",
                   bins, " bins need a ", g.kh, "x", g.kw, " kernel padded by ", g.pad_h, "x",
                   g.pad_w, ", and pooling needs the pad smaller than the kernel; use a "
                   "pyramid_height of at most ", l);
    g.stride_h = g.kh, g.stride_w = g.kw;
    g.out_h = pooled_size(g.h, g.kh, g.stride_h, g.pad_h, true);
    g.out_w = pooled_size(g.w, g.kw, g.stride_w, g.pad_w, true);
    return Level{g, g.c * g.out_h * g.out_w, 0};
  }
  // Level l's draws: the numbers of its place in the top, level after level.
  PoolDraws draws(size_t l) const {
    return PoolDraws{&random_, l, uint64_t(levels_[l].g.n * levels_[l].offset)};
  }
  int32_t* mask(const Level& level) const {
    return uses_mask(kind_) ? mask_.as<int32_t>() + level.g.n * level.offset : nullptr;
  }

  PoolKind kind_ = PoolKind::kMax;
  std::vector<Level> levels_;
  int64_t total_ = 0;  // values per sample over all levels
  Buffer pooled_;      // one level's pooling, or its gradient (N, C, OH, OW); 2+ levels
  Buffer dx_;          // a level's bottom gradient (N, C, H, W), added to the bottom's
  Buffer mask_;        // max, TRAIN stochastic: each level's (N, C, OH, OW) chosen indices,
                       // level after level
};

}  // namespace

void register_spp_layer() { register_layer<SppLayer>("SPP"); }

}  // namespace lamina
