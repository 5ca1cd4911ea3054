// Classifies MNIST digits with a trained model through the inference API (inference.hpp) and
// prints each image's top-k classes with their probabilities.
//
//   classify --model models/mnist/lenet_deploy.prototxt --weights lenet_iter_10000.lamina \
//            --idx data/mnist/t10k-images-idx3-ubyte --index 0 --index 7 --top-k 3
//   classify --model models/mnist/lenet_deploy.prototxt --weights W --png digit.png
//   classify --model ... --weights W --idx data/mnist/t10k-images-idx3-ubyte \
//            --labels data/mnist/t10k-labels-idx1-ubyte       # every image, and the accuracy
//
// Pixels are scaled by 1/256, as the MNIST models' data layers scale them in training
// (transform_param { scale: 0.00390625 }). An image has the model input's height and width
// (28 x 28 for models/mnist) and one channel: a PNG is read in gray, white digits on black as
// in MNIST. Every flag's value is used or refused with one message and exit status 1.
#include <CLI/CLI.hpp>
#include <glog/logging.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "lamina/backend_factory.hpp"
#include "lamina/idx.hpp"
#include "lamina/image.hpp"
#include "lamina/inference.hpp"

namespace {

constexpr float kPixelScale = 0.00390625f;  // 1/256: lenet_train.prototxt's transform_param

struct Options {
  std::string model, weights, idx, labels, png, gpu = "-1";
  std::vector<int64_t> indices;  // empty: every image of --idx
  int top_k = 3;
  int batch = 100;
};

// The images to classify: (count, height, width) bytes, their names and labels (-1: none).
struct Images {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> pixels;
  std::vector<std::string> names;
  std::vector<int> labels;
};

Images read_idx_images(const Options& o) {
  const lamina::IdxArray all = lamina::read_idx(o.idx);
  LAMINA_REQUIRE(all.dims.size() == 3, "--idx ", o.idx, " holds an array of ", all.dims.size(),
                 " dimensions; MNIST images are (N, H, W): give an images file "
                 "(*-images-idx3-ubyte), not a labels file");
  const int64_t n = all.dims[0], plane = all.dims[1] * all.dims[2];
  LAMINA_REQUIRE(n > 0, "--idx ", o.idx, " holds no images");
  std::vector<int64_t> chosen = o.indices;
  if (chosen.empty()) {
    chosen.resize(n);
    std::iota(chosen.begin(), chosen.end(), 0);
  }
  for (int64_t i : chosen)
    LAMINA_REQUIRE(i < n, "--index ", i, " is out of range: ", o.idx, " holds ", n,
                   " images (0 to ", n - 1, ")");
  std::vector<uint8_t> labels;
  if (!o.labels.empty()) {
    const lamina::IdxArray l = lamina::read_idx(o.labels);
    LAMINA_REQUIRE(l.dims.size() == 1 && l.dims[0] == n, "--labels ", o.labels, " holds ",
                   l.dims.size() == 1 ? std::to_string(l.dims[0]) + " labels"
                                      : "an array of " + std::to_string(l.dims.size()) +
                                            " dimensions",
                   " but --idx ", o.idx, " holds ", n, " images; give the labels of those images");
    labels = l.values;
  }
  Images images;
  images.height = all.dims[1];
  images.width = all.dims[2];
  const std::string file = std::filesystem::path(o.idx).filename().string();
  for (int64_t i : chosen) {
    images.pixels.insert(images.pixels.end(), all.values.begin() + i * plane,
                         all.values.begin() + (i + 1) * plane);
    images.names.push_back(file + " #" + std::to_string(i));
    images.labels.push_back(labels.empty() ? -1 : labels[i]);
  }
  return images;
}

Images read_png_image(const Options& o) {
  const lamina::Image image = lamina::read_image(o.png, lamina::ImageMode::kGray);
  Images images;
  images.height = image.height;
  images.width = image.width;
  images.pixels = image.pixels;
  images.names.push_back(o.png);
  images.labels.push_back(-1);
  return images;
}

// The model's input must take one-channel images of the given size, its output K classes.
void check_model(const lamina::Model& model, const Images& images, const Options& o) {
  LAMINA_REQUIRE(model.input_names().size() == 1 && model.output_names().size() == 1, "--model ",
                 o.model, " has ", model.input_names().size(), " inputs and ",
                 model.output_names().size(), " outputs; classify needs a net with one input "
                 "(N, 1, H, W) and one output of class probabilities (N, K)");
  const lamina::Shape& in = model.input_shape(model.input_names()[0]);
  LAMINA_REQUIRE(in.size() == 4 && in[1] == 1 && in[2] == images.height && in[3] == images.width,
                 "--model ", o.model, " takes input '", model.input_names()[0], "' of shape ",
                 lamina::shape_string(in), " but the images are ", images.height, " x ",
                 images.width, " in one channel; give one-channel images of the size the net "
                 "takes, or a net that takes (N, 1, ", images.height, ", ", images.width, ")");
}

int run(const Options& o) {
  const Images images = o.idx.empty() ? read_png_image(o) : read_idx_images(o);
  const std::string spec = lamina::backend_spec_from_gpu(o.gpu, "--gpu");
  const lamina::Model model(o.model, o.weights, spec);
  check_model(model, images, o);

  const int64_t count = int64_t(images.names.size());
  const int64_t plane = images.height * images.width;
  lamina::Predictor predictor(model, std::min<int64_t>(o.batch, count));
  const int64_t batch = predictor.batch_size();
  const std::string& output = model.output_names()[0];
  const lamina::Shape out = predictor.output_shape(output);
  LAMINA_REQUIRE(out.size() == 2, "--model ", o.model, ": output '", output, "' has shape ",
                 lamina::shape_string(out), "; classify needs class probabilities (N, K)");
  const int64_t classes = out[1];
  LAMINA_REQUIRE(o.top_k <= classes, "--top-k ", o.top_k, " is more than the ", classes,
                 " classes of --model ", o.model, "; give at most ", classes);

  std::vector<float> input(batch * plane), prob;
  std::vector<int64_t> order(classes);
  int64_t correct = 0, labelled = 0;
  for (int64_t first = 0; first < count; first += batch) {
    const int64_t n = std::min(batch, count - first);
    std::fill(input.begin(), input.end(), 0.0f);  // a last, partial batch: zeros after it
    for (int64_t i = 0; i < n * plane; ++i)
      input[i] = kPixelScale * images.pixels[first * plane + i];
    prob = predictor.predict(input);
    for (int64_t i = 0; i < n; ++i) {
      const float* p = prob.data() + i * classes;
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [p](int64_t a, int64_t b) { return p[a] > p[b]; });
      const int label = images.labels[first + i];
      std::printf("%s", images.names[first + i].c_str());
      if (label >= 0) std::printf(" (label %d)", label);
      std::printf(":");
      for (int k = 0; k < o.top_k; ++k)
        std::printf("  %lld %.4f", (long long)order[k], p[order[k]]);
      std::printf("\n");
      if (label >= 0) {
        ++labelled;
        correct += order[0] == label;
      }
    }
  }
  if (labelled > 0)
    std::printf("top-1 accuracy: %.2f%% (%lld of %lld images)\n", 100.0 * correct / labelled,
                (long long)correct, (long long)labelled);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  FLAGS_minloglevel = 1;  // this program prints its own results

  Options o;
  CLI::App app{"Classify MNIST digits with a trained model and print the top-k classes",
               "classify"};
  app.add_option("--model", o.model, "Deploy net prototxt (models/mnist/lenet_deploy.prototxt)")
      ->required()
      ->check(CLI::ExistingFile);
  app.add_option("--weights", o.weights, "Trained weights: a .lamina file (lamina train's "
                 "snapshot) or a .caffemodel")
      ->required()
      ->check(CLI::ExistingFile);
  auto* idx = app.add_option("--idx", o.idx, "IDX images file (N, H, W), plain or .gz")
      ->check(CLI::ExistingFile);
  auto* png = app.add_option("--png", o.png, "A PNG (or JPEG) image, read in gray")
      ->check(CLI::ExistingFile);
  idx->excludes(png);
  app.add_option("--index", o.indices, "Which images of --idx to classify (repeat; 0-based; "
                 "default: every image)")
      ->needs(idx)
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            int64_t i = -1;
            if (CLI::detail::lexical_cast(text, i) && i >= 0) return {};
            return "must be an image number >= 0, got '" + text + "'";
          },
          "INDEX >= 0"));
  app.add_option("--labels", o.labels, "IDX labels of --idx's images: prints each label and the "
                 "top-1 accuracy")
      ->needs(idx)
      ->check(CLI::ExistingFile);
  app.add_option("--top-k", o.top_k, "Classes to print per image, from 1 to the number of "
                 "classes (default 3)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--batch", o.batch, "Images per forward pass, > 0 (default 100)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--gpu", o.gpu, "GPU device to run on, or -1 for the CPU (default -1)")
      ->type_name("INT");
  try {
    app.parse(argc, argv);
    if (!*idx && !*png) throw CLI::RequiredError("one of --idx and --png");
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    std::fprintf(stderr, "classify: error: %s (classify --help lists the options)\n", e.what());
    return 1;
  }
  try {
    return run(o);
  } catch (const lamina::Error& e) {
    std::fprintf(stderr, "classify: error: %s\n", e.what());
    return 1;
  }
}
