// The fillers of Caffe 1.0, with its rules. Random values are drawn on the host from the
// net's seeded generator, the whole array first and then any mask, so every backend starts
// from the same weights.
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

// Caffe's sparse Gaussian: each value is kept with probability sparse / shape[0] and set to
// 0 otherwise (for an InnerProduct weight (K_out, K_in): about `sparse` of each input's
// K_out weights stay non-zero).
void sparsify(int sparse, const Shape& shape, std::mt19937_64& rng,
              std::vector<float>& values) {
  LAMINA_REQUIRE(sparse >= -1, "gaussian filler: sparse is ", sparse, "; give the expected "
                 "number of non-zero weights (>= 0), or -1 (the default) for none zeroed");
  if (sparse < 0) return;
  LAMINA_REQUIRE(!shape.empty(), "gaussian filler: sparse needs a parameter with at least one "
                 "axis (its outputs), got shape ", shape_string(shape));
  if (values.empty()) return;
  LAMINA_REQUIRE(sparse <= shape[0], "gaussian filler: sparse is ", sparse, " but the parameter "
                 "of shape ", shape_string(shape), " has ", shape[0], " outputs (shape[0]); "
                 "a weight is kept with probability sparse / outputs, so sparse must be at "
                 "most ", shape[0]);
  std::bernoulli_distribution keep(double(float(sparse) / float(shape[0])));
  for (float& v : values) v = keep(rng) ? v : 0.0f;
}

// Uniform in [0, 1), then each row (shape[0] rows, the count / shape[0] values that follow
// one another) divided by its sum: positive values, each row summing to 1.
void fill_positive_unitball(const Shape& shape, std::mt19937_64& rng,
                            std::vector<float>& values) {
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (float& v : values) v = dist(rng);
  const int64_t rows = shape.empty() ? 1 : shape[0];
  if (values.empty()) return;
  const int64_t dim = int64_t(values.size()) / rows;
  for (int64_t r = 0; r < rows; ++r) {
    float* row = values.data() + r * dim;
    double sum = 0;
    for (int64_t j = 0; j < dim; ++j) sum += row[j];
    for (int64_t j = 0; j < dim; ++j) row[j] = float(row[j] / sum);
  }
}

// Bilinear upsampling weights for a Deconvolution of weight (C_in, C_out / group, K, K):
// f = ceil(K / 2), c = (2f - 1 - f % 2) / (2f), w(y, x) = (1 - |x / f - c|)(1 - |y / f - c|),
// the same kernel for every pair of channels (Caffe's BilinearFiller, in float as Caffe).
void fill_bilinear(const Shape& shape, std::vector<float>& values) {
  LAMINA_REQUIRE(shape.size() == 4, "bilinear filler: the parameter has shape ",
                 shape_string(shape), " but bilinear needs 4 axes (a Deconvolution weight: "
                 "channels, channels / group, kernel_h, kernel_w)");
  LAMINA_REQUIRE(shape[2] == shape[3], "bilinear filler: the kernel is ", shape[2], " x ",
                 shape[3], " (shape ", shape_string(shape), "); bilinear needs a square "
                 "kernel (kernel_h == kernel_w)");
  const int64_t k = shape[3];
  const int64_t f = (k + 1) / 2;
  const float c = float(2 * f - 1 - f % 2) / float(2 * f);
  for (size_t i = 0; i < values.size(); ++i) {
    const float x = float(int64_t(i) % k), y = float(int64_t(i) / k % k);
    values[i] = (1 - std::fabs(x / float(f) - c)) * (1 - std::fabs(y / float(f) - c));
  }
}

}  // namespace

void fill(const FillerParameter& filler, const Shape& shape, std::mt19937_64& rng,
          std::vector<float>& values) {
  values.assign(shape_count(shape), 0.0f);
  const std::string& type = filler.type();
  LAMINA_REQUIRE(type == "gaussian" || filler.sparse() == -1, type, " filler: sparse is ",
                 filler.sparse(), " but only the gaussian filler takes sparse; remove it");
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
    sparsify(filler.sparse(), shape, rng, values);
  } else if (type == "xavier") {
    const float scale = std::sqrt(3.0f / fan(filler, shape));
    std::uniform_real_distribution<float> dist(-scale, scale);
    for (float& v : values) v = dist(rng);
  } else if (type == "msra") {
    std::normal_distribution<float> dist(0.0f, std::sqrt(2.0f / fan(filler, shape)));
    for (float& v : values) v = dist(rng);
  } else if (type == "positive_unitball") {
    fill_positive_unitball(shape, rng, values);
  } else if (type == "bilinear") {
    fill_bilinear(shape, values);
  } else {
    fail("unknown filler type '", type, "'; use constant, uniform, gaussian, xavier, msra, "
         "positive_unitball or bilinear");
  }
}

}  // namespace lamina
