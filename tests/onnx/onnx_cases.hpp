// The catalogue of nets the ONNX export is tested on (test_onnx_export.cpp), and how a case
// is built: its TEST net on the CPU with random weights and random inputs, seeded.
//
// Weights: every parameter uniform in [-a, a] with a = sqrt(3 / fan-in) (the count per
// output: its elements over its first dim), so that values keep their scale from layer to
// layer, except BatchNorm's running variance and factor: var_sum in [2, 6] and the factor 2
// (the export must divide by it), a variance in [1, 3] that keeps a deep net's values from
// growing from block to block. Inputs: uniform in [-1, 1]; a blob named "index..."
// holds integers in [0, 4) (Embed's and BatchReindex's indices).
#pragma once

#include <google/protobuf/text_format.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "lamina/backend_factory.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"

namespace lamina::onnx_cases {

struct Case {
  std::string name;
  std::string text;  // the net's prototxt
  // Whether the evaluator compares it with Lamina's forward pass: not where layers run in
  // BF16 (the exported graph computes in FP32).
  bool compare = true;
};

// A net whose Input layer "data" has the shape `dims` ("dim: 2 dim: 3"), then `layers`.
inline std::string with_input(const std::string& dims, const std::string& layers) {
  return "name: \"case\"\nlayer { name: \"data\" type: \"Input\" top: \"data\" "
         "input_param { shape { " + dims + " } } }\n" + layers;
}

inline std::vector<Case> catalogue() {
  const std::string source = LAMINA_SOURCE_DIR;
  const auto file = [&](const std::string& path) {
    std::string text;
    google::protobuf::TextFormat::PrintToString(read_net_parameter(source + "/" + path), &text);
    return text;
  };
  const std::string nchw = "dim: 2 dim: 4 dim: 8 dim: 8";
  return {
      {"mnist_mlp", file("models/mnist/mlp_deploy.prototxt")},
      {"lenet", file("models/mnist/lenet_deploy.prototxt")},
      {"inner_product", with_input("dim: 2 dim: 3 dim: 4", R"(
        layer { name: "axis2" type: "InnerProduct" bottom: "data" top: "axis2"
                inner_product_param { num_output: 5 axis: 2 } }
        layer { name: "transposed" type: "Linear" bottom: "data" top: "transposed"
                inner_product_param { num_output: 6 transpose: true bias_term: false } })")},
      {"convolution", with_input(nchw, R"(
        layer { name: "grouped" type: "Convolution" bottom: "data" top: "grouped"
                convolution_param { num_output: 6 kernel_size: 3 stride: 2 pad: 1 group: 2 } }
        layer { name: "dilated" type: "Convolution" bottom: "grouped" top: "dilated"
                convolution_param { num_output: 3 kernel_h: 2 kernel_w: 3 pad_w: 1
                                    dilation: 2 bias_term: false } }
        layer { name: "deconv" type: "Deconvolution" bottom: "data" top: "deconv"
                convolution_param { num_output: 4 kernel_size: 3 stride: 2 pad: 1 group: 2 } }
        layer { name: "columns" type: "Im2col" bottom: "data" top: "columns"
                convolution_param { kernel_size: 3 stride: 2 pad: 1 } })")},
      {"pooling", with_input(nchw, R"(
        layer { name: "max_ceil" type: "Pooling" bottom: "data" top: "max_ceil"
                pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 } }
        layer { name: "ave_overhang_pad" type: "Pooling" bottom: "data" top: "ave_overhang_pad"
                pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
        layer { name: "ave_overhang" type: "Pooling" bottom: "data" top: "ave_overhang"
                pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
        layer { name: "ave_pad" type: "Pooling" bottom: "data" top: "ave_pad"
                pooling_param { pool: AVE kernel_size: 2 stride: 2 pad: 1 } }
        layer { name: "floor" type: "Pooling" bottom: "data" top: "floor"
                pooling_param { pool: AVE kernel_h: 3 kernel_w: 2 stride: 2 round_mode: FLOOR } }
        layer { name: "global_max" type: "Pooling" bottom: "data" top: "global_max"
                pooling_param { pool: MAX global_pooling: true } }
        layer { name: "global_ave" type: "Pooling" bottom: "data" top: "global_ave"
                pooling_param { pool: AVE global_pooling: true } }
        layer { name: "positive" type: "AbsVal" bottom: "data" top: "positive" }
        layer { name: "stochastic" type: "Pooling" bottom: "positive" top: "stochastic"
                pooling_param { pool: STOCHASTIC kernel_size: 3 stride: 2 } }
        layer { name: "pyramid" type: "SPP" bottom: "data" top: "pyramid"
                spp_param { pyramid_height: 3 } }
        layer { name: "pyramid_ave" type: "SPP" bottom: "data" top: "pyramid_ave"
                spp_param { pyramid_height: 2 pool: AVE } }
        layer { name: "pyramid_one" type: "SPP" bottom: "data" top: "pyramid_one"
                spp_param { pyramid_height: 1 } })")},
      {"pyramid_of_odd_size", with_input("dim: 1 dim: 2 dim: 7 dim: 6", R"(
        layer { name: "pyramid" type: "SPP" bottom: "data" top: "pyramid"
                spp_param { pyramid_height: 3 pool: AVE } })")},
      {"lrn", with_input(nchw, R"(
        layer { name: "across" type: "LRN" bottom: "data" top: "across"
                lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 } }
        layer { name: "within" type: "LRN" bottom: "data" top: "within"
                lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL } })")},
      {"pointwise", with_input("dim: 2 dim: 3 dim: 4", R"(
        layer { name: "relu" type: "ReLU" bottom: "data" top: "relu" }
        layer { name: "leaky" type: "ReLU" bottom: "data" top: "leaky"
                relu_param { negative_slope: 0.1 } }
        layer { name: "sigmoid" type: "Sigmoid" bottom: "data" top: "sigmoid" }
        layer { name: "tanh" type: "TanH" bottom: "data" top: "tanh" }
        layer { name: "abs" type: "AbsVal" bottom: "data" top: "abs" }
        layer { name: "bnll" type: "BNLL" bottom: "data" top: "bnll" }
        layer { name: "elu" type: "ELU" bottom: "data" top: "elu" elu_param { alpha: 0.7 } }
        layer { name: "clip" type: "Clip" bottom: "data" top: "clip"
                clip_param { min: -0.3 max: 0.4 } }
        layer { name: "threshold" type: "Threshold" bottom: "data" top: "threshold"
                threshold_param { threshold: 0.2 } }
        layer { name: "swish" type: "Swish" bottom: "data" top: "swish" swish_param { beta: 1.5 } }
        layer { name: "power" type: "Power" bottom: "data" top: "power"
                power_param { power: 1.5 scale: 0.5 shift: 2 } }
        layer { name: "square" type: "Power" bottom: "data" top: "square"
                power_param { power: 2 } }
        layer { name: "constant" type: "Power" bottom: "data" top: "constant"
                power_param { power: 2 scale: 0 shift: 3 } }
        layer { name: "same" type: "Power" bottom: "data" top: "same" }
        layer { name: "exp" type: "Exp" bottom: "data" top: "exp"
                exp_param { base: 2 scale: 0.5 shift: 1 } }
        layer { name: "exp_e" type: "Exp" bottom: "data" top: "exp_e" }
        layer { name: "log" type: "Log" bottom: "data" top: "log"
                log_param { base: 10 scale: 0.5 shift: 2 } }
        layer { name: "prelu" type: "PReLU" bottom: "data" top: "prelu" }
        layer { name: "prelu_shared" type: "PReLU" bottom: "data" top: "prelu_shared"
                prelu_param { channel_shared: true } }
        layer { name: "dropout" type: "Dropout" bottom: "data" top: "dropout" })")},
      {"eltwise", with_input("dim: 2 dim: 3 dim: 4", R"(
        layer { name: "b" type: "TanH" bottom: "data" top: "b" }
        layer { name: "c" type: "Sigmoid" bottom: "data" top: "c" }
        layer { name: "sum" type: "Eltwise" bottom: "data" bottom: "b" top: "sum"
                eltwise_param { operation: SUM coeff: 1 coeff: -0.5 } }
        layer { name: "product" type: "Eltwise" bottom: "data" bottom: "b" bottom: "c"
                top: "product" eltwise_param { operation: PROD } }
        layer { name: "max" type: "Eltwise" bottom: "data" bottom: "b" bottom: "c" top: "max"
                eltwise_param { operation: MAX } })")},
      {"normalisation", with_input(nchw, R"(
        layer { name: "bn" type: "BatchNorm" bottom: "data" top: "bn" }
        layer { name: "scale" type: "Scale" bottom: "bn" top: "bn"
                scale_param { bias_term: true } }
        layer { name: "relu" type: "ReLU" bottom: "bn" top: "bn" }
        layer { name: "batch_stats" type: "BatchNorm" bottom: "data" top: "batch_stats"
                batch_norm_param { use_global_stats: false } }
        layer { name: "bias" type: "Bias" bottom: "data" top: "bias"
                bias_param { axis: 2 num_axes: 2 } }
        layer { name: "scale_all" type: "Scale" bottom: "data" top: "scale_all"
                scale_param { axis: 0 num_axes: -1 } }
        layer { name: "mvn" type: "MVN" bottom: "data" top: "mvn" }
        layer { name: "mvn_across" type: "MVN" bottom: "data" top: "mvn_across"
                mvn_param { across_channels: true eps: 0.01 } }
        layer { name: "mvn_mean" type: "MVN" bottom: "data" top: "mvn_mean"
                mvn_param { normalize_variance: false } })")},
      {"two_bottom_scale_and_bias", with_input(nchw, R"(
        layer { name: "factors" type: "Input" top: "factors" input_param { shape { dim: 4 } } }
        layer { name: "offsets" type: "Input" top: "offsets"
                input_param { shape { dim: 2 dim: 4 } } }
        layer { name: "scaled" type: "Scale" bottom: "data" bottom: "factors" top: "scaled"
                scale_param { bias_term: true } }
        layer { name: "shifted" type: "Bias" bottom: "data" bottom: "offsets" top: "shifted"
                bias_param { axis: 0 } })")},
      {"softmax", with_input("dim: 2 dim: 3 dim: 4 dim: 5", R"(
        layer { name: "softmax" type: "Softmax" bottom: "data" top: "softmax" }
        layer { name: "log_softmax" type: "LogSoftmax" bottom: "data" top: "log_softmax"
                softmax_param { axis: -1 } })")},
      {"shapes", with_input("dim: 2 dim: 6 dim: 3 dim: 4", R"(
        layer { name: "flat" type: "Flatten" bottom: "data" top: "flat"
                flatten_param { axis: 1 end_axis: 2 } }
        layer { name: "reshaped" type: "Reshape" bottom: "data" top: "reshaped"
                reshape_param { shape { dim: 0 dim: -1 dim: 2 } } }
        layer { name: "parts" type: "Slice" bottom: "data" top: "part0" top: "part1"
                top: "part2" slice_param { axis: 1 slice_point: 1 slice_point: 4 } }
        layer { name: "joined" type: "Concat" bottom: "part2" bottom: "part0" top: "joined" }
        layer { name: "small" type: "Input" top: "small"
                input_param { shape { dim: 2 dim: 6 dim: 2 dim: 2 } } }
        layer { name: "cropped" type: "Crop" bottom: "data" bottom: "small" top: "cropped"
                crop_param { axis: 2 offset: 1 offset: 2 } }
        layer { name: "tiled" type: "Tile" bottom: "part1" top: "tiled"
                tile_param { axis: 2 tiles: 3 } }
        layer { name: "sum" type: "Reduction" bottom: "part1" top: "sum"
                reduction_param { axis: 1 coeff: 2 } }
        layer { name: "asum" type: "Reduction" bottom: "data" top: "asum"
                reduction_param { operation: ASUM axis: 2 } }
        layer { name: "sumsq" type: "Reduction" bottom: "data" top: "sumsq"
                reduction_param { operation: SUMSQ axis: -1 } }
        layer { name: "mean" type: "Reduction" bottom: "data" top: "mean"
                reduction_param { operation: MEAN coeff: 0.5 } }
        layer { name: "argmax" type: "ArgMax" bottom: "data" top: "argmax"
                argmax_param { top_k: 3 out_max_val: true } }
        layer { name: "argmax_plain" type: "ArgMax" bottom: "data" top: "argmax_plain" }
        layer { name: "argmax_axis" type: "ArgMax" bottom: "data" top: "argmax_axis"
                argmax_param { axis: 1 top_k: 2 } }
        layer { name: "max_axis" type: "ArgMax" bottom: "data" top: "max_axis"
                argmax_param { axis: -1 out_max_val: true } })")},
      {"indices", with_input("dim: 4 dim: 3", R"(
        layer { name: "index_rows" type: "Input" top: "index_rows"
                input_param { shape { dim: 5 } } }
        layer { name: "index_words" type: "Input" top: "index_words"
                input_param { shape { dim: 2 dim: 3 } } }
        layer { name: "rows" type: "BatchReindex" bottom: "data" bottom: "index_rows"
                top: "rows" }
        layer { name: "embedded" type: "Embed" bottom: "index_words" top: "embedded"
                embed_param { num_output: 5 input_dim: 4 } }
        layer { name: "embedded_plain" type: "Embed" bottom: "index_words"
                top: "embedded_plain" embed_param { num_output: 2 input_dim: 4 bias_term: false } }
        layer { name: "learned" type: "Parameter" top: "learned"
                parameter_param { shape { dim: 4 dim: 3 } } }
        layer { name: "plus" type: "Eltwise" bottom: "data" bottom: "learned" top: "plus" })")},
      {"in_place_and_silence", with_input("dim: 2 dim: 5", R"(
        layer { name: "rescale" type: "Power" bottom: "data" top: "data"
                power_param { scale: 2 } }
        layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
                inner_product_param { num_output: 3 } }
        layer { name: "relu" type: "ReLU" bottom: "fc" top: "fc" }
        layer { name: "drop" type: "Dropout" bottom: "fc" top: "fc" }
        layer { name: "unused" type: "Sigmoid" bottom: "data" top: "unused" }
        layer { name: "quiet" type: "Silence" bottom: "unused" }
        layer { name: "aux" type: "Input" top: "aux" input_param { shape { dim: 3 } } }
        layer { name: "doubled" type: "Power" bottom: "aux" top: "aux"
                power_param { scale: 2 } })")},
      {"bf16_layers", with_input("dim: 2 dim: 3", R"(
        layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc" precision: BF16
                inner_product_param { num_output: 4 } }
        layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" })"), false},
      {"deep_net", [&] {
         NetParameter deep = read_net_parameter(source + "/tests/onnx/deep_net.prototxt");
         BlobShape& shape = *deep.mutable_layer(0)->mutable_input_param()->mutable_shape(0);
         shape.set_dim(0, 1);  // one image of 32 x 32: the layers are what is tested
         shape.set_dim(2, 32);
         shape.set_dim(3, 32);
         std::string text;
         google::protobuf::TextFormat::PrintToString(deep, &text);
         return text;
       }()},
  };
}

// A case's TEST net on the CPU, with the weights and inputs described above.
struct Built {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Net> net;
};

inline void randomize(Net& net, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const auto fill = [&](Tensor& t, float lo, float hi, bool integers) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(size_t(t.count()));
    for (float& x : v) x = integers ? std::floor(u(rng)) : u(rng);
    t.copy_data_from_host(v);
  };
  for (int i = 0; i < net.num_layers(); ++i) {
    Layer& layer = net.layer(i);
    for (Param& p : layer.params()) {
      const Shape& shape = p.tensor->shape();
      const int64_t fan_in = shape.empty() ? 1 : std::max<int64_t>(1, p.tensor->count() / shape[0]);
      const float a = std::sqrt(3.0f / float(fan_in));
      fill(*p.tensor, -a, a, false);
    }
    if (layer.type() == "BatchNorm") {
      fill(*layer.params()[1].tensor, 2.0f, 6.0f, false);     // var_sum: var in [1, 3]
      layer.params()[2].tensor->copy_data_from_host({2.0f});  // factor
    }
    if (layer.type() == "Input")
      for (Tensor* t : net.layer_tops(i)) {
        const bool index = t->name().rfind("index", 0) == 0;
        fill(*t, index ? 0.0f : -1.0f, index ? 4.0f : 1.0f, index);
      }
  }
}

inline Built build(const Case& c, uint64_t seed = 1) {
  Built b;
  b.backend = make_backend("cpu");
  b.net = std::make_unique<Net>(parse_net_parameter(c.text, c.name), TEST, *b.backend, seed);
  randomize(*b.net, seed);
  return b;
}

}  // namespace lamina::onnx_cases
