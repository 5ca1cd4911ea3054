// Caffe's Datum records, as LMDB and LevelDB databases hold them: one example of channels x
// height x width values, stored as uint8 bytes (data) or floats (float_data), with a label.
// Encoded Datums (a JPEG or PNG file in data, encoded: true) are refused for now: decoding
// them needs an image library Lamina does not link yet.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lamina/common.hpp"
#include "lamina.pb.h"

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

// Where a record came from, for messages: "LMDB database 'path', record '00000012': ".
std::string record_prefix(const std::string& source, std::string_view key);

// Parses a record's value as a raw Datum and checks it: positive dimensions, not encoded,
// and exactly channels x height x width values in data (bytes) or float_data. Every problem
// is an Error starting with record_prefix(source, key).
DatumShape parse_raw_datum(std::string_view bytes, const std::string& source,
                           std::string_view key, Datum& datum);

}  // namespace lamina
