// Data input: IDX reading (plain and .gz, every error), the Input layer, and the MnistData
// layer (order, wrap-around, shuffled epochs, device residency), on the Native backend, plus
// a check of the real MNIST files (scripts/fetch_mnist.sh).
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>

#include "lamina/idx.hpp"
#include "lamina/registry.hpp"
#include "forwarding_backend.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using testing::error_of;

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<uint8_t> be32(uint32_t v) {
  return {uint8_t(v >> 24), uint8_t(v >> 16), uint8_t(v >> 8), uint8_t(v)};
}

// Header (magic, dims) followed by values; plain or gzip.
void write_idx(const std::string& path, uint32_t magic, const std::vector<uint32_t>& dims,
               const std::vector<uint8_t>& values, bool gz = false) {
  std::vector<uint8_t> bytes = be32(magic);
  for (uint32_t d : dims) {
    auto b = be32(d);
    bytes.insert(bytes.end(), b.begin(), b.end());
  }
  bytes.insert(bytes.end(), values.begin(), values.end());
  if (gz) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), unsigned(bytes.size())), int(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                std::streamsize(bytes.size()));
  }
}

class DataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/lamina_test_data_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }

  // num samples of (rows, cols) images whose bytes are (7 i + 3 j) % 256, labels i % 10.
  void write_set(int num, int rows, int cols, const std::string& images = "img",
                 const std::string& labels = "lbl") {
    pixels_.assign(size_t(num) * rows * cols, 0);
    labels_.assign(num, 0);
    for (int i = 0; i < num; ++i) {
      labels_[i] = uint8_t(i % 10);
      for (int j = 0; j < rows * cols; ++j) pixels_[size_t(i) * rows * cols + j] = (7 * i + 3 * j) % 256;
    }
    write_idx(path(images), 0x803, {uint32_t(num), uint32_t(rows), uint32_t(cols)}, pixels_);
    write_idx(path(labels), 0x801, {uint32_t(num)}, labels_);
  }

  std::unique_ptr<Layer> make_layer(const std::string& text, uint64_t seed = 1,
                                    Backend* backend = nullptr) {
    LayerParameter param;
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
    return LayerRegistry::create(param, LayerContext{backend ? *backend : backend_, TRAIN, seed});
  }
  std::string mnist_text(int batch, bool shuffle, float scale = 1) {
    return "name: 'mnist' type: 'MnistData' top: 'data' top: 'label' mnist_data_param { "
           "images: '" + path("img") + "' labels: '" + path("lbl") + "' batch_size: " +
           std::to_string(batch) + " shuffle: " + (shuffle ? "true" : "false") +
           " } transform_param { scale: " + std::to_string(scale) + " }";
  }

  NativeBackend backend_;
  std::string dir_;
  std::vector<uint8_t> pixels_, labels_;
};

// ---- IDX ----

TEST_F(DataTest, IdxRoundTripPlainAndGz) {
  std::vector<uint8_t> values = {0, 1, 2, 250, 251, 252, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0, 128, 255,
                                 17, 18, 19, 20, 21, 22};
  for (bool gz : {false, true}) {
    const std::string file = path(gz ? "images.gz" : "images");
    write_idx(file, 0x803, {3, 2, 4}, values, gz);
    IdxArray array = read_idx(file);
    EXPECT_EQ(array.dims, (std::vector<int64_t>{3, 2, 4})) << file;
    EXPECT_EQ(array.values, values) << file;
    EXPECT_EQ(read_idx_dims(file), (std::vector<int64_t>{3, 2, 4})) << file;
  }
  write_idx(path("labels"), 0x801, {5}, {4, 3, 2, 1, 0});
  IdxArray labels = read_idx(path("labels"));
  EXPECT_EQ(labels.dims, (std::vector<int64_t>{5}));
  EXPECT_EQ(labels.values, (std::vector<uint8_t>{4, 3, 2, 1, 0}));
}

TEST_F(DataTest, IdxMissingFileSaysHowToFetch) {
  const std::string file = path("no-such-file");
  EXPECT_THAT(error_of([&] { read_idx(file); }),
              AllOf(HasSubstr(file), HasSubstr("No such file"), HasSubstr("fetch_mnist.sh")));
  EXPECT_THAT(error_of([&] { read_idx_dims(file); }), HasSubstr("fetch_mnist.sh"));
}

TEST_F(DataTest, IdxBadMagicShowsFoundAndExpected) {
  write_idx(path("bad"), 0x12345678, {}, {1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_THAT(error_of([&] { read_idx(path("bad")); }),
              AllOf(HasSubstr(path("bad")), HasSubstr("bad magic"), HasSubstr("0x12345678"),
                    HasSubstr("0x00000801"), HasSubstr("0x00000803")));
}

TEST_F(DataTest, IdxUnsupportedType) {
  write_idx(path("floats"), 0x00000D01, {2}, {0, 0, 0, 0, 0, 0, 0, 0});  // float32 labels
  EXPECT_THAT(error_of([&] { read_idx(path("floats")); }),
              AllOf(HasSubstr(path("floats")), HasSubstr("unsupported type 0xd")));
}

TEST_F(DataTest, IdxTruncatedValuesAndHeader) {
  write_idx(path("short"), 0x803, {3, 2, 4}, std::vector<uint8_t>(20, 1));
  EXPECT_THAT(error_of([&] { read_idx(path("short")); }),
              AllOf(HasSubstr(path("short")), HasSubstr("truncated"), HasSubstr("need 24 bytes"),
                    HasSubstr("only 20 available")));
  write_idx(path("short.gz"), 0x803, {3, 2, 4}, std::vector<uint8_t>(23, 1), true);
  EXPECT_THAT(error_of([&] { read_idx(path("short.gz")); }), HasSubstr("only 23 available"));
  write_idx(path("header"), 0x803, {3, 2}, {});  // 3 dimensions promised, 2 given
  EXPECT_THAT(error_of([&] { read_idx_dims(path("header")); }),
              AllOf(HasSubstr("truncated"), HasSubstr("expected 12 bytes of dimensions"),
                    HasSubstr("found 8")));
  write_idx(path("empty"), 0x803, {}, {});
  std::filesystem::resize_file(path("empty"), 2);
  EXPECT_THAT(error_of([&] { read_idx(path("empty")); }), HasSubstr("found 2"));
}

TEST_F(DataTest, IdxAbsurdDimensions) {
  write_idx(path("zero"), 0x803, {3, 0, 4}, {});
  EXPECT_THAT(error_of([&] { read_idx(path("zero")); }),
              AllOf(HasSubstr(path("zero")), HasSubstr("dimension 1 equal to 0")));
  // 2^32-1 cubed: must be refused from the header, before any allocation.
  write_idx(path("huge"), 0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {});
  EXPECT_THAT(error_of([&] { read_idx(path("huge")); }),
              AllOf(HasSubstr(path("huge")), HasSubstr("absurd")));
}

// A header announcing more values than the file can hold is refused before any is read:
// plain, by the file's size; gzip, by the most deflate expands (1032:1), so 1000 bytes of
// gzip cannot claim 47 MB.
TEST_F(DataTest, IdxHeaderLargerThanTheFileIsRefusedBeforeReading) {
  write_idx(path("images"), 0x803, {60000, 28, 28}, std::vector<uint8_t>(100, 0));
  EXPECT_THAT(error_of([&] { read_idx(path("images")); }),
              AllOf(HasSubstr("IDX data file '" + path("images") + "'"),
                    HasSubstr("need 47040000 bytes"), HasSubstr("only 100 available")));
  write_idx(path("images.gz"), 0x803, {60000, 28, 28}, std::vector<uint8_t>(10000, 0), true);
  ASSERT_LT(std::filesystem::file_size(path("images.gz")), 47040000u / 1032);
  EXPECT_THAT(error_of([&] { read_idx(path("images.gz")); }),
              AllOf(HasSubstr("IDX data file '" + path("images.gz") + "'"),
                    HasSubstr("need 47040000 bytes"), HasSubstr("more than a gzip file of"),
                    HasSubstr("can inflate to")));
}

// ---- Input ----

TEST_F(DataTest, InputShapesTopsAndKeepsFedValues) {
  Tensor a(backend_, {1}, "a"), b(backend_, {1}, "b"), c(backend_, {1}, "c");
  auto two = make_layer("name: 'in' type: 'Input' top: 'a' top: 'b' input_param { "
                        "shape { dim: 2 dim: 3 } shape { dim: 2 } }");
  two->setup({}, {&a, &b});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(b.shape(), (Shape{2}));
  a.copy_data_from_host({1, 2, 3, 4, 5, 6});
  two->forward({}, {&a, &b});
  EXPECT_EQ(a.copy_data_to_host(), (std::vector<float>{1, 2, 3, 4, 5, 6}));

  auto shared = make_layer("name: 'in' type: 'Input' top: 'a' top: 'b' top: 'c' input_param { "
                           "shape { dim: 4 dim: 5 } }");
  shared->setup({}, {&a, &b, &c});
  EXPECT_EQ(a.shape(), (Shape{4, 5}));
  EXPECT_EQ(c.shape(), (Shape{4, 5}));

  auto wrong = make_layer("name: 'in' type: 'Input' top: 'a' top: 'b' top: 'c' input_param { "
                          "shape { dim: 1 } shape { dim: 2 } }");
  EXPECT_THAT(error_of([&] { wrong->setup({}, {&a, &b, &c}); }),
              AllOf(HasSubstr("'in'"), HasSubstr("2 shape(s) for 3 top(s)")));
}

// ---- MnistData ----

TEST_F(DataTest, MnistDataCountMismatchNamesBothFiles) {
  write_set(5, 2, 2);
  write_idx(path("lbl4"), 0x801, {4}, {0, 1, 2, 3});
  Tensor data(backend_, {1}), label(backend_, {1});
  auto layer = make_layer("name: 'mnist' type: 'MnistData' top: 'data' top: 'label' "
                          "mnist_data_param { images: '" + path("img") + "' labels: '" +
                          path("lbl4") + "' batch_size: 2 }");
  EXPECT_THAT(error_of([&] { layer->setup({}, {&data, &label}); }),
              AllOf(HasSubstr(path("img")), HasSubstr(path("lbl4")), HasSubstr("5 images"),
                    HasSubstr("4 labels")));
}

TEST_F(DataTest, MnistDataRefusesTransformsOtherThanScale) {
  write_set(4, 2, 2);
  Tensor data(backend_, {1}), label(backend_, {1});
  auto layer = make_layer("name: 'mnist' type: 'MnistData' top: 'data' top: 'label' "
                          "transform_param { scale: 0.5 mirror: true } "
                          "mnist_data_param { images: '" + path("img") + "' labels: '" +
                          path("lbl") + "' batch_size: 2 }");
  EXPECT_THAT(error_of([&] { layer->setup({}, {&data, &label}); }),
              HasSubstr("layer 'mnist' (MnistData): MnistData applies only "
                        "transform_param.scale; remove mirror"));
}

TEST_F(DataTest, MnistDataOutOfRangeLabelNamesFileAndIndex) {
  write_set(5, 2, 2);
  write_idx(path("lbl"), 0x801, {5}, {0, 1, 10, 3, 4});
  Tensor data(backend_, {1}), label(backend_, {1});
  auto layer = make_layer(mnist_text(2, false));
  EXPECT_THAT(error_of([&] { layer->setup({}, {&data, &label}); }),
              AllOf(HasSubstr(path("lbl")), HasSubstr("label 10 at index 2")));
}

TEST_F(DataTest, MnistDataBadParameters) {
  write_set(5, 2, 2);
  Tensor data(backend_, {1}), label(backend_, {1});
  auto zero = make_layer(mnist_text(0, false));
  EXPECT_THAT(error_of([&] { zero->setup({}, {&data, &label}); }), HasSubstr("batch_size"));
  auto big = make_layer(mnist_text(6, true));
  EXPECT_THAT(error_of([&] { big->setup({}, {&data, &label}); }),
              AllOf(HasSubstr("batch_size 6"), HasSubstr("5 samples")));
  auto swapped = make_layer("name: 'm' type: 'MnistData' top: 'd' top: 'l' mnist_data_param { "
                            "images: '" + path("lbl") + "' labels: '" + path("img") +
                            "' batch_size: 1 }");
  EXPECT_THAT(error_of([&] { swapped->setup({}, {&data, &label}); }),
              AllOf(HasSubstr(path("lbl")), HasSubstr("an image file has 3")));
}

TEST_F(DataTest, MnistDataInOrderScaledAndWrapping) {
  const int num = 5, rows = 2, cols = 3, batch = 3;
  write_set(num, rows, cols);
  testing::CountingBackend counting;
  Tensor data(counting, {1}), label(counting, {1});
  auto layer = make_layer(mnist_text(batch, false, 0.5f), 1, &counting);
  layer->setup({}, {&data, &label});
  const int64_t uploads = counting.transfers().from_host;
  EXPECT_EQ(data.shape(), (Shape{batch, 1, rows, cols}));
  EXPECT_EQ(label.shape(), (Shape{batch}));
  int next = 0;  // samples 0 1 2 | 3 4 0 | 1 2 3 | 4 0 1
  for (int iter = 0; iter < 4; ++iter) {
    layer->forward({}, {&data, &label});
    std::vector<float> want_data, want_label;
    for (int r = 0; r < batch; ++r, next = (next + 1) % num) {
      for (int j = 0; j < rows * cols; ++j)
        want_data.push_back(float(pixels_[size_t(next) * rows * cols + j]) * 0.5f);
      want_label.push_back(float(labels_[next]));
    }
    EXPECT_EQ(data.copy_data_to_host(), want_data) << "iteration " << iter;
    EXPECT_EQ(label.copy_data_to_host(), want_label) << "iteration " << iter;
  }  EXPECT_EQ(counting.transfers().from_host, uploads) << "a forward copied from the host";
}

// The sample indices of each batch of iters forwards; sample i is recognised by its first
// pixel 7i % 256 (distinct for num < 37) and its label must match.
std::vector<std::vector<int>> shuffled_batches(Layer& layer, Tensor& data, Tensor& label,
                                               int iters, int num) {
  std::vector<std::vector<int>> batches;
  for (int it = 0; it < iters; ++it) {
    layer.forward({}, {&data, &label});
    const std::vector<float> d = data.copy_data_to_host(), l = label.copy_data_to_host();
    const int64_t per = data.count() / data.dim(0);
    std::vector<int> batch;
    for (int64_t r = 0; r < data.dim(0); ++r) {
      int sample = -1;
      for (int i = 0; i < num; ++i)
        if (d[r * per] == float(7 * i % 256)) sample = i;
      EXPECT_GE(sample, 0) << "unknown sample in row " << r;
      EXPECT_EQ(l[r], float(sample % 10)) << "label does not match the image in row " << r;
      batch.push_back(sample);
    }
    batches.push_back(batch);
  }
  return batches;
}

TEST_F(DataTest, MnistDataShuffleVisitsDistinctSamplesAndUploadsOncePerEpoch) {
  const int num = 10, batch = 3;  // 3 full batches per epoch, the 10th sample dropped
  write_set(num, 2, 2);
  testing::CountingBackend counting;
  Tensor data(counting, {1}), label(counting, {1});
  auto layer = make_layer(mnist_text(batch, true), 42, &counting);
  layer->setup({}, {&data, &label});
  for (int epoch = 0; epoch < 3; ++epoch) {
    const int64_t before = counting.transfers().from_host;
    auto batches = shuffled_batches(*layer, data, label, 3, num);
    EXPECT_EQ(counting.transfers().from_host - before, 1)
        << "epoch " << epoch << ": the permutation is uploaded once per epoch, at its start";
    std::set<int> seen;
    for (auto& b : batches) seen.insert(b.begin(), b.end());
    EXPECT_EQ(seen.size(), size_t(9)) << "epoch " << epoch << " repeated a sample";
  }
}

TEST_F(DataTest, MnistDataShuffleIsSeededPerLayerAndEpoch) {
  const int num = 30, batch = 10;
  write_set(num, 1, 2);
  Tensor d1(backend_, {1}), l1(backend_, {1}), d2(backend_, {1}), l2(backend_, {1}),
      d3(backend_, {1}), l3(backend_, {1});
  auto a = make_layer(mnist_text(batch, true), 7);
  auto b = make_layer(mnist_text(batch, true), 7);
  auto c = make_layer(mnist_text(batch, true), 8);
  a->setup({}, {&d1, &l1});
  b->setup({}, {&d2, &l2});
  c->setup({}, {&d3, &l3});
  auto first = shuffled_batches(*a, d1, l1, 6, num);  // two epochs
  auto same = shuffled_batches(*b, d2, l2, 6, num);
  auto other = shuffled_batches(*c, d3, l3, 6, num);
  EXPECT_EQ(first, same);
  EXPECT_NE(first, other);
  std::vector<int> epoch0, epoch1, identity(num);
  for (int i = 0; i < 3; ++i) {
    epoch0.insert(epoch0.end(), first[i].begin(), first[i].end());
    epoch1.insert(epoch1.end(), first[i + 3].begin(), first[i + 3].end());
  }
  for (int i = 0; i < num; ++i) identity[i] = i;
  EXPECT_NE(epoch0, identity) << "shuffle left the order unchanged";
  EXPECT_NE(epoch0, epoch1) << "two epochs drew the same permutation";
}

TEST_F(DataTest, MnistDataReadsGzipFiles) {
  write_set(4, 2, 2);
  write_idx(path("img.gz"), 0x803, {4, 2, 2}, pixels_, true);
  write_idx(path("lbl.gz"), 0x801, {4}, labels_, true);
  Tensor data(backend_, {1}), label(backend_, {1});
  auto layer = make_layer("name: 'm' type: 'MnistData' top: 'd' top: 'l' mnist_data_param { "
                          "images: '" + path("img.gz") + "' labels: '" + path("lbl.gz") +
                          "' batch_size: 4 }");
  layer->setup({}, {&data, &label});
  layer->forward({}, {&data, &label});
  EXPECT_EQ(label.copy_data_to_host(), (std::vector<float>{0, 1, 2, 3}));
  EXPECT_EQ(data.copy_data_to_host()[5], float(pixels_[5]));
}

// ---- the real files ----

TEST_F(DataTest, RealMnistFiles) {
  const std::string dir = testing::mnist_dir();
  const std::string train_images = dir + "/train-images-idx3-ubyte";
  if (!std::filesystem::exists(train_images) && !std::filesystem::exists(train_images + ".gz")) {
    FAIL() << "MNIST not found in " << dir << "; run scripts/fetch_mnist.sh (or set "
           << "LAMINA_MNIST_DIR to a directory holding the four IDX files)";
  }
  EXPECT_EQ(read_idx_dims(train_images), (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(read_idx_dims(dir + "/train-labels-idx1-ubyte"), (std::vector<int64_t>{60000}));
  EXPECT_EQ(read_idx_dims(dir + "/t10k-images-idx3-ubyte"), (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(read_idx_dims(dir + "/t10k-labels-idx1-ubyte"), (std::vector<int64_t>{10000}));

  Tensor data(backend_, {1}), label(backend_, {1});
  auto layer = make_layer("name: 'mnist' type: 'MnistData' top: 'data' top: 'label' "
                          "mnist_data_param { images: '" + train_images + "' labels: '" + dir +
                          "/train-labels-idx1-ubyte' batch_size: 64 } "
                          "transform_param { scale: 0.00390625 }");
  layer->setup({}, {&data, &label});
  layer->forward({}, {&data, &label});
  EXPECT_EQ(data.shape(), (Shape{64, 1, 28, 28}));
  const std::vector<float> labels = label.copy_data_to_host();
  EXPECT_EQ(labels[0], 5.0f) << "the first MNIST training label is 5";
  const std::vector<float> pixels = data.copy_data_to_host();
  const float max_pixel = *std::max_element(pixels.begin(), pixels.end());
  EXPECT_GT(max_pixel, 0.9f);
  EXPECT_LT(max_pixel, 1.0f);
}

// Fashion-MNIST from the Debian package (gzip IDX), linked by scripts/fetch_mnist.sh.
TEST_F(DataTest, RealFashionMnistGzFiles) {
  const std::string dir = testing::source_dir() + "/data/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "no " << dir << " (install dataset-fashion-mnist, run scripts/fetch_mnist.sh)";
  }
  EXPECT_EQ(read_idx_dims(dir + "/train-images-idx3-ubyte.gz"),
            (std::vector<int64_t>{60000, 28, 28}));
  const IdxArray labels = read_idx(dir + "/train-labels-idx1-ubyte.gz");
  ASSERT_EQ(labels.dims, (std::vector<int64_t>{60000}));
  EXPECT_EQ(labels.values[0], 9) << "the first Fashion-MNIST training item is an ankle boot (9)";
}

}  // namespace
}  // namespace lamina
