// ImageData: Caffe's data layer over the images of a list file.
//
//   layer { name: "data" type: "ImageData" top: "data" top: "label" include { phase: TRAIN }
//           transform_param { mirror: true crop_size: 227 mean_file: "mean.binaryproto" }
//           image_data_param { source: "train.txt" root_folder: "images/" batch_size: 256
//                              shuffle: true new_height: 256 new_width: 256 } }
//
// The list (image_list.hpp): one "PATH LABEL" a line, split at the last space. Each image is
// read from root_folder + PATH (joined as they are, as Caffe), decoded in colour (is_color,
// the default: 3 channels, B G R) or in gray (1), resized to new_height x new_width when
// both are set (bilinear, as cv::resize; Caffe requires both or neither), then transformed
// as transform_param says (data_transformer.hpp). is_color decides the colour: Caffe ignores
// transform_param's force_color and force_gray here; Lamina refuses them, naming is_color.
// Tops: data (N, C, H', W') and label (N), the listed labels as float. The shape comes from
// the stream's first image; an image that transforms to another shape is an Error, as is one
// that cannot be read or decoded, naming the list file, the line and the path.
// Order: stream position s (prefetched_data.hpp) is entry order_e[s % n] of epoch e = s / n,
// n the listed images: the list's order, or with shuffle a permutation drawn from the layer's
// seed and e (seeded_shuffle.hpp). So every epoch is shuffled anew, as Caffe reshuffles at
// each epoch's end, and the order depends only on the seed. rand_skip starts the stream at
// a position drawn from the seed in 0..rand_skip-1.
// Prefetch: read only picks the entries (one thread at a time); the files are read, decoded,
// resized and transformed in decode, on every prefetch thread.
// image_data_param's older scale, mean_file, crop_size and mirror are moved into
// transform_param, as Caffe's net upgrade does.
#include <memory>
#include <vector>

#include "lamina/data_transformer.hpp"
#include "lamina/file_access.hpp"
#include "lamina/image.hpp"
#include "lamina/image_list.hpp"
#include "lamina/registry.hpp"
#include "lamina/seeded_shuffle.hpp"
#include "lamina/upgrade_v1.hpp"
#include "prefetched_data.hpp"

namespace lamina {
namespace {

constexpr int kPrefetch = 4;  // batches prepared ahead (Caffe's default prefetch)

// What loading one image needs, reused from image to image (one set per thread).
struct ImageBuffers {
  Image image, resized;      // (H, W, C)
  std::vector<uint8_t> chw;  // (C, H, W)
};

// The entries of a list file, in each epoch's order.
class ListSource final : public RecordSource {
 public:
  // where: "layer 'x' (ImageData): ".
  ListSource(const ImageDataParameter& param, std::string where,
             std::unique_ptr<DataTransformer> transformer)
      : param_(param), where_(std::move(where)), entries_(read_image_list(param.source())),
        transformer_(std::move(transformer)) {}

  int64_t records() const override { return int64_t(entries_.size()); }
  std::string name() const override {
    return where_ + "list file " + quoted_path(param_.source());
  }

  // Loads the image at stream position `start` of the stream seeded by `seed`, whose shape
  // every image must transform to; returns the transformed shape.
  DatumShape first_example(uint64_t seed, int64_t start) {
    const ImageListEntry& entry = entries_[size_t(index(seed, start))];
    ImageBuffers buffers;
    first_ = load(entry, buffers).shape;
    return transformer_->output_shape(first_, prefix(entry));
  }

  // Each record is the index of an entry (as text).
  void read(uint64_t seed, int64_t first, int64_t count, RawRecords& records) override {
    records.resize(size_t(count));
    for (int64_t r = 0; r < count; ++r) {
      records[size_t(r)].first = std::to_string(index(seed, first + r));
      records[size_t(r)].second.clear();
    }
  }

  void decode(uint64_t seed, int64_t position, const RawRecords::value_type& record,
              float* data, float* label) const override {
    const ImageListEntry& entry = entries_[size_t(std::stoll(record.first))];
    thread_local ImageBuffers buffers;  // each prefetch thread's
    const DatumValues example = load(entry, buffers);
    if (example.shape != first_)
      transformer_->require_same_output(example.shape, first_, prefix(entry));
    transformer_->transform(example, transformer_->draw(seed, uint64_t(position), example.shape),
                            data);
    *label = float(entry.label);
  }

 private:
  std::string prefix(const ImageListEntry& entry) const {
    return where_ + image_list_prefix(param_.source(), entry);
  }

  // The entry at stream position s of the stream seeded by `seed`. Called by one thread at
  // a time (read, or setup before the pool starts).
  int64_t index(uint64_t seed, int64_t s) {
    const int64_t n = records(), epoch = s / n;
    if (!param_.shuffle()) return s % n;
    if (order_.empty() || epoch != epoch_ || seed != order_seed_) {
      order_ = epoch_permutation(seed, epoch, n);
      epoch_ = epoch;
      order_seed_ = seed;
    }
    return order_[size_t(s % n)];
  }

  // Reads, decodes and resizes an entry's image: (C, H, W) bytes in buffers.chw.
  DatumValues load(const ImageListEntry& entry, ImageBuffers& buffers) const {
    const std::string file = param_.root_folder() + entry.path;
    const ImageMode mode = param_.is_color() ? ImageMode::kColor : ImageMode::kGray;
    try {
      decode_image(read_image_file(file), mode, "image " + quoted_path(file), buffers.image);
    } catch (const Error& e) {
      throw Error(prefix(entry) + e.what());
    }
    const bool resize = param_.new_height() > 0;
    if (resize) resize_image(buffers.image, param_.new_height(), param_.new_width(),
                             buffers.resized);
    return image_values(resize ? buffers.resized : buffers.image, buffers.chw);
  }

  ImageDataParameter param_;
  std::string where_;
  std::vector<ImageListEntry> entries_;
  std::unique_ptr<DataTransformer> transformer_;
  DatumShape first_;  // of the stream's first image, decoded and resized
  // The order of epoch epoch_ for order_seed_ (with shuffle); read's alone.
  std::vector<int32_t> order_;
  int64_t epoch_ = -1;
  uint64_t order_seed_ = 0;
};

class ImageDataLayer final : public PrefetchedData {
 public:
  using PrefetchedData::PrefetchedData;

  std::vector<std::string> parameter_messages() const override {
    return {"image_data_param", "transform_param"};
  }

  void setup(const Tensors& /*bottom*/, const Tensors& top) override {
    const ImageDataParameter& p = param_.image_data_param();
    LAMINA_REQUIRE(!p.source().empty(), where(), "image_data_param.source must name the list "
                   "file (PATH LABEL lines)");
    LAMINA_REQUIRE(p.batch_size() > 0, where(), "image_data_param.batch_size must be > 0");
    LAMINA_REQUIRE((p.new_height() > 0) == (p.new_width() > 0), where(), "image_data_param "
                   "has new_height ", p.new_height(), " and new_width ", p.new_width(),
                   "; set both to resize the images, or neither");
    LAMINA_REQUIRE(int64_t(p.new_height()) * p.new_width() <= kMaxImagePixels, where(),
                   "image_data_param resizes to ", p.new_width(), " x ", p.new_height(),
                   " (width x height), more than the ", kMaxImagePixels, " pixels an image "
                   "may have");
    LAMINA_REQUIRE(!param_.transform_param().force_color() &&
                       !param_.transform_param().force_gray(),
                   where(), "transform_param.force_color and force_gray do not apply to "
                   "ImageData; image_data_param.is_color chooses colour (true) or gray");
    // transform_param, with image_data_param's older fields moved in (Caffe's upgrade)
    TransformationParameter transform = param_.transform_param();
    copy_data_transform_fields(p, transform);
    auto source = std::make_unique<ListSource>(
        p, where(), std::make_unique<DataTransformer>(transform, phase_, where()));
    LAMINA_REQUIRE(p.rand_skip() <= source->records(), source->name(), ": rand_skip ",
                   p.rand_skip(), " is more than the ", source->records(), " images listed");
    const int64_t start = skip_start(p.rand_skip());
    const DatumShape example = source->first_example(seed_, start);
    shape_stream(top, p.batch_size(), example, std::move(source), kPrefetch, start);
  }
};

}  // namespace

void register_image_data_layer() { register_layer<ImageDataLayer>("ImageData"); }

}  // namespace lamina
