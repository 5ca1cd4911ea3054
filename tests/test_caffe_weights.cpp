// Caffe's trained weights and V1 nets (caffe_weights.hpp, upgrade_v1.hpp): .caffemodel files
// built here with protobuf's own API (not Lamina's writer) load into the matching net with
// Caffe's matching and legacy shapes; Lamina's weights exported as .caffemodel read back
// equal with Caffe's names, types and shapes; V1 prototxt builds the net its V2 form builds;
// damaged, foreign and mis-shaped files are errors naming the file; the lamina tool converts
// and scores .caffemodel files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <map>

#include "lamina/caffe_weights.hpp"
#include "lamina/io.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/upgrade_v1.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;
using testing::random_values;
using testing::TempDir;
using testing::write_bytes;

// Every kind of layer whose blobs Caffe orders in its own way: Convolution (weight, bias),
// BatchNorm (mean, variance, factor), Scale with bias_term (scale, bias), PReLU shared (one
// value, shape ()), InnerProduct (weight, bias).
constexpr const char* kNet = R"(
name: "cw"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "gaussian" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "sc" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "prelu" type: "PReLU" bottom: "conv" top: "conv"
        prelu_param { channel_shared: true } }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)";

// Caffe's blobs of kNet's layers, in Caffe's order and shapes.
const std::vector<std::pair<std::string, std::vector<Shape>>> kCaffeBlobs = {
    {"conv", {{2, 3, 3, 3}, {2}}},
    {"bn", {{2}, {2}, {1}}},
    {"sc", {{2}, {2}}},
    {"prelu", {{}}},
    {"ip", {{5, 8}, {5}}},
};
// Lamina's parameter names for them, in the same order.
const std::vector<std::string> kParamNames = {
    "conv/weight", "conv/bias",   "bn/mean",     "bn/variance", "bn/factor",
    "sc/scale",    "sc/bias",     "prelu/slope", "ip/weight",   "ip/bias"};

std::unique_ptr<Net> make_net(Backend& backend, const std::string& text = kNet,
                              uint64_t seed = 1, Phase phase = TEST) {
  return std::make_unique<Net>(parse_net_parameter(text, "net"), phase, backend, seed);
}

std::vector<float> param_values(const Net& net, const std::string& name) {
  const ParamInfo* info = net.arena().find(name);
  EXPECT_NE(info, nullptr) << name;
  if (!info) return {};
  const std::vector<float> all = net.arena().to_host(net.arena().data());
  return std::vector<float>(all.begin() + info->offset,
                            all.begin() + info->offset + info->count);
}

void add_shaped_blob(LayerParameter& layer, const Shape& shape, const std::vector<float>& v) {
  BlobProto& blob = *layer.add_blobs();
  for (int64_t d : shape) blob.mutable_shape()->add_dim(d);
  for (float x : v) blob.add_data(x);
}

// A blob in Caffe's old form: num, channels, height, width.
template <class Layer>
void add_legacy_blob(Layer& layer, const Shape& nchw, const std::vector<float>& v) {
  BlobProto& blob = *layer.add_blobs();
  blob.set_num(int(nchw[0]));
  blob.set_channels(int(nchw[1]));
  blob.set_height(int(nchw[2]));
  blob.set_width(int(nchw[3]));
  for (float x : v) blob.add_data(x);
}

// A model for kNet as Caffe would write it, with the values in `values` (one vector per
// blob, in kCaffeBlobs' order), plus layers the net does not have. InnerProduct's blobs are
// in the old 4-D form, Scale's bias in double_data.
NetParameter model_for_net(std::vector<std::vector<float>>& values) {
  NetParameter model;
  model.set_name("cw");
  LayerParameter& data = *model.add_layer();
  data.set_name("data");
  data.set_type("Input");
  uint64_t seed = 10;
  for (const auto& [name, shapes] : kCaffeBlobs) {
    LayerParameter& layer = *model.add_layer();
    layer.set_name(name);
    for (const Shape& shape : shapes) {
      values.push_back(random_values(shape_count(shape), seed++));
      const std::vector<float>& v = values.back();
      if (name == "ip") {
        add_legacy_blob(layer, shape.size() == 2 ? Shape{1, 1, shape[0], shape[1]}
                                                 : Shape{1, 1, 1, shape[0]}, v);
      } else if (name == "sc" && layer.blobs_size() == 1) {
        BlobProto& blob = *layer.add_blobs();
        for (int64_t d : shape) blob.mutable_shape()->add_dim(d);
        for (float x : v) blob.add_double_data(double(x));
      } else {
        add_shaped_blob(layer, shape, v);
      }
    }
  }
  LayerParameter& old = *model.add_layer();  // a layer of the net it was trained in, only
  old.set_name("fc_old");
  old.set_type("InnerProduct");
  add_shaped_blob(old, {2, 2}, {1, 2, 3, 4});
  return model;
}

std::string write_model(const TempDir& dir, const std::string& name, const NetParameter& model) {
  std::string bytes;
  EXPECT_TRUE(model.SerializeToString(&bytes));
  const std::string path = dir / name;
  write_bytes(path, bytes);
  return path;
}

class CaffeWeights : public ::testing::Test {
 protected:
  NativeBackend backend_;
  TempDir dir_;
};

TEST_F(CaffeWeights, CaffeModelLoadsEveryBlobIntoItsParameter) {
  std::vector<std::vector<float>> values;
  const std::string path = write_model(dir_, "cw.caffemodel", model_for_net(values));
  auto net = make_net(backend_);
  const WeightsLoadReport report = load_caffe_weights(*net, path, WeightsMatch::kRequireAll);
  EXPECT_EQ(report.loaded, kParamNames);
  EXPECT_EQ(report.ignored, (std::vector<std::string>{"fc_old"}));
  EXPECT_TRUE(report.kept_filler.empty());
  ASSERT_EQ(values.size(), kParamNames.size());
  for (size_t k = 0; k < kParamNames.size(); ++k)
    EXPECT_EQ(param_values(*net, kParamNames[k]), values[k]) << kParamNames[k];
  EXPECT_FALSE(weights_file_is_lamina(path));
}

BlobProto shaped(const Shape& shape) {
  BlobProto blob;
  for (int64_t d : shape) blob.mutable_shape()->add_dim(d);
  return blob;
}

BlobProto legacy(int n, int c, int h, int w) {
  BlobProto blob;
  blob.set_num(n);
  blob.set_channels(c);
  blob.set_height(h);
  blob.set_width(w);
  return blob;
}

// Caffe's Blob::ShapeEquals: exact, except the old 4-D form, padded with 1s in front.
TEST_F(CaffeWeights, ShapesMatchAsCaffeComparesThem) {
  EXPECT_TRUE(caffe_shapes_match({2, 3, 3, 3}, shaped({2, 3, 3, 3})));
  EXPECT_TRUE(caffe_shapes_match({1}, shaped({})));  // PReLU's shared slope
  EXPECT_FALSE(caffe_shapes_match({2}, shaped({})));
  EXPECT_FALSE(caffe_shapes_match({5, 8}, shaped({8, 5})));
  EXPECT_FALSE(caffe_shapes_match({5, 8}, shaped({1, 1, 5, 8})));  // N-D: exact
  // A kernel of 5 channels and width 1 is not one of 1 channel and 5 x 5.
  EXPECT_FALSE(caffe_shapes_match({20, 1, 5, 5}, shaped({20, 5, 1, 5})));
  EXPECT_FALSE(caffe_shapes_match({20, 1, 5, 5}, legacy(20, 5, 1, 5)));
  EXPECT_TRUE(caffe_shapes_match({5, 8}, legacy(1, 1, 5, 8)));
  EXPECT_TRUE(caffe_shapes_match({5}, legacy(1, 1, 1, 5)));
  EXPECT_TRUE(caffe_shapes_match({20, 1, 5, 5}, legacy(20, 1, 5, 5)));
  EXPECT_FALSE(caffe_shapes_match({5, 8}, legacy(1, 1, 5, 4)));
  EXPECT_FALSE(caffe_shapes_match({1, 1, 1, 5, 8}, legacy(1, 1, 5, 8)));  // more than 4 axes
  EXPECT_EQ(blob_shape(legacy(1, 1, 5, 8)), (Shape{1, 1, 5, 8}));
}

TEST_F(CaffeWeights, FineTuningKeepsTheFillersOfLayersTheFileLacks) {
  std::vector<std::vector<float>> values;
  NetParameter model = model_for_net(values);
  model.mutable_layer()->erase(model.mutable_layer()->begin() + 5);  // "ip"
  const std::string path = write_model(dir_, "no_ip.caffemodel", model);
  auto net = make_net(backend_);
  const std::vector<float> filled = param_values(*net, "ip/weight");
  const WeightsLoadReport report = load_caffe_weights(*net, path, WeightsMatch::kFineTune);
  EXPECT_EQ(report.kept_filler, (std::vector<std::string>{"ip/weight", "ip/bias"}));
  EXPECT_EQ(param_values(*net, "ip/weight"), filled);
  EXPECT_EQ(param_values(*net, "conv/weight"), values[0]);
  // Scoring needs every layer.
  EXPECT_THAT(error_of([&] { load_caffe_weights(*net, path, WeightsMatch::kRequireAll); }),
              AllOf(HasSubstr(path), HasSubstr("has no blobs for layer 'ip'")));
}

TEST_F(CaffeWeights, ExportedModelHasCaffesNamesTypesAndShapesAndReadsBackEqual) {
  auto net = make_net(backend_, kNet, 7);
  const std::string path = dir_ / "out.caffemodel";
  save_caffemodel(*net, path);
  NetParameter model;
  {
    std::ifstream in(path, std::ios::binary);
    ASSERT_TRUE(model.ParseFromIstream(&in));
  }
  EXPECT_EQ(model.name(), "cw");
  std::map<std::string, const LayerParameter*> by_name;
  for (const LayerParameter& layer : model.layer()) by_name[layer.name()] = &layer;
  ASSERT_TRUE(by_name.count("data") && by_name.count("loss"));
  EXPECT_EQ(by_name["data"]->blobs_size(), 0);
  for (const auto& [name, shapes] : kCaffeBlobs) {
    ASSERT_TRUE(by_name.count(name)) << name;
    const LayerParameter& layer = *by_name[name];
    ASSERT_EQ(layer.blobs_size(), int(shapes.size())) << name;
    for (size_t k = 0; k < shapes.size(); ++k) {
      const BlobProto& blob = layer.blobs(int(k));
      EXPECT_FALSE(blob.has_num()) << name;  // Caffe 1.0's shape, not the old 4-D form
      EXPECT_EQ(Shape(blob.shape().dim().begin(), blob.shape().dim().end()), shapes[k])
          << name << " blob " << k;
    }
  }
  EXPECT_EQ(by_name["conv"]->type(), "Convolution");
  EXPECT_EQ(by_name["bn"]->type(), "BatchNorm");
  EXPECT_EQ(by_name["sc"]->type(), "Scale");
  EXPECT_EQ(by_name["prelu"]->type(), "PReLU");
  EXPECT_EQ(by_name["ip"]->type(), "InnerProduct");
  EXPECT_EQ(by_name["ip"]->bottom(0), "conv");
  EXPECT_EQ(by_name["ip"]->top(0), "ip");
  // Its values, read into a net filled differently, are the exported net's.
  auto other = make_net(backend_, kNet, 99);
  EXPECT_NE(param_values(*other, "conv/weight"), param_values(*net, "conv/weight"));
  const WeightsLoadReport report = load_caffe_weights(*other, path, WeightsMatch::kExact);
  EXPECT_EQ(report.loaded, kParamNames);
  for (const std::string& name : kParamNames)
    EXPECT_EQ(param_values(*other, name), param_values(*net, name)) << name;
}

// LeNet (deploy) in Caffe's V1 syntax, and the same in Caffe 1.0's.
constexpr const char* kLeNetV1 = R"(
name: "LeNet"
input: "data" input_dim: 2 input_dim: 1 input_dim: 28 input_dim: 28
layers { name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
         blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
         convolution_param { num_output: 20 kernel_size: 5 stride: 1
                             weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
         pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { name: "conv2" type: CONVOLUTION bottom: "pool1" top: "conv2"
         blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
         convolution_param { num_output: 50 kernel_size: 5 stride: 1
                             weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layers { name: "pool2" type: POOLING bottom: "conv2" top: "pool2"
         pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { name: "ip1" type: INNER_PRODUCT bottom: "pool2" top: "ip1"
         blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
         inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" }
layers { name: "drop1" type: DROPOUT bottom: "ip1" top: "ip1" include { phase: TRAIN }
         dropout_param { dropout_ratio: 0.5 } }
layers { name: "ip2" type: INNER_PRODUCT bottom: "ip1" top: "ip2"
         blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
         inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layers { name: "prob" type: SOFTMAX bottom: "ip2" top: "prob" }
)";
constexpr const char* kLeNetV2 = R"(
name: "LeNet"
input: "data" input_dim: 2 input_dim: 1 input_dim: 28 input_dim: 28
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 20 kernel_size: 5 stride: 1
                            weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        convolution_param { num_output: 50 kernel_size: 5 stride: 1
                            weight_filler { type: "xavier" } bias_filler { type: "constant" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "drop1" type: "Dropout" bottom: "ip1" top: "ip1" include { phase: TRAIN }
        dropout_param { dropout_ratio: 0.5 } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }
)";

TEST_F(CaffeWeights, V1NetBuildsTheNetOfItsV2Form) {
  for (Phase phase : {TRAIN, TEST}) {
    auto v1 = make_net(backend_, kLeNetV1, 3, phase);
    auto v2 = make_net(backend_, kLeNetV2, 3, phase);
    ASSERT_EQ(v1->num_layers(), v2->num_layers()) << Phase_Name(phase);
    for (int i = 0; i < v1->num_layers(); ++i) {
      EXPECT_EQ(v1->layer(i).name(), v2->layer(i).name());
      EXPECT_EQ(v1->layer(i).type(), v2->layer(i).type());
    }
    const auto& t1 = v1->arena().table();
    const auto& t2 = v2->arena().table();
    ASSERT_EQ(t1.size(), 8u);
    ASSERT_EQ(t1.size(), t2.size());
    for (size_t k = 0; k < t1.size(); ++k) {
      EXPECT_EQ(t1[k].name, t2[k].name);
      EXPECT_EQ(t1[k].shape, t2[k].shape);
      EXPECT_EQ(t1[k].lr_mult, t2[k].lr_mult) << t1[k].name;
      EXPECT_EQ(t1[k].decay_mult, t2[k].decay_mult) << t1[k].name;
    }
    EXPECT_EQ(t1[1].name, "conv1/bias");
    EXPECT_EQ(t1[1].lr_mult, 2);
    EXPECT_EQ(t1[1].decay_mult, 0);
    // The same fillers from the same seed: the same weights.
    EXPECT_EQ(v1->arena().to_host(v1->arena().data()), v2->arena().to_host(v2->arena().data()));
  }
}

TEST_F(CaffeWeights, V1LayerMovesEveryFieldAsCaffeDoes) {
  NetParameter net = parse_net_parameter(R"(
    layers { name: "d" type: DATA top: "x" top: "y" include { phase: TRAIN }
             data_param { source: "db" batch_size: 4 scale: 0.5 mirror: true crop_size: 3 }
             transform_param { mean_value: 1 } }
    layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "z" param: "w" param: "b"
             blob_share_mode: PERMISSIVE blobs_lr: 3 weight_decay: 0 weight_decay: 2
             inner_product_param { num_output: 2 } }
    layers { name: "loss" type: SOFTMAX_LOSS bottom: "z" bottom: "y" loss_weight: 0.5
             loss_param { ignore_label: 7 } exclude { stage: "deploy" } })", "v1");
  const NetParameter up = upgrade_v1_net(net, "v1");
  ASSERT_EQ(up.layer_size(), 3);
  EXPECT_EQ(up.layers_size(), 0);
  const LayerParameter& d = up.layer(0);
  EXPECT_EQ(d.type(), "Data");
  EXPECT_EQ(d.include(0).phase(), TRAIN);
  EXPECT_EQ(d.data_param().source(), "db");
  EXPECT_FALSE(d.data_param().has_scale());
  EXPECT_FALSE(d.data_param().has_mirror());
  EXPECT_EQ(d.transform_param().scale(), 0.5f);
  EXPECT_TRUE(d.transform_param().mirror());
  EXPECT_EQ(d.transform_param().crop_size(), 3u);
  EXPECT_EQ(d.transform_param().mean_value(0), 1.0f);
  const LayerParameter& ip = up.layer(1);
  EXPECT_EQ(ip.type(), "InnerProduct");
  ASSERT_EQ(ip.param_size(), 2);
  EXPECT_EQ(ip.param(0).name(), "w");
  EXPECT_EQ(ip.param(0).share_mode(), ParamSpec::PERMISSIVE);
  EXPECT_EQ(ip.param(0).lr_mult(), 3);
  EXPECT_EQ(ip.param(0).decay_mult(), 0);
  EXPECT_EQ(ip.param(1).name(), "b");
  EXPECT_FALSE(ip.param(1).has_lr_mult());
  EXPECT_EQ(ip.param(1).decay_mult(), 2);
  EXPECT_EQ(ip.inner_product_param().num_output(), 2u);
  const LayerParameter& loss = up.layer(2);
  EXPECT_EQ(loss.type(), "SoftmaxWithLoss");
  EXPECT_EQ(loss.loss_weight(0), 0.5f);
  EXPECT_EQ(loss.loss_param().ignore_label(), 7);
  EXPECT_EQ(loss.exclude(0).stage(0), "deploy");
  EXPECT_STREQ(v1_layer_type(V1LayerParameter::SOFTMAX_LOSS), "SoftmaxWithLoss");
  EXPECT_STREQ(v1_layer_type(V1LayerParameter::IM2COL), "Im2col");
}

TEST_F(CaffeWeights, V1CaffeModelLoads) {
  // Caffe's V1 LeNet model: `layers` with blobs in the old 4-D form.
  NetParameter model;
  model.set_name("LeNet");
  const std::vector<std::pair<std::string, std::vector<Shape>>> blobs = {
      {"conv1", {{20, 1, 5, 5}, {1, 1, 1, 20}}},
      {"conv2", {{50, 20, 5, 5}, {1, 1, 1, 50}}},
      {"ip1", {{1, 1, 500, 800}, {1, 1, 1, 500}}},
      {"ip2", {{1, 1, 10, 500}, {1, 1, 1, 10}}}};
  std::vector<std::vector<float>> values;
  for (const auto& [name, shapes] : blobs) {
    V1LayerParameter& layer = *model.add_layers();
    layer.set_name(name);
    layer.set_type(name[0] == 'c' ? V1LayerParameter::CONVOLUTION
                                  : V1LayerParameter::INNER_PRODUCT);
    for (const Shape& shape : shapes) {
      values.push_back(random_values(shape_count(shape), values.size() + 1));
      add_legacy_blob(layer, shape, values.back());
    }
  }
  const std::string path = write_model(dir_, "lenet_v1.caffemodel", model);
  EXPECT_EQ(read_caffemodel(path).layer(2).type(), "InnerProduct");
  auto net = make_net(backend_, kLeNetV2);
  const WeightsLoadReport report = load_caffe_weights(*net, path, WeightsMatch::kRequireAll);
  EXPECT_EQ(report.loaded.size(), 8u);
  EXPECT_EQ(param_values(*net, "ip1/weight"), values[4]);
  EXPECT_EQ(param_values(*net, "conv2/bias"), values[3]);
}

// ---- bad files: an Error naming the file, the net untouched ----

class CaffeWeightsErrors : public CaffeWeights {
 protected:
  // The message of loading `model` (as bytes) into kNet; checks the weights did not change.
  std::string load_error(const std::string& bytes, const std::string& name) {
    const std::string path = dir_ / name;
    write_bytes(path, bytes);
    auto net = make_net(backend_);
    const std::vector<float> before = net->arena().to_host(net->arena().data());
    const std::string message =
        error_of([&] { load_caffe_weights(*net, path, WeightsMatch::kFineTune); });
    EXPECT_EQ(net->arena().to_host(net->arena().data()), before);
    EXPECT_THAT(message, HasSubstr("Caffe model '" + path + "'"));
    return message;
  }
  std::string bytes_of(const NetParameter& model) {
    std::string bytes;
    EXPECT_TRUE(model.SerializeToString(&bytes));
    return bytes;
  }
};

TEST_F(CaffeWeightsErrors, TruncatedFile) {
  std::vector<std::vector<float>> values;
  const std::string bytes = bytes_of(model_for_net(values));
  // Cut inside conv's weights, and inside the last value. (A cut between two layers leaves a
  // model of the layers before it, which protobuf cannot tell from a whole one.)
  EXPECT_THAT(load_error(bytes.substr(0, 100), "cut.caffemodel"),
              HasSubstr("does not parse as a Caffe model"));
  EXPECT_THAT(load_error(bytes.substr(0, bytes.size() - 3), "cut_end.caffemodel"),
              HasSubstr("does not parse as a Caffe model"));
}

TEST_F(CaffeWeightsErrors, NotProtobuf) {
  EXPECT_THAT(load_error(kNet, "net.prototxt"), HasSubstr("does not parse as a Caffe model"));
  EXPECT_THAT(load_error("", "empty.caffemodel"), HasSubstr("holds no layers"));
}

TEST_F(CaffeWeightsErrors, AnotherNetsFile) {
  NetParameter model;
  for (const char* name : {"conv1", "fc8"}) {
    LayerParameter& layer = *model.add_layer();
    layer.set_name(name);
    add_shaped_blob(layer, {2}, {1, 2});
  }
  EXPECT_THAT(load_error(bytes_of(model), "other.caffemodel"),
              AllOf(HasSubstr("none of its 2 layers ('conv1', 'fc8') is a layer of the net "
                              "with parameters ('conv', 'bn', 'sc', 'prelu', 'ip')"),
                    HasSubstr("written for another net")));
}

TEST_F(CaffeWeightsErrors, WrongShapeNamesTheLayerAndBothShapes) {
  std::vector<std::vector<float>> values;
  NetParameter model = model_for_net(values);
  BlobProto& weight = *model.mutable_layer(1)->mutable_blobs(0);  // conv (2, 3, 3, 3)
  weight.mutable_shape()->set_dim(2, 1);
  weight.mutable_shape()->set_dim(3, 9);
  EXPECT_THAT(load_error(bytes_of(model), "shape.caffemodel"),
              HasSubstr("layer 'conv' (Convolution): blob 0 has shape (2, 3, 1, 9) in the "
                        "file but its parameter 'conv/weight' has shape (2, 3, 3, 3) in the "
                        "net"));
}

TEST_F(CaffeWeightsErrors, BlobCountAndValueCount) {
  std::vector<std::vector<float>> values;
  NetParameter model = model_for_net(values);
  model.mutable_layer(1)->mutable_blobs()->RemoveLast();
  EXPECT_THAT(load_error(bytes_of(model), "count.caffemodel"),
              HasSubstr("layer 'conv' (Convolution): the file has 1 blob(s) ((2, 3, 3, 3)) but "
                        "the net's layer has 2 parameter(s) ('conv/weight' (2, 3, 3, 3), "
                        "'conv/bias' (2))"));
  model = model_for_net(values);
  model.mutable_layer(1)->mutable_blobs(1)->add_data(1);
  EXPECT_THAT(load_error(bytes_of(model), "values.caffemodel"),
              HasSubstr("layer 'conv': blob 1 has shape (2) (2 values) but holds 3 values"));
}

TEST_F(CaffeWeightsErrors, MixingLayerAndLayersInANetFile) {
  const std::string text = std::string(kNet) +
                           R"(layers { name: "old" type: RELU bottom: "ip" top: "ip" })";
  EXPECT_THAT(error_of([&] { make_net(backend_, text); }),
              HasSubstr("has both `layer` (7) and Caffe's V1 `layers` (1)"));
}

// ---- the lamina tool ----

// The built tool, or $LAMINA_TOOL (binaries moved to another machine).
std::string tool_path() {
  if (const char* env = std::getenv("LAMINA_TOOL"); env && *env) return env;
  return LAMINA_TOOL;
}

// Runs the tool with args; its exit status and output (stdout and stderr).
std::pair<int, std::string> run_tool(const std::string& args) {
  const std::string tool = tool_path();
  EXPECT_TRUE(std::filesystem::exists(tool)) << tool << ": build lamina_tool first";
  FILE* pipe = ::popen((tool + " " + args + " 2>&1").c_str(), "r");
  std::string out;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

constexpr const char* kScoredNet = R"(
name: "scored"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 2 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" }
)";

TEST_F(CaffeWeights, ToolScoresACaffeModel) {
  // Inputs and labels are zero: the scores are the bias, the loss -log softmax(bias)[0].
  NetParameter model;
  LayerParameter& ip = *model.add_layer();
  ip.set_name("ip");
  add_legacy_blob(ip, {1, 1, 2, 3}, {1, 2, 3, 4, 5, 6});
  add_legacy_blob(ip, {1, 1, 1, 2}, {0, std::log(3.0f)});
  const std::string weights = write_model(dir_, "scored.caffemodel", model);
  const std::string net = dir_.write("scored.prototxt", kScoredNet);
  const auto [status, out] =
      run_tool("test --model " + net + " --weights " + weights + " --iterations 2");
  EXPECT_EQ(status, 0) << out;
  EXPECT_THAT(out, HasSubstr("Scored " + weights));
  EXPECT_THAT(out, HasSubstr("loss = 1.38629"));  // log 4
  const auto [bad, message] =
      run_tool("test --model " + net + " --weights " + dir_.write("x.caffemodel", "junk"));
  EXPECT_EQ(bad, 1) << message;
  EXPECT_THAT(message, HasSubstr("x.caffemodel': does not parse as a Caffe model"));
}

TEST_F(CaffeWeights, ToolConvertsBothWays) {
  const std::string net_path = dir_.write("cw.prototxt", kNet);
  auto net = make_net(backend_, kNet, 5);
  const std::string lamina_in = dir_ / "cw.lamina";
  save_weights(*net, lamina_in);
  const std::string caffe = dir_ / "cw.caffemodel";
  const auto [s1, o1] = run_tool("convert_weights " + lamina_in + " " + caffe + " --model " +
                                 net_path);
  EXPECT_EQ(s1, 0) << o1;
  EXPECT_THAT(o1, HasSubstr("(Lamina weights) to " + caffe + " (Caffe model): 10 parameters"));
  EXPECT_FALSE(weights_file_is_lamina(caffe));
  const std::string back = dir_ / "back.weights";
  const auto [s2, o2] = run_tool("convert_weights " + caffe + " " + back + " --model " +
                                 net_path);
  EXPECT_EQ(s2, 0) << o2;
  EXPECT_TRUE(weights_file_is_lamina(back));
  auto other = make_net(backend_, kNet, 6);
  load_weights(*other, back, WeightsMatch::kExact);
  EXPECT_EQ(other->arena().to_host(other->arena().data()),
            net->arena().to_host(net->arena().data()));
  // --to wins over the extension.
  const std::string forced = dir_ / "forced.lamina";
  const auto [s3, o3] = run_tool("convert_weights " + back + " " + forced + " --to caffe "
                                 "--model " + net_path);
  EXPECT_EQ(s3, 0) << o3;
  EXPECT_EQ(read_caffemodel(forced).layer_size(), 7);
}

}  // namespace
}  // namespace lamina
