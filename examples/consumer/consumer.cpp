// A program outside Lamina's tree: builds a small net from prototxt text, sets its weights,
// runs it forward on the CPU and checks the result against the same arithmetic done here.
// Exit status 0 when they agree.
#include <cmath>
#include <cstdio>
#include <vector>

#include "lamina/io.hpp"
#include "lamina/native_backend.hpp"
#include "lamina/net.hpp"
#include "lamina/version.hpp"

int main() {
  std::printf("consumer: compiled against Lamina %s, running with %s\n", LAMINA_VERSION_STRING,
              lamina::version());
  try {
    // y = softmax(W x + b), x: (1, 3), W: (2, 3)
    const lamina::NetParameter param = lamina::parse_net_parameter(R"(
      layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
      layer { name: "fc" type: "InnerProduct" bottom: "x" top: "z"
              inner_product_param { num_output: 2 } }
      layer { name: "prob" type: "Softmax" bottom: "z" top: "y" })", "consumer");
    lamina::NativeBackend backend;  // the CPU
    lamina::Net net(param, lamina::Phase::TEST, backend, /*seed=*/1);
    const std::vector<float> weight = {0.5f, -1, 2, 1, 0.25f, -0.5f}, bias = {0.1f, -0.2f};
    const std::vector<float> x = {1, 2, 3};
    lamina::Layer& fc = net.layer(1);  // its parameters: weight (K, C), bias (K)
    fc.params()[0].tensor->copy_data_from_host(weight);
    fc.params()[1].tensor->copy_data_from_host(bias);
    net.blob("x").copy_data_from_host(x);
    net.forward();
    const std::vector<float> y = net.blob("y").copy_data_to_host();

    float z[2];
    for (int k = 0; k < 2; ++k) {
      z[k] = bias[k];
      for (int c = 0; c < 3; ++c) z[k] += weight[k * 3 + c] * x[c];
    }
    const float m = std::fmax(z[0], z[1]);
    const float e0 = std::exp(z[0] - m), e1 = std::exp(z[1] - m);
    const float expected[2] = {e0 / (e0 + e1), e1 / (e0 + e1)};
    std::printf("consumer: softmax(Wx + b) = %.6f %.6f (expected %.6f %.6f)\n", y[0], y[1],
                expected[0], expected[1]);
    for (int k = 0; k < 2; ++k)
      if (std::fabs(y[k] - expected[k]) > 1e-6f) return 1;
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "consumer: error: %s\n", e.what());
    return 1;
  }
  std::printf("consumer: ok\n");
  return 0;
}
