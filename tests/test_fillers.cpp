// The fillers Caffe 1.0 has beyond constant, uniform, gaussian, xavier and msra:
// gaussian with sparse, positive_unitball and bilinear. Each one's values against its rule
// computed here, the errors of parameters a filler cannot apply (naming the filler, the
// field and, through a net, the parameter), and the same weights on every backend (fillers
// run on the host from the net's seed).
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "lamina/filler.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "forwarding_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

FillerParameter filler(const std::string& text) {
  FillerParameter f;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &f)) << text;
  return f;
}

std::vector<float> filled(const std::string& text, const Shape& shape, uint64_t seed = 1) {
  std::mt19937_64 rng(seed);
  std::vector<float> values;
  fill(filler(text), shape, rng, values);
  return values;
}

std::string fill_error(const std::string& text, const Shape& shape) {
  return error_of([&] { filled(text, shape); });
}

// ---------------------------------------------------------------------------------------
// bilinear

// Caffe's kernel in double: f = ceil(k / 2), c = (2f - 1 - f % 2) / (2f),
// w(y, x) = (1 - |x / f - c|)(1 - |y / f - c|).
double bilinear(int64_t k, int64_t y, int64_t x) {
  const double f = std::ceil(k / 2.0);
  const double c = (2 * f - 1 - std::fmod(f, 2.0)) / (2 * f);
  return (1 - std::abs(x / f - c)) * (1 - std::abs(y / f - c));
}

TEST(BilinearFiller, EveryChannelPairHoldsCaffesKernel) {
  for (int64_t k : {1, 2, 3, 4, 5, 8, 16}) {
    SCOPED_TRACE(k);
    const Shape shape = {3, 2, k, k};
    const std::vector<float> w = filled("type: 'bilinear'", shape);
    ASSERT_EQ(int64_t(w.size()), 6 * k * k);
    for (int64_t pair = 0; pair < 6; ++pair) {
      for (int64_t y = 0; y < k; ++y) {
        for (int64_t x = 0; x < k; ++x) {
          ASSERT_NEAR(w[(pair * k + y) * k + x], bilinear(k, y, x), 1e-6)
              << "pair " << pair << " (" << y << ", " << x << ")";
        }
      }
    }
  }
  // The usual 2x upsampling kernel (4 x 4, stride 2): rows and columns 1/4, 3/4, 3/4, 1/4.
  const std::vector<float> w4 = filled("type: 'bilinear'", {1, 1, 4, 4});
  const float edge[4] = {0.25f, 0.75f, 0.75f, 0.25f};
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 4; ++x) EXPECT_FLOAT_EQ(w4[y * 4 + x], edge[y] * edge[x]);
  // Odd kernels peak at 1 in the middle: 5 x 5 is 1/3, 2/3, 1, 2/3, 1/3 each way.
  const std::vector<float> w5 = filled("type: 'bilinear'", {1, 1, 5, 5});
  EXPECT_FLOAT_EQ(w5[2 * 5 + 2], 1.0f);
  EXPECT_NEAR(w5[0], 1.0 / 9, 1e-7);
}

TEST(BilinearFiller, DrawsNoRandomNumbers) {
  std::mt19937_64 rng(5), untouched(5);
  std::vector<float> values;
  fill(filler("type: 'bilinear'"), {2, 2, 3, 3}, rng, values);
  EXPECT_EQ(rng(), untouched()) << "the next filler's values would shift";
}

TEST(BilinearFiller, NeedsFourAxesAndASquareKernel) {
  EXPECT_THAT(fill_error("type: 'bilinear'", {4, 4, 4}),
              AllOf(StartsWith("bilinear filler: "), HasSubstr("(4, 4, 4)"),
                    HasSubstr("4 axes")));
  EXPECT_THAT(fill_error("type: 'bilinear'", {2, 2, 1, 4, 4}), HasSubstr("4 axes"));
  EXPECT_THAT(fill_error("type: 'bilinear'", {2, 2, 3, 4}),
              AllOf(StartsWith("bilinear filler: "), HasSubstr("3 x 4"),
                    HasSubstr("square kernel")));
}

// ---------------------------------------------------------------------------------------
// positive_unitball

TEST(PositiveUnitballFiller, EachRowIsPositiveAndSumsToOne) {
  for (const Shape& shape : std::vector<Shape>{{5, 3, 2, 2}, {7, 40}, {1, 1000}, {6}}) {
    SCOPED_TRACE(shape_string(shape));
    const std::vector<float> w = filled("type: 'positive_unitball'", shape);
    const int64_t rows = shape[0], dim = int64_t(w.size()) / rows;
    for (int64_t r = 0; r < rows; ++r) {
      double sum = 0;
      for (int64_t j = 0; j < dim; ++j) {
        const float v = w[r * dim + j];
        ASSERT_GE(v, 0.0f) << "row " << r;
        ASSERT_LE(v, 1.0f) << "row " << r;
        sum += v;
      }
      EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << r;
    }
  }
  // A row of one value is 1 (each of shape (6)'s rows).
  for (float v : filled("type: 'positive_unitball'", {6})) EXPECT_EQ(v, 1.0f);
}

// The values are the uniform draws in [0, 1) divided by their row's sum: proportional to a
// uniform filler's [0, 1) values from the same seed.
TEST(PositiveUnitballFiller, IsTheUniformDrawsNormalisedPerRow) {
  const Shape shape = {4, 25};
  const std::vector<float> unit = filled("type: 'positive_unitball'", shape, 9);
  const std::vector<float> uniform = filled("type: 'uniform' min: 0 max: 1", shape, 9);
  for (int64_t r = 0; r < 4; ++r) {
    double sum = 0;
    for (int64_t j = 0; j < 25; ++j) sum += uniform[r * 25 + j];
    for (int64_t j = 0; j < 25; ++j)
      EXPECT_NEAR(unit[r * 25 + j], uniform[r * 25 + j] / sum, 1e-7) << r << ", " << j;
  }
}

// ---------------------------------------------------------------------------------------
// gaussian with sparse

// Caffe's rule: every value is drawn as for the dense Gaussian, then each is kept with
// probability sparse / shape[0] (the others become 0).
TEST(SparseGaussianFiller, KeepsEachValueWithProbabilitySparseOverShape0) {
  const std::string dense = "type: 'gaussian' mean: 0.5 std: 2";
  struct Case {
    Shape shape;
    int sparse;
  };
  for (const Case& c : {Case{{100, 200}, 20}, Case{{10, 1000}, 5}, Case{{4, 8, 25, 25}, 1},
                        Case{{50, 300}, 45}}) {
    SCOPED_TRACE(shape_string(c.shape) + " sparse " + std::to_string(c.sparse));
    const std::vector<float> all = filled(dense, c.shape, 3);
    const std::vector<float> w =
        filled(dense + " sparse: " + std::to_string(c.sparse), c.shape, 3);
    ASSERT_EQ(w.size(), all.size());
    int64_t kept = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (w[i] == 0) continue;
      ASSERT_EQ(w[i], all[i]) << "a kept value is not the dense filler's value at " << i;
      ++kept;
    }
    const double n = double(w.size()), p = double(c.sparse) / double(c.shape[0]);
    // Within 5 standard deviations of the binomial's mean.
    EXPECT_NEAR(kept / n, p, 5 * std::sqrt(p * (1 - p) / n)) << "kept " << kept << " of " << n;
  }
}

TEST(SparseGaussianFiller, ZeroKeepsNothingAndShape0KeepsEverything) {
  for (float v : filled("type: 'gaussian' sparse: 0", {30, 20})) ASSERT_EQ(v, 0.0f);
  EXPECT_EQ(filled("type: 'gaussian' sparse: 30", {30, 20}, 4),
            filled("type: 'gaussian'", {30, 20}, 4));
  // -1 written out is the default: no value zeroed, for any filler.
  EXPECT_EQ(filled("type: 'gaussian' sparse: -1", {30, 20}, 4),
            filled("type: 'gaussian'", {30, 20}, 4));
  EXPECT_EQ(filled("type: 'xavier' sparse: -1", {30, 20}, 4),
            filled("type: 'xavier'", {30, 20}, 4));
}

TEST(SparseGaussianFiller, SparseOutOfRangeOrOnAnotherFillerIsAnError) {
  EXPECT_THAT(fill_error("type: 'gaussian' sparse: -2", {10, 10}),
              AllOf(StartsWith("gaussian filler: "), HasSubstr("sparse is -2")));
  EXPECT_THAT(fill_error("type: 'gaussian' sparse: 11", {10, 4}),
              AllOf(StartsWith("gaussian filler: "), HasSubstr("sparse is 11"),
                    HasSubstr("10 outputs (shape[0])"), HasSubstr("at most 10")));
  EXPECT_THAT(fill_error("type: 'gaussian' sparse: 1", {}),
              AllOf(StartsWith("gaussian filler: "), HasSubstr("at least one axis")));
  for (const char* type : {"constant", "uniform", "xavier", "msra", "positive_unitball",
                           "bilinear"}) {
    EXPECT_THAT(fill_error(std::string("type: '") + type + "' sparse: 3", {4, 4, 3, 3}),
                AllOf(StartsWith(std::string(type) + " filler: sparse is 3"),
                      HasSubstr("only the gaussian filler")))
        << type;
  }
}

TEST(Fillers, UnknownTypeListsEveryFiller) {
  EXPECT_THAT(fill_error("type: 'unitball'", {2, 2}),
              AllOf(HasSubstr("'unitball'"), HasSubstr("positive_unitball"),
                    HasSubstr("bilinear"), HasSubstr("msra")));
}

// ---------------------------------------------------------------------------------------
// Through a net: the error names the parameter; every backend gets the same weights.

std::string filler_net(const std::string& conv_filler, const std::string& fc_filler) {
  return R"(name: "fillers"
    layer { name: "data" type: "Input" top: "x"
            input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
    layer { name: "up" type: "Convolution" bottom: "x" top: "y"
            convolution_param { num_output: 3 kernel_size: 4 bias_term: false
                                weight_filler { )" + conv_filler + R"( } } }
    layer { name: "fc" type: "InnerProduct" bottom: "y" top: "z"
            inner_product_param { num_output: 8
                                  weight_filler { )" + fc_filler + R"( }
                                  bias_filler { type: "positive_unitball" } } })";
}

TEST(Fillers, AnErrorThroughANetNamesTheParameter) {
  NativeBackend backend;
  const NetParameter bad =
      parse_net_parameter(filler_net("type: 'bilinear'", "type: 'gaussian' sparse: 9"), "net");
  EXPECT_THAT(error_of([&] { Net(bad, TRAIN, backend, 1); }),
              AllOf(HasSubstr("fc"), HasSubstr("gaussian filler: sparse is 9"),
                    HasSubstr("8 outputs")));
}

// A NativeBackend posing as a device: the weights reach it through copy_from_host.
class HostAsDevice final : public testing::ForwardingBackend {
 public:
  bool is_host() const override { return false; }
};

std::vector<float> arena_values(Net& net) {
  std::vector<float> host(net.arena().count());
  net.backend().copy_to_host(sizeof(float) * host.size(), net.arena().data(), host.data());
  return host;
}

std::vector<float> weights_on(Backend& backend) {
  const NetParameter p = parse_net_parameter(
      filler_net("type: 'bilinear'", "type: 'gaussian' std: 0.1 sparse: 3"), "net");
  Net net(p, TRAIN, backend, 42);
  return arena_values(net);
}

TEST(Fillers, EveryBackendStartsFromTheSameWeights) {
  NativeBackend native;
  const std::vector<float> expected = weights_on(native);
  // The Convolution weight (3, 3, 4, 4) is the bilinear kernel; some fc weights are zero.
  ASSERT_GT(expected.size(), size_t(3 * 3 * 16));
  EXPECT_FLOAT_EQ(expected[5], float(bilinear(4, 1, 1)));
  HostAsDevice host_as_device;
  EXPECT_EQ(testing::compare_bits(weights_on(host_as_device), expected), "");
  if (!cuda_compiled() || cuda_device_count() == 0) return;  // the CUDA comparison needs one
  std::unique_ptr<Backend> cuda = make_cuda_backend(0);
  EXPECT_EQ(testing::compare_bits(weights_on(*cuda), expected), "");
}

}  // namespace
}  // namespace lamina
