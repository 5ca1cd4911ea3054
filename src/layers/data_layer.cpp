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
// Order (as Caffe, no shuffle): the database in key order, wrapping around at the end:
// stream position s (prefetched_data.hpp) is record s % records. The stream starts at record
// k, k drawn from the layer's seed in 0..rand_skip-1 when rand_skip is set (Caffe's random
// skip, so that workers or runs do not all start at the same point). Record s's random
// transform is drawn for (seed, s), so every epoch crops and mirrors anew.
// Prefetch, the device ring, CUDA graphs, data parallel and snapshots: prefetched_data.hpp;
// `prefetch` batches are prepared ahead. Records are only copied in read (one thread, in
// order); parsing, image decoding and transforms run in decode, on every thread.
// data_param's older scale, mean_file, crop_size and mirror are moved into transform_param,
// as Caffe's net upgrade does.
#include <memory>

#include "lamina/data_transformer.hpp"
#include "lamina/database.hpp"
#include "lamina/registry.hpp"
#include "lamina/upgrade_v1.hpp"
#include "prefetched_data.hpp"

namespace lamina {
namespace {

// The records of a database, in key order, wrapping around.
class DbSource final : public RecordSource {
 public:
  // Opens the database and reads its first record's shape. name: "layer 'x' (Data): LMDB
  // database 'path'".
  DbSource(const std::string& path, DbKind kind, std::string name,
           std::unique_ptr<DataTransformer> transformer)
      : name_(std::move(name)), db_(open_db(path, kind)), records_(db_->count()),
        transformer_(std::move(transformer)) {
    LAMINA_REQUIRE(records_ > 0, name_, ": the database holds no records");
    mode_ = transformer_->image_mode();
    cursor_ = db_->cursor();
    DatumBuffers buffers;
    shape_ = read_datum(cursor_->value(), name_, cursor_->key(), mode_, buffers).shape;
    example_ = transformer_->output_shape(shape_, record_prefix(name_, cursor_->key()));
  }
  int64_t records() const override { return records_; }
  std::string name() const override { return name_; }
  const DatumShape& example() const { return example_; }

  void read(uint64_t /*seed*/, int64_t first, int64_t count, RawRecords& records) override {
    records.resize(size_t(count));
    for (int64_t r = 0; r < count; ++r) {
      advance_to(first + r);
      records[size_t(r)].first.assign(cursor_->key());
      records[size_t(r)].second.assign(cursor_->value());
    }
  }

  void decode(uint64_t seed, int64_t position, const RawRecords::value_type& record,
              float* data, float* label) const override {
    const auto& [key, value] = record;
    thread_local DatumBuffers buffers;  // each prefetch thread's, reused record to record
    const DatumValues example = read_datum(value, name_, key, mode_, buffers);
    if (example.shape != shape_)
      transformer_->require_same_output(example.shape, shape_, record_prefix(name_, key));
    transformer_->transform(example, transformer_->draw(seed, uint64_t(position), example.shape),
                            data);
    *label = float(buffers.datum.label());
  }

 private:
  // Moves the cursor to stream position s, from the start when s is behind it.
  void advance_to(int64_t s) {
    if (s < cursor_stream_) {
      cursor_->seek_to_first();
      cursor_stream_ = 0;
    }
    for (int64_t steps = (s - cursor_stream_) % records_; steps > 0; --steps)
      cursor_->next_wrapping();
    cursor_stream_ = s;
  }

  std::string name_;
  std::unique_ptr<DbReader> db_;
  int64_t records_ = 0;
  std::unique_ptr<DataTransformer> transformer_;
  std::unique_ptr<DbCursor> cursor_;  // the prefetch pool's, one reader at a time
  int64_t cursor_stream_ = 0;         // a stream position of the cursor's record
  DatumShape shape_;                  // of the first record
  DatumShape example_;                // of a transformed record
  ImageMode mode_ = ImageMode::kAsIs;  // how encoded records decode
};

class DataLayer final : public PrefetchedData {
 public:
  using PrefetchedData::PrefetchedData;

  std::vector<std::string> parameter_messages() const override {
    return {"data_param", "transform_param"};
  }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const DataParameter& p = param_.data_param();
    LAMINA_REQUIRE(!p.source().empty(), where(), "data_param.source must name the database");
    LAMINA_REQUIRE(p.batch_size() > 0, where(), "data_param.batch_size must be > 0");
    LAMINA_REQUIRE(p.prefetch() > 0, where(), "data_param.prefetch must be > 0");
    const DbKind kind = p.backend() == DataParameter::LMDB ? DbKind::kLmdb : DbKind::kLevelDb;
    const std::string name = where() + db_name(p.source(), kind);
    // transform_param, with data_param's older fields moved in (Caffe's upgrade)
    TransformationParameter transform = param_.transform_param();
    copy_data_transform_fields(p, transform);
    auto source = std::make_unique<DbSource>(
        p.source(), kind, name, std::make_unique<DataTransformer>(transform, phase_, where()));
    const DatumShape example = source->example();
    shape_stream(top, p.batch_size(), example, std::move(source), int(p.prefetch()),
                 skip_start(p.rand_skip()));
  }
};

}  // namespace

void register_data_layer() { register_layer<DataLayer>("Data"); }

}  // namespace lamina
