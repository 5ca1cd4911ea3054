// Encoded Datums (JPEG/PNG files in data, encoded: true, as Caffe's convert_imageset
// --encoded writes them) through the Data layer and compute_image_mean: an LMDB of PNG
// records written by the test (PNG files made without libpng) gives exactly the batches of
// the LMDB of raw Datums of the same pixels; force_color and force_gray; records of sizes
// that the crop makes one; and every bad record an Error naming the database and the record.
#include <gmock/gmock.h>
#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include "datum_db.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/image.hpp"
#include "lamina/registry.hpp"
#include "png_bytes.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::caffe_key;
using testing::error_of;

using Records = std::vector<std::pair<std::string, std::string>>;

// Image i's (R, G, B) at row y, column x.
uint8_t red(int i, int y, int x) { return uint8_t(13 * i + 7 * y + 3 * x); }
uint8_t green(int i, int y, int x) { return uint8_t(200 - 5 * i + 11 * y + x); }
uint8_t blue(int i, int y, int x) { return uint8_t(31 * i + 2 * y + 17 * x); }

// Image i (height x width, RGB) as a PNG file.
std::string png_file(int i, int height, int width) {
  std::string rows;
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x)
      rows += {char(red(i, y, x)), char(green(i, y, x)), char(blue(i, y, x))};
  return testing::png_bytes(uint32_t(width), uint32_t(height), 8, testing::kPngRgb, rows);
}

// Image i as Caffe's raw Datum holds it: (C, H, W), channels B, G, R.
std::string raw_pixels(int i, int height, int width) {
  std::string chw;
  for (auto channel : {blue, green, red})
    for (int y = 0; y < height; ++y)
      for (int x = 0; x < width; ++x) chw += char(channel(i, y, x));
  return chw;
}

class EncodedDataTest : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const Records& records) {
    const std::string path = dir_ / name;
    testing::write_lmdb(path, records);
    return path;
  }
  // num images of height x width, as PNG records and as raw records.
  std::string encoded_db(int num, int height, int width, const std::string& name = "png") {
    Records records;
    for (int i = 0; i < num; ++i)
      records.emplace_back(caffe_key(i), testing::encoded_datum_bytes(png_file(i, height, width),
                                                                      i % 7));
    return write(name, records);
  }
  std::string raw_db(int num, int height, int width) {
    Records records;
    for (int i = 0; i < num; ++i)
      records.emplace_back(caffe_key(i), testing::datum_bytes(3, height, width,
                                                              raw_pixels(i, height, width), i % 7));
    return write("raw", records);
  }

  std::unique_ptr<Layer> make_layer(const std::string& path, int batch,
                                    const std::string& transform, uint64_t seed = 3) {
    LayerParameter param;
    const std::string text = "name: 'data' type: 'Data' top: 'data' top: 'label' data_param { "
                             "source: '" + path + "' batch_size: " + std::to_string(batch) +
                             " backend: LMDB } transform_param { " + transform + " }";
    EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &param)) << text;
    return LayerRegistry::create(param, LayerContext{backend_, TRAIN, seed});
  }
  std::pair<std::vector<float>, std::vector<float>> next(Layer& layer) {
    layer.forward({}, {&data_, &label_});
    return {data_.copy_data_to_host(), label_.copy_data_to_host()};
  }
  std::string setup_error(const std::string& path, const std::string& transform) {
    auto layer = make_layer(path, 1, transform);
    return error_of([&] { layer->setup({}, {&data_, &label_}); });
  }

  testing::TempDir dir_;
  NativeBackend backend_;
  Tensor data_{backend_, {1}}, label_{backend_, {1}};
};

TEST_F(EncodedDataTest, PngRecordsGiveTheBatchesOfRawRecordsOfTheSamePixels) {
  const int num = 5, batch = 3, height = 4, width = 6;
  const std::string png = encoded_db(num, height, width), raw = raw_db(num, height, width);
  for (const std::string transform :
       {"", "crop_size: 3 mirror: true mean_value: 20 mean_value: 10 mean_value: 5 scale: 0.5",
        "force_color: true"}) {
    SCOPED_TRACE(transform);
    auto encoded = make_layer(png, batch, transform), plain = make_layer(raw, batch, transform);
    encoded->setup({}, {&data_, &label_});
    const Shape shape = data_.shape();
    EXPECT_EQ(shape[1], 3);
    plain->setup({}, {&data_, &label_});
    EXPECT_EQ(data_.shape(), shape);
    for (int pass = 0; pass < 4; ++pass) {  // across the wrap-around
      const auto want = next(*plain);
      EXPECT_EQ(next(*encoded), want) << "pass " << pass;
    }
  }
}

TEST_F(EncodedDataTest, ForceGrayAndForceColorChooseTheChannels) {
  // Colour records in gray: libpng's (9797 R + 19234 G + 3737 B) >> 15.
  auto gray = make_layer(encoded_db(2, 2, 3), 2, "force_gray: true");
  gray->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{2, 1, 2, 3}));
  std::vector<float> want;
  for (int i = 0; i < 2; ++i)
    for (int y = 0; y < 2; ++y)
      for (int x = 0; x < 3; ++x)
        want.push_back(float((9797 * red(i, y, x) + 19234 * green(i, y, x) +
                              3737 * blue(i, y, x)) >> 15));
  EXPECT_EQ(next(*gray).first, want);
  // Gray records stay 1 channel as they are, and become 3 equal ones with force_color.
  const std::string gray_png = testing::png_bytes(2, 1, 8, testing::kPngGray, {9, 99});
  const std::string path = write("gray", {{caffe_key(0),
                                           testing::encoded_datum_bytes(gray_png, 4)}});
  auto as_is = make_layer(path, 1, "");
  as_is->setup({}, {&data_, &label_});
  EXPECT_EQ(next(*as_is), std::make_pair(std::vector<float>{9, 99}, std::vector<float>{4}));
  auto colour = make_layer(path, 1, "force_color: true");
  colour->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{1, 3, 1, 2}));
  EXPECT_EQ(next(*colour).first, (std::vector<float>{9, 99, 9, 99, 9, 99}));
  // Caffe's older data_param.force_encoded_color is force_color.
  LayerParameter older;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(
      "name: 'data' type: 'Data' top: 'data' top: 'label' data_param { source: '" + path +
          "' batch_size: 1 backend: LMDB force_encoded_color: true }", &older));
  auto forced = LayerRegistry::create(older, LayerContext{backend_, TRAIN, 3});
  forced->setup({}, {&data_, &label_});
  EXPECT_EQ(next(*forced).first, (std::vector<float>{9, 99, 9, 99, 9, 99}));
  EXPECT_THAT(setup_error(path, "force_color: true force_gray: true"),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("both force_color and "
                                                                "force_gray")));
}

TEST_F(EncodedDataTest, AJpegRecordGivesWhatDecodingTheFileGives) {
  Image image;
  image.reshape(8, 8, 3);
  for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(i * 5);
  const std::string jpg = encode_image(image, "jpg");
  const Image decoded = decode_image(jpg, ImageMode::kAsIs, "x");
  std::vector<uint8_t> chw(size_t(decoded.count()));
  image_to_chw(decoded, chw.data());
  auto layer = make_layer(write("jpg", {{caffe_key(0), testing::encoded_datum_bytes(jpg, 1)}}),
                          1, "");
  layer->setup({}, {&data_, &label_});
  EXPECT_EQ(next(*layer).first, std::vector<float>(chw.begin(), chw.end()));
}

TEST_F(EncodedDataTest, RecordsOfOtherSizesAreFineWhereTheCropMakesThemOne) {
  const Records records = {
      {caffe_key(0), testing::encoded_datum_bytes(png_file(0, 4, 5), 0)},
      {caffe_key(1), testing::encoded_datum_bytes(png_file(1, 6, 3), 1)},
      {caffe_key(2), testing::encoded_datum_bytes(png_file(2, 2, 5), 2)}};
  const std::string path = write("sizes", records);
  auto cropped = make_layer(path, 2, "crop_size: 3", 9);
  cropped->setup({}, {&data_, &label_});
  EXPECT_EQ(data_.shape(), (Shape{2, 3, 3, 3}));
  EXPECT_EQ(next(*cropped).second, (std::vector<float>{0, 1}));
  // Record 2 (2 x 5) is smaller than the crop.
  EXPECT_THAT(error_of([&] { next(*cropped); }),
              AllOf(HasSubstr("LMDB database"), HasSubstr("record '00000002'"),
                    HasSubstr("crop_size 3 is larger than the image, 2 x 5")));
  auto whole = make_layer(path, 2, "");
  whole->setup({}, {&data_, &label_});
  EXPECT_THAT(error_of([&] { next(*whole); }),
              AllOf(HasSubstr("record '00000001'"), HasSubstr("is 3 x 6 x 3"),
                    HasSubstr("the first is 3 x 4 x 5"), HasSubstr("one shape")));
}

TEST_F(EncodedDataTest, CorruptAndMixedRecordsAreErrorsNamingTheDatabaseAndTheRecord) {
  const std::string good = png_file(0, 2, 2);
  const std::string path = write("corrupt", {
      {caffe_key(0), testing::encoded_datum_bytes(good, 0)},
      {caffe_key(1), testing::encoded_datum_bytes(good.substr(0, good.size() / 2), 0)},
      {caffe_key(2), testing::encoded_datum_bytes("GIF89a", 0)},
      {caffe_key(3), testing::encoded_datum_bytes(
                         testing::png_bytes(2, 2, 8, testing::kPngGray, "abcd"), 0)}});
  auto layer = make_layer(path, 1, "");
  layer->setup({}, {&data_, &label_});
  next(*layer);
  EXPECT_THAT(error_of([&] { next(*layer); }),
              AllOf(HasSubstr("layer 'data' (Data): LMDB database"), HasSubstr("/corrupt'"),
                    HasSubstr("record '00000001' (an encoded Datum)"), HasSubstr("PNG")));
  layer->set_state({3, 2, 4});
  EXPECT_THAT(error_of([&] { next(*layer); }),
              AllOf(HasSubstr("record '00000002'"), HasSubstr("neither a JPEG nor a PNG")));
  layer->set_state({3, 3, 4});
  EXPECT_THAT(error_of([&] { next(*layer); }),
              AllOf(HasSubstr("record '00000003'"), HasSubstr("is 1 x 2 x 2"),
                    HasSubstr("force_color or force_gray")));
  EXPECT_THAT(setup_error(write("bad_first", {{caffe_key(0),
                                               testing::encoded_datum_bytes("", 0)}}), ""),
              AllOf(HasSubstr("layer 'data' (Data)"), HasSubstr("record '00000000'"),
                    HasSubstr("is empty")));
}

TEST_F(EncodedDataTest, ComputeImageMeanDecodesEncodedRecords) {
  const int num = 4, height = 3, width = 2;
  const BlobProto from_png = compute_image_mean(encoded_db(num, height, width), DbKind::kLmdb);
  const BlobProto from_raw = compute_image_mean(raw_db(num, height, width), DbKind::kLmdb);
  EXPECT_EQ(from_png.SerializeAsString(), from_raw.SerializeAsString());
  EXPECT_EQ(from_png.channels(), 3);
  const BlobProto gray =
      compute_image_mean(dir_ / "png", DbKind::kLmdb, ImageMode::kGray);
  EXPECT_EQ(gray.channels(), 1);
  float sum = 0;
  for (int i = 0; i < num; ++i)
    sum += float((9797 * red(i, 1, 1) + 19234 * green(i, 1, 1) + 3737 * blue(i, 1, 1)) >> 15);
  EXPECT_FLOAT_EQ(gray.data(1 * width + 1), sum / num);
}

}  // namespace
}  // namespace lamina
