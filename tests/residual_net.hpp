// A small residual net for the 16-bit tests of batch normalisation, Scale, Eltwise and Split
// (test_half_norm.cpp, test_cuda_half_norm.cpp): a convolution, then one ResNet basic block
// (convolution, BatchNorm + Scale in place, ReLU, convolution, BatchNorm + Scale, the identity
// shortcut summed by Eltwise, ReLU), global average pooling, a Linear layer and the loss. Its
// task: three classes told apart by where a bright square sits in a 6x6 image.
#pragma once

#include <vector>

#include "lamina/io.hpp"
#include "lamina/net.hpp"

namespace lamina::testing {

constexpr int kResidualBatch = 12;

inline NetParameter residual_net() {
  return parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 12 dim: 1 dim: 6 dim: 6 } shape { dim: 12 } } }
layer { name: "conv0" type: "Convolution" bottom: "data" top: "b0"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "msra" } } }
layer { name: "bn0" type: "BatchNorm" bottom: "b0" top: "b0" }
layer { name: "scale0" type: "Scale" bottom: "b0" top: "b0" scale_param { bias_term: true } }
layer { name: "relu0" type: "ReLU" bottom: "b0" top: "b0" }
layer { name: "conv1" type: "Convolution" bottom: "b0" top: "a"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "msra" } } }
layer { name: "bn1" type: "BatchNorm" bottom: "a" top: "a" }
layer { name: "scale1" type: "Scale" bottom: "a" top: "a" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "a" top: "a" }
layer { name: "conv2" type: "Convolution" bottom: "a" top: "c"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "msra" } } }
layer { name: "bn2" type: "BatchNorm" bottom: "c" top: "c" }
layer { name: "scale2" type: "Scale" bottom: "c" top: "c" scale_param { bias_term: true } }
layer { name: "sum" type: "Eltwise" bottom: "b0" bottom: "c" top: "s" }
layer { name: "relu2" type: "ReLU" bottom: "s" top: "s" }
layer { name: "pool" type: "Pooling" bottom: "s" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "Linear" bottom: "pool" top: "fc"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" }
)", "residual_net");
}

// Image i of class i % 3 has a bright 2x2 square at (2k, 2k), k its class; data (12, 1, 6, 6).
inline void set_residual_data(Net& net) {
  std::vector<float> data(kResidualBatch * 36, 0.0f), labels(kResidualBatch);
  for (int i = 0; i < kResidualBatch; ++i) {
    labels[i] = float(i % 3);
    const int at = 2 * (i % 3);
    for (int r = at; r < at + 2; ++r)
      for (int c = at; c < at + 2; ++c) data[i * 36 + r * 6 + c] = 1.0f;
  }
  net.blob("data").copy_data_from_host(data);
  net.blob("label").copy_data_from_host(labels);
}

}  // namespace lamina::testing
