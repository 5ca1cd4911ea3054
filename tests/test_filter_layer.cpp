// Filter (Caffe's): the rows a selector keeps, a number that changes from pass to pass.
//   - the layer in the LayerCase table: a gradient check on Native, HostAsDevice and CUDA,
//     and the same forward and backward on each device as on Native;
//   - forward rows and backward gradients against values written here, on every device;
//   - in a net, over passes keeping 4, 1, 0 and 6 rows: the layers after it are set up
//     again each pass, and the loss and the gradients equal those of the same net fed the
//     kept rows directly; the net is not fused and says why it cannot be captured;
//   - a Filter behind a Filter;
//   - invalid selectors and bottoms, and a parameter whose shape would follow the number of
//     rows, are Errors naming the layer.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "layer_cases.hpp"
#include "lamina/io.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

using ::testing::HasSubstr;

std::vector<LayerCase> filter_cases() {
  return {
      // Labels 0 and 1 as the selector: it drops some rows of six.
      LayerCase("Filter", "type: 'Filter'", {{6, 3, 2}, {6}}).labels(1, 2),
      // Two blobs and a 4-D selector holding 0, 1 and 2 (any value but 0 keeps a row).
      LayerCase("FilterTwoBlobs", "type: 'Filter'", {{5, 4}, {5, 2, 2}, {5, 1, 1, 1}})
          .labels(2, 3)
          .with_tops(2),
  };
}

LAMINA_LAYER_CASES(Filter, filter_cases);

class FilterOnDevice : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override { open_backend(GetParam(), backend_); }
  std::unique_ptr<Backend> backend_;
};

INSTANTIATE_TEST_SUITE_P(Devices, FilterOnDevice,
                         ::testing::Values(Device::kNative, Device::kHostAsDevice, Device::kCuda),
                         [](const auto& info) { return device_name(info.param); });

std::unique_ptr<Tensor> tensor(Backend& backend, const Shape& shape, const std::string& name,
                               const std::vector<float>& values) {
  auto t = std::make_unique<Tensor>(backend, shape, name);
  t->copy_data_from_host(values);
  return t;
}

std::unique_ptr<Layer> filter_layer(Backend& backend) {
  LayerParameter p;
  p.set_name("filter");
  p.set_type("Filter");
  return LayerRegistry::create(p, LayerContext{backend, TRAIN, 1});
}

// x (5, 2) = 0..9, y (5) = 10..14, selector (5, 1) = (0, 2, 0, -1, 1): rows 1, 3, 4 stay.
TEST_P(FilterOnDevice, KeepsTheSelectedRowsInOrderAndRoutesTheirGradientsBack) {
  Backend& b = *backend_;
  auto x = tensor(b, {5, 2}, "x", {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  auto y = tensor(b, {5}, "y", {10, 11, 12, 13, 14});
  auto s = tensor(b, {5, 1}, "s", {0, 2, 0, -1, 1});
  Tensor fx(b, {1}, "fx"), fy(b, {1}, "fy");
  std::unique_ptr<Layer> layer = filter_layer(b);
  const Tensors bottom{x.get(), y.get(), s.get()}, top{&fx, &fy};
  layer->setup(bottom, top);
  EXPECT_EQ(fx.shape(), (Shape{5, 2}));  // all rows until a pass counts them
  layer->forward(bottom, top);
  EXPECT_EQ(fx.shape(), (Shape{3, 2}));
  EXPECT_EQ(fy.shape(), (Shape{3}));
  EXPECT_EQ(fx.copy_data_to_host(), (std::vector<float>{2, 3, 6, 7, 8, 9}));
  EXPECT_EQ(fy.copy_data_to_host(), (std::vector<float>{11, 13, 14}));

  EXPECT_TRUE(layer->accepts_gradient(0) && layer->accepts_gradient(1));
  EXPECT_FALSE(layer->accepts_gradient(2));
  for (Tensor* t : bottom) t->copy_diff_from_host(std::vector<float>(t->count(), 7.0f));
  fx.copy_diff_from_host({-1, -2, -3, -4, -5, -6});
  fy.copy_diff_from_host({-7, -8, -9});
  layer->backward_input(top, {true, true, false}, bottom);
  EXPECT_EQ(x->copy_diff_to_host(), (std::vector<float>{0, 0, -1, -2, 0, 0, -3, -4, -5, -6}));
  EXPECT_EQ(y->copy_diff_to_host(), (std::vector<float>{0, -7, 0, -8, -9}));
  EXPECT_EQ(s->copy_diff_to_host(), std::vector<float>(5, 7.0f));  // not touched

  // The next pass keeps no row: empty tops, and zero gradients.
  s->copy_data_from_host({0, 0, 0, 0, 0});
  layer->forward(bottom, top);
  EXPECT_EQ(fx.shape(), (Shape{0, 2}));
  EXPECT_EQ(fy.shape(), (Shape{0}));
  layer->backward_input(top, {true, false, false}, bottom);
  EXPECT_EQ(x->copy_diff_to_host(), std::vector<float>(10, 0.0f));
}

// ---------------------------------------------------------------- in a net

// x (6, 4) and its labels, filtered by keep, through a Linear, an in-place ReLU (the net
// would fuse it into the Linear) and the softmax loss. force_backward: x gets a gradient.
constexpr const char* kFilterNet = R"(
force_backward: true
layer { name: "data" type: "Input" top: "x" top: "label" top: "keep"
        input_param { shape { dim: 6 dim: 4 } shape { dim: 6 } shape { dim: 6 dim: 1 } } }
layer { name: "filter" type: "Filter" bottom: "x" bottom: "label" bottom: "keep"
        top: "fx" top: "flabel" }
layer { name: "ip" type: "InnerProduct" bottom: "fx" top: "y"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "constant" value: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "y" top: "y" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "flabel" top: "loss" }
)";

// The same layers fed rows (rows, 4) directly.
std::string direct_net(int rows) {
  const std::string r = std::to_string(rows);
  return "force_backward: true\n"
         "layer { name: 'data' type: 'Input' top: 'fx' top: 'flabel' input_param { shape { dim: " +
         r + " dim: 4 } shape { dim: " + r + " } } }\n" +
         R"(layer { name: "ip" type: "InnerProduct" bottom: "fx" top: "y"
                    inner_product_param { num_output: 3 } }
            layer { name: "relu" type: "ReLU" bottom: "y" top: "y" }
            layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "flabel"
                    top: "loss" })";
}

void pass(Net& net) {
  net.arena().zero_diff();
  net.forward();
  net.backward();
}

TEST_P(FilterOnDevice, TheLayersAfterItFollowTheRowsItKeepsEachPass) {
  Backend& b = *backend_;
  Net net(parse_net_parameter(kFilterNet, "filter net"), TRAIN, b, 5);
  EXPECT_TRUE(net.shapes_vary());
  EXPECT_FALSE(net.layer_fused(layer_index(net, "relu")));  // the Linear runs alone
  EXPECT_THAT(net.capture_blocker(),
              HasSubstr("layer 'filter' (Filter): it reads its selector on the host"));
  const std::vector<float> x = random_values(24, 9);
  const std::vector<float> label = {0, 1, 2, 1, 0, 2};
  net.blob("x").copy_data_from_host(x);
  net.blob("label").copy_data_from_host(label);
  Layer& ip = net.layer(layer_index(net, "ip"));

  for (const std::vector<float>& keep :
       {std::vector<float>{1, 0, 1, 1, 0, 1}, {0, 0, 3, 0, 0, 0}, std::vector<float>(6, 0.0f),
        std::vector<float>(6, 1.0f)}) {
    std::vector<int> kept;
    for (int r = 0; r < 6; ++r)
      if (keep[r] != 0) kept.push_back(r);
    const int rows = int(kept.size());
    SCOPED_TRACE(std::to_string(rows) + " rows kept");
    net.blob("keep").copy_data_from_host(keep);
    pass(net);
    EXPECT_EQ(net.blob("fx").shape(), (Shape{rows, 4}));
    EXPECT_EQ(net.blob("y").shape(), (Shape{rows, 3}));
    const std::vector<float> dx = net.blob("x").copy_diff_to_host();
    if (rows == 0) {
      EXPECT_EQ(net.loss(), 0.0f);
      EXPECT_EQ(dx, std::vector<float>(24, 0.0f));
      EXPECT_EQ(ip.params()[0].tensor->copy_diff_to_host(), std::vector<float>(12, 0.0f));
      continue;
    }
    // The reference: the kept rows fed directly, through the same weights.
    Net direct(parse_net_parameter(direct_net(rows), "direct net"), TRAIN, b, 5);
    Layer& dip = direct.layer(layer_index(direct, "ip"));
    for (int k = 0; k < 2; ++k)
      dip.params()[k].tensor->copy_data_from_host(ip.params()[k].tensor->copy_data_to_host());
    std::vector<float> fx, flabel;
    for (int r : kept) {
      fx.insert(fx.end(), x.begin() + 4 * r, x.begin() + 4 * r + 4);
      flabel.push_back(label[r]);
    }
    direct.blob("fx").copy_data_from_host(fx);
    direct.blob("flabel").copy_data_from_host(flabel);
    pass(direct);
    EXPECT_NEAR(net.loss(), direct.loss(), 1e-6 * std::abs(direct.loss()));
    for (int k = 0; k < 2; ++k)
      EXPECT_EQ(compare(ip.params()[k].tensor->copy_diff_to_host(),
                        dip.params()[k].tensor->copy_diff_to_host(), 1e-6), "");
    std::vector<float> expected_dx(24, 0.0f);
    const std::vector<float> dfx = direct.blob("fx").copy_diff_to_host();
    for (int k = 0; k < rows; ++k)
      std::copy(dfx.begin() + 4 * k, dfx.begin() + 4 * k + 4, expected_dx.begin() + 4 * kept[k]);
    EXPECT_EQ(compare(dx, expected_dx, 1e-6), "");
  }
}

// The solver trains through a Filter (its steps run directly: the net says why it cannot be
// captured), the same on every device as on Native.
std::vector<float> train_through_filter(Backend& backend) {
  const SolverParameter sp = parse_solver_parameter(
      "base_lr: 0.2 momentum: 0.9 lr_policy: 'fixed' random_seed: 5", "solver");
  Solver solver(sp, parse_net_parameter(kFilterNet, "filter net"), backend);
  Net& net = solver.net();
  net.blob("x").copy_data_from_host(random_values(24, 9));
  net.blob("label").copy_data_from_host({0, 1, 2, 1, 0, 2});
  net.blob("keep").copy_data_from_host({1, 0, 1, 1, 0, 1});
  std::vector<float> losses;
  for (int i = 0; i < 4; ++i) {
    solver.step(10);
    losses.push_back(solver.take_mean_loss());
  }
  return losses;
}

TEST_P(FilterOnDevice, TheSolverTrainsThroughIt) {
  NativeBackend native;
  const std::vector<float> expected = train_through_filter(native);
  EXPECT_LT(expected.back(), 0.5f * expected.front());
  const std::vector<float> losses = train_through_filter(*backend_);
  EXPECT_EQ(compare(losses, expected, 1e-5), "");
}

// A Filter of a Filter's top: the second selector is filtered by the first.
TEST_P(FilterOnDevice, AFilterBehindAFilterKeepsTheRowsBothSelect) {
  Net net(parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "x" top: "a" top: "b"
        input_param { shape { dim: 5 dim: 2 } shape { dim: 5 } shape { dim: 5 } } }
layer { name: "f1" type: "Filter" bottom: "x" bottom: "b" bottom: "a" top: "x1" top: "b1" }
layer { name: "f2" type: "Filter" bottom: "x1" bottom: "b1" top: "x2" }
layer { name: "sum" type: "Reduction" bottom: "x2" top: "sum" })", "nested"), TRAIN,
          *backend_, 5);
  net.blob("x").copy_data_from_host({0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  net.blob("a").copy_data_from_host({1, 1, 0, 1, 1});  // rows 0, 1, 3, 4
  net.blob("b").copy_data_from_host({0, 1, 1, 1, 0});  // of those: 1 and 3
  net.forward();
  EXPECT_EQ(net.blob("x2").copy_data_to_host(), (std::vector<float>{2, 3, 6, 7}));
  EXPECT_EQ(net.blob("sum").copy_data_to_host(), (std::vector<float>{18}));
  net.blob("a").copy_data_from_host({0, 0, 0, 0, 1});
  net.forward();
  EXPECT_EQ(net.blob("x2").shape(), (Shape{0, 2}));
  EXPECT_EQ(net.blob("sum").copy_data_to_host(), (std::vector<float>{0}));
}

// Behind a Filter, Dropout is set up again for each pass's rows and draws on: a pass of the
// same rows as an earlier one draws another mask, and the state's offset has advanced by
// every element drawn (4, 5 and 4 rows of 4), as a resumed run needs.
TEST_P(FilterOnDevice, DropoutBehindItDrawsNewNumbersForEveryPass) {
  Net net(parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "x" top: "keep"
        input_param { shape { dim: 6 dim: 4 } shape { dim: 6 } } }
layer { name: "filter" type: "Filter" bottom: "x" bottom: "keep" top: "fx" }
layer { name: "drop" type: "Dropout" bottom: "fx" top: "d" })", "dropout"), TRAIN, *backend_,
          5);
  net.blob("x").copy_data_from_host(std::vector<float>(24, 1.0f));
  const int64_t offset = net.layer_states().at("drop").at(1);
  std::vector<std::vector<float>> masks;
  for (const std::vector<float>& keep : {std::vector<float>{1, 1, 0, 1, 1, 0},
                                         std::vector<float>{1, 1, 1, 1, 1, 0},
                                         std::vector<float>{1, 1, 0, 1, 1, 0}}) {
    net.blob("keep").copy_data_from_host(keep);
    net.forward();
    masks.push_back(net.blob("d").copy_data_to_host());
  }
  ASSERT_EQ(masks[0].size(), 16u);
  EXPECT_EQ(masks[2].size(), 16u);
  EXPECT_NE(masks[0], masks[2]);
  EXPECT_EQ(net.layer_states().at("drop").at(1), offset + 16 + 20 + 16);
}

// A view and a Split behind a Filter follow its rows as they shrink and grow back: x
// (6, 2, 2) filtered, flattened to (S, 4), read by two losses (the sum and the sum of
// squares), so the loss is sum(x + x^2) over the kept rows and dx = 1 + 2x there.
TEST_P(FilterOnDevice, AViewAndASplitBehindItFollowItsRows) {
  Net net(parse_net_parameter(R"(
force_backward: true
layer { name: "data" type: "Input" top: "x" top: "keep"
        input_param { shape { dim: 6 dim: 2 dim: 2 } shape { dim: 6 } } }
layer { name: "filter" type: "Filter" bottom: "x" bottom: "keep" top: "fx" }
layer { name: "flat" type: "Flatten" bottom: "fx" top: "f" }
layer { name: "sum" type: "Reduction" bottom: "f" top: "sum" loss_weight: 1 }
layer { name: "squares" type: "Reduction" bottom: "f" top: "squares" loss_weight: 1
        reduction_param { operation: SUMSQ } })", "view"), TRAIN, *backend_, 5);
  const std::vector<float> x = random_values(24, 4);
  net.blob("x").copy_data_from_host(x);
  for (const std::vector<float>& keep : {std::vector<float>{0, 1, 1, 0, 1, 1},
                                         std::vector<float>(6, 1.0f),
                                         std::vector<float>{1, 0, 0, 0, 0, 0}}) {
    net.blob("keep").copy_data_from_host(keep);
    pass(net);
    double loss = 0;
    std::vector<float> dx(24, 0.0f);
    int rows = 0;
    for (int r = 0; r < 6; ++r) {
      if (keep[r] == 0) continue;
      ++rows;
      for (int k = 4 * r; k < 4 * r + 4; ++k) {
        loss += x[k] + double(x[k]) * x[k];
        dx[k] = 1 + 2 * x[k];
      }
    }
    SCOPED_TRACE(std::to_string(rows) + " rows");
    EXPECT_EQ(net.blob("f").shape(), (Shape{rows, 4}));
    EXPECT_NEAR(net.loss(), loss, 1e-5);
    EXPECT_EQ(compare(net.blob("x").copy_diff_to_host(), dx, 1e-6), "");
  }
}

// ---------------------------------------------------------------- errors

std::string build_error(const std::string& layers) {
  NativeBackend native;
  return error_of([&] {
    Net net(parse_net_parameter(layers, "bad filter"), TRAIN, native, 1);
    net.forward();
  });
}

TEST(FilterErrors, NameTheLayerAndSayWhatToFix) {
  const std::string input = R"(
layer { name: "data" type: "Input" top: "x" top: "s" top: "s2"
        input_param { shape { dim: 6 dim: 4 } shape { dim: 6 dim: 2 } shape { dim: 5 } } })";
  EXPECT_THAT(build_error(input + R"(
layer { name: "f" type: "Filter" bottom: "x" bottom: "s" top: "y" })"),
              HasSubstr("layer 'f' (Filter): the selector 's' must hold one value per row: "
                        "every axis after the first must be 1, but it is (6, 2)"));
  EXPECT_THAT(build_error(input + R"(
layer { name: "f" type: "Filter" bottom: "x" bottom: "s2" top: "y" })"),
              HasSubstr("layer 'f' (Filter): bottom 'x' (6, 4) must have as many rows"));
  EXPECT_THAT(build_error(input + R"(
layer { name: "f" type: "Filter" bottom: "x" bottom: "s2" top: "y" top: "z" })"),
              HasSubstr("2 bottoms need 1 tops, not 2"));
  EXPECT_THAT(build_error(input + R"(
layer { name: "f" type: "Filter" bottom: "x" bottom: "s2" top: "y" propagate_down: true
        propagate_down: true })"),
              HasSubstr("takes no gradient for bottom 1 ('s2')"));
}

// A test reports the mean of each output value: an output behind a Filter, whose size
// changes from pass to pass, is an error saying what to do.
TEST(FilterErrors, ATestNetOutputWhoseSizeChangesIsRefused) {
  NativeBackend native;
  const SolverParameter sp =
      parse_solver_parameter("base_lr: 0.1 lr_policy: 'fixed' test_iter: 1", "solver");
  Solver solver(sp, parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "x" top: "keep"
        input_param { shape { dim: 4 dim: 2 } shape { dim: 4 } } }
layer { name: "filter" type: "Filter" bottom: "x" bottom: "keep" top: "fx" }
layer { name: "p" type: "Parameter" top: "p" parameter_param { shape { dim: 2 } } }
layer { name: "loss" type: "Reduction" bottom: "p" top: "loss" loss_weight: 1
        reduction_param { operation: SUMSQ } })", "test output"), native);
  EXPECT_THAT(error_of([&] { solver.test(); }),
              HasSubstr("TEST net: its outputs ('fx' (0, 2), 'loss' ()) changed size during the "
                        "test"));
}

// A Linear over every axis (axis 0) has a weight as wide as the rows times their values:
// once the Filter keeps fewer rows, its weight would have to change shape.
TEST(FilterErrors, ALayerWhoseParameterFollowsTheRowsCannotComeAfterIt) {
  NativeBackend native;
  Net net(parse_net_parameter(R"(
layer { name: "data" type: "Input" top: "x" top: "s"
        input_param { shape { dim: 6 dim: 4 } shape { dim: 6 } } }
layer { name: "f" type: "Filter" bottom: "x" bottom: "s" top: "y" }
layer { name: "ip" type: "InnerProduct" bottom: "y" top: "z"
        inner_product_param { num_output: 2 axis: 0 } })", "axis 0"), TRAIN, native, 1);
  net.blob("s").copy_data_from_host({1, 1, 0, 1, 1, 1});
  EXPECT_THAT(error_of([&] { net.forward(); }),
              HasSubstr("TRAIN net '': reshaping layer 'ip' for bottoms (5, 4) (a layer before "
                        "it changes its tops' shapes each pass): layer 'ip' (InnerProduct): its "
                        "parameter 'ip/weight' would change shape from (2, 24) to (2, 20)"));
}

}  // namespace
}  // namespace lamina::testing
