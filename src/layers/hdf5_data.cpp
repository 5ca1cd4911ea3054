// HDF5Data (Caffe's): batches of rows read from HDF5 files.
//
//   layer { name: "data" type: "HDF5Data" top: "data" top: "label"
//           hdf5_data_param { source: "train_h5_list.txt" batch_size: 64 shuffle: true } }
//
// source is a text file listing .h5 files (whitespace-separated paths, as Caffe reads them;
// relative paths are from the working directory). Each top reads the dataset of its own name
// from every file: rank >= 1, floating-point or integer values (read as float), the first
// axis the rows; in one file every top's dataset has the same rows, and every file gives a
// top the same shape after its first axis. Tops are (batch_size, that shape...).
//
// Caffe's order: the files in list order, the rows of each in order; a batch runs on across
// the end of a file into the next, and from the last file back to the first. With shuffle,
// the file order is drawn again for every pass over the list, and each file's rows every
// time it is entered; the permutations come from the layer's seed (file order of round e:
// seed and e; row order of the k-th file entered: seed and k). One file is in memory at a
// time, read when a batch reaches it, as in Caffe.
//
// With several files or shuffle, each batch is put together on the host and copied to the
// device: what a pass reads depends on which file is loaded, which changes in the middle of
// batches, so the layer's passes are not captured as a CUDA graph (capture_blocker). One
// file without shuffle (the common case of a data set in one file) stays on the device, and
// each batch is chosen there from a pass counter (batch_rows.hpp): nothing is copied per
// pass and a training step is captured.
// State (snapshots): (seed, round, file in the round, row, files entered, files listed).
#include <numeric>
#include <optional>
#include <sstream>

#include "core/hdf5_file.hpp"
#include "lamina/file_access.hpp"
#include "lamina/registry.hpp"
#include "lamina/seeded_shuffle.hpp"
#include "layers/batch_rows.hpp"

namespace lamina {
namespace {

class Hdf5DataLayer final : public Layer {
 public:
  using Layer::Layer;
  std::vector<std::string> parameter_messages() const override { return {"hdf5_data_param"}; }
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int max_tops() const override { return -1; }
  std::vector<Operation> operations() const override { return {Operation::kTensorOps}; }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const HDF5DataParameter& p = param_.hdf5_data_param();
    LAMINA_REQUIRE(!p.source().empty(), where(), "hdf5_data_param.source must name a text "
                   "file listing the .h5 files");
    LAMINA_REQUIRE(p.batch_size() > 0, where(), "hdf5_data_param.batch_size must be > 0");
    batch_ = p.batch_size();
    shuffle_ = p.shuffle();
    files_.clear();
    std::string list;
    try {
      list = InputFile(p.source(), "HDF5 list file (hdf5_data_param.source)")
                 .read_all(kMaxTextFileBytes);
    } catch (const Error& e) {
      fail(where(), e.what());
    }
    std::istringstream words(list);
    for (std::string file; words >> file;) files_.push_back(file);
    LAMINA_REQUIRE(!files_.empty(), where(), "the HDF5 list file '", p.source(),
                   "' names no files; list one .h5 path per line");
    row_shapes_.clear();
    restart(0, 0, 0, 0);
    for (size_t i = 0; i < top.size(); ++i) {
      Shape shape = row_shapes_[i];
      shape.insert(shape.begin(), batch_);
      top[i]->reshape(shape);
    }
    staging_.resize(top.size());
    // One file read in order: the batches walk its rows and wrap around, which the device
    // does alone (BatchRows), so the layer can be captured.
    resident_ = files_.size() == 1 && !shuffle_ && rows() <= BatchRows::kMaxSamples;
    if (resident_) upload();
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    if (resident_) {
      rows_.next();
      for (size_t i = 0; i < top.size(); ++i)
        rows_.gather(top[i]->count() / batch_, device_[i].as<float>(), top[i]->mutable_data());
      return advance_resident(1);
    }
    for (size_t i = 0; i < top.size(); ++i) staging_[i].resize(size_t(top[i]->count()));
    for (int64_t r = 0; r < batch_; ++r, ++row_) {
      if (row_ == rows()) next_file();
      const int64_t source_row = row_order_[size_t(row_)];
      for (size_t i = 0; i < top.size(); ++i) {
        const int64_t cols = top[i]->count() / batch_;
        const float* src = arrays_[i].values.data() + source_row * cols;
        std::copy(src, src + cols, staging_[i].data() + r * cols);
      }
    }
    for (size_t i = 0; i < top.size(); ++i) {
      backend_.copy_from_host(sizeof(float) * staging_[i].size(), staging_[i].data(),
                              top[i]->mutable_data());
    }
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  // A recording holds the device arrays' addresses: after upload() moved them, it must not
  // be replayed (set_state outside the net, which otherwise starts a new generation).
  bool prepare_replay(int64_t /*passes*/) override { return rows_.prepare_replay(); }
  void replayed(int64_t passes) override {
    if (!resident_) return;
    rows_.replayed(passes);
    advance_resident(passes);
  }

  std::optional<std::string> capture_blocker() const override {
    if (resident_) return std::string();
    return std::string("HDF5Data puts each batch together on the host, in Caffe's order "
                       "across file boundaries (one file in memory at a time), and copies it "
                       "to the device every pass");
  }

  // (seed, round, file in the round, row, files entered, files listed)
  std::vector<int64_t> state() const override {
    return {int64_t(seed_), round_, position_, row_, entered_, int64_t(files_.size())};
  }
  void set_state(const std::vector<int64_t>& state) override {
    LAMINA_REQUIRE(state.size() == 6, where(), "the snapshot holds ", state.size(),
                   " state values; HDF5Data keeps 6 (seed, round, file, row, files entered, "
                   "files listed)");
    LAMINA_REQUIRE(state[5] == int64_t(files_.size()), where(), "the snapshot was taken with ",
                   state[5], " files listed, but '", param_.hdf5_data_param().source(),
                   "' lists ", files_.size(), "; resume with the same list");
    LAMINA_REQUIRE(state[1] >= 0 && state[2] >= 0 && state[2] < state[5] && state[3] >= 0 &&
                       state[4] >= 0,
                   where(), "the snapshot's position (round ", state[1], ", file ", state[2],
                   ", row ", state[3], ") is impossible");
    const std::vector<int64_t> before = this->state();
    seed_ = uint64_t(state[0]);
    try {
      restart(state[1], state[2], state[3], state[4]);
    } catch (...) {  // a file changed since, or the row is beyond it: back to where it was
      seed_ = uint64_t(before[0]);
      restart(before[1], before[2], before[3], before[4]);
      throw;
    }
    if (resident_) upload();
  }

 private:
  int64_t rows() const { return arrays_[0].dims[0]; }

  // The one file's datasets to the device; its batches start at the current row.
  void upload() {
    device_.clear();
    for (const Hdf5Array& array : arrays_) {
      device_.emplace_back(backend_, sizeof(float) * array.values.size());
      backend_.copy_from_host(device_.back().bytes(), array.values.data(),
                              device_.back().get());
    }
    rows_.shape(backend_, where(), rows(), batch_, row_ % rows());
  }
  // One file on the device: the host's position after `passes` more batches.
  void advance_resident(int64_t passes) {
    const int64_t next = row_ + passes * batch_;
    round_ += next / rows();
    entered_ = round_;
    row_ = next % rows();
  }

  // Positions the layer at row `row` of file `position` of round `round`, the `entered`-th
  // file entered; loads that file.
  void restart(int64_t round, int64_t position, int64_t row, int64_t entered) {
    round_ = round;
    position_ = position;
    entered_ = entered;
    draw_file_order();
    load(file_order_[size_t(position_)]);
    LAMINA_REQUIRE(row <= rows(), where(), "the snapshot's row ", row, " is beyond the ",
                   rows(), " rows of '", files_[file_order_[size_t(position_)]], "'");
    row_ = row;
  }

  // The end of a file: on to the next (a new round after the last), its rows in a new order.
  void next_file() {
    ++entered_;
    if (++position_ == int64_t(files_.size())) {
      position_ = 0;
      ++round_;
      draw_file_order();
    }
    if (files_.size() > 1) {
      load(file_order_[size_t(position_)]);
    } else {
      draw_row_order();  // one file stays loaded; Caffe shuffles its rows again
    }
    row_ = 0;
  }

  // Reads file k's datasets, one per top, and checks them against the tops' row shapes.
  void load(size_t k) {
    const std::string& file = files_[k];
    std::vector<std::string> names(param_.top().begin(), param_.top().end());
    arrays_ = read_hdf5(where(), "HDF5 data file", file, names);
    for (size_t i = 0; i < arrays_.size(); ++i) {
      const Shape& dims = arrays_[i].dims;
      LAMINA_REQUIRE(dims[0] == arrays_[0].dims[0], where(), "'", file, "': dataset '",
                     names[i], "' has ", dims[0], " rows but dataset '", names[0], "' has ",
                     arrays_[0].dims[0], "; every top's dataset needs the same rows");
      const Shape row_shape(dims.begin() + 1, dims.end());
      if (row_shapes_.size() <= i) row_shapes_.push_back(row_shape);
      LAMINA_REQUIRE(row_shape == row_shapes_[i], where(), "'", file, "': dataset '",
                     names[i], "' has rows of shape ", shape_string(row_shape),
                     ", but the first file's rows are ", shape_string(row_shapes_[i]),
                     "; every file must give a top the same shape");
    }
    LAMINA_REQUIRE(rows() > 0, where(), "'", file, "': dataset '", names[0],
                   "' has no rows");
    draw_row_order();
  }

  // seeded_shuffle.hpp: the same order everywhere for a given seed.
  template <class T>
  void permute(std::vector<T>& v, uint64_t what, int64_t which) const {
    if (!shuffle_) return std::iota(v.begin(), v.end(), T(0));
    seeded_shuffle(v, {uint32_t(seed_), uint32_t(seed_ >> 32), uint32_t(what),
                       uint32_t(which), uint32_t(uint64_t(which) >> 32)});
  }
  void draw_file_order() {
    file_order_.resize(files_.size());
    permute(file_order_, 0, round_);
  }
  void draw_row_order() {
    row_order_.resize(size_t(rows()));
    permute(row_order_, 1, entered_);
  }

  int64_t batch_ = 0;
  bool shuffle_ = false;
  std::vector<std::string> files_;          // as listed
  std::vector<size_t> file_order_;          // this round's order of files_
  std::vector<int64_t> row_order_;          // the loaded file's order of rows
  std::vector<Hdf5Array> arrays_;           // the loaded file's datasets, one per top
  std::vector<Shape> row_shapes_;           // per top: the shape of a row (the first file's)
  std::vector<std::vector<float>> staging_;  // per top: the batch on the host
  int64_t round_ = 0;     // passes over the list so far
  int64_t position_ = 0;  // the loaded file's place in file_order_
  int64_t row_ = 0;       // the next row's place in row_order_ (rows(): the file is done)
  int64_t entered_ = 0;   // files entered before the loaded one
  // One file without shuffle: its datasets stay on the device and batches are chosen there.
  bool resident_ = false;
  std::vector<Buffer> device_;  // per top: (rows, cols) float
  BatchRows rows_;
};

}  // namespace

void register_hdf5_data_layer() { register_layer<Hdf5DataLayer>("HDF5Data"); }

}  // namespace lamina
