// Caffe's DataTransformer: one example (C, H, W) becomes (C, H', W') floats,
//
//   out[c][h][w] = (in[c][h_off + h][w_off + w'] - mean) * scale,
//   w' = mirror ? W' - 1 - w : w,
//
// where H' = W' = crop_size with a crop (H' = H, W' = W without), and mean is mean_file's
// value at the same position of the uncropped image (in[c][h_off + h][w_off + w']), or
// mean_value[c] (one value serves every channel), or 0.
// The offsets: random in TRAIN, uniform over 0..H-crop_size and 0..W-crop_size; the centre
// ((H - crop_size) / 2, rounded down) in TEST. Mirror: with mirror set, each example is
// mirrored with probability 1/2 in both phases, as in Caffe (whose TEST nets mirror too).
// The random numbers come from counter_rng.hpp for (seed, example index), so an example's
// transform does not depend on which thread computes it or when.
// Examples may differ in size where the crop makes them one (H' x W'), as in Caffe; each is
// checked (output_shape) with its own (C, H, W).
// force_color and force_gray say how encoded images decode (image_mode); raw Datums ignore
// them, as Caffe.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lamina/datum.hpp"
#include "lamina/lamina.pb.h"

namespace lamina {

// The random choices for one example.
struct TransformDraw {
  bool mirror = false;
  int64_t h_off = 0, w_off = 0;
};

class DataTransformer {
 public:
  // Reads mean_file (a BlobProto). where: the start of error messages ("layer 'x' (Data): ").
  // mean_file together with mean_value is an Error, as in Caffe.
  DataTransformer(const TransformationParameter& param, Phase phase, std::string where);

  // The transformed shape of an example of shape `in`. A crop larger than the example, a
  // mean_file of another shape, or mean_value with neither 1 nor C values is an Error
  // starting with prefix (where_ or the record) and naming what to fix.
  DatumShape output_shape(const DatumShape& in, const std::string& prefix) const;

  // Checks that an example of shape `in`, another than the first example's (`first`),
  // transforms to the same shape, as the examples of one batch must: examples may differ in
  // size where the crop makes them one, as in Caffe. Errors start with prefix.
  void require_same_output(const DatumShape& in, const DatumShape& first,
                           const std::string& prefix) const;

  // How encoded images decode: force_color, force_gray, or as each file is. Both set is an
  // Error, as in Caffe.
  ImageMode image_mode() const;

  // The random choices for example `example` of the stream seeded by seed, of shape `in`.
  TransformDraw draw(uint64_t seed, uint64_t example, const DatumShape& in) const;
  // out (C, H', W') from an example (output_shape accepted its shape).
  void transform(const DatumValues& in, const TransformDraw& draw, float* out) const;

 private:
  template <class Value>
  void transform_values(const Value* in, const DatumShape& shape, const TransformDraw& draw,
                        float* out) const;

  TransformationParameter param_;
  Phase phase_;
  std::string where_;
  DatumShape mean_shape_;     // of mean_file
  std::vector<float> mean_;   // mean_file's values (C, H, W), or one per channel
};

// A BlobProto file's values and its shape as (C, H, W): the legacy num/channels/height/width
// with num 1, or a shape of at most 4 dimensions whose leading ones are 1. what names the
// file's use in messages ("mean file (transform_param.mean_file)").
std::vector<float> read_mean_blob(const std::string& path, const std::string& what,
                                  DatumShape& shape);

}  // namespace lamina
