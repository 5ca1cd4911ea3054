// convert_imageset (data_tools.hpp): a folder of PNG and JPEG files written by the test,
// converted, and read back through liblmdb: Caffe's keys, raw Datums in (C, H, W) B G R
// order, the files' own bytes with --encoded, re-encoded images where resized or of another
// encode_type, gray, shuffles reproducible from the seed, --check_size; and every bad list
// line or image an Error naming the list file, the line and the path, leaving no database.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "datum_db.hpp"
#include "lamina/data_tools.hpp"
#include "lamina/image.hpp"
#include "lamina/seeded_shuffle.hpp"
#include "png_bytes.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

uint8_t red(int y, int x) { return uint8_t(10 + 40 * y + 9 * x); }
uint8_t green(int y, int x) { return uint8_t(250 - 30 * y - 7 * x); }
uint8_t blue(int y, int x) { return uint8_t(3 * y * x + 1); }

// (C, H, W) bytes of an image.
std::string chw(const Image& image) {
  std::string out(size_t(image.count()), '\0');
  image_to_chw(image, reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

Datum parse(const std::string& value) {
  Datum datum;
  EXPECT_TRUE(datum.ParseFromString(value));
  return datum;
}

class ConvertImagesetTest : public ::testing::Test {
 protected:
  // img/a/one.png (RGB, 3 x 4), img/b two.png (gray, 2 x 2), img/c.jpg (colour, 5 x 6),
  // img/d.JPEG (colour, 4 x 4), listed with a blank line, a CRLF and a negative label.
  void SetUp() override {
    std::string rows;
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) rows += {char(red(y, x)), char(green(y, x)), char(blue(y, x))};
    files_["a/one.png"] = testing::png_bytes(4, 3, 8, testing::kPngRgb, rows);
    files_["b two.png"] = testing::png_bytes(2, 2, 8, testing::kPngGray, {1, 2, 3, 4});
    files_["c.jpg"] = encode_image(gradient(5, 6, 3), "jpg");
    files_["d.JPEG"] = encode_image(gradient(4, 4, 3), "jpg");
    for (const auto& [name, bytes] : files_) dir_.write("img/" + name, bytes);
    list_ = dir_.write("list.txt", "a/one.png 0\nb two.png 1\r\n\nc.jpg 2\nd.JPEG -3");
    root_ = dir_ / "img/";
  }

  static Image gradient(int64_t h, int64_t w, int64_t c) {
    Image image;
    image.reshape(h, w, c);
    for (size_t i = 0; i < image.pixels.size(); ++i) image.pixels[i] = uint8_t(60 + 5 * i);
    return image;
  }

  // Converts with options into a new database; its records through liblmdb.
  std::vector<std::pair<std::string, std::string>> convert(const ImagesetOptions& options,
                                                           const std::string& name = "db") {
    EXPECT_EQ(convert_imageset(root_, list_, dir_ / name, options), 4);
    return testing::read_lmdb(dir_ / name);
  }

  Image decoded(const std::string& name, ImageMode mode) {
    return decode_image(files_[name], mode, name);
  }

  testing::TempDir dir_;
  std::map<std::string, std::string> files_;
  std::string list_, root_;
};

TEST_F(ConvertImagesetTest, RawDatumsUnderCaffesKeysInColour) {
  const auto records = convert({});
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[0].first, "00000000_a/one.png");
  EXPECT_EQ(records[1].first, "00000001_b two.png");
  EXPECT_EQ(records[2].first, "00000002_c.jpg");
  EXPECT_EQ(records[3].first, "00000003_d.JPEG");
  const Datum one = parse(records[0].second);
  EXPECT_EQ(one.channels(), 3);
  EXPECT_EQ(one.height(), 3);
  EXPECT_EQ(one.width(), 4);
  EXPECT_EQ(one.label(), 0);
  EXPECT_TRUE(one.has_encoded());  // Caffe's CVMatToDatum writes encoded: false
  EXPECT_FALSE(one.encoded());
  std::string want;  // (C, H, W), B then G then R
  for (auto channel : {blue, green, red})
    for (int y = 0; y < 3; ++y)
      for (int x = 0; x < 4; ++x) want += char(channel(y, x));
  EXPECT_EQ(one.data(), want);
  const Datum two = parse(records[1].second);  // gray, decoded in colour: 3 equal planes
  EXPECT_EQ(two.channels(), 3);
  EXPECT_EQ(two.data(), std::string("\1\2\3\4\1\2\3\4\1\2\3\4"));
  EXPECT_EQ(two.label(), 1);
  const Datum three = parse(records[2].second);
  EXPECT_EQ(three.height(), 5);
  EXPECT_EQ(three.data(), chw(decoded("c.jpg", ImageMode::kColor)));
  EXPECT_EQ(parse(records[3].second).label(), -3);
}

TEST_F(ConvertImagesetTest, GrayDecodesOneChannel) {
  ImagesetOptions options;
  options.gray = true;
  const auto records = convert(options);
  const Datum one = parse(records[0].second);
  EXPECT_EQ(one.channels(), 1);
  EXPECT_EQ(uint8_t(one.data()[5]),  // row 1, column 1: libpng's weighted sum, truncated
            (9797 * red(1, 1) + 19234 * green(1, 1) + 3737 * blue(1, 1)) >> 15);
  EXPECT_EQ(parse(records[1].second).data(), std::string("\1\2\3\4"));
  EXPECT_EQ(parse(records[2].second).data(), chw(decoded("c.jpg", ImageMode::kGray)));
}

TEST_F(ConvertImagesetTest, EncodedKeepsEachFileAsItIs) {
  ImagesetOptions options;
  options.encoded = true;
  const auto records = convert(options);
  const char* names[] = {"a/one.png", "b two.png", "c.jpg", "d.JPEG"};
  for (size_t i = 0; i < 4; ++i) {
    const Datum datum = parse(records[i].second);
    EXPECT_TRUE(datum.encoded()) << names[i];
    EXPECT_FALSE(datum.has_channels() || datum.has_height() || datum.has_width()) << names[i];
    EXPECT_EQ(datum.data(), files_[names[i]]) << names[i];
  }
  options.backend = DbKind::kLevelDb;  // the other backend, read back through open_db
  EXPECT_EQ(convert_imageset(root_, list_, dir_ / "leveldb", options), 4);
  const auto reader = open_db(dir_ / "leveldb", DbKind::kLevelDb);
  const auto cursor = reader->cursor();
  EXPECT_EQ(cursor->key(), "00000000_a/one.png");
  EXPECT_EQ(std::string(cursor->value()), records[0].second);
}

TEST_F(ConvertImagesetTest, ResizedImagesAreEncodedAnewOrStoredRaw) {
  ImagesetOptions options;
  options.resize_height = 2;
  options.resize_width = 3;
  const auto raw = convert(options, "raw");
  const Datum one = parse(raw[0].second);
  EXPECT_EQ(one.height(), 2);
  EXPECT_EQ(one.width(), 3);
  EXPECT_EQ(one.data(), chw(resize_image(decoded("a/one.png", ImageMode::kColor), 2, 3)));
  options.encoded = true;
  const auto encoded = convert(options, "encoded");
  const std::string png = parse(encoded[0].second).data();  // re-encoded in its own type
  EXPECT_EQ(png.substr(1, 3), "PNG");
  EXPECT_EQ(chw(decode_image(png, ImageMode::kAsIs, "x")), one.data());
  const Image jpg = decode_image(parse(encoded[2].second).data(), ImageMode::kAsIs, "x");
  EXPECT_EQ(jpg.height, 2);
  EXPECT_EQ(jpg.width, 3);
}

TEST_F(ConvertImagesetTest, EncodeTypeReencodesFilesOfAnotherType) {
  ImagesetOptions options;
  options.encode_type = "png";  // implies encoded
  const auto as_png = convert(options, "png");
  EXPECT_EQ(parse(as_png[0].second).data(), files_["a/one.png"]);
  const Datum jpg = parse(as_png[2].second);
  EXPECT_TRUE(jpg.encoded());
  EXPECT_EQ(chw(decode_image(jpg.data(), ImageMode::kAsIs, "x")),
            chw(decoded("c.jpg", ImageMode::kColor)));  // PNG: the decoded pixels, exactly
  options.encode_type = "JPG";
  const auto as_jpg = convert(options, "jpg");
  EXPECT_EQ(parse(as_jpg[3].second).data(), files_["d.JPEG"]);  // jpeg counts as jpg
  EXPECT_EQ(parse(as_jpg[0].second).data().substr(0, 3), "\xFF\xD8\xFF");
}

TEST_F(ConvertImagesetTest, ShuffleIsTheSeedsPermutation) {
  const std::vector<std::string> listed = {"a/one.png", "b two.png", "c.jpg", "d.JPEG"};
  std::set<std::vector<std::string>> orders;
  for (uint64_t seed : {1, 2, 3, 4, 5}) {
    ImagesetOptions options;
    options.shuffle = true;
    options.seed = seed;
    const auto records = convert(options, "seed" + std::to_string(seed));
    const std::vector<int32_t> order = epoch_permutation(seed, 0, 4);
    std::vector<std::string> paths;
    for (size_t i = 0; i < 4; ++i) {
      const std::string& path = listed[size_t(order[i])];
      EXPECT_EQ(records[i].first, testing::caffe_key(int(i)) + "_" + path);
      paths.push_back(path);
    }
    orders.insert(paths);
  }
  EXPECT_GT(orders.size(), 2u) << "other seeds, other orders";
}

TEST_F(ConvertImagesetTest, CheckSizeRefusesImagesOfAnotherSize) {
  ImagesetOptions options;
  options.check_size = true;
  EXPECT_THAT(error_of([&] { convert_imageset(root_, list_, dir_ / "db", options); }),
              AllOf(HasSubstr("list.txt', line 2: image 'b two.png' is 3 x 2 x 2"),
                    HasSubstr("the first is 3 x 3 x 4")));
  options.resize_height = options.resize_width = 4;
  EXPECT_EQ(convert_imageset(root_, list_, dir_ / "db", options), 4);
}

TEST_F(ConvertImagesetTest, BadLinesAndImagesAreErrorsNamingTheLineAndLeaveNoDatabase) {
  dir_.write("img/text.jpg", "not an image");
  dir_.write("img/cut.png", files_["a/one.png"].substr(0, 40));
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"a/one.png 0\nnolabel\n", {"line 2", "'nolabel' has no label"}},
      {"a/one.png x1\n", {"line 1", "the label 'x1'", "not an integer"}},
      {"a/one.png 0\n\nmissing.png 3\n", {"line 3", "img/missing.png", "No such file"}},
      {"text.jpg 1\n", {"line 1", "img/text.jpg", "neither a JPEG nor a PNG"}},
      {"c.jpg 1\ncut.png 1\n", {"line 2", "img/cut.png", "PNG"}},
      {"\n \n", {"lists no images"}}};
  for (const auto& [text, parts] : cases) {
    SCOPED_TRACE(text);
    const std::string list = dir_.write("bad.txt", text);
    const std::string message =
        error_of([&] { convert_imageset(root_, list, dir_ / "bad_db", {}); });
    EXPECT_THAT(message, HasSubstr("bad.txt'"));
    for (const std::string& part : parts) EXPECT_THAT(message, HasSubstr(part));
    for (const auto& file : std::filesystem::directory_iterator(dir_.path()))
      EXPECT_EQ(file.path().filename().string().find("bad_db"), std::string::npos)
          << file.path() << " left behind";
  }
  // ROOT is prepended as it is, as in Caffe: without its slash the paths change.
  EXPECT_THAT(error_of([&] { convert_imageset(dir_ / "img", list_, dir_ / "db", {}); }),
              AllOf(HasSubstr("imga/one.png"), HasSubstr("end it with / for a folder")));
  convert({});
  EXPECT_THAT(error_of([&] { convert_imageset(root_, list_, dir_ / "db", {}); }),
              HasSubstr("already exists"));
  ImagesetOptions half;
  half.resize_height = 5;
  EXPECT_THAT(error_of([&] { convert_imageset(root_, list_, dir_ / "x", half); }),
              HasSubstr("give both"));
  half.resize_width = 1 << 14;
  half.resize_height = 1 << 13;
  EXPECT_THAT(error_of([&] { convert_imageset(root_, list_, dir_ / "x", half); }),
              HasSubstr("more than the 67108864 pixels"));
  ImagesetOptions bmp;
  bmp.encode_type = "bmp";
  EXPECT_THAT(error_of([&] { convert_imageset(root_, list_, dir_ / "x", bmp); }),
              HasSubstr("Lamina encodes jpg and png"));
}

}  // namespace
}  // namespace lamina
