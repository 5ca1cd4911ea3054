// MemoryData: batches of examples a program hands over (lamina/memory_data.hpp).
//
// The n examples live in the backend's memory, data_ (n, C*H*W) and labels_ (n); each
// forward takes the next batch_size rows with BatchRows (batch_rows.hpp): the row numbers
// come from a PassCounter on the device, so a steady-state pass copies nothing from the
// host and a captured step replays it. Rows wrap around; n is a multiple of batch_size.
// State (snapshots): (n, the next row), restored only for the same n.
#include <algorithm>
#include <optional>

#include "lamina/memory_data.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "layers/batch_rows.hpp"

namespace lamina {
namespace {

class MemoryDataLayer final : public Layer, public MemoryData {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"memory_data_param"}; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 2; }
  int max_tops() const override { return 2; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const MemoryDataParameter& p = param_.memory_data_param();
    batch_ = p.batch_size(), channels_ = p.channels(), height_ = p.height(), width_ = p.width();
    LAMINA_REQUIRE(batch_ > 0 && channels_ > 0 && height_ > 0 && width_ > 0, where(),
                   "memory_data_param needs batch_size, channels, height and width, each > 0 "
                   "(got ", batch_, ", ", channels_, ", ", height_, ", ", width_, ")");
    top[0]->reshape({batch_, channels_, height_, width_});
    top[1]->reshape({batch_, 1, 1, 1});
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    LAMINA_REQUIRE(rows_.shaped(), where(), "has no examples; hand them over with "
                   "lamina::memory_data(net, \"", name(), "\").reset(data, labels, n) "
                   "(lamina/memory_data.hpp) before the first forward pass");
    rows_.next();
    rows_.gather(example_size(), data_.as<float>(), top[0]->mutable_data());
    rows_.gather(1, labels_.as<float>(), top[1]->mutable_data());
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  void reset(const float* data, const float* labels, int64_t n) override {
    LAMINA_REQUIRE(data != nullptr && labels != nullptr, where(), "reset() needs both the "
                   "data and the labels");
    LAMINA_REQUIRE(n > 0 && n % batch_ == 0, where(), "reset() got ", n, " examples; n must be "
                   "a positive multiple of batch_size ", batch_);
    if (!rows_.shaped() || rows_.samples() != n) {
      data_ = Buffer(backend_, sizeof(float) * size_t(n * example_size()));  // (n, C*H*W)
      labels_ = Buffer(backend_, sizeof(float) * size_t(n));                 // (n)
      rows_.shape(backend_, where(), n, batch_);
    }
    backend_.copy_from_host(data_.bytes(), data, data_.get());
    backend_.copy_from_host(labels_.bytes(), labels, labels_.get());
    // A recording took the first row as an argument: from another one, it must not replay.
    if (rows_.first() != 0) rows_.forget_recordings();
    rows_.restart(0);
  }

  void add_datum_vector(const std::vector<Datum>& datums) override {
    const int64_t n = int64_t(datums.size()), size = example_size();
    std::vector<float> data(size_t(n * size)), labels(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const Datum& d = datums[size_t(i)];
      LAMINA_REQUIRE(!d.encoded(), where(), "datum ", i, " holds an encoded image; "
                     "add_datum_vector takes raw values (decode it first)");
      LAMINA_REQUIRE(d.channels() == channels_ && d.height() == height_ && d.width() == width_,
                     where(), "datum ", i, " is ", d.channels(), " x ", d.height(), " x ",
                     d.width(), "; memory_data_param says ", channels_, " x ", height_, " x ",
                     width_);
      float* row = data.data() + i * size;
      if (d.float_data_size() > 0) {
        LAMINA_REQUIRE(d.float_data_size() == size, where(), "datum ", i, " has ",
                       d.float_data_size(), " float_data values; ", size, " expected");
        std::copy(d.float_data().begin(), d.float_data().end(), row);
      } else {
        LAMINA_REQUIRE(int64_t(d.data().size()) == size, where(), "datum ", i, " has ",
                       d.data().size(), " data bytes; ", size, " expected");
        for (int64_t j = 0; j < size; ++j) row[j] = float(uint8_t(d.data()[size_t(j)]));
      }
      labels[size_t(i)] = float(d.label());
    }
    reset(data.data(), labels.data(), n);
  }

  int64_t batch_size() const override { return batch_; }
  int64_t channels() const override { return channels_; }
  int64_t height() const override { return height_; }
  int64_t width() const override { return width_; }

  // A recording reads the arrays by address: once reset() replaced them, replays stop.
  bool prepare_replay(int64_t /*passes*/) override { return rows_.prepare_replay(); }
  void replayed(int64_t passes) override { rows_.replayed(passes); }

  // (n, the next row); nothing before the first reset().
  std::vector<int64_t> state() const override {
    if (!rows_.shaped()) return {};
    return {rows_.samples(), rows_.position()};
  }
  void set_state(const std::vector<int64_t>& state) override {
    if (!rows_.shaped()) return Layer::set_state(state);
    LAMINA_REQUIRE(state.size() == 2, where(), "the snapshot holds ", state.size(),
                   " state values; MemoryData keeps 2 (examples, next row)");
    LAMINA_REQUIRE(state[0] == rows_.samples(), where(), "the snapshot was taken with ",
                   state[0], " examples, but reset() gave ", rows_.samples());
    LAMINA_REQUIRE(state[1] >= 0 && state[1] < state[0] && state[1] % batch_ == 0, where(),
                   "the snapshot's next row ", state[1], " is not a batch start of ",
                   state[0], " examples in batches of ", batch_);
    rows_.restart(state[1]);
  }

 private:
  int64_t example_size() const { return channels_ * height_ * width_; }

  int64_t batch_ = 0, channels_ = 0, height_ = 0, width_ = 0;
  Buffer data_, labels_;  // (n, C*H*W) and (n), after reset()
  BatchRows rows_;
};

}  // namespace

MemoryData& memory_data(Net& net, const std::string& name) {
  std::string found;
  for (int i = 0; i < net.num_layers(); ++i) {
    auto* layer = dynamic_cast<MemoryDataLayer*>(&net.layer(i));
    if (layer == nullptr) continue;
    if (layer->name() == name) return *layer;
    found += (found.empty() ? "'" : ", '") + layer->name() + "'";
  }
  fail("net '", net.name(), "' has no MemoryData layer named '", name, "'; ",
       found.empty() ? std::string("it has none") : "its MemoryData layers: " + found);
}

void register_memory_data_layer() { register_layer<MemoryDataLayer>("MemoryData"); }

}  // namespace lamina
