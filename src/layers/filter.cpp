// Filter: keeps the rows (items along the first axis) whose selector value is not zero
// (Caffe's Filter). The last bottom is the selector; every other bottom has a top.
//
//   bottoms x_t (N, ...) for t < T, selector s (N) or (N, 1, ...)  ->  tops (S, ...)
// S, the number of rows with s != 0, changes from pass to pass: forward reads the selector
// on the host, reshapes the tops, and the net sets up the later layers again for the new
// shapes (Layer::reshapes_each_pass), as Caffe reshapes every layer each pass. Set up, the
// tops have all N rows (Caffe's first reshape). A pass may keep no rows (S = 0).
// Top row k = x_t row idx[k], idx the kept rows in increasing order.
// Gradients: dx_t = 0, then dx_t row idx[k] = dtop row k. The selector gets none.
// Reading the selector waits for the device, so a net with a Filter runs its steps directly,
// never as a captured graph (capture_blocker).
#include <string>
#include <vector>

#include "indexed_rows.hpp"
#include "lamina/layer.hpp"
#include "lamina/registry.hpp"

namespace lamina {
namespace {

class FilterLayer : public Layer {
 public:
  using Layer::Layer;
  int min_bottoms() const override { return 2; }
  int max_bottoms() const override { return -1; }
  int max_tops() const override { return -1; }
  std::vector<std::string> parameter_messages() const override { return {}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }
  // Every bottom but the last (the selector); before setup, as the prototxt lists them.
  bool accepts_gradient(int bottom_index) const override {
    return bottom_index + 1 < (bottoms_ > 0 ? bottoms_ : param_.bottom_size());
  }
  bool reshapes_each_pass() const override { return true; }
  std::optional<std::string> capture_blocker() const override {
    return std::string("it reads its selector on the host each pass to count the rows it "
                       "keeps");
  }

  void setup(const Tensors& bottom, const Tensors& top) override {
    const Tensor& s = *bottom.back();
    bottoms_ = int(bottom.size());
    LAMINA_REQUIRE(top.size() + 1 == bottom.size(), where(), "it takes the blobs to filter "
                   "and then the selector, and gives one top per blob filtered: ",
                   bottom.size(), " bottoms need ", bottom.size() - 1, " tops, not ", top.size());
    LAMINA_REQUIRE(s.num_axes() >= 1, where(), "the selector '", s.name(), "' has no axes");
    for (int a = 1; a < s.num_axes(); ++a)
      LAMINA_REQUIRE(s.dim(a) == 1, where(), "the selector '", s.name(), "' must hold one "
                     "value per row: every axis after the first must be 1, but it is ",
                     s.shape_string());
    n_ = s.dim(0);
    LAMINA_REQUIRE(n_ <= kExactIndices, where(), "the selector '", s.name(), "' has ", n_,
                   " rows; the rows kept are picked by float indices, exact up to ",
                   kExactIndices);
    inner_.clear();
    for (size_t t = 0; t + 1 < bottom.size(); ++t) {
      const Tensor& x = *bottom[t];
      LAMINA_REQUIRE(x.num_axes() >= 1 && x.dim(0) == n_, where(), "bottom '", x.name(), "' ",
                     x.shape_string(), " must have as many rows (first axis) as the selector '",
                     s.name(), "' ", s.shape_string());
      inner_.push_back(x.count(1, x.num_axes()));
      top[t]->reshape(x.shape());  // all N rows until forward counts them
    }
    selector_.resize(size_t(n_));
    index_host_.resize(size_t(n_));
    index_.reserve(backend_, sizeof(float) * n_);
  }

  void forward(const Tensors& bottom, const Tensors& top) override {
    backend_.copy_to_host(sizeof(float) * n_, bottom.back()->data(), selector_.data());
    kept_ = 0;
    for (int64_t r = 0; r < n_; ++r)
      if (selector_[r] != 0) index_host_[kept_++] = float(r);
    if (kept_ > 0) backend_.copy_from_host(sizeof(float) * kept_, index_host_.data(), index_.get());
    for (size_t t = 0; t < top.size(); ++t) {
      Shape shape = bottom[t]->shape();
      shape[0] = kept_;
      top[t]->reshape(shape);
      if (kept_ == 0) continue;
      backend_.gather_rows(kept_, inner_[t], index_.as<float>(), n_, bottom[t]->data(),
                           top[t]->mutable_data());
    }
  }

  void backward_input(const Tensors& top, const std::vector<bool>& propagate,
                      const Tensors& bottom) override {
    for (size_t t = 0; t < top.size(); ++t) {
      if (!propagate[t]) continue;
      float* dx = bottom[t]->mutable_diff();
      backend_.zero(sizeof(float) * bottom[t]->count(), dx);
      if (kept_ == 0) continue;
      backend_.scatter_add_rows(kept_, inner_[t], index_.as<float>(), n_, top[t]->diff(), dx);
    }
  }

 private:
  int bottoms_ = 0;                 // as set up: the blobs filtered and the selector
  int64_t n_ = 0;                   // rows of every bottom
  std::vector<int64_t> inner_;      // per bottom filtered: values in a row
  int64_t kept_ = 0;                // S: rows kept by the last forward
  std::vector<float> selector_;     // the selector, read each pass (N)
  std::vector<float> index_host_;   // the kept rows' numbers, as floats (S of N)
  Buffer index_;                    // the same in backend memory (N)
};

}  // namespace

void register_filter_layer() { register_layer<FilterLayer>("Filter"); }

}  // namespace lamina
