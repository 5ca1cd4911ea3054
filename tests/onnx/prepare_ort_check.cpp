// onnx_ort_prepare: writes what tests/onnx/compare_ort.py needs to run the exported models in
// ONNX Runtime on another machine (one without Lamina's build), and to compare them with
// Lamina's forward pass there.
//
//   onnx_ort_prepare OUT MLP_WEIGHTS LENET_WEIGHTS [MNIST_DIR]
//
// MLP_WEIGHTS and LENET_WEIGHTS are trained weights of models/mnist/{mlp,lenet}_deploy.prototxt
// (lamina train on models/mnist/*_solver.prototxt); MNIST_DIR holds MNIST's IDX files
// (default: LAMINA_MNIST_DIR, else the source tree's data/mnist). OUT receives:
//   mnist_test_images.u8, mnist_test_labels.u8   the 10,000 test images (28 x 28 bytes each)
//                                                and their labels, raw
//   mnist_mlp/, lenet/   model.onnx exported with a batch of 100 (the deploy net's Input
//                        reshaped), lamina_prob.f32: Lamina's probabilities for every test
//                        image (10,000 x 10 float32, the images times 1/256 as the training
//                        nets' data layers scale them), and test_data_set_0 (the first batch)
//   deep_net/            tests/onnx/deep_net.prototxt with random weights (onnx_cases.hpp),
//                        model.onnx and test_data_set_0 (4 random images, the logits and
//                        probabilities), the same values raw in input_0.f32, output_<i>.f32
// Every model is also checked by ONNX's checker here (export_onnx does).
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>

#include "lamina/idx.hpp"
#include "lamina/onnx_export.hpp"
#include "lamina/snapshot.hpp"
#include "lamina/weights_file.hpp"
#include "onnx/onnx_cases.hpp"

namespace lamina {
namespace {

constexpr int64_t kBatch = 100;

void write_raw(const std::filesystem::path& path, const void* data, size_t bytes) {
  write_file_atomically(path.string(), std::string(static_cast<const char*>(data), bytes));
}

// The MNIST model: exported at a batch of kBatch, and Lamina's outputs on every test image.
void prepare_mnist(const std::string& name, const std::string& weights, const IdxArray& images,
                   const std::filesystem::path& out) {
  const std::string deploy =
      std::string(LAMINA_SOURCE_DIR) + "/models/mnist/" + name + "_deploy.prototxt";
  NetParameter param = read_net_parameter(deploy);
  param.mutable_layer(0)->mutable_input_param()->mutable_shape(0)->set_dim(0, kBatch);
  auto backend = make_backend("cpu");
  Net net(param, TEST, *backend, 1, nullptr, deploy);
  load_weights_file(net, weights, WeightsMatch::kRequireAll, "TEST net of " + deploy);
  const int64_t n = images.dims[0], pixels = images.dims[1] * images.dims[2];
  LAMINA_REQUIRE(n % kBatch == 0, "the test set's ", n, " images are not whole batches");
  Tensor& data = net.blob("data");
  std::vector<float> probabilities;
  const std::filesystem::path dir = out / (name == "mlp" ? "mnist_mlp" : name);
  for (int64_t first = 0; first < n; first += kBatch) {
    std::vector<float> x(size_t(kBatch * pixels));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] = float(images.values[size_t(first * pixels) + i]) * 0.00390625f;
    data.copy_data_from_host(x);
    if (first == 0) {
      write_onnx_test_case(net, dir.string());  // runs the first batch's forward pass
    } else {
      net.forward();
    }
    const std::vector<float> p = net.blob("prob").copy_data_to_host();
    probabilities.insert(probabilities.end(), p.begin(), p.end());
  }
  write_raw(dir / "lamina_prob.f32", probabilities.data(), sizeof(float) * probabilities.size());
  std::cout << name << ": " << dir.string() << "/model.onnx, Lamina's probabilities for " << n
            << " images\n";
}

void prepare_deep(const std::filesystem::path& out) {
  const std::string path = std::string(LAMINA_SOURCE_DIR) + "/tests/onnx/deep_net.prototxt";
  onnx_cases::Built b = onnx_cases::build({"deep_net", read_text_file(path, "net file")}, 7);
  const OnnxModel model = write_onnx_test_case(*b.net, (out / "deep_net").string());
  // The same values raw, for a reader without the onnx package: the input (not written in
  // place, so still the one the outputs came from) and the outputs, in the graph's order.
  const auto raw = [&](const std::string& blob, const std::string& file) {
    const std::vector<float> v = b.net->blob(blob).copy_data_to_host();
    write_raw(out / "deep_net" / file, v.data(), sizeof(float) * v.size());
  };
  raw(model.inputs.at(0), "input_0.f32");
  for (size_t i = 0; i < model.output_blobs.size(); ++i)
    raw(model.output_blobs[i], "output_" + std::to_string(i) + ".f32");
  std::cout << "deep_net: " << (out / "deep_net").string() << "/model.onnx, " << model.nodes
            << " nodes, " << model.weights << " weights\n";
}

int run(int argc, char** argv) {
  if (argc < 4 || argc > 5) {
    std::cerr << "usage: onnx_ort_prepare OUT MLP_WEIGHTS LENET_WEIGHTS [MNIST_DIR]\n";
    return 1;
  }
  const std::filesystem::path out = argv[1];
  std::string mnist = argc == 5 ? argv[4] : "";
  if (mnist.empty() && std::getenv("LAMINA_MNIST_DIR")) mnist = std::getenv("LAMINA_MNIST_DIR");
  if (mnist.empty()) mnist = std::string(LAMINA_SOURCE_DIR) + "/data/mnist";
  std::filesystem::create_directories(out);
  const IdxArray images = read_idx(mnist + "/t10k-images-idx3-ubyte");
  const IdxArray labels = read_idx(mnist + "/t10k-labels-idx1-ubyte");
  write_raw(out / "mnist_test_images.u8", images.values.data(), images.values.size());
  write_raw(out / "mnist_test_labels.u8", labels.values.data(), labels.values.size());
  prepare_mnist("mlp", argv[2], images, out);
  prepare_mnist("lenet", argv[3], images, out);
  prepare_deep(out);
  return 0;
}

}  // namespace
}  // namespace lamina

int main(int argc, char** argv) {
  try {
    return lamina::run(argc, argv);
  } catch (const lamina::Error& e) {
    std::cerr << "onnx_ort_prepare: error: " << e.what() << "\n";
    return 1;
  }
}
