// Caffe's convert_mnist_data and compute_image_mean (data_tools.hpp).
#include "lamina/data_tools.hpp"

#include <memory>
#include <vector>

#include "datum_writer.hpp"

#include "lamina/datum.hpp"
#include "lamina/idx.hpp"
#include "lamina/snapshot.hpp"

namespace lamina {

int64_t convert_mnist(const std::string& images, const std::string& labels,
                      const std::string& db_path, DbKind kind) {
  const IdxArray pixels = read_idx(images);  // (N, H, W)
  const IdxArray classes = read_idx(labels);  // (N)
  LAMINA_REQUIRE(pixels.dims.size() == 3, "IDX file '", images, "' has dimensions ",
                 shape_string(pixels.dims), "; an image file has 3 (count, rows, cols)");
  LAMINA_REQUIRE(classes.dims.size() == 1, "IDX file '", labels, "' has dimensions ",
                 shape_string(classes.dims), "; a label file has 1 (count)");
  const int64_t n = pixels.dims[0], rows = pixels.dims[1], cols = pixels.dims[2];
  LAMINA_REQUIRE(n == classes.dims[0], "'", images, "' holds ", n, " images but '", labels,
                 "' holds ", classes.dims[0], " labels; the two files must come from one set");
  const size_t image_bytes = size_t(rows * cols);
  write_datums(db_path, kind, "IDX file '" + images + "'", n, [&](int64_t i, Datum& datum) {
    datum.set_channels(1);
    datum.set_height(int(rows));
    datum.set_width(int(cols));
    datum.set_data(pixels.values.data() + i * image_bytes, image_bytes);
    datum.set_label(classes.values[i]);
    return std::string();
  });
  return n;
}

BlobProto compute_image_mean(const std::string& db_path, DbKind kind, ImageMode mode) {
  std::unique_ptr<DbReader> db = open_db(db_path, kind);
  const std::string source = db_name(db_path, kind);
  std::unique_ptr<DbCursor> cursor = db->cursor();
  LAMINA_REQUIRE(cursor->valid(), source, ": the database holds no records");
  DatumBuffers buffers;
  DatumShape first;
  std::vector<double> sum;
  int64_t count = 0;
  for (; cursor->valid(); cursor->next(), ++count) {
    const DatumValues example = read_datum(cursor->value(), source, cursor->key(), mode,
                                           buffers);
    const DatumShape& shape = example.shape;
    if (count == 0) {
      first = shape;
      sum.assign(size_t(shape.count()), 0.0);
    }
    LAMINA_REQUIRE(shape == first, record_prefix(source, cursor->key()), "is ",
                   shape_text(shape), " but the first record is ", shape_text(first),
                   " (C x H x W); a mean needs images of one shape",
                   shape.channels != first.channels && buffers.datum.encoded()
                       ? " (decode every image in colour or in gray: --force_color or "
                         "--force_gray)"
                       : "");
    if (example.bytes) {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += example.bytes[i];
    } else {
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += example.floats[i];
    }
  }
  BlobProto mean;
  mean.set_num(1);
  mean.set_channels(int(first.channels));
  mean.set_height(int(first.height));
  mean.set_width(int(first.width));
  for (double s : sum) mean.add_data(float(s / double(count)));
  return mean;
}

// Written whole or not at all, as weights are (write_file_atomically's errors name the path).
void write_blob_proto(const BlobProto& blob, const std::string& path) {
  std::string bytes;
  LAMINA_REQUIRE(blob.SerializeToString(&bytes), "cannot encode the BlobProto for '", path, "'");
  write_file_atomically(path, bytes);
}

}  // namespace lamina
