// Caffe's BlobProto: one array, as .caffemodel layers, mean files (.binaryproto) and
// InfogainLoss's matrix hold it. The shape is `shape`, or the older num/channels/height/width
// (the legacy form, which Caffe's Blob::ShapeEquals compares counting axes from the end); the
// values are floats in data, or doubles in double_data (which win when both are given).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// Whether blob gives its shape as num/channels/height/width.
bool has_legacy_shape(const BlobProto& blob);
// A blob's shape: its shape, or (num, channels, height, width) when it gives those.
Shape blob_shape(const BlobProto& blob);
// How many values the blob stores (double_data's, or data's), whatever its shape says.
int64_t blob_value_count(const BlobProto& blob);
// The stored values as floats: blob_value_count(blob) of them written to out.
void copy_blob_values(const BlobProto& blob, float* out);

// A BlobProto file's array, unchecked: whether the values fit the shape is the caller's
// question, asked with the caller's words.
struct BlobFile {
  std::string prefix;  // "<what> '<path>': ", the start of messages about the file
  Shape shape;
  std::vector<float> values;
};
// Reads a BlobProto file (Caffe's binary .binaryproto). what and if_missing as InputFile's;
// a file over max_bytes, or one that does not parse, is an Error naming it.
BlobFile read_blob_proto(const std::string& path, const std::string& what, int64_t max_bytes,
                         const std::string& if_missing = {});

}  // namespace lamina
