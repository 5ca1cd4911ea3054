// Fuzz target: prototxt text -> NetParameter -> Net (TRAIN, then TEST sharing its weights)
// -> forward (and backward for TRAIN) on the Native backend.
//
// Every malformed input must end in a lamina::Error. Anything else (another exception, a
// CHECK abort, a crash, a sanitizer report, a timeout) is a bug. MnistData layers are
// pointed at two tiny IDX files this target writes, so the fuzzer reads no file of the
// machine and does not spend its time loading MNIST. The backend holds at most kBudget
// bytes (fuzz_util.hpp): larger nets end in a lamina::Error, as when memory runs out.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fuzz_util.hpp"
#include "lamina/io.hpp"
#include "lamina/net.hpp"

namespace lamina::fuzz {
namespace {

constexpr size_t kBudget = size_t(128) << 20;  // bytes a net may hold at once

struct TinyMnist {
  std::string images, labels;
};

// 12 images of 3x2 pixels and their labels, covering all ten classes.
const TinyMnist& tiny_mnist() {
  static const TinyMnist files = [] {
    std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, 12, 0, 0, 0, 3, 0, 0, 0, 2};
    std::vector<uint8_t> labels = {0, 0, 8, 1, 0, 0, 0, 12};
    for (int i = 0; i < 12 * 6; ++i) images.push_back(uint8_t(i * 37));
    for (int i = 0; i < 12; ++i) labels.push_back(uint8_t(i % 10));
    return TinyMnist{write_file("images-idx3-ubyte", images.data(), images.size()),
                     write_file("labels-idx1-ubyte", labels.data(), labels.size())};
  }();
  return files;
}

void redirect_data(LayerParameter& layer) {
  if (layer.has_mnist_data_param()) {
    MnistDataParameter& p = *layer.mutable_mnist_data_param();
    if (p.has_images()) p.set_images(tiny_mnist().images);
    if (p.has_labels()) p.set_labels(tiny_mnist().labels);
  }
  for (LayerParameter& child : *layer.mutable_layer()) redirect_data(child);
}

void run(const uint8_t* data, size_t size) {
  static const bool quiet = (quiet_logging(), true);
  (void)quiet;
  const std::string text(reinterpret_cast<const char*>(data), size);
  // A file, so that error messages also exercise the file:line lookup of layer_line.
  const std::string path = write_file("net.prototxt", text.data(), text.size());
  NetParameter param;
  try {
    param = parse_net_parameter(text, path);
  } catch (const Error& e) {
    rejected("parse", e);
    return;
  }
  for (LayerParameter& layer : *param.mutable_layer()) redirect_data(layer);

  BudgetBackend backend(kBudget);
  std::unique_ptr<Net> train;
  try {
    train = std::make_unique<Net>(param, TRAIN, backend, 1, nullptr, path);
    train->forward();
    train->backward();
    (void)train->loss();
    accepted("TRAIN net");
  } catch (const Error& e) {
    rejected("TRAIN net", e);
    train.reset();
  }
  try {
    Net test(param, TEST, backend, 2, train ? train->arena_handle() : nullptr, path);
    test.forward();
    (void)test.loss();
    accepted("TEST net");
  } catch (const Error& e) {
    rejected("TEST net", e);
  }
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
