// Caffe's Datum records, as LMDB and LevelDB databases hold them: one example of channels x
// height x width values, stored as uint8 bytes (data) or floats (float_data), with a label;
// or an encoded image (encoded: true, a JPEG or PNG file in data, no dimensions: Caffe's
// convert_imageset --encoded), decoded when it is read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/image.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// (C, H, W) of one example.
struct DatumShape {
  int64_t channels = 0, height = 0, width = 0;
  int64_t count() const { return channels * height * width; }
  Shape shape() const { return {channels, height, width}; }
  bool operator==(const DatumShape& o) const {
    return channels == o.channels && height == o.height && width == o.width;
  }
  bool operator!=(const DatumShape& o) const { return !(*this == o); }
};

// "C x H x W"
std::string shape_text(const DatumShape& shape);

// One example's values (C, H, W), viewed where they are: bytes (uint8) or floats.
struct DatumValues {
  DatumShape shape;
  const uint8_t* bytes = nullptr;
  const float* floats = nullptr;
};

// What read_datum keeps from record to record (one per thread), reused so that reading
// allocates only for a record larger than those before.
struct DatumBuffers {
  Datum datum;
  Image image;               // an encoded record's image, (H, W, C)
  std::vector<uint8_t> chw;  // the same as (C, H, W)
};

// Where a record came from, for messages: "LMDB database 'path', record '00000012': ".
std::string record_prefix(const std::string& source, std::string_view key);

// An image's pixels as a Datum's values: (C, H, W) bytes in chw (CVMatToDatum's order).
DatumValues image_values(const Image& image, std::vector<uint8_t>& chw);

// Reads a record's value into buffers.datum and returns its example. A raw Datum must have
// positive dimensions and exactly channels x height x width values in data (bytes) or
// float_data; they are viewed in place. An encoded one is decoded as mode says (Caffe's
// DataTransformer: force_color, force_gray, or as the file is) and its (H, W, C) pixels put
// in (C, H, W) order, as Caffe's CVMatToDatum orders them. Every problem (not a Datum, bad
// dimensions, an image that does not decode) is an Error starting with
// record_prefix(source, key). The view lives as long as buffers.
DatumValues read_datum(std::string_view bytes, const std::string& source, std::string_view key,
                       ImageMode mode, DatumBuffers& buffers);

}  // namespace lamina
