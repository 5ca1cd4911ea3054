// Tests for the example's Square layer, the way a user tests their own layer: forward values
// in closed form, gradients with Lamina's gradient checker, and use from a prototxt.
#include <gtest/gtest.h>

#include <memory>

#include "lamina/gradient_checker.hpp"
#include "lamina/io.hpp"
#include "lamina/backend_factory.hpp"
#include "lamina/net.hpp"
#include "lamina/registry.hpp"

namespace {

lamina::LayerParameter square_param(const std::string& scale) {
  return lamina::parse_net_parameter(
             "layer { name: 'sq' type: 'Square' custom_param { entry { key: 'scale' value: '" +
                 scale + "' } } }",
             "test")
      .layer(0);
}

TEST(SquareLayer, IsRegisteredByItsOwnFile) { EXPECT_TRUE(lamina::LayerRegistry::has("Square")); }

TEST(SquareLayer, ForwardIsScaledSquare) {
  const std::unique_ptr<lamina::Backend> cpu = lamina::make_backend("cpu");
  lamina::Backend& backend = *cpu;
  lamina::Tensor x(backend, {2, 3}, "x"), y(backend, {1}, "y");
  x.copy_data_from_host({-2, -1, 0, 0.5f, 1, 3});
  auto layer = lamina::LayerRegistry::create(square_param("0.5"), {backend, lamina::TRAIN, 1});
  lamina::setup_standalone(*layer, {&x}, {&y}, 1);
  layer->forward({&x}, {&y});
  const std::vector<float> expected = {2, 0.5f, 0, 0.125f, 0.5f, 4.5f};
  EXPECT_EQ(y.shape(), x.shape());
  EXPECT_EQ(y.copy_data_to_host(), expected);
}

TEST(SquareLayer, GradientMatchesFiniteDifferences) {
  const std::unique_ptr<lamina::Backend> cpu = lamina::make_backend("cpu");
  lamina::Backend& backend = *cpu;
  lamina::Tensor x(backend, {4, 5}, "x"), y(backend, {1}, "y");
  std::vector<float> values(20);
  for (int i = 0; i < 20; ++i) values[i] = 0.1f * (i - 9.5f);
  x.copy_data_from_host(values);
  auto layer = lamina::LayerRegistry::create(square_param("1.5"), {backend, lamina::TRAIN, 1});
  lamina::setup_standalone(*layer, {&x}, {&y}, 1);
  lamina::GradientCheckResult result = lamina::check_gradients(*layer, {&x}, {&y});
  EXPECT_TRUE(result.ok) << result.summary();
  EXPECT_EQ(result.checked, 20);
}

TEST(SquareLayer, BadParametersAreClearErrors) {
  const std::unique_ptr<lamina::Backend> cpu = lamina::make_backend("cpu");
  lamina::Backend& backend = *cpu;
  lamina::Tensor x(backend, {2}, "x"), y(backend, {1}, "y");
  auto bad_value = lamina::LayerRegistry::create(square_param("big"), {backend, lamina::TRAIN, 1});
  try {
    bad_value->setup({&x}, {&y});
    FAIL() << "expected an error";
  } catch (const lamina::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'big', not a number"), std::string::npos) << e.what();
  }
  lamina::LayerParameter unknown = square_param("1");
  unknown.mutable_custom_param()->add_entry()->set_key("power");
  auto bad_key = lamina::LayerRegistry::create(unknown, {backend, lamina::TRAIN, 1});
  EXPECT_THROW(bad_key->setup({&x}, {&y}), lamina::Error);
}

TEST(SquareLayer, TrainsInsideANetFromPrototxt) {
  const std::unique_ptr<lamina::Backend> cpu = lamina::make_backend("cpu");
  lamina::Backend& backend = *cpu;
  lamina::NetParameter param = lamina::parse_net_parameter(R"(
    layer { name: "in" type: "Input" top: "x" top: "t" input_param { shape { dim: 3 dim: 4 } } }
    layer { name: "fc" type: "Linear" bottom: "x" inner_product_param { num_output: 4 } }
    layer { name: "sq" type: "Square" custom_param { entry { key: "scale" value: "1" } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "sq" bottom: "t" }
  )", "test");
  lamina::Net net(param, lamina::TRAIN, backend, 7);
  net.blob("x").copy_data_from_host(std::vector<float>(12, 0.5f));
  net.blob("t").copy_data_from_host(std::vector<float>(12, 0.25f));
  net.forward();
  const float before = net.loss();
  // Plain gradient descent on the arena: the loss must fall.
  for (int i = 0; i < 50; ++i) {
    net.arena().zero_diff();
    net.forward();
    net.backward();
    backend.axpy(net.arena().count(), -0.1f, net.arena().diff(), net.arena().data());
  }
  net.forward();
  EXPECT_LT(net.loss(), 0.5f * before);
}

}  // namespace
