// Data: Caffe's data layer over a database (LMDB or LevelDB) of Datum records, raw or
// encoded (JPEG/PNG, decoded as transform_param's force_color / force_gray say).
//
//   layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN }
//           transform_param { scale: 0.00390625 }
//           data_param { source: "examples/mnist/mnist_train_lmdb" batch_size: 64
//                        backend: LMDB } }
//
// Tops: data (N, C, H', W'), the records transformed as transform_param says
// (data_transformer.hpp), and optionally label (N), each record's label as float. The shape
// comes from the first record (decoded); a record whose transformed shape differs is an
// Error naming it (records of other sizes that crop_size crops to one are fine, as Caffe).
// Order (as Caffe, no shuffle): the database in key order, wrapping around at the end; the
// stream starts at record k, k drawn from the layer's seed in 0..rand_skip-1 when rand_skip
// is set (Caffe's random skip, so that workers or runs do not all start at the same point).
// Pass p of the whole job takes stream positions s0 + p * workers * N onwards; worker r its
// N from r * N on (data parallel, as MnistData). Stream position s is record s % records,
// and its random transform is drawn for (seed, s), so every epoch crops and mirrors anew.
// Prefetch: `prefetch` batches ahead, read and decoded by a pool of threads
// (batch_prefetcher.hpp) into host buffers; forward copies the next one to the tops. Records
// are only copied in read (one thread, in order); parsing, image decoding and transforms
// run in decode, on every thread.
// State (snapshots): seed, the stream position of the next pass, and the record count.
// data_param's older scale, mean_file, crop_size and mirror are moved into transform_param,
// as Caffe's net upgrade does.
#include <glog/logging.h>

#include <algorithm>
#include <memory>
#include <thread>

#include "lamina/batch_prefetcher.hpp"
#include "lamina/counter_rng.hpp"
#include "lamina/data_transformer.hpp"
#include "lamina/database.hpp"
#include "lamina/registry.hpp"
#include "lamina/upgrade_v1.hpp"

namespace lamina {
namespace {

// The counter of the rand_skip draw: beyond every example's (data_transformer.hpp draws
// three per example from 0 up).
constexpr uint64_t kSkipCounter = ~uint64_t{0};
constexpr int kMaxThreads = 4;

class DataLayer final : public Layer {
 public:
  using Layer::Layer;

  std::vector<std::string> parameter_messages() const override {
    return {"data_param", "transform_param"};
  }
  int min_bottoms() const override { return 0; }
  int max_bottoms() const override { return 0; }
  int min_tops() const override { return 1; }
  int max_tops() const override { return 2; }

  std::optional<std::string> capture_blocker() const override {
    return std::string("it copies each batch from the host buffers its prefetch threads fill, "
                       "a copy whose source changes every pass");
  }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const DataParameter& p = param_.data_param();
    LAMINA_REQUIRE(!p.source().empty(), where(), "data_param.source must name the database");
    LAMINA_REQUIRE(p.batch_size() > 0, where(), "data_param.batch_size must be > 0");
    LAMINA_REQUIRE(p.prefetch() > 0, where(), "data_param.prefetch must be > 0");
    batch_ = p.batch_size();
    const DbKind kind = p.backend() == DataParameter::LMDB ? DbKind::kLmdb : DbKind::kLevelDb;
    source_ = where() + db_name(p.source(), kind);
    prefetcher_.reset();
    cursor_.reset();  // its transaction or iterator belongs to the database it replaces
    db_ = open_db(p.source(), kind);
    records_ = db_->count();
    LAMINA_REQUIRE(records_ > 0, source_, ": the database holds no records");
    transformer_ = std::make_unique<DataTransformer>(transform_param(), phase_, where());
    mode_ = transformer_->image_mode();
    cursor_ = db_->cursor();
    DatumBuffers buffers;
    shape_ = read_datum(cursor_->value(), source_, cursor_->key(), mode_, buffers).shape;
    example_ = transformer_->output_shape(shape_, record_prefix(source_, cursor_->key()));
    top[0]->reshape({batch_, example_.channels, example_.height, example_.width});
    labels_ = top.size() > 1;
    if (labels_) top[1]->reshape({batch_});
    // rand_skip's draw: the stream's start
    const int64_t skip =
        p.rand_skip() > 0 ? int64_t(counter_hash(seed_, kSkipCounter) % p.rand_skip()) : 0;
    if (skip > 0) LOG(INFO) << where() << "skipping the first " << skip << " records";
    restart(skip);
  }

  void forward(const Tensors& /*bottom*/, const Tensors& top) override {
    if (!prefetcher_) start();
    const HostBatch& batch = prefetcher_->take();
    backend_.copy_from_host(batch.data.size() * sizeof(float), batch.data.data(),
                            top[0]->mutable_data());
    if (labels_) {
      backend_.copy_from_host(batch.label.size() * sizeof(float), batch.label.data(),
                              top[1]->mutable_data());
    }
    prefetcher_->release();
    position_ += stride();
  }

  void backward_input(const Tensors& /*top*/, const std::vector<bool>& /*propagate*/,
                      const Tensors& /*bottom*/) override {}

  bool set_worker(int rank, int workers) override {
    prefetcher_.reset();  // its threads read rank_ and workers_
    rank_ = rank;
    workers_ = workers;
    restart(position_);
    return true;
  }

  // (seed, position, records): the stream position of the next pass.
  std::vector<int64_t> state() const override { return {int64_t(seed_), position_, records_}; }

  void set_state(const std::vector<int64_t>& state) override {
    LAMINA_REQUIRE(state.size() == 3, where(), "the snapshot holds ", state.size(),
                   " state values; Data keeps 3 (seed, position, records)");
    LAMINA_REQUIRE(state[2] == records_, source_, ": the snapshot was taken with ", state[2],
                   " records, but the database holds ", records_, "; resume with the same "
                   "database");
    LAMINA_REQUIRE(state[1] >= 0, where(), "the snapshot's position ", state[1],
                   " is impossible");
    prefetcher_.reset();  // its threads read seed_
    seed_ = uint64_t(state[0]);  // the transforms' draws depend on it
    restart(state[1]);
  }

 private:
  int64_t stride() const { return batch_ * workers_; }

  // transform_param, with data_param's older fields moved in (Caffe's upgrade).
  TransformationParameter transform_param() const {
    TransformationParameter t = param_.transform_param();
    copy_data_transform_fields(param_.data_param(), t);
    return t;
  }

  // The next pass takes stream position `position` onwards; the pool starts at the next
  // forward.
  void restart(int64_t position) {
    prefetcher_.reset();
    position_ = position;
    cursor_->seek_to_first();
    cursor_stream_ = 0;
  }

  void start() {
    const int depth = int(param_.data_param().prefetch());
    const int threads =
        std::clamp(int(std::thread::hardware_concurrency()), 1, std::min(depth, kMaxThreads));
    const int64_t first = position_;  // stream position of batch 0's first row of the job
    prefetcher_ = std::make_unique<BatchPrefetcher>(
        depth, threads,
        [this, first](int64_t b, RawRecords& records) { read(first + b * stride(), records); },
        [this, first](int64_t b, const RawRecords& records, HostBatch& out) {
          decode(first + b * stride() + rank_ * batch_, records, out);
        });
  }

  // This worker's N records of the pass whose first row of the job is at `pass_start`.
  // Runs on one prefetch thread at a time, in pass order.
  void read(int64_t pass_start, RawRecords& records) {
    records.resize(size_t(batch_));
    for (int64_t r = 0; r < batch_; ++r) {
      advance_to(pass_start + rank_ * batch_ + r);
      records[r].first.assign(cursor_->key());
      records[r].second.assign(cursor_->value());
    }
  }

  // Moves the cursor to stream position s (s >= where it is).
  void advance_to(int64_t s) {
    for (int64_t steps = (s - cursor_stream_) % records_; steps > 0; --steps)
      cursor_->next_wrapping();
    cursor_stream_ = s;
  }

  // Transforms a batch whose first row is stream position `first`; any prefetch thread.
  void decode(int64_t first, const RawRecords& records, HostBatch& out) const {
    const int64_t count = example_.count();
    out.data.resize(size_t(batch_ * count));
    out.label.resize(size_t(batch_));
    DatumBuffers buffers;
    for (int64_t r = 0; r < batch_; ++r) {
      const auto& [key, value] = records[r];
      const DatumValues example = read_datum(value, source_, key, mode_, buffers);
      if (example.shape != shape_) require_same_output(example.shape, key);
      const int64_t s = first + r;
      transformer_->transform(example, transformer_->draw(seed_, uint64_t(s), example.shape),
                              out.data.data() + r * count);
      out.label[size_t(r)] = float(buffers.datum.label());
    }
  }

  // A record of another size than the first must transform to the same shape.
  void require_same_output(const DatumShape& shape, const std::string& key) const {
    const std::string prefix = record_prefix(source_, key);
    const DatumShape out = transformer_->output_shape(shape, prefix);
    LAMINA_REQUIRE(out == example_, prefix, "is ", shape_text(shape), " (C x H x W), "
                   "transformed to ", shape_text(out), ", but the first record is ",
                   shape_text(shape_), ", transformed to ", shape_text(example_),
                   "; a Data layer's records must have one shape (or sizes that crop_size "
                   "crops to one)",
                   shape.channels != shape_.channels
                       ? "; for encoded images of different channels, set "
                         "transform_param.force_color or force_gray"
                       : "");
  }

  int64_t batch_ = 0;        // N, this worker's rows
  int64_t records_ = 0;      // in the database
  int64_t position_ = 0;     // stream position of the next pass's first row of the job
  int64_t workers_ = 1, rank_ = 0;
  bool labels_ = false;
  std::string source_;       // "layer 'x' (Data): LMDB database 'path'"
  DatumShape shape_;         // of the first record
  DatumShape example_;       // of a transformed record
  ImageMode mode_ = ImageMode::kAsIs;  // how encoded records decode
  std::unique_ptr<DbReader> db_;
  std::unique_ptr<DbCursor> cursor_;  // the prefetch pool's, one reader at a time
  int64_t cursor_stream_ = 0;         // a stream position of the cursor's record
  std::unique_ptr<DataTransformer> transformer_;
  std::unique_ptr<BatchPrefetcher> prefetcher_;  // last: its threads use the members above
};

}  // namespace

void register_data_layer() { register_layer<DataLayer>("Data"); }

}  // namespace lamina
