// Fuzz target: bytes -> a database record (key and value) -> read_datum (raw, or an encoded
// image decoded as it is), and for a record it accepts, DataTransformer with the transform_param the input's header chooses -> transform
// of that record into a buffer of exactly the transformed shape (AddressSanitizer catches a
// read past the record or a write past the buffer), and each output value is checked
// against the transform's formula computed here from the record's values, read with their
// indices checked (a Datum's bytes and floats may sit in a larger buffer that AddressSanitizer
// does not fence).
//
// Input: a 4-byte header, then the key, then the value (a Datum's bytes):
//   byte 0: bit 0 mirror, bit 1 TRAIN (else TEST), bits 2-3 mean_value: none, one value, one
//           per channel, or channels + 1 values (an Error), bit 4 scale 1/256 (else 1)
//   byte 1: crop_size (0 = none)
//   byte 2: the key's length (at most what follows the header)
//   byte 3: the example index of the random draw
// Every record that is neither a raw Datum of the shape it announces nor a decodable image,
// and every transform_param that does not fit the shape, must end in a lamina::Error;
// anything else is a bug.
// Corpus (tests/fuzz/corpus/fuzz_datum): small raw Datums of bytes and of float_data, each
// behind a header whose transform fits it, an encoded Datum, and the reproducers found so far
// (crash-*: dimensions whose product overflowed int64).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_util.hpp"
#include "lamina/data_transformer.hpp"
#include "lamina/datum.hpp"

namespace lamina::fuzz {
namespace {

constexpr size_t kHeader = 4;

TransformationParameter transform_param(uint8_t flags, uint8_t crop, int64_t channels) {
  TransformationParameter p;
  p.set_mirror(flags & 1);
  p.set_crop_size(crop);
  if (flags & 16) p.set_scale(1.0f / 256);
  const int mean_mode = (flags >> 2) & 3;
  const int64_t means = mean_mode == 0 ? 0 : mean_mode == 1 ? 1 : channels + (mean_mode - 2);
  for (int64_t c = 0; c < means; ++c) p.add_mean_value(float(c) + 0.5f);
  return p;
}

// The record's value at index i of (C, H, W), checked against the storage it lies in: the
// Datum's bytes or floats (raw) or the decoded image (encoded).
float value_at(const DatumValues& values, const DatumBuffers& buffers, int64_t i) {
  int64_t held = -1;
  if (values.floats != nullptr && values.floats == buffers.datum.float_data().data())
    held = buffers.datum.float_data_size();
  else if (values.bytes != nullptr &&
           values.bytes == reinterpret_cast<const uint8_t*>(buffers.datum.data().data()))
    held = int64_t(buffers.datum.data().size());
  else if (values.bytes != nullptr && values.bytes == buffers.chw.data())
    held = int64_t(buffers.chw.size());
  if (i < 0 || i >= held) std::abort();
  return values.bytes != nullptr ? float(values.bytes[i]) : values.floats[i];
}

// The window lies inside the input, at the centre unless TRAIN crops, and is mirrored only
// with mirror set; out is (x[c][h_off + h][w_off + w'] - mean[c]) * scale, w' the mirrored w
// (data_transformer.hpp), compared exactly (NaN matches NaN): both sides compute the same
// float operations.
void check(const DatumValues& values, const DatumBuffers& buffers,
           const TransformationParameter& p, Phase phase, const DatumShape& out_shape,
           const TransformDraw& d, const std::vector<float>& out) {
  const DatumShape& in = values.shape;
  const int64_t crop = p.crop_size();
  if (out_shape != DatumShape{in.channels, crop ? crop : in.height, crop ? crop : in.width})
    std::abort();
  const int64_t rows = in.height - out_shape.height, cols = in.width - out_shape.width;
  const bool random = phase == TRAIN && crop > 0;
  if (d.h_off < 0 || d.w_off < 0 || d.h_off > rows || d.w_off > cols ||
      (!random && (d.h_off != rows / 2 || d.w_off != cols / 2)) || (d.mirror && !p.mirror()))
    std::abort();
  size_t k = 0;
  for (int64_t c = 0; c < out_shape.channels; ++c) {
    const float mean = p.mean_value_size() == 0   ? 0.0f
                       : p.mean_value_size() == 1 ? p.mean_value(0)
                                                  : p.mean_value(int(c));
    for (int64_t h = 0; h < out_shape.height; ++h) {
      for (int64_t w = 0; w < out_shape.width; ++w, ++k) {
        const int64_t col = d.w_off + (d.mirror ? out_shape.width - 1 - w : w);
        const float x =
            value_at(values, buffers, (c * in.height + d.h_off + h) * in.width + col);
        const float expected = (x - mean) * p.scale();
        if (!(out[k] == expected || (out[k] != out[k] && expected != expected))) std::abort();
      }
    }
  }
}

void run(const uint8_t* data, size_t size) {
  quiet_logging();
  if (size < kHeader) return;
  const uint8_t flags = data[0], crop = data[1], example = data[3];
  const std::string_view rest(reinterpret_cast<const char*>(data + kHeader), size - kHeader);
  const size_t key_size = std::min<size_t>(data[2], rest.size());
  const std::string_view key = rest.substr(0, key_size), value = rest.substr(key_size);
  DatumBuffers buffers;
  DatumValues values;
  try {
    values = read_datum(value, "fuzz database", key, ImageMode::kAsIs, buffers);
    accepted("read_datum");
  } catch (const Error& e) {
    rejected("read_datum", e);
    return;
  }
  try {
    const Phase phase = flags & 2 ? TRAIN : TEST;
    const TransformationParameter p = transform_param(flags, crop, values.shape.channels);
    DataTransformer transformer(p, phase, "fuzz layer: ");
    const DatumShape out_shape = transformer.output_shape(values.shape, "fuzz record: ");
    std::vector<float> out(size_t(out_shape.count()));
    const TransformDraw draw = transformer.draw(1, example, values.shape);
    transformer.transform(values, draw, out.data());
    check(values, buffers, p, phase, out_shape, draw, out);
    accepted("transform");
  } catch (const Error& e) {
    rejected("transform", e);
  }
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
