// The ImageData layer over PNG files and a list written by the test (PNGs made without
// libpng): exact batches in list order across the epoch's wrap-around, resized and gray
// images, shuffled epochs reproducible from the seed (each a permutation of the list, drawn
// anew every epoch), rand_skip, image_data_param's older transform fields, resuming from
// state, data-parallel shares, and every bad list line, image or parameter an Error naming
// the layer, the list file and the line.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include <set>

#include "lamina/counter_rng.hpp"
#include "lamina/image.hpp"
#include "lamina/registry.hpp"
#include "lamina/seeded_shuffle.hpp"
#include "png_bytes.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::error_of;

constexpr int kImages = 5, kHeight = 3, kWidth = 4;

// Image i's (R, G, B) at (y, x); its label is 10 + i.
uint8_t red(int i, int y, int x) { return uint8_t(20 * i + 5 * y + x); }
uint8_t green(int i, int y, int x) { return uint8_t(255 - 9 * i - 3 * y - 2 * x); }
uint8_t blue(int i, int y, int x) { return uint8_t(7 * i * y + 11 * x); }

std::string png(int i, int height = kHeight, int width = kWidth) {
  std::string rows;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) rows += {char(red(i, y, x)), char(green(i, y, x)),
                                             char(blue(i, y, x))};
  return testing::png_bytes(uint32_t(width), uint32_t(height), 8, testing::kPngRgb, rows);
}

// Image i as the layer gives it without transforms: (C, H, W) floats, B G R.
std::vector<float> chw(int i) {
  std::vector<float> values;
  for (auto channel : {blue, green, red})
    for (int y = 0; y < kHeight; ++y)
      for (int x = 0; x < kWidth; ++x) values.push_back(float(channel(i, y, x)));
  return values;
}

class ImageDataTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string list;
    for (int i = 0; i < kImages; ++i) {
      dir_.write("img/" + std::to_string(i) + ".png", png(i));
      list += std::to_string(i) + ".png " + std::to_string(10 + i) + "\n";
    }
    list_ = dir_.write("list.txt", list);
  }

  std::unique_ptr<Layer> make_layer(const std::string& params, const std::string& transform = "",
                                    uint64_t seed = 1, const std::string& list = "") {
    LayerParameter param;
    const std::string text = "name: 'images' type: 'ImageData' top: 'data' top: 'label' "
                             "image_data_param { source: '" + (list.empty() ? list_ : list) +
                             "' root_folder: '" + dir_ / "img/" + "' " + params +
                             " } transform_param { " + transform + " }";
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
    return LayerRegistry::create(param, LayerContext{backend_, TRAIN, seed});
  }
  std::pair<std::vector<float>, std::vector<float>> next(Layer& layer) {
    layer.forward({}, {&data_, &label_});
    return {data_.copy_data_to_host(), label_.copy_data_to_host()};
  }
  // The batch of the images given, untransformed.
  static std::pair<std::vector<float>, std::vector<float>> batch_of(std::vector<int> images) {
    std::vector<float> data, labels;
    for (int i : images) {
      const std::vector<float> values = chw(i);
      data.insert(data.end(), values.begin(), values.end());
      labels.push_back(float(10 + i));
    }
    return {data, labels};
  }

  testing::TempDir dir_;
  std::string list_;
  NativeBackend backend_;
  Tensor data_{backend_, {1}}, label_{backend_, {1}};
};

TEST_F(ImageDataTest, BatchesInListOrderAcrossTheWrapAround) {
  auto layer = make_layer("batch_size: 2");
  layer->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{2, 3, kHeight, kWidth}));
  EXPECT_EQ(label_.shape(), (Shape{2}));
  for (int pass = 0; pass < 4; ++pass)  // 0 1 | 2 3 | 4 0 | 1 2
    EXPECT_EQ(next(*layer), batch_of({2 * pass % kImages, (2 * pass + 1) % kImages})) << pass;
  EXPECT_EQ(layer->state(), (std::vector<int64_t>{1, 8, kImages}));
}

TEST_F(ImageDataTest, ResizedAndGrayImages) {
  auto resized = make_layer("batch_size: 1 new_height: 2 new_width: 5");
  resized->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{1, 3, 2, 5}));
  const Image image = resize_image(decode_image(png(0), ImageMode::kColor, "0.png"), 2, 5);
  std::vector<uint8_t> want(size_t(image.count()));
  image_to_chw(image, want.data());
  EXPECT_EQ(next(*resized).first, std::vector<float>(want.begin(), want.end()));
  auto gray = make_layer("batch_size: 1 is_color: false");
  gray->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{1, 1, kHeight, kWidth}));
  const std::vector<float> values = next(*gray).first;
  for (int y = 0; y < kHeight; ++y)
    for (int x = 0; x < kWidth; ++x)  // libpng's weighted sum, truncated
      EXPECT_EQ(values[size_t(y * kWidth + x)],
                float((9797 * red(0, y, x) + 19234 * green(0, y, x) + 3737 * blue(0, y, x)) >>
                      15));
}

TEST_F(ImageDataTest, ShuffledEpochsArePermutationsDrawnFromTheSeedAndTheEpoch) {
  const int batch = 3, passes = 5;  // 15 positions: 3 epochs of 5
  std::vector<float> labels;
  auto layer = make_layer("batch_size: 3 shuffle: true", "", 7);
  layer->setup({}, {&data_, &label_});
  for (int pass = 0; pass < passes; ++pass) {
    const auto got = next(*layer);
    std::vector<int> images;
    for (int r = 0; r < batch; ++r) {
      const int s = pass * batch + r;
      images.push_back(epoch_permutation(7, s / kImages, kImages)[size_t(s % kImages)]);
    }
    EXPECT_EQ(got, batch_of(images)) << "pass " << pass;
    labels.insert(labels.end(), got.second.begin(), got.second.end());
  }
  std::set<std::vector<float>> epochs;
  for (int e = 0; e < 3; ++e) {
    std::vector<float> epoch(labels.begin() + e * kImages, labels.begin() + (e + 1) * kImages);
    epochs.insert(epoch);
    std::sort(epoch.begin(), epoch.end());
    EXPECT_EQ(epoch, (std::vector<float>{10, 11, 12, 13, 14})) << "epoch " << e;
  }
  EXPECT_GT(epochs.size(), 1u) << "each epoch is shuffled anew";
  // The labels of `passes` passes of a new layer with the seed given.
  const auto labels_for = [&](uint64_t seed) {
    auto fresh = make_layer("batch_size: 3 shuffle: true", "", seed);
    fresh->setup({}, {&data_, &label_});
    std::vector<float> all;
    for (int pass = 0; pass < passes; ++pass) {
      const auto got = next(*fresh).second;
      all.insert(all.end(), got.begin(), got.end());
    }
    return all;
  };
  EXPECT_EQ(labels_for(7), labels);
  EXPECT_NE(labels_for(8), labels);
}

TEST_F(ImageDataTest, RandSkipAndOlderTransformFields) {
  auto skipping = make_layer("batch_size: 1 rand_skip: 4", "", 5);
  skipping->setup({}, {&data_, &label_});
  const int start = int(counter_hash(5, ~uint64_t{0}) % 4);
  EXPECT_EQ(skipping->state()[1], start);
  EXPECT_EQ(next(*skipping), batch_of({start}));
  // crop_size and scale inside image_data_param move into transform_param (TEST: the centre).
  LayerParameter param;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'images' type: 'ImageData' top: 'data' top: 'label' image_data_param { source: '" +
          list_ + "' root_folder: '" + dir_ / "img/" + "' crop_size: 1 scale: 2 }",
      &param));
  auto old = LayerRegistry::create(param, LayerContext{backend_, TEST, 1});
  old->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{1, 3, 1, 1}));
  // The centre of 3 x 4 is row 1, column 1.
  EXPECT_EQ(next(*old).first,
            (std::vector<float>{2 * float(blue(0, 1, 1)), 2 * float(green(0, 1, 1)),
                                2 * float(red(0, 1, 1))}));
}

TEST_F(ImageDataTest, ResumingFromStateGivesTheSameBatches) {
  const std::string params = "batch_size: 2 shuffle: true";
  const std::string transform = "crop_size: 2 mirror: true";
  auto original = make_layer(params, transform, 3);
  original->setup({}, {&data_, &label_});
  for (int pass = 0; pass < 3; ++pass) next(*original);
  const std::vector<int64_t> state = original->state();
  auto resumed = make_layer(params, transform, 99);  // the seed comes from the state
  resumed->setup({}, {&data_, &label_});
  next(*resumed);
  resumed->set_state(state);
  for (int pass = 0; pass < 6; ++pass) {
    const auto want = next(*original);
    EXPECT_EQ(next(*resumed), want) << "pass " << pass;
  }
}

TEST_F(ImageDataTest, EachWorkerTakesItsRowsOfTheJobsBatch) {
  auto whole = make_layer("batch_size: 4 shuffle: true", "", 2);
  whole->setup({}, {&data_, &label_});
  std::vector<std::vector<float>> labels;
  for (int pass = 0; pass < 3; ++pass) labels.push_back(next(*whole).second);
  for (int rank = 0; rank < 2; ++rank) {
    auto worker = make_layer("batch_size: 2 shuffle: true", "", 2);
    worker->setup({}, {&data_, &label_});
    ASSERT_TRUE(worker->set_worker(rank, 2));
    for (int pass = 0; pass < 3; ++pass) {
      const std::vector<float>& all = labels[size_t(pass)];
      EXPECT_EQ(next(*worker).second,
                std::vector<float>(all.begin() + 2 * rank, all.begin() + 2 * rank + 2))
          << "rank " << rank << " pass " << pass;
    }
  }
}

TEST_F(ImageDataTest, BadListsImagesAndParametersAreErrorsNamingTheListAndTheLine) {
  const auto setup_error = [&](const std::string& params, const std::string& list = "") {
    auto layer = make_layer(params, "", 1, list);
    return error_of([&] { layer->setup({}, {&data_, &label_}); });
  };
  EXPECT_THAT(setup_error("batch_size: 1", dir_ / "none.txt"),
              AllOf(HasSubstr("image list file"), HasSubstr("none.txt"),
                    HasSubstr("No such file")));
  EXPECT_THAT(setup_error("batch_size: 1", dir_.write("nolabel.txt", "0.png 1\n1.png\n")),
              AllOf(HasSubstr("nolabel.txt', line 2: '1.png' has no label")));
  EXPECT_THAT(setup_error("batch_size: 1", dir_.write("missing.txt", "gone.png 1\n")),
              AllOf(HasSubstr("layer 'images' (ImageData): list file"),
                    HasSubstr("missing.txt', line 1: image"), HasSubstr("img/gone.png"),
                    HasSubstr("No such file")));
  EXPECT_THAT(setup_error("batch_size: 1 new_height: 4"),
              AllOf(HasSubstr("layer 'images' (ImageData)"), HasSubstr("set both")));
  EXPECT_THAT(setup_error("batch_size: 1 new_height: 10000 new_width: 10000"),
              HasSubstr("more than the 67108864 pixels"));
  EXPECT_THAT(setup_error("batch_size: 1 rand_skip: 6"),
              AllOf(HasSubstr("list.txt'"), HasSubstr("rand_skip 6 is more than the 5")));
  EXPECT_THAT(setup_error("batch_size: 0"), HasSubstr("batch_size must be > 0"));
  {
    auto forced = make_layer("batch_size: 1", "force_gray: true", 1);
    EXPECT_THAT(error_of([&] { forced->setup({}, {&data_, &label_}); }),
                AllOf(HasSubstr("layer 'images' (ImageData)"), HasSubstr("force_gray"),
                      HasSubstr("is_color")));
  }
  // In the stream: a file that is not an image, and one of another size.
  dir_.write("img/text.png", "not a png");
  dir_.write("img/big.png", png(1, 5, 6));
  const std::string bad = dir_.write("bad.txt", "0.png 1\ntext.png 2\n\nbig.png 3\n");
  auto layer = make_layer("batch_size: 1", "", 1, bad);
  layer->setup({}, {&data_, &label_});
  next(*layer);
  EXPECT_THAT(error_of([&] { next(*layer); }),
              AllOf(HasSubstr("layer 'images' (ImageData): list file"),
                    HasSubstr("bad.txt', line 2: image"), HasSubstr("text.png"),
                    HasSubstr("neither a JPEG nor a PNG")));
  layer->set_state({1, 2, 3});
  EXPECT_THAT(error_of([&] { next(*layer); }),
              AllOf(HasSubstr("bad.txt', line 4: is 3 x 5 x 6"), HasSubstr("one shape")));
  auto cropped = make_layer("batch_size: 1", "crop_size: 2", 1, bad);  // sizes the crop evens
  cropped->setup({}, {&data_, &label_});
  cropped->set_state({1, 2, 3});
  EXPECT_EQ(next(*cropped).second, (std::vector<float>{3}));
}

}  // namespace
}  // namespace lamina
