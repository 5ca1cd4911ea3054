// Caffe's data tools, as library functions (the lamina tool's convert_mnist,
// convert_imageset and compute_image_mean call them).
#pragma once

#include <cstdint>
#include <string>

#include "lamina/database.hpp"
#include "lamina/image.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

constexpr int64_t kRecordsPerCommit = 1000;  // Caffe's converters commit every 1000 records

// Caffe's convert_mnist_data: an IDX image file (N, H, W) and label file (N) (plain or .gz)
// become a new database of N raw Datums (channels 1, height H, width W, the pixels as
// bytes, the label) under the keys "%08d" of the index, committed every 1000 records.
// Returns N.
int64_t convert_mnist(const std::string& images, const std::string& labels,
                      const std::string& db_path, DbKind kind);

// convert_imageset's options, Caffe's flags.
struct ImagesetOptions {
  int64_t resize_height = 0, resize_width = 0;  // both 0, or both positive: cv::resize to them
  bool shuffle = false;  // the lines in epoch_permutation(seed, 0, lines) order
  uint64_t seed = 1;
  bool gray = false;     // decode in gray (1 channel); else in colour (3)
  bool encoded = false;  // keep the images as JPEG/PNG files (encoded Datums)
  std::string encode_type;  // "jpg" or "png": re-encode in it (implies encoded)
  bool check_size = false;  // every image must decode (and resize) to the first one's shape
  DbKind backend = DbKind::kLmdb;
};

// Caffe's convert_imageset: the images of a list file (image_list.hpp; each path read as
// root + path, joined as Caffe does, with no separator added) become a new database of
// Datums under the keys "%08d_PATH" of the line's index after the shuffle, committed every
// 1000 records. Without encoded: raw Datums (channels, height, width, the (C, H, W) bytes in
// B, G, R order, the label). With encoded: the file's own bytes when it is neither resized
// nor of another type than encode_type says (by its extension, jpeg counting as jpg), else
// the decoded (resized) image encoded anew (in encode_type, or the extension's type);
// encoded Datums hold data, label and encoded: true, no dimensions, as Caffe's.
// Where Caffe logs and skips an image it cannot read, this stops with an Error naming the
// list file, the line and the path; the database is written under a temporary name and
// renamed to db_path only when every image is in, so a failed run leaves nothing. An
// existing db_path is an Error. Returns the number of records.
int64_t convert_imageset(const std::string& root, const std::string& list,
                         const std::string& db_path, const ImagesetOptions& options);

// Caffe's compute_image_mean: the mean over every record of a database of Datums of one
// shape, as a BlobProto with num 1 and the Datums' channels, height and width (summed in
// double). Encoded records are decoded as mode says (Caffe: as each file is). Records of
// another shape are an Error naming the record.
BlobProto compute_image_mean(const std::string& db_path, DbKind kind,
                             ImageMode mode = ImageMode::kAsIs);

// Writes a BlobProto file (.binaryproto); an Error names the path if it cannot.
void write_blob_proto(const BlobProto& blob, const std::string& path);

}  // namespace lamina
