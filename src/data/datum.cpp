// Parsing and checking raw Datum records (datum.hpp).
#include "lamina/datum.hpp"

#include <limits>

namespace lamina {

std::string record_prefix(const std::string& source, std::string_view key) {
  std::string shown(key.substr(0, 64));
  for (char& c : shown)
    if (c < 0x20 || c == 0x7f) c = '?';  // keys are text in Caffe's tools; show any as text
  return source + ", record '" + shown + (key.size() > 64 ? "...'" : "'") + ": ";
}

DatumShape parse_raw_datum(std::string_view bytes, const std::string& source,
                           std::string_view key, Datum& datum) {
  LAMINA_REQUIRE(bytes.size() <= size_t(std::numeric_limits<int>::max()) &&
                     datum.ParseFromArray(bytes.data(), int(bytes.size())),
                 record_prefix(source, key), "the value (", bytes.size(),
                 " bytes) is not a Datum: the database is corrupt, or holds something else");
  LAMINA_REQUIRE(!datum.encoded(), record_prefix(source, key),
                 "is an encoded image (JPEG/PNG); Lamina cannot decode encoded Datums yet: "
                 "write the database with raw pixels (convert_imageset without --encoded)");
  const DatumShape shape{datum.channels(), datum.height(), datum.width()};
  LAMINA_REQUIRE(shape.channels > 0 && shape.height > 0 && shape.width > 0,
                 record_prefix(source, key), "has channels ", shape.channels, ", height ",
                 shape.height, ", width ", shape.width, "; each must be positive");
  LAMINA_REQUIRE(shape.height * shape.width <= std::numeric_limits<int>::max() / shape.channels,
                 record_prefix(source, key), "has channels x height x width ", shape.channels,
                 " x ", shape.height, " x ", shape.width, ", more than a Datum holds (2^31 - 1)");
  const bool bytes_held = !datum.data().empty();
  const int64_t held = bytes_held ? int64_t(datum.data().size()) : datum.float_data_size();
  LAMINA_REQUIRE(held == shape.count(), record_prefix(source, key), "holds ", held,
                 bytes_held ? " bytes of data" : " float_data values", ", but channels x height "
                 "x width is ", shape.channels, " x ", shape.height, " x ", shape.width, " = ",
                 shape.count());
  return shape;
}

}  // namespace lamina
