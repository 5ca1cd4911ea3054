// The inference API (inference.hpp) on models/mnist/lenet_deploy.prototxt with random weights
// written to a file, against the Net it wraps:
//   - a predictor's outputs are those of a Net built from the same deploy file and loaded
//     with the same file, bit for bit, at the file's batch and at another;
//   - predictors view the model's weights (no arena of their own), and see set_parameter and
//     load_weights at their next forward; a predictor outlives its Model object;
//   - predictors forwarding on four threads at once give the results of the same requests
//     made one after another, bit for bit;
//   - mistakes are Errors naming what is wrong (files, weights for another net, input and
//     output names, sizes, batch, device pointers on the CPU);
//   - on a GPU (skipped, saying so, without one): the CPU's predictions within 1e-5, inputs
//     from device pointers, wrong pointers refused, concurrent predictors as sequential.
#include <gtest/gtest.h>

#include <thread>

#include "lamina/backend_factory.hpp"
#include "lamina/inference.hpp"
#include "lamina/io.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/weights_file.hpp"
#include "test_util.hpp"

namespace lamina::testing {
namespace {

constexpr int64_t kPixels = 28 * 28;

std::string lenet_deploy() { return source_dir() + "/models/mnist/lenet_deploy.prototxt"; }

// The deploy net with batch n.
NetParameter lenet_param(int64_t n) {
  NetParameter param = read_net_parameter(lenet_deploy());
  param.mutable_layer(0)->mutable_input_param()->mutable_shape(0)->set_dim(0, n);
  return param;
}

// Writes the weights of `param` (a CPU net's) to dir/name and returns its path: from `seed`,
// weights uniform in Xavier's range, +-sqrt(3 / fan_in), and biases in +-0.1 (none zero),
// so that the probabilities are not all 0 or 1.
std::string write_weights(const TempDir& dir, const std::string& name, const NetParameter& param,
                          uint64_t seed) {
  NativeBackend cpu;
  Net net(param, TEST, cpu, seed);
  std::vector<float> values(net.arena().count(), 0.0f);
  for (const ParamInfo& info : net.arena().table()) {
    const float bound =
        info.shape.size() > 1 ? std::sqrt(3.0f * info.shape[0] / info.count) : 0.1f;
    const std::vector<float> v = random_values(info.count, seed + info.offset, -bound, bound);
    std::copy(v.begin(), v.end(), values.begin() + info.offset);
  }
  net.arena().from_host(values, net.arena().data());
  const std::string path = dir / name;
  save_weights(net, path);
  return path;
}

// LeNet's "prob" for images (n, 1, 28, 28) by the Net itself, loaded from the weights file.
std::vector<float> net_forward(const std::string& weights, int64_t n,
                               const std::vector<float>& images,
                               const std::string& device = "cpu") {
  std::unique_ptr<Backend> backend = make_backend(device);
  Net net(lenet_param(n), TEST, *backend, 7);
  load_weights_file(net, weights, WeightsMatch::kRequireAll);
  net.blob("data").copy_data_from_host(images);
  net.forward();
  return net.blob("prob").copy_data_to_host();
}

std::vector<float> images(int64_t n, uint64_t seed) {
  return random_values(n * kPixels, seed, 0, 1);
}

class Inference : public ::testing::Test {
 protected:
  TempDir dir_;
  std::string weights_ = write_weights(dir_, "lenet.lamina", lenet_param(1), 11);
};

TEST_F(Inference, PredictorsEqualTheNetsOwnForward) {
  const Model model(lenet_deploy(), weights_);
  EXPECT_EQ(model.input_names(), std::vector<std::string>{"data"});
  EXPECT_EQ(model.output_names(), std::vector<std::string>{"prob"});
  EXPECT_EQ(model.input_shape("data"), (Shape{1, 1, 28, 28}));
  for (int64_t batch : {0, 5}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Predictor predictor(model, batch);
    const int64_t n = batch == 0 ? 1 : batch;
    ASSERT_EQ(predictor.batch_size(), n);
    EXPECT_EQ(predictor.input_shape("data"), (Shape{n, 1, 28, 28}));
    EXPECT_EQ(predictor.output_shape("prob"), (Shape{n, 10}));
    const std::vector<float> x = images(n, 3);
    predictor.set_input("data", x);
    predictor.forward();
    const std::vector<float> expected = net_forward(weights_, n, x);
    EXPECT_EQ(compare_bits(predictor.output("prob"), expected), "");
    std::vector<float> into(n * 10);
    predictor.output("prob", into.data(), int64_t(into.size()));
    EXPECT_EQ(compare_bits(into, expected), "");
    EXPECT_EQ(compare_bits(predictor.predict(x), expected), "");
  }
}

TEST_F(Inference, PredictorsViewTheModelsWeights) {
  Model model(lenet_deploy(), weights_);
  Predictor a(model, 2), b(model, 3);
  const float* begin = model.arena().data();
  const float* end = begin + model.arena().count();
  for (Predictor* p : {&a, &b}) {
    EXPECT_EQ(&p->net().arena(), &model.arena()) << "a predictor made an arena of its own";
    int params = 0;
    for (int i = 0; i < p->net().num_layers(); ++i) {
      for (const Param& param : p->net().layer(i).params()) {
        EXPECT_TRUE(param.tensor->data() >= begin && param.tensor->data() < end)
            << "layer " << p->net().layer(i).name() << ": a parameter outside the model's arena";
        ++params;
      }
    }
    EXPECT_EQ(params, 8);  // conv1, conv2, ip1, ip2: weight and bias each
  }

  // A changed weight is seen by every predictor at its next forward.
  const std::vector<float> x = images(2, 5);
  const std::vector<float> before = a.predict(x);
  std::vector<float> bias = model.parameter("ip2/bias");
  ASSERT_EQ(bias.size(), 10u);
  bias[3] += 1000.0f;  // class 3 wins every image
  model.set_parameter("ip2/bias", bias);
  EXPECT_EQ(model.parameter("ip2/bias"), bias);
  const std::vector<float> after = a.predict(x);
  EXPECT_LT(before[3], 0.5f);
  EXPECT_GT(after[3], 0.99f) << "the predictor did not see the new bias";
  {
    NativeBackend cpu;
    Net net(lenet_param(1), TEST, cpu, 1);
    load_weights_file(net, weights_, WeightsMatch::kRequireAll);
    const ParamInfo* info = net.arena().find("ip2/bias");
    std::vector<float> all = net.arena().to_host(net.arena().data());
    std::copy(bias.begin(), bias.end(), all.begin() + info->offset);
    net.arena().from_host(all, net.arena().data());
    save_weights(net, dir_ / "changed.lamina");
  }
  EXPECT_EQ(compare_bits(after, net_forward(dir_ / "changed.lamina", 2, x)), "");

  // load_weights replaces them all, in place.
  const std::string other = write_weights(dir_, "other.lamina", lenet_param(1), 12);
  model.load_weights(other);
  EXPECT_EQ(&a.net().arena(), &model.arena());
  EXPECT_EQ(compare_bits(a.predict(x), net_forward(other, 2, x)), "");
  EXPECT_EQ(compare_bits(b.predict(images(3, 6)), net_forward(other, 3, images(3, 6))), "");
}

TEST_F(Inference, APredictorOutlivesItsModel) {
  std::unique_ptr<Predictor> predictor;
  {
    const Model model(lenet_deploy(), weights_);
    predictor = std::make_unique<Predictor>(model, 4);
  }
  const std::vector<float> x = images(4, 8);
  EXPECT_EQ(compare_bits(predictor->predict(x), net_forward(weights_, 4, x)), "");
}

// A batch size replaces the first dimension of every input, whichever way the deploy file
// declares them: an Input layer with two tops, Caffe's input header with input_shape, or
// with input_dim. Each row of a batch of 5 is what a predictor of batch 1 gives that row.
TEST_F(Inference, TheBatchSizeIsTheFirstDimensionOfEveryInput) {
  const std::string fc = R"(layer { name: "fc" type: "InnerProduct" bottom: "x" top: "y"
      inner_product_param { num_output: 2 } })";
  const std::vector<std::pair<std::string, std::vector<std::string>>> nets = {
      {R"(layer { name: "in" type: "Input" top: "a" top: "b"
                  input_param { shape { dim: 2 dim: 3 } } }
          layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "x" })" + fc,
       {"a", "b"}},
      {"input: 'x' input_shape { dim: 2 dim: 3 } " + fc, {"x"}},
      {"input: 'x' input_dim: 2 input_dim: 3 input_dim: 1 input_dim: 1 " + fc, {"x"}},
  };
  for (const auto& [text, inputs] : nets) {
    SCOPED_TRACE(text);
    const NetParameter param = parse_net_parameter(text, "net");
    const Model model(param, write_weights(dir_, "w.lamina", param, 4), "cpu", "net");
    EXPECT_EQ(model.input_names(), inputs);
    Predictor five(model, 5), one(model, 1);
    const int64_t per_row = shape_count(model.input_shape(inputs[0])) / 2;  // 3
    for (const std::string& input : inputs) {
      EXPECT_EQ(five.input_shape(input)[0], 5);
      five.set_input(input, random_values(5 * per_row, input.size()));
    }
    five.forward();
    const std::vector<float> rows = five.output("y");
    ASSERT_EQ(five.output_shape("y"), (Shape{5, 2}));
    for (int64_t r = 0; r < 5; ++r) {
      for (const std::string& input : inputs) {
        const std::vector<float> all = random_values(5 * per_row, input.size());
        one.set_input(input, std::vector<float>(all.begin() + r * per_row,
                                                all.begin() + (r + 1) * per_row));
      }
      one.forward();
      EXPECT_EQ(compare(one.output("y"), {rows[2 * r], rows[2 * r + 1]}, 1e-6), "") << "row " << r;
    }
    if (inputs.size() > 1) {
      EXPECT_NE(error_of([&] { five.predict({}); }).find("has 2 inputs ('a', 'b')"),
                std::string::npos);
    }
  }
}

// Each of `threads` predictors (batch 3) answers `requests` requests; the results by thread
// and request, computed one after another, or on all threads at once.
using Results = std::vector<std::vector<std::vector<float>>>;
Results answer(const Model& model, int threads, int requests, bool concurrently) {
  Results out(threads, std::vector<std::vector<float>>(requests));
  std::vector<Predictor> predictors;
  for (int t = 0; t < threads; ++t) predictors.emplace_back(model, 3);
  auto serve = [&](int t) {
    for (int r = 0; r < requests; ++r) out[t][r] = predictors[t].predict(images(3, 100 * t + r));
  };
  if (!concurrently) {
    for (int t = 0; t < threads; ++t) serve(t);
    return out;
  }
  std::vector<std::string> errors(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      try {
        serve(t);
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  for (std::thread& w : workers) w.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  return out;
}

// The answers on four threads at once are the sequential ones, bit for bit. Each request's
// answer differs from the one before it (outputs are computed afresh), and, given the same
// model on the CPU, the sequential answers are the CPU's within `tolerance`.
void expect_concurrent_equals_sequential(const Model& model, const Model* cpu = nullptr,
                                         double tolerance = 0) {
  const Results sequential = answer(model, 4, 6, false);
  const Results concurrent = answer(model, 4, 6, true);
  const Results expected = cpu ? answer(*cpu, 4, 6, false) : Results{};
  for (size_t t = 0; t < sequential.size(); ++t) {
    for (size_t r = 0; r < sequential[t].size(); ++r) {
      EXPECT_EQ(compare_bits(concurrent[t][r], sequential[t][r]), "")
          << "thread " << t << ", request " << r;
      if (r > 0) EXPECT_NE(compare_bits(sequential[t][r], sequential[t][r - 1]), "");
      if (cpu) EXPECT_EQ(compare(sequential[t][r], expected[t][r], tolerance), "");
    }
  }
}

TEST_F(Inference, ConcurrentPredictorsGiveTheSequentialResults) {
  expect_concurrent_equals_sequential(Model(lenet_deploy(), weights_));
}

TEST_F(Inference, MistakesAreErrorsNamingWhatIsWrong) {
  EXPECT_NE(error_of([&] { Model(dir_ / "none.prototxt", weights_); }).find("none.prototxt"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Model(lenet_deploy(), dir_ / "none.lamina"); }).find("none.lamina"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Model(lenet_deploy(), ""); }).find("no weights file given"),
            std::string::npos);
  EXPECT_NE(error_of([&] { Model(lenet_deploy(), weights_, "gpu"); }).find("'gpu'"),
            std::string::npos);

  // Weights of another net: the MLP's match no parameter of LeNet.
  const NetParameter mlp_deploy =
      read_net_parameter(source_dir() + "/models/mnist/mlp_deploy.prototxt");
  const std::string mlp = write_weights(dir_, "mlp.lamina", mlp_deploy, 1);
  const std::string other = error_of([&] { Model(lenet_deploy(), mlp); });
  EXPECT_NE(other.find("matches no parameter of the deploy net 'LeNet'"), std::string::npos)
      << other;
  // A file lacking a parameter (LeNet's ip2 renamed), or with another shape (ip1 of 400).
  NetParameter renamed = lenet_param(1);
  renamed.mutable_layer(7)->set_name("ip3");
  ASSERT_EQ(renamed.layer(7).type(), "InnerProduct");
  const std::string missing = error_of(
      [&] { Model(lenet_deploy(), write_weights(dir_, "renamed.lamina", renamed, 1)); });
  EXPECT_NE(missing.find("missing parameter 'ip2/"), std::string::npos) << missing;
  NetParameter narrower = lenet_param(1);
  narrower.mutable_layer(5)->mutable_inner_product_param()->set_num_output(400);
  ASSERT_EQ(narrower.layer(5).name(), "ip1");
  const std::string shape = error_of(
      [&] { Model(lenet_deploy(), write_weights(dir_, "narrow.lamina", narrower, 1)); });
  EXPECT_NE(shape.find("(500, 800) in the net but (400, 800) in the file"), std::string::npos)
      << shape;

  const NetParameter no_input = parse_net_parameter(
      "layer { name: 'd' type: 'DummyData' top: 'x' dummy_data_param { shape { dim: 1 } } }",
      "net");
  EXPECT_NE(error_of([&] { Model(no_input, weights_, "cpu", "net"); }).find("has no Input layer"),
            std::string::npos);

  Model model(lenet_deploy(), weights_);
  EXPECT_NE(error_of([&] { Predictor(model, -1); }).find("batch size -1 is negative"),
            std::string::npos);
  Predictor predictor(model, 2);
  const std::string name = error_of([&] { predictor.set_input("image", images(2, 1)); });
  EXPECT_NE(name.find("has no input 'image'; its inputs are 'data'"), std::string::npos) << name;
  const std::string size = error_of([&] { predictor.set_input("data", images(1, 1)); });
  EXPECT_NE(size.find("input 'data' has shape (2, 1, 28, 28) (1568 values), got 784 values"),
            std::string::npos) << size;
  predictor.forward();
  const std::string out = error_of([&] { predictor.output("ip2"); });
  EXPECT_NE(out.find("has no output 'ip2'; its outputs are 'prob'"), std::string::npos) << out;
  std::vector<float> small(10);
  EXPECT_NE(error_of([&] { predictor.output("prob", small.data(), 10); }).find("got 10 values"),
            std::string::npos);
  const std::vector<float> x = images(2, 1);
  EXPECT_NE(error_of([&] { predictor.set_input_device("data", x.data(), 2 * kPixels); })
                .find("runs on the CPU, where inputs are host arrays"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.parameter("ip9/bias"); }).find("no parameter 'ip9/bias'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.set_parameter("ip2/bias", {1, 2}); })
                .find("'ip2/bias' has shape (10) (10 values), got 2 values"),
            std::string::npos);
  EXPECT_NE(error_of([&] { model.input_shape("label"); }).find("has no input 'label'"),
            std::string::npos);
}

// ---------------------------------------------------------------- on a GPU

#define LAMINA_GPU_OR_SKIP()                                                       \
  if (!::lamina::cuda_compiled()) GTEST_SKIP() << "built without CUDA";            \
  if (::lamina::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device present"

using InferenceGpu = Inference;

// cuDNN's FP32 convolutions (FMA math, no TF32) and cuBLAS's products add the same products
// as im2col + OpenBLAS in other orders: each sum differs by a few float roundings (relative
// 1e-7 to 1e-6 over LeNet's sums of 25 to 800 terms), which four layers and a softmax keep
// far below 1e-5 normalised, the bound the CUDA layer tests hold the backends to.
constexpr double kGpuTolerance = 1e-5;

TEST_F(InferenceGpu, PredictionsMatchTheCpu) {
  LAMINA_GPU_OR_SKIP();
  const Model gpu(lenet_deploy(), weights_, "cuda:0");
  const Model cpu(lenet_deploy(), weights_, "cpu");
  EXPECT_EQ(gpu.device(), "cuda:0");
  Predictor on_gpu(gpu, 7), on_cpu(cpu, 7);
  const std::vector<float> x = images(7, 21);
  const std::vector<float> expected = on_cpu.predict(x);
  EXPECT_EQ(compare(on_gpu.predict(x), expected, kGpuTolerance), "");
  // The Net on the GPU gives the predictor's result, bit for bit.
  EXPECT_EQ(compare_bits(on_gpu.predict(x), net_forward(weights_, 7, x, "cuda:0")), "");
}

TEST_F(InferenceGpu, InputsFromDevicePointers) {
  LAMINA_GPU_OR_SKIP();
  const Model model(lenet_deploy(), weights_, "cuda:0");
  Predictor predictor(model, 4);
  const std::vector<float> x = images(4, 31);
  const std::vector<float> from_host = predictor.predict(x);
  std::unique_ptr<Backend> device = make_backend("cuda:0");
  {
    Floats on_device(*device, x);
    predictor.set_input("data", images(4, 32));  // overwritten by the device input
    predictor.set_input_device("data", on_device.get(), 4 * kPixels);
  }  // the device array is freed: the predictor copied it
  predictor.forward();
  EXPECT_EQ(compare_bits(predictor.output("prob"), from_host), "");

  const std::string host =
      error_of([&] { predictor.set_input_device("data", x.data(), 4 * kPixels); });
  EXPECT_NE(host.find("is not in device memory (a host pointer?)"), std::string::npos) << host;
  Floats too_few(*device, x);
  EXPECT_NE(error_of([&] { predictor.set_input_device("data", too_few.get(), kPixels); })
                .find("got 784 values"),
            std::string::npos);
  if (cuda_device_count() < 2) {
    std::printf("one GPU: the other GPU's pointer is not tried\n");
    return;
  }
  std::unique_ptr<Backend> second = make_backend("cuda:1");
  Floats elsewhere(*second, x);
  const std::string wrong = error_of(
      [&] { predictor.set_input_device("data", elsewhere.get(), 4 * kPixels); });
  EXPECT_NE(wrong.find("is in the memory of GPU 1; this predictor runs on cuda:0"),
            std::string::npos) << wrong;
}

TEST_F(InferenceGpu, ConcurrentPredictorsGiveTheSequentialResults) {
  LAMINA_GPU_OR_SKIP();
  const Model cpu(lenet_deploy(), weights_, "cpu");
  expect_concurrent_equals_sequential(Model(lenet_deploy(), weights_, "cuda:0"), &cpu,
                                      kGpuTolerance);
}

}  // namespace
}  // namespace lamina::testing
