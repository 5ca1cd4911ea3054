// Reading Datum records, raw or encoded (datum.hpp).
#include "lamina/datum.hpp"

#include <limits>

namespace lamina {
namespace {

DatumValues raw_values(const Datum& datum, const std::string& source, std::string_view key) {
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
                 "x width is ", shape_text(shape), " = ", shape.count());
  DatumValues values{shape};
  if (bytes_held) values.bytes = reinterpret_cast<const uint8_t*>(datum.data().data());
  else values.floats = datum.float_data().data();
  return values;
}

DatumValues decoded_values(ImageMode mode, const std::string& source, std::string_view key,
                           DatumBuffers& buffers) {
  std::string what = record_prefix(source, key);
  what.resize(what.size() - 2);  // without ": "
  decode_image(buffers.datum.data(), mode, what + " (an encoded Datum)", buffers.image);
  return image_values(buffers.image, buffers.chw);
}

}  // namespace

std::string shape_text(const DatumShape& shape) {
  return std::to_string(shape.channels) + " x " + std::to_string(shape.height) + " x " +
         std::to_string(shape.width);
}

std::string record_prefix(const std::string& source, std::string_view key) {
  std::string shown(key.substr(0, 64));
  for (char& c : shown)
    if (c < 0x20 || c == 0x7f) c = '?';  // keys are text in Caffe's tools; show any as text
  return source + ", record '" + shown + (key.size() > 64 ? "...'" : "'") + ": ";
}

DatumValues image_values(const Image& image, std::vector<uint8_t>& chw) {
  chw.resize(size_t(image.count()));
  image_to_chw(image, chw.data());
  return {{image.channels, image.height, image.width}, chw.data(), nullptr};
}

DatumValues read_datum(std::string_view bytes, const std::string& source, std::string_view key,
                       ImageMode mode, DatumBuffers& buffers) {
  Datum& datum = buffers.datum;
  LAMINA_REQUIRE(bytes.size() <= size_t(std::numeric_limits<int>::max()) &&
                     datum.ParseFromArray(bytes.data(), int(bytes.size())),
                 record_prefix(source, key), "the value (", bytes.size(),
                 " bytes) is not a Datum: the database is corrupt, or holds something else");
  return datum.encoded() ? decoded_values(mode, source, key, buffers)
                         : raw_values(datum, source, key);
}

}  // namespace lamina
