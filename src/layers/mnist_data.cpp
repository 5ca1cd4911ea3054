// MnistData: batches of an IDX image/label pair (MNIST, Fashion-MNIST), resident on the device.
//
//   layer { name: "mnist" type: "MnistData" top: "data" top: "label"
//           mnist_data_param { images: "data/mnist/train-images-idx3-ubyte"
//                              labels: "data/mnist/train-labels-idx1-ubyte"
//                              batch_size: 64 shuffle: true }
//           transform_param { scale: 0.00390625 } }
//
// Tops: data (N, 1, H, W) = scale * pixel, label (N) = class index as float.
// The whole data set is uploaded once at setup as uint8; each forward is one gather_batch for
// both tops, which reads the layer's pass counter in backend memory and advances it, so a
// steady-state iteration makes no host/device copy and launches the same operation with the
// same arguments (a captured step replays it). Without shuffle, batches walk the files in
// order and wrap around. With shuffle, every epoch draws a permutation (seeded by the layer's
// seed and the epoch number) and takes full batches only: the last partial batch is dropped.
// Each epoch's permutation is uploaded once, before its first batch, into one of two slots
// (epoch % 2), so the passes of one replayed step may span two epochs.
// State (snapshots): seed, epoch, cursor and the sample count; restoring it redraws and
// uploads that epoch's permutation, so a resumed run sees the same batches.
// Data parallel (set_worker): a pass of the whole job takes workers * batch_size rows, worker
// r its rows r * batch_size onwards; positions and states are the whole job's, the same on
// every worker, and the same as one worker's with batch_size workers * batch_size.
#include <array>
#include <cstdint>
#include <vector>

#include "lamina/idx.hpp"
#include "lamina/pass_counter_buffer.hpp"
#include "lamina/registry.hpp"
#include "lamina/seeded_shuffle.hpp"

namespace lamina {
namespace {

constexpr int kNumClasses = 10;  // labels are validated against MNIST's ten classes

class MnistDataLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override {
    return {"mnist_data_param", "transform_param"};
  }

  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 2; }
  int max_tops() const override { return 2; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const MnistDataParameter& p = param_.mnist_data_param();
    LAMINA_REQUIRE(!p.images().empty() && !p.labels().empty(), where(),
                   "mnist_data_param needs both `images` and `labels` (IDX files)");
    LAMINA_REQUIRE(p.batch_size() > 0, where(), "mnist_data_param.batch_size must be > 0");
    batch_ = p.batch_size();
    shuffle_ = p.shuffle();
    const TransformationParameter& t = param_.transform_param();
    LAMINA_REQUIRE(!t.mirror() && t.crop_size() == 0 && !t.has_mean_file() &&
                       t.mean_value_size() == 0 && !t.force_color() && !t.force_gray(),
                   where(), "MnistData applies only transform_param.scale; remove mirror, "
                   "crop_size, mean_file, mean_value, force_color and force_gray");
    scale_ = t.scale();

    IdxArray images = read_idx(p.images());  // (S, H, W)
    IdxArray labels = read_idx(p.labels());  // (S)
    LAMINA_REQUIRE(images.dims.size() == 3, where(), "'", p.images(), "' has dimensions ",
                   shape_string(images.dims), "; an image file has 3 (count, rows, cols)");
    LAMINA_REQUIRE(labels.dims.size() == 1, where(), "'", p.labels(), "' has dimensions ",
                   shape_string(labels.dims), "; a label file has 1 (count)");
    samples_ = images.dims[0];
    LAMINA_REQUIRE(samples_ == labels.dims[0], where(), "'", p.images(), "' holds ", samples_,
                   " images but '", p.labels(), "' holds ", labels.dims[0],
                   " labels; the two files must come from the same set");
    LAMINA_REQUIRE(samples_ <= INT32_MAX, where(), "'", p.images(), "' holds ", samples_,
                   " samples, more than the 2^31-1 an int32 order can index");
    for (int64_t i = 0; i < samples_; ++i) {
      LAMINA_REQUIRE(labels.values[i] < kNumClasses, where(), "'", p.labels(), "' has label ",
                     int(labels.values[i]), " at index ", i, "; MnistData expects classes 0..",
                     kNumClasses - 1);
    }
    LAMINA_REQUIRE(!shuffle_ || batch_ <= samples_, where(), "batch_size ", batch_,
                   " exceeds the ", samples_, " samples; with shuffle a batch comes from one "
                   "epoch");
    pixels_ = images.dims[1] * images.dims[2];

    images_ = Buffer(backend_, images.values.size());  // (S, H*W) uint8
    labels_ = Buffer(backend_, labels.values.size());  // (S) uint8
    backend_.copy_from_host(images_.bytes(), images.values.data(), images_.get());
    backend_.copy_from_host(labels_.bytes(), labels.values.data(), labels_.get());
    if (shuffle_) {
      for (Buffer& order : orders_) order = Buffer(backend_, sizeof(int32_t) * samples_);
    }
    counter_ = PassCounterBuffer(backend_);
    restart(0);
    top[0]->reshape({batch_, 1, images.dims[1], images.dims[2]});
    top[1]->reshape({batch_});
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    if (shuffle_) load_epoch(batch_order().epoch(counter_.passes()));
    backend_.gather_batch(batch_order(),
                          GatherTop{images_.as<uint8_t>(), pixels_, scale_, top[0]->mutable_data()},
                          GatherTop{labels_.as<uint8_t>(), 1, 1.0f, top[1]->mutable_data()});
    counter_.advance();
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  // Each pass of the whole job takes workers * batch_size rows; this worker its share.
  bool set_worker(int rank, int workers) override {
    LAMINA_REQUIRE(!shuffle_ || batch_ * workers <= samples_, where(), "batch_size ", batch_,
                   " on each of ", workers, " workers takes ", batch_ * workers,
                   " samples a pass, more than the ", samples_, " there are; with shuffle a "
                   "batch comes from one epoch");
    rank_ = rank;
    workers_ = workers;
    restart(0);
    return true;
  }

  // The permutations of every epoch the next `passes` passes take, if that is at most two.
  bool prepare_replay(int64_t passes) override {
    if (!shuffle_) return true;
    const BatchOrder order = batch_order();
    const int64_t now = counter_.passes();
    const int64_t first = order.epoch(now), last = order.epoch(now + passes - 1);
    if (last - first > 1) return false;
    for (int64_t epoch = first; epoch <= last; ++epoch) load_epoch(epoch);
    return true;
  }

  void replayed(int64_t passes) override { counter_.advance(passes); }

  // (seed, epoch, cursor, samples): the position of the next batch.
  std::vector<int64_t> state() const override {
    const BatchOrder order = batch_order();
    const int64_t now = counter_.passes();
    return {int64_t(seed_), order.epoch(now), order.cursor(now), samples_};
  }

  void set_state(const std::vector<int64_t>& state) override {
    LAMINA_REQUIRE(state.size() == 4, where(), "the snapshot holds ", state.size(),
                   " state values; MnistData keeps 4 (seed, epoch, cursor, samples)");
    const int64_t epoch = state[1], cursor = state[2], samples = state[3];
    LAMINA_REQUIRE(samples == samples_, where(), "the snapshot was taken with ", samples,
                   " samples, but '", param_.mnist_data_param().images(), "' holds ", samples_,
                   "; resume with the same data set");
    const bool possible =
        shuffle_ ? epoch >= 0 && epoch <= kMaxPosition / (samples_ / (batch_ * workers_) + 1) &&
                       cursor >= 0 && cursor <= samples_ && cursor % (batch_ * workers_) == 0
                 : epoch == 0 && cursor >= 0 && cursor < samples_;
    LAMINA_REQUIRE(possible, where(), "the snapshot's position (epoch ", epoch, ", sample ",
                   cursor, ") is impossible for ", samples_, " samples in batches of ",
                   batch_ * workers_,
                   shuffle_ ? " with shuffle (resume with the batch_size it was written with)"
                            : " without shuffle");
    seed_ = uint64_t(state[0]);  // the permutations depend on the seed and the epoch
    const int64_t stride = batch_ * workers_;  // rows a pass of the whole job takes
    restart(shuffle_ ? epoch * (samples_ / stride) + cursor / stride : cursor);
  }

 private:
  static constexpr int64_t kMaxPosition = int64_t{1} << 50;  // batches counted from epoch 0

  BatchOrder batch_order() const {
    BatchOrder order;
    order.counter = counter_.device();
    order.first = first_;
    order.batch = batch_;
    order.samples = samples_;
    order.shuffle = shuffle_;
    order.workers = workers_;
    order.rank = rank_;
    if (shuffle_) order.order[0] = orders_[0].as<int32_t>(), order.order[1] = orders_[1].as<int32_t>();
    return order;
  }

  // Pass 0 takes position first (BatchOrder::first); the counter starts again from zero.
  void restart(int64_t first) {
    first_ = first;
    counter_.restart();
    loaded_ = {-1, -1};
  }

  // Draws epoch's permutation on the host (seeded_shuffle.hpp: the same everywhere for a
  // given seed) and uploads it to its slot, unless it is there: the one copy of an epoch.
  void load_epoch(int64_t epoch) {
    const int slot = int(epoch % 2);
    if (loaded_[slot] == epoch) return;
    const std::vector<int32_t> order = epoch_permutation(seed_, epoch, samples_);
    backend_.copy_from_host(orders_[slot].bytes(), order.data(), orders_[slot].get());
    loaded_[slot] = epoch;
  }

  int64_t batch_ = 0;
  int64_t samples_ = 0;  // S
  int64_t pixels_ = 0;   // H*W
  float scale_ = 1;
  bool shuffle_ = false;
  Buffer images_, labels_;
  std::array<Buffer, 2> orders_;     // with shuffle: epoch e's permutation in orders_[e % 2]
  std::array<int64_t, 2> loaded_{};  // the epoch in each slot, -1 for none
  PassCounterBuffer counter_;        // the passes since restart()
  int64_t first_ = 0;                // BatchOrder::first
  int64_t workers_ = 1, rank_ = 0;   // BatchOrder::workers, rank
};

}  // namespace

void register_mnist_data_layer() { register_layer<MnistDataLayer>("MnistData"); }

}  // namespace lamina
