// In place (a layer whose top is one of its bottoms), for every registered layer type.
//
// Each type has a case below; a type registered without one fails RegistryTypesAllHaveACase.
// The layer under test reads learnable blobs (a Scale in front of each bottom) and feeds a
// Linear head and a Euclidean loss (a loss layer is the loss itself). A type that supports
// in place must give, built in place, exactly the outputs, bottom gradients, parameter
// gradients and parameter values (running statistics) of the same net built out of place
// with the same seed, over two iterations; a type that does not must be refused when the net
// is built, with file:line, the layer and the fix. In place on any of several bottoms counts.
// Further tests: chains of in-place layers over values an earlier layer still needs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::HasSubstr;
using testing::error_of;
using testing::random_values;

NativeBackend& native() {
  static NativeBackend backend;
  return backend;
}

struct InPlaceCase {
  std::string label;                 // for messages; also tells cases of one type apart
  std::string type;                  // the registered type
  // From "x" (2, 3, 4, 4), "x2" (same shape), "rows" (2, 4), "label" (2), "target" and
  // "pair" (2, 1), "label_map" (2, 4, 4: a label per position of x's class axis) and "h"
  // (3, 3).
  std::vector<std::string> bottoms;
  std::string settings;              // the layer's *_param text ("" for none)
  bool in_place;                     // whether the type supports in place
  bool loss = false;                 // the layer's top is the loss (no head)
  Phase phase = TRAIN;
};

const std::vector<InPlaceCase>& cases() {
  static const std::vector<InPlaceCase> all = {
      {"ReLU", "ReLU", {"x"}, "", true},
      {"leaky ReLU", "ReLU", {"x"}, "relu_param { negative_slope: 0.1 }", true},
      {"Sigmoid", "Sigmoid", {"x"}, "", true},
      {"TanH", "TanH", {"x"}, "", true},
      {"Softmax", "Softmax", {"x"}, "", true},
      {"LogSoftmax", "LogSoftmax", {"x"}, "", true},
      {"Dropout TRAIN", "Dropout", {"x"}, "dropout_param { dropout_ratio: 0.3 }", true},
      {"Dropout TEST", "Dropout", {"x"}, "dropout_param { dropout_ratio: 0.3 }", true, false,
       TEST},
      {"BatchNorm batch statistics", "BatchNorm", {"x"},
       "batch_norm_param { moving_average_fraction: 0.5 }", true},
      {"BatchNorm running statistics", "BatchNorm", {"x"},
       "batch_norm_param { use_global_stats: true }", true},
      {"Scale", "Scale", {"x"},
       "scale_param { bias_term: true filler { type: 'uniform' min: -1.5 max: 1.5 } "
       "bias_filler { type: 'uniform' min: -1 max: 1 } }",
       true},
      {"Bias", "Bias", {"x"}, "bias_param { filler { type: 'uniform' min: -1 max: 1 } }", true},
      {"Sequential of ReLU", "Sequential", {"x"}, "layer { name: 'relu' type: 'ReLU' }", true},
      {"Sequential of Linear", "Sequential", {"x"},
       "layer { name: 'ip' type: 'Linear' inner_product_param { num_output: 3 } }", false},
      {"Linear", "Linear", {"x"}, "inner_product_param { num_output: 3 }", false},
      {"InnerProduct", "InnerProduct", {"x"}, "inner_product_param { num_output: 3 }", false},
      {"Convolution", "Convolution", {"x"},
       "convolution_param { num_output: 3 kernel_size: 3 pad: 1 }", false},
      {"Pooling", "Pooling", {"x"}, "pooling_param { pool: MAX kernel_size: 1 }", false},
      {"Flatten", "Flatten", {"x"}, "", false},
      {"Reshape", "Reshape", {"x"}, "reshape_param { shape { dim: 0 dim: 3 dim: -1 } }", false},
      {"Split", "Split", {"x"}, "", false},
      {"Convert", "Convert", {"x"}, "precision: BF16", false},
      {"Concat", "Concat", {"x", "x2"}, "", false},
      {"Eltwise SUM", "Eltwise", {"x", "x2"}, "", false},
      {"Eltwise PROD", "Eltwise", {"x", "x2"}, "eltwise_param { operation: PROD }", false},
      {"Eltwise MAX", "Eltwise", {"x", "x2"}, "eltwise_param { operation: MAX }", false},
      {"SoftmaxWithLoss", "SoftmaxWithLoss", {"x", "label_map"}, "", false, true},
      {"NegativeLogLikelihood", "NegativeLogLikelihood", {"rows", "label"}, "", false, true},
      {"EuclideanLoss", "EuclideanLoss", {"x", "x2"}, "", false, true},
      {"Accuracy", "Accuracy", {"x", "label_map"}, "", false, true},
      {"SigmoidCrossEntropyLoss", "SigmoidCrossEntropyLoss", {"x", "x2"}, "", false, true},
      {"HingeLoss", "HingeLoss", {"x", "label"}, "", false, true},
      {"MultinomialLogisticLoss", "MultinomialLogisticLoss", {"x", "label"}, "", false, true},
      {"ContrastiveLoss", "ContrastiveLoss", {"target", "pair", "label"}, "", false, true},
      {"InfogainLoss", "InfogainLoss", {"x", "label_map", "h"}, "", false, true},
      // The pointwise layers (x lies in [-3, 3]; Log and the square root shifted into their
      // domain), PReLU and MVN.
      {"AbsVal", "AbsVal", {"x"}, "", true},
      {"BNLL", "BNLL", {"x"}, "", true},
      {"Power square", "Power", {"x"}, "power_param { power: 2 scale: 0.5 shift: 1 }", true},
      {"Power root", "Power", {"x"}, "power_param { power: 0.5 shift: 10 }", true},
      {"Power constant gradient", "Power", {"x"}, "power_param { power: 1 scale: 2 }", true},
      {"Exp", "Exp", {"x"}, "exp_param { base: 2 }", true},
      {"Log", "Log", {"x"}, "log_param { shift: 10 }", true},
      {"Threshold", "Threshold", {"x"}, "threshold_param { threshold: 0.2 }", true},
      {"Clip", "Clip", {"x"}, "clip_param { min: -1 max: 1.5 }", true},
      {"Swish", "Swish", {"x"}, "", true},
      {"ELU", "ELU", {"x"}, "elu_param { alpha: 0.5 }", true},
      {"PReLU", "PReLU", {"x"},
       "prelu_param { filler { type: 'uniform' min: -0.5 max: 0.5 } }", true},
      {"PReLU shared", "PReLU", {"x"}, "prelu_param { channel_shared: true }", true},
      {"MVN", "MVN", {"x"}, "", true},
      {"MVN of the mean across channels", "MVN", {"x"},
       "mvn_param { normalize_variance: false across_channels: true }", true},
      // LRN, Deconvolution, Im2col, SPP, and the shape and indexing layers: none works in
      // place.
      {"LRN", "LRN", {"x"}, "lrn_param { local_size: 3 }", false},
      {"Deconvolution", "Deconvolution", {"x"},
       "convolution_param { num_output: 3 kernel_size: 1 }", false},
      {"Im2col", "Im2col", {"x"}, "convolution_param { kernel_size: 1 }", false},
      {"SPP", "SPP", {"x"}, "spp_param { pyramid_height: 1 }", false},
      {"Slice", "Slice", {"x"}, "", false},
      {"Crop", "Crop", {"x", "x2"}, "crop_param { offset: 0 }", false},
      {"Tile", "Tile", {"x"}, "tile_param { tiles: 2 }", false},
      {"Reduction", "Reduction", {"x"}, "reduction_param { axis: 2 }", false},
      {"ArgMax", "ArgMax", {"x"}, "", false},
      {"Embed", "Embed", {"pair"}, "embed_param { num_output: 3 input_dim: 4 }", false},
      {"BatchReindex", "BatchReindex", {"x", "label"}, "", false},
      {"Filter", "Filter", {"x", "label"}, "", false},
  };
  return all;
}

// Types that take no bottom, so that no top can be one: the net refuses a bottom.
const std::set<std::string> kNoBottoms = {"Input",      "MnistData",  "Data",      "ImageData",
                                          "DummyData",  "MemoryData", "HDF5Data"};
// Types for which in place cannot arise either: Parameter has no bottom (its own test is in
// test_shape_layers.cpp), Silence and HDF5Output no top.
const std::set<std::string> kNeverInPlace = {"Parameter", "Silence", "HDF5Output"};

// Two Inputs, and a learnable Scale in front of each data blob, so that x, x2 and rows get
// gradients: x, x2 (2, 3, 4, 4), rows (2, 4), label (2) with values 1 and 3, target (2, 1);
// and pair (2, 1), label_map (2, 4, 4) and h (3, 3), zeros (only losses read them, in cases
// not run).
const char kPrelude[] = R"(name: 'in_place'
layer { name: 'data' type: 'Input' top: 'data' top: 'data2'
        input_param { shape { dim: 2 dim: 3 dim: 4 dim: 4 } } }
layer { name: 'labels' type: 'Input' top: 'label' top: 'target' top: 'pair' top: 'label_map'
        top: 'h' top: 'data3' input_param { shape { dim: 2 } shape { dim: 2 dim: 1 }
        shape { dim: 2 dim: 1 } shape { dim: 2 dim: 4 dim: 4 } shape { dim: 3 dim: 3 }
        shape { dim: 2 dim: 4 } } }
layer { name: 'pre' type: 'Scale' bottom: 'data' top: 'x'
        scale_param { num_axes: -1 filler { type: 'uniform' min: -1.5 max: 1.5 } } }
layer { name: 'pre2' type: 'Scale' bottom: 'data2' top: 'x2'
        scale_param { num_axes: -1 filler { type: 'uniform' min: -1.5 max: 1.5 } } }
layer { name: 'pre3' type: 'Scale' bottom: 'data3' top: 'rows'
        scale_param { num_axes: -1 filler { type: 'uniform' min: -1.5 max: 1.5 } } }
)";
constexpr int kLayerLine = 14;  // the first line after the prelude

// A Linear head on `top` and a Euclidean loss.
std::string head(const std::string& top) {
  return "layer { name: 'head' type: 'Linear' bottom: '" + top + "' top: 'head'\n"
         "        inner_product_param { num_output: 1\n"
         "          weight_filler { type: 'uniform' min: -1 max: 1 } } }\n"
         "layer { name: 'loss' type: 'EuclideanLoss' bottom: 'head' bottom: 'target' }\n";
}

// The test net; the layer under test reads `bottoms` and writes `top`.
std::string net_text(const InPlaceCase& c, const std::vector<std::string>& bottoms,
                     const std::string& top) {
  std::string layer = "layer { name: 'under_test' type: '" + c.type + "'";
  for (const std::string& b : bottoms) layer += " bottom: '" + b + "'";
  layer += " top: '" + top + "' " + c.settings + " }\n";
  return kPrelude + layer + (c.loss ? "" : head(top));
}

// Builds the net from a file, so that errors carry file:line. The file is this process's
// own: ctest runs the tests of this binary in parallel processes.
std::unique_ptr<Net> build(const std::string& text, Phase phase) {
  static const testing::TempDir dir;
  const std::string path = dir / "in_place.prototxt";
  std::ofstream(path) << text;
  return std::make_unique<Net>(parse_net_parameter(read_text_file(path), path), phase, native(),
                               7, nullptr, path);
}

// Everything a run produces that in place must not change, by name.
using Results = std::map<std::string, std::vector<float>>;

// Two iterations (stateful layers: running statistics, dropout masks, saved inputs).
Results run(Net& net, const std::string& top, const std::vector<std::string>& bottoms) {
  Results r;
  for (int iteration = 0; iteration < 2; ++iteration) {
    const std::string it = " (iteration " + std::to_string(iteration) + ")";
    net.blob("data").copy_data_from_host(random_values(96, 10 + iteration, -2, 2));
    net.blob("data2").copy_data_from_host(random_values(96, 20 + iteration, -2, 2));
    net.blob("label").copy_data_from_host({1.0f, 3.0f + iteration});
    net.blob("target").copy_data_from_host(random_values(2, 30 + iteration));
    net.arena().zero_diff();
    net.forward();
    r["loss" + it] = {net.loss()};
    r["top values" + it] = net.blob(top).copy_data_to_host();
    net.backward();
    for (const std::string& b : bottoms)
      if (b != "label") r["gradient of " + b + it] = net.blob(b).copy_diff_to_host();
    for (const ParamInfo& p : net.arena().table()) {
      const float* d = net.arena().diff() + p.offset;
      const float* v = net.arena().data() + p.offset;
      r["gradient of " + p.name + it] = std::vector<float>(d, d + p.count);
      r["values of " + p.name + it] = std::vector<float>(v, v + p.count);
    }
  }
  return r;
}

void expect_same(const Results& in_place, const Results& reference) {
  ASSERT_EQ(in_place.size(), reference.size());
  for (const auto& [name, values] : reference) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(in_place.count(name));
    EXPECT_EQ(testing::compare(in_place.at(name), values, 1e-6), "");
  }
}

TEST(InPlace, RegistryTypesAllHaveACase) {
  std::set<std::string> covered(kNoBottoms);
  covered.insert(kNeverInPlace.begin(), kNeverInPlace.end());
  for (const InPlaceCase& c : cases()) covered.insert(c.type);
  for (const std::string& type : LayerRegistry::types())
    EXPECT_TRUE(covered.count(type)) << "layer type '" << type << "' has no case in "
                                     << "test_in_place.cpp; add one (does it work in place?)";
}

TEST(InPlace, LayersWithoutBottomsRefuseOne) {
  for (const std::string& type : kNoBottoms) {
    SCOPED_TRACE(type);
    LayerParameter p;
    p.set_name("under_test");
    p.set_type(type);
    EXPECT_EQ(LayerRegistry::create(p, {native(), TRAIN, 1})->max_bottoms(), 0);
    const std::string text = "layer { name: 'under_test' type: '" + type +
                             "' bottom: 'x' top: 'x' }";
    EXPECT_THAT(error_of([&] { build(text, TRAIN); }),
                HasSubstr("layer 'under_test' (" + type + ") takes 0 bottom(s), got 1"));
  }
}

TEST(InPlace, EveryTypeIsCorrectInPlaceOrRefused) {
  for (const InPlaceCase& c : cases()) {
    SCOPED_TRACE(c.label);
    if (c.type != "Sequential") {  // a container, not a layer
      LayerParameter p;
      p.set_name("under_test");
      p.set_type(c.type);
      EXPECT_EQ(LayerRegistry::create(p, {native(), c.phase, 1})->supports_in_place(), c.in_place)
          << "the layer's supports_in_place() disagrees with the case";
    }
    // The case itself is sound: out of place, the net builds.
    std::unique_ptr<Net> reference;
    ASSERT_NO_THROW(reference = build(net_text(c, c.bottoms, "y"), c.phase));
    if (c.in_place) {
      const Results expected = run(*reference, "y", c.bottoms);
      std::unique_ptr<Net> net = build(net_text(c, c.bottoms, c.bottoms[0]), c.phase);
      expect_same(run(*net, c.bottoms[0], c.bottoms), expected);
      continue;
    }
    for (const std::string& top : c.bottoms) {  // in place on each bottom in turn
      SCOPED_TRACE("top '" + top + "'");
      const std::string message = error_of([&] { build(net_text(c, c.bottoms, top), c.phase); });
      EXPECT_THAT(message, HasSubstr("in_place.prototxt:" + std::to_string(kLayerLine) + ": "));
      const std::string layer = c.type == "Sequential" ? "layer 'under_test/ip' (Linear)"
                                                       : "layer 'under_test' (" + c.type + ")";
      EXPECT_THAT(message, HasSubstr(layer + ": cannot work in place: its top '" + top + "'"));
      EXPECT_THAT(message, HasSubstr("give the top its own name"));
    }
  }
}

// A chain of layers on x (name 'l<i>', type types[i], settings[i]), then the head: every
// top 'x' (in place) or each its own. Returns the text and the last top.
std::pair<std::string, std::string> chain_text(const std::vector<std::string>& types,
                                               const std::vector<std::string>& settings,
                                               bool in_place) {
  std::string text = kPrelude, bottom = "x";
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string top = in_place ? "x" : "y" + std::to_string(i);
    text += "layer { name: 'l" + std::to_string(i) + "' type: '" + types[i] + "' bottom: '" +
            bottom + "' top: '" + top + "' " + settings[i] + " }\n";
    bottom = top;
  }
  return {text + head(bottom), bottom};
}

// The chain built in place gives what it gives out of place.
void expect_chain_correct(const std::vector<std::string>& types,
                          const std::vector<std::string>& settings) {
  const auto [reference_text, last] = chain_text(types, settings, false);
  auto reference = build(reference_text, TRAIN);
  auto net = build(chain_text(types, settings, true).first, TRAIN);
  expect_same(run(*net, "x", {"x"}), run(*reference, last, {"x"}));
}

// Caffe's usual chains: BatchNorm + Scale + ReLU, and ReLU + Dropout, whose in-place Dropout
// changes the values ReLU's backward reads in a way that keeps its gradient.
TEST(InPlace, CaffeChainsAreCorrect) {
  {
    SCOPED_TRACE("BatchNorm, Scale, ReLU");
    expect_chain_correct({"BatchNorm", "Scale", "ReLU"},
                         {"", "scale_param { bias_term: true filler { type: 'uniform' min: -1 "
                              "max: 1 } }", ""});
  }
  {
    SCOPED_TRACE("ReLU, Dropout, ReLU");
    expect_chain_correct({"ReLU", "Dropout", "ReLU"},
                         {"", "dropout_param { dropout_ratio: 0.4 }", ""});
  }
}

// The error building the prelude, `chain`, and a head on 'x' gives.
std::string chain_error(const std::string& chain) {
  return error_of([&] { build(kPrelude + chain + head("x"), TRAIN); });
}

// An in-place layer must not overwrite values an earlier layer's backward reads.
TEST(InPlace, OverwritingValuesAnEarlierBackwardReadsIsRefused) {
  EXPECT_THAT(
      chain_error("layer { name: 'sig' type: 'Sigmoid' bottom: 'x' top: 's' }\n"
                  "layer { name: 'tanh' type: 'TanH' bottom: 's' top: 's' }\n"
                  "layer { name: 'more' type: 'Bias' bottom: 's' top: 'x3' }\n"),
      HasSubstr("layer 'tanh' (TanH): cannot work in place on 's': layer 'sig' (Sigmoid) "
                "before it reads those values in its backward pass"));
  // ReLU reads which values are positive: a Scale may flip them, a Dropout does not.
  EXPECT_THAT(chain_error("layer { name: 'relu' type: 'ReLU' bottom: 'x' top: 'x' }\n"
                          "layer { name: 'scale' type: 'Scale' bottom: 'x' top: 'x' }\n"),
              HasSubstr("layer 'scale' (Scale): cannot work in place on 'x': layer 'relu' "
                        "(ReLU) before it reads which of those values are positive"));
  EXPECT_THAT(chain_error("layer { name: 'relu' type: 'ReLU' bottom: 'x' top: 'x' }\n"
                          "layer { name: 'drop' type: 'Dropout' bottom: 'x' top: 'x' }\n"
                          "layer { name: 'bn' type: 'BatchNorm' bottom: 'x' top: 'x' }\n"),
              HasSubstr("layer 'bn' (BatchNorm): cannot work in place on 'x': layer 'relu'"));
  EXPECT_THAT(chain_error("layer { name: 'soft' type: 'Softmax' bottom: 'x' top: 'p' }\n"
                          "layer { name: 'drop' type: 'Dropout' bottom: 'p' top: 'p' }\n"
                          "layer { name: 'more' type: 'Bias' bottom: 'p' top: 'x3' }\n"),
              HasSubstr("layer 'drop' (Dropout): cannot work in place on 'p': layer 'soft'"));
}

// A Flatten or Reshape output shares its values with its bottom, which a Split may hand to
// other layers: writing it in place would change what they read.
TEST(InPlace, OverwritingSharedValuesIsRefused) {
  const std::string message =
      chain_error("layer { name: 'flat' type: 'Flatten' bottom: 'x' top: 'f' }\n"
                  "layer { name: 'relu' type: 'ReLU' bottom: 'f' top: 'f' }\n"
                  "layer { name: 'other' type: 'Bias' bottom: 'x' top: 'x3' }\n"
                  "layer { name: 'more' type: 'Bias' bottom: 'f' top: 'x4' }\n");
  EXPECT_THAT(message, HasSubstr("layer 'relu' (ReLU): cannot work in place on 'f': it shares "
                                 "its values with 'x' (layer 'flat' (Flatten) outputs a view"));
  EXPECT_THAT(message, HasSubstr("give the top its own name"));
}

}  // namespace
}  // namespace lamina
