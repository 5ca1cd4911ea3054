// Caffe's transforms of examples (data_transformer.hpp).
#include "lamina/data_transformer.hpp"

#include "lamina/blob_proto.hpp"
#include "lamina/counter_rng.hpp"

namespace lamina {
namespace {

// Counter values per example: mirror, h_off, w_off.
constexpr uint64_t kDrawsPerExample = 3;

}  // namespace

std::vector<float> read_mean_blob(const std::string& path, const std::string& what,
                                  DatumShape& shape) {
  const BlobFile blob = read_blob_proto(path, what, int64_t{1} << 32, "(make one with `lamina "
                                        "compute_image_mean DB MEAN.binaryproto`)");
  const Shape& dims = blob.shape;
  Shape chw(3, 1);  // the last three dimensions; those before must be 1 (num 1)
  bool leading_ones = dims.size() <= 4;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (i + 3 >= dims.size()) chw[i + 3 - dims.size()] = dims[i];
    else leading_ones = leading_ones && dims[i] == 1;
  }
  LAMINA_REQUIRE(leading_ones && chw[0] > 0 && chw[1] > 0 && chw[2] > 0, blob.prefix,
                 "has shape ", shape_string(dims), "; a mean image is (1, C, H, W)");
  const int64_t stored = int64_t(blob.values.size());
  // Dimensions read from a file may multiply past int64: each is at most the values stored
  // (2^32), so their product fits in 128 bits.
  const bool small = chw[0] <= stored && chw[1] <= stored && chw[2] <= stored;
  const unsigned __int128 count =
      small ? static_cast<unsigned __int128>(chw[0]) * uint64_t(chw[1]) * uint64_t(chw[2]) : 0;
  LAMINA_REQUIRE(small && count == static_cast<unsigned __int128>(stored), blob.prefix,
                 "holds ",
                 stored, " values, but its shape ", shape_string(dims), " needs ", chw[0],
                 " x ", chw[1], " x ", chw[2]);
  shape = {chw[0], chw[1], chw[2]};
  return blob.values;
}

DataTransformer::DataTransformer(const TransformationParameter& param, Phase phase,
                                 std::string where)
    : param_(param), phase_(phase), where_(std::move(where)) {
  LAMINA_REQUIRE(!(param.has_mean_file() && param.mean_value_size() > 0), where_,
                 "transform_param has both mean_file and mean_value; give one of them");
  if (param.has_mean_file()) {
    mean_ = read_mean_blob(param.mean_file(), "mean file (transform_param.mean_file)",
                           mean_shape_);
  } else {
    mean_.assign(param.mean_value().begin(), param.mean_value().end());
  }
}

DatumShape DataTransformer::output_shape(const DatumShape& in, const std::string& prefix) const {
  const int64_t crop = param_.crop_size();
  LAMINA_REQUIRE(crop <= in.height && crop <= in.width, prefix, "transform_param.crop_size ",
                 crop, " is larger than the image, ", in.height, " x ", in.width,
                 " (height x width); crop_size must be at most ", std::min(in.height, in.width));
  LAMINA_REQUIRE(!param_.has_mean_file() || mean_shape_ == in, prefix, "the mean file '",
                 param_.mean_file(), "' is ", shape_string(mean_shape_.shape()),
                 " (C, H, W), but the image is ", shape_string(in.shape()),
                 "; compute the mean of this data (lamina compute_image_mean)");
  LAMINA_REQUIRE(param_.has_mean_file() || mean_.size() <= 1 ||
                     int64_t(mean_.size()) == in.channels,
                 prefix, "transform_param has ", mean_.size(), " mean_value entries for ",
                 in.channels, " channels; give one value, or one per channel");
  return {in.channels, crop ? crop : in.height, crop ? crop : in.width};
}

void DataTransformer::require_same_output(const DatumShape& in, const DatumShape& first,
                                          const std::string& prefix) const {
  const DatumShape out = output_shape(in, prefix), first_out = output_shape(first, prefix);
  LAMINA_REQUIRE(out == first_out, prefix, "is ", shape_text(in), " (C x H x W), transformed "
                 "to ", shape_text(out), ", but the first is ", shape_text(first),
                 ", transformed to ", shape_text(first_out), "; the examples of a data layer "
                 "must have one shape (or sizes that crop_size crops to one)",
                 in.channels != first.channels
                     ? "; encoded images decode with their own channels unless "
                       "transform_param.force_color or force_gray is set"
                     : "");
}

ImageMode DataTransformer::image_mode() const {
  LAMINA_REQUIRE(!(param_.force_color() && param_.force_gray()), where_, "transform_param "
                 "sets both force_color and force_gray; an image decodes in colour or in gray");
  return param_.force_color() ? ImageMode::kColor
         : param_.force_gray() ? ImageMode::kGray
                               : ImageMode::kAsIs;
}

TransformDraw DataTransformer::draw(uint64_t seed, uint64_t example,
                                    const DatumShape& in) const {
  const uint64_t first = example * kDrawsPerExample;
  TransformDraw d;
  d.mirror = param_.mirror() && (counter_hash(seed, first) >> 63) != 0;
  const int64_t crop = param_.crop_size();
  const int64_t rows = crop ? in.height - crop + 1 : 1, cols = crop ? in.width - crop + 1 : 1;
  if (phase_ == TRAIN && crop > 0) {
    d.h_off = int64_t(counter_hash(seed, first + 1) % uint64_t(rows));
    d.w_off = int64_t(counter_hash(seed, first + 2) % uint64_t(cols));
  } else {
    d.h_off = (rows - 1) / 2;
    d.w_off = (cols - 1) / 2;
  }
  return d;
}

void DataTransformer::transform(const DatumValues& in, const TransformDraw& draw,
                                float* out) const {
  if (in.bytes) transform_values(in.bytes, in.shape, draw, out);
  else transform_values(in.floats, in.shape, draw, out);
}

template <class Value>
void DataTransformer::transform_values(const Value* in, const DatumShape& shape,
                                       const TransformDraw& draw, float* out) const {
  const float scale = param_.scale();
  const bool mean_image = param_.has_mean_file();  // else mean_ holds mean_value
  const int64_t crop = param_.crop_size();
  const int64_t H = shape.height, W = shape.width;
  const int64_t h_out = crop ? crop : H, w_out = crop ? crop : W;
  for (int64_t c = 0; c < shape.channels; ++c) {
    const float channel_mean = mean_image || mean_.empty() ? 0.0f
                               : mean_.size() == 1          ? mean_[0]
                                                            : mean_[c];
    for (int64_t h = 0; h < h_out; ++h) {
      const int64_t row = (c * H + draw.h_off + h) * W + draw.w_off;  // input index of w = 0
      float* dst = out + (c * h_out + h) * w_out;
      for (int64_t w = 0; w < w_out; ++w) {
        const int64_t src = row + (draw.mirror ? w_out - 1 - w : w);
        const float mean = mean_image ? mean_[src] : channel_mean;
        dst[w] = (float(in[src]) - mean) * scale;
      }
    }
  }
}

}  // namespace lamina
