#include "lamina/filler.hpp"

#include <cmath>

namespace lamina {
namespace {

// Caffe's fan: fan-in = count / shape[0], fan-out = count / shape[1].
float fan(const FillerParameter& filler, const Shape& shape) {
  const int64_t count = shape_count(shape);
  const float fan_in = shape.empty() || shape[0] == 0 ? 1.0f : float(count) / shape[0];
  const float fan_out = shape.size() < 2 || shape[1] == 0 ? 1.0f : float(count) / shape[1];
  switch (filler.variance_norm()) {
    case FillerParameter::FAN_OUT: return fan_out;
    case FillerParameter::AVERAGE: return (fan_in + fan_out) / 2;
    default: return fan_in;
  }
}

}  // namespace

void fill(const FillerParameter& filler, const Shape& shape, std::mt19937_64& rng,
          std::vector<float>& values) {
  values.assign(shape_count(shape), 0.0f);
  const std::string& type = filler.type();
  if (type == "constant") {
    for (float& v : values) v = filler.value();
  } else if (type == "uniform") {
    LAMINA_REQUIRE(filler.min() <= filler.max(), "uniform filler: min ", filler.min(),
                   " is greater than max ", filler.max());
    std::uniform_real_distribution<float> dist(filler.min(), filler.max());
    for (float& v : values) v = dist(rng);
  } else if (type == "gaussian") {
    LAMINA_REQUIRE(filler.std() >= 0, "gaussian filler: std must be >= 0, got ", filler.std());
    std::normal_distribution<float> dist(filler.mean(), filler.std());
    for (float& v : values) v = dist(rng);
  } else if (type == "xavier") {
    const float scale = std::sqrt(3.0f / fan(filler, shape));
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& v : values) v = dist(rng);
  } else if (type == "msra") {
    std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / fan(filler, shape)));
    for (float& v : values) v = dist(rng);
  } else {
    fail("unknown filler type '", type, "'; use constant, uniform, gaussian, xavier or msra");
  }
}

}  // namespace lamina
