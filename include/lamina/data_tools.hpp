// Caffe's data tools, as library functions (the lamina tool's convert_mnist and
// compute_image_mean call them).
#pragma once

#include <cstdint>
#include <string>

#include "lamina/database.hpp"
#include "lamina/image.hpp"
#include "lamina.pb.h"

namespace lamina {

// Caffe's convert_mnist_data: an IDX image file (N, H, W) and label file (N) (plain or .gz)
// become a new database of N raw Datums (channels 1, height H, width W, the pixels as
// bytes, the label) under the keys "%08d" of the index, committed every 1000 records.
// Returns N.
int64_t convert_mnist(const std::string& images, const std::string& labels,
                      const std::string& db_path, DbKind kind);

// Caffe's compute_image_mean: the mean over every record of a database of Datums of one
// shape, as a BlobProto with num 1 and the Datums' channels, height and width (summed in
// double). Encoded records are decoded as mode says (Caffe: as each file is). Records of
// another shape are an Error naming the record.
BlobProto compute_image_mean(const std::string& db_path, DbKind kind,
                             ImageMode mode = ImageMode::kAsIs);

// Writes a BlobProto file (.binaryproto); an Error names the path if it cannot.
void write_blob_proto(const BlobProto& blob, const std::string& path);

}  // namespace lamina
