// Weights in the net file (Caffe's LayerParameter.blobs): a net whose layers carry blobs
// starts from exactly those values on Native instead of its fillers, whether it comes from a
// prototxt (V1 too) or is built in code (Caffe's Net::ToProto output); the other parameters
// keep the fillers' values. The blobs pass a .caffemodel's checks (count, shape as Caffe
// compares it, values per shape): errors name the file, line, layer and both shapes.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "lamina/caffe_weights.hpp"
#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;
using testing::TempDir;
using testing::write_bytes;

constexpr const char* kInput = R"(
name: "inline"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } })";
// ip (2 x 3 weight, 2 biases) carries blobs; ip2 has only its fillers.
constexpr const char* kIp = R"(
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } }
        blobs { shape { dim: 2 dim: 3 } data: 1 data: -2 data: 3 data: 0.5 data: 0 data: -1 }
        blobs { shape { dim: 2 } data: 0.25 data: -4 } })";
constexpr const char* kIpWithoutBlobs = R"(
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } })";
constexpr const char* kIp2 = R"(
layer { name: "ip2" type: "InnerProduct" bottom: "ip" top: "ip2"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" }
                              bias_filler { type: "uniform" } } })";
const std::vector<float> kWeight = {1, -2, 3, 0.5f, 0, -1};  // (K 2, C 3)
const std::vector<float> kBias = {0.25f, -4};

std::string net_text(const char* ip) { return std::string(kInput) + ip + kIp2; }

class NetBlobs : public ::testing::Test {
 protected:
  std::unique_ptr<Net> net_of(const std::string& text, uint64_t seed = 1,
                              std::shared_ptr<ParamArena> shared = nullptr) {
    return std::make_unique<Net>(parse_net_parameter(text, "net"), shared ? TEST : TRAIN,
                                 backend_, seed, std::move(shared));
  }
  static std::vector<float> values(const Net& net, const std::string& name) {
    const ParamInfo* info = net.arena().find(name);
    EXPECT_NE(info, nullptr) << name;
    if (!info) return {};
    const std::vector<float> all = net.arena().to_host(net.arena().data());
    return {all.begin() + info->offset, all.begin() + info->offset + info->count};
  }
  // The error of building the net text (written to a file, so that messages give its line).
  std::string build_error(const std::string& text) {
    const std::string path = dir_ / "net.prototxt";
    write_bytes(path, text);
    return error_of([&] { Net net(read_net_parameter(path), TRAIN, backend_, 1, nullptr, path); });
  }

  NativeBackend backend_;
  TempDir dir_;
};

TEST_F(NetBlobs, BlobsReplaceTheFillersAndTheOtherParametersKeepTheirs) {
  auto net = net_of(net_text(kIp));
  EXPECT_EQ(values(*net, "ip/weight"), kWeight);
  EXPECT_EQ(values(*net, "ip/bias"), kBias);
  auto filled = net_of(net_text(kIpWithoutBlobs));
  EXPECT_NE(values(*filled, "ip/weight"), kWeight);
  for (const char* name : {"ip2/weight", "ip2/bias"})
    EXPECT_EQ(values(*net, name), values(*filled, name)) << name;
  // The forward pass uses them: ip = x W^T + b, x (2, 3).
  const std::vector<float> x = {1, 2, 3, -1, 0.5f, 2};
  net->blob("data").copy_data_from_host(x);
  net->forward();
  const std::vector<float> expected = {1 - 4 + 9 + 0.25f, 0.5f + 0 - 3 - 4,
                                       -1 - 1 + 6 + 0.25f, -0.5f + 0 - 2 - 4};
  EXPECT_EQ(net->blob("ip").copy_data_to_host(), expected);
}

// Caffe's older num/channels/height/width form ((1, 1, 2, 3) is (2, 3)) and double_data.
TEST_F(NetBlobs, LegacyShapesAndDoubleDataAreRead) {
  auto net = net_of(net_text(R"(
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 }
        blobs { num: 1 channels: 1 height: 2 width: 3
                double_data: 1 double_data: -2 double_data: 3 double_data: 0.5 double_data: 0
                double_data: -1 }
        blobs { num: 1 channels: 1 height: 1 width: 2 data: 0.25 data: -4 } })"));
  EXPECT_EQ(values(*net, "ip/weight"), kWeight);
  EXPECT_EQ(values(*net, "ip/bias"), kBias);
}

TEST_F(NetBlobs, V1NetFileBlobsAreRead) {
  auto net = net_of(R"(
name: "v1"
input: "data" input_dim: 2 input_dim: 3 input_dim: 1 input_dim: 1
layers { name: "ip" type: INNER_PRODUCT bottom: "data" top: "ip"
         inner_product_param { num_output: 2 }
         blobs { num: 1 channels: 1 height: 2 width: 3
                 data: 1 data: -2 data: 3 data: 0.5 data: 0 data: -1 }
         blobs { num: 1 channels: 1 height: 1 width: 2 data: 0.25 data: -4 } })");
  EXPECT_EQ(values(*net, "ip/weight"), kWeight);
  EXPECT_EQ(values(*net, "ip/bias"), kBias);
}

// A NetParameter built in code: what caffemodel_of writes (Caffe's Net::ToProto), built as a
// net with another seed, starts from the first net's weights.
TEST_F(NetBlobs, ANetBuiltFromItsOwnCaffeModelHasItsWeights) {
  auto net = net_of(net_text(kIpWithoutBlobs), 1);
  auto copy = std::make_unique<Net>(caffemodel_of(*net), TRAIN, backend_, 99);
  EXPECT_EQ(copy->arena().to_host(copy->arena().data()),
            net->arena().to_host(net->arena().data()));
  auto other_seed = net_of(net_text(kIpWithoutBlobs), 99);
  EXPECT_NE(other_seed->arena().to_host(other_seed->arena().data()),
            net->arena().to_host(net->arena().data()));
}

// Caffe's owner of a shared parameter, the first layer declaring it, gives its values: its
// blobs, else its filler.
TEST_F(NetBlobs, ASharedParameterHasItsFirstLayersValues) {
  const auto shared_net = [](const std::string& a_blobs, const std::string& b_blobs) {
    std::string text = kInput;
    for (const auto& [name, blobs] : {std::pair{"a", a_blobs}, std::pair{"b", b_blobs}})
      text += std::string("\nlayer { name: \"") + name + "\" type: \"InnerProduct\" bottom: "
              "\"data\" top: \"" + name + "\" param { name: \"w\" } inner_product_param { "
              "num_output: 1 bias_term: false weight_filler { type: \"gaussian\" } } " +
              blobs + " }";
    return text;
  };
  const std::string ones = "blobs { shape { dim: 1 dim: 3 } data: 1 data: 2 data: 3 }";
  const std::string sevens = "blobs { shape { dim: 1 dim: 3 } data: 7 data: 8 data: 9 }";
  EXPECT_EQ(values(*net_of(shared_net(ones, sevens)), "w"), (std::vector<float>{1, 2, 3}));
  const std::vector<float> filled = values(*net_of(shared_net("", "")), "w");
  EXPECT_NE(filled, (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(values(*net_of(shared_net("", sevens)), "w"), filled);
}

// A test net viewing the train net's arena keeps the train net's values (Caffe's test nets
// share the trained layers), and still checks its own blobs.
TEST_F(NetBlobs, ANetSharingAnArenaKeepsItsValues) {
  auto train = net_of(net_text(kIp));
  std::string other = net_text(kIp);
  other.replace(other.find("data: 0.25 data: -4"), 19, "data: 5 data: 6");
  auto test = net_of(other, 1, train->arena_handle());
  EXPECT_EQ(values(*test, "ip/bias"), kBias);
  std::string wrong = net_text(kIp);
  wrong.replace(wrong.find("blobs { shape { dim: 2 } data: 0.25 data: -4 }"), 46, "");
  EXPECT_THAT(error_of([&] { net_of(wrong, 1, train->arena_handle()); }),
              HasSubstr("layer 'ip' (InnerProduct): the net file has 1 blob(s)"));
}

TEST_F(NetBlobs, AWrongShapeNamesTheFileLineLayerAndBothShapes) {
  std::string text = net_text(kIp);
  const std::string weight = "blobs { shape { dim: 2 dim: 3 }";
  text.replace(text.find(weight), weight.size(), "blobs { shape { dim: 3 dim: 2 }");
  EXPECT_THAT(build_error(text),
              AllOf(HasSubstr(dir_ / "net.prototxt:4: "),
                    HasSubstr("layer 'ip' (InnerProduct): blob 0 has shape (3, 2) in the net "
                              "file but its parameter 'ip/weight' has shape (2, 3) in the net")));
}

TEST_F(NetBlobs, AWrongCountOfBlobsOrValuesNamesTheLayer) {
  std::string one_blob = net_text(kIp);
  one_blob.replace(one_blob.find("blobs { shape { dim: 2 } data: 0.25 data: -4 }"), 46, "");
  EXPECT_THAT(build_error(one_blob),
              HasSubstr("layer 'ip' (InnerProduct): the net file has 1 blob(s) ((2, 3)) but the "
                        "net's layer has 2 parameter(s) ('ip/weight' (2, 3), 'ip/bias' (2))"));
  std::string extra_value = net_text(kIp);
  extra_value.replace(extra_value.find("data: -4"), 8, "data: -4 data: 1");
  EXPECT_THAT(build_error(extra_value),
              HasSubstr("layer 'ip' (InnerProduct): blob 1 has shape (2) (2 values) but holds 3 "
                        "values"));
  EXPECT_THAT(build_error(std::string(kInput) + R"(
layer { name: "relu" type: "ReLU" bottom: "data" top: "data"
        blobs { shape { dim: 1 } data: 1 } })"),
              HasSubstr("layer 'relu' (ReLU): the net file has 1 blob(s) ((1)) but the net's "
                        "layer has 0 parameter(s) (none)"));
  EXPECT_THAT(build_error(std::string(kInput) + R"(
layer { name: "seq" type: "Sequential" bottom: "data" top: "out" blobs { shape { dim: 1 } }
        layer { name: "relu" type: "ReLU" } })"),
              HasSubstr("a Sequential container has no parameters of its own"));
}

}  // namespace
}  // namespace lamina
