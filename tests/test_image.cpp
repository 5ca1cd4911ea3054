// Images (image.hpp): PNG files written by the test without libpng decoded in every mode
// against hand-computed pixels (libpng's gray weights, palettes, alpha, 16 and 1-bit
// samples), encode/decode round trips (PNG exact, JPEG within JPEG's error), JPEG's gray
// (luma) and CMYK conversions, bilinear resizing against hand-computed values, and every
// bad input an Error naming its source.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>  // before jpeglib.h, which uses FILE and size_t
#include <cstdlib>

#include <jpeglib.h>

#include "lamina/image.hpp"
#include "png_bytes.hpp"
#include "test_util.hpp"

namespace lamina {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using testing::error_of;
using testing::png_bytes;

Image make_image(int64_t h, int64_t w, int64_t c, std::vector<uint8_t> pixels) {
  Image image;
  image.reshape(h, w, c);
  EXPECT_EQ(pixels.size(), image.pixels.size());
  image.pixels = std::move(pixels);
  return image;
}

// A (h, w, c) image of smooth gradients: JPEG's error on it is small.
Image gradient(int64_t h, int64_t w, int64_t c) {
  Image image;
  image.reshape(h, w, c);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t k = 0; k < c; ++k)
        image.pixels[size_t((y * w + x) * c + k)] = uint8_t(40 + 4 * y + 3 * x + 30 * k);
  return image;
}

Image random_image(int64_t h, int64_t w, int64_t c, uint64_t seed) {
  Image image;
  image.reshape(h, w, c);
  std::mt19937_64 rng(seed);
  for (uint8_t& v : image.pixels) v = uint8_t(rng());
  return image;
}

const std::string kWhat = "image 'test.png'";

// ---- PNG files in every mode, against hand-computed pixels ----

TEST(ImagePng, RgbIsBgrAsIsAndInColourAndLibpngsWeightedSumInGray) {
  // Two pixels (R, G, B): (255, 0, 0) and (100, 150, 200); a row of (0, 255, 0), (0, 0, 255).
  const std::string rows = {char(255), 0, 0, 100, char(150), char(200),
                            0, char(255), 0, 0, 0, char(255)};
  const std::string png = png_bytes(2, 2, 8, testing::kPngRgb, rows);
  for (ImageMode mode : {ImageMode::kAsIs, ImageMode::kColor}) {
    const Image image = decode_image(png, mode, kWhat);
    EXPECT_EQ(image.height, 2);
    EXPECT_EQ(image.width, 2);
    EXPECT_EQ(image.channels, 3);
    EXPECT_THAT(image.pixels, ElementsAre(0, 0, 255, 200, 150, 100, 0, 255, 0, 255, 0, 0));
  }
  // libpng without a gAMA chunk: (9797 R + 19234 G + 3737 B) >> 15, truncated (0.299 and
  // 0.587 in 15 bits, blue the rest).
  const Image gray = decode_image(png, ImageMode::kGray, kWhat);
  EXPECT_EQ(gray.channels, 1);
  EXPECT_THAT(gray.pixels, ElementsAre(76, 140, 149, 29));
}

TEST(ImagePng, GrayIsOneChannelAsIsAndThreeEqualOnesInColour) {
  const std::string png = png_bytes(3, 1, 8, testing::kPngGray, {7, char(128), char(255)});
  const Image as_is = decode_image(png, ImageMode::kAsIs, kWhat);
  EXPECT_EQ(as_is.channels, 1);
  EXPECT_THAT(as_is.pixels, ElementsAre(7, 128, 255));
  EXPECT_EQ(decode_image(png, ImageMode::kGray, kWhat).pixels, as_is.pixels);
  const Image colour = decode_image(png, ImageMode::kColor, kWhat);
  EXPECT_EQ(colour.channels, 3);
  EXPECT_THAT(colour.pixels, ElementsAre(7, 7, 7, 128, 128, 128, 255, 255, 255));
}

TEST(ImagePng, AlphaIsDroppedAndGrayWithAlphaBecomesColourAsIs) {
  const std::string rgba = png_bytes(1, 1, 8, testing::kPngRgba, {10, 20, 30, 40});
  EXPECT_THAT(decode_image(rgba, ImageMode::kAsIs, kWhat).pixels, ElementsAre(30, 20, 10));
  // OpenCV's decoder sees 4 channels in gray + alpha, so IMREAD_ANYCOLOR gives 3.
  const std::string gray_alpha = png_bytes(2, 1, 8, testing::kPngGrayAlpha, {50, 0, 60, 9});
  const Image image = decode_image(gray_alpha, ImageMode::kAsIs, kWhat);
  EXPECT_EQ(image.channels, 3);
  EXPECT_THAT(image.pixels, ElementsAre(50, 50, 50, 60, 60, 60));
  EXPECT_THAT(decode_image(gray_alpha, ImageMode::kGray, kWhat).pixels, ElementsAre(50, 60));
  // tRNS in a gray file leaves it gray.
  const std::string gray_trns = png_bytes(1, 1, 8, testing::kPngGray, {5}, "", {0, 5});
  EXPECT_EQ(decode_image(gray_trns, ImageMode::kAsIs, kWhat).channels, 1);
}

TEST(ImagePng, PalettesExpandToTheirColours) {
  const std::string palette = {char(255), 0, 0, 0, 0, char(255)};  // red, blue
  const std::string png = png_bytes(3, 1, 8, testing::kPngPalette, {1, 0, 1}, palette,
                                    {char(128)});  // entry 0 half transparent: dropped
  const Image image = decode_image(png, ImageMode::kAsIs, kWhat);
  EXPECT_EQ(image.channels, 3);
  EXPECT_THAT(image.pixels, ElementsAre(255, 0, 0, 0, 0, 255, 255, 0, 0));
  EXPECT_THAT(decode_image(png, ImageMode::kGray, kWhat).pixels, ElementsAre(29, 76, 29));
}

TEST(ImagePng, SixteenBitSamplesKeepTheirHighByteAndOneBitGrayIsExpanded) {
  const std::string wide = png_bytes(2, 1, 16, testing::kPngGray, {char(0xab), char(0xff), 1, 2});
  EXPECT_THAT(decode_image(wide, ImageMode::kAsIs, kWhat).pixels, ElementsAre(0xab, 1));
  const std::string bits = png_bytes(3, 1, 1, testing::kPngGray, {char(0xa0)});  // 1 0 1
  EXPECT_THAT(decode_image(bits, ImageMode::kAsIs, kWhat).pixels, ElementsAre(255, 0, 255));
}

TEST(ImagePng, EncodeDecodeIsExactForGrayAndColour) {
  for (int64_t c : {1, 3}) {
    const Image image = random_image(5, 7, c, uint64_t(c));
    const std::string png = encode_image(image, "png");
    EXPECT_EQ(png.substr(1, 3), "PNG");
    const Image back = decode_image(png, ImageMode::kAsIs, kWhat);
    EXPECT_EQ(back.channels, c);
    EXPECT_EQ(back.pixels, image.pixels);
  }
  EXPECT_EQ(encode_image(random_image(2, 2, 3, 1), "PNG"),
            encode_image(random_image(2, 2, 3, 1), "png"));
}

// ---- JPEG ----

TEST(ImageJpeg, EncodeDecodeStaysWithinJpegsError) {
  for (int64_t c : {1, 3}) {
    const Image image = gradient(16, 24, c);
    const std::string jpg = encode_image(image, c == 1 ? "jpg" : "JPEG");
    EXPECT_EQ(jpg.substr(0, 3), "\xFF\xD8\xFF");
    const Image back = decode_image(jpg, ImageMode::kAsIs, "image 'a.jpg'");
    ASSERT_EQ(back.channels, c);
    ASSERT_EQ(back.pixels.size(), image.pixels.size());
    int worst = 0;
    for (size_t i = 0; i < image.pixels.size(); ++i)
      worst = std::max(worst, std::abs(int(back.pixels[i]) - int(image.pixels[i])));
    EXPECT_LE(worst, 4) << c << " channels";
  }
}

TEST(ImageJpeg, GrayIsTheLumaAndGrayFilesGiveThreeEqualChannelsInColour) {
  // A solid (B, G, R) = (50, 100, 200): luma 0.299 R + 0.587 G + 0.114 B = 124.2.
  Image solid;
  solid.reshape(16, 16, 3);
  for (size_t i = 0; i < solid.pixels.size(); i += 3)
    solid.pixels[i] = 50, solid.pixels[i + 1] = 100, solid.pixels[i + 2] = 200;
  const std::string jpg = encode_image(solid, "jpg");
  const Image gray = decode_image(jpg, ImageMode::kGray, kWhat);
  EXPECT_EQ(gray.channels, 1);
  for (uint8_t v : gray.pixels) EXPECT_NEAR(v, 124, 1);
  const Image colour = decode_image(jpg, ImageMode::kAsIs, kWhat);
  for (size_t i = 0; i < colour.pixels.size(); i += 3) {
    EXPECT_NEAR(colour.pixels[i], 50, 2);
    EXPECT_NEAR(colour.pixels[i + 1], 100, 2);
    EXPECT_NEAR(colour.pixels[i + 2], 200, 2);
  }
  const std::string gray_jpg = encode_image(gradient(8, 8, 1), "jpg");
  const Image one = decode_image(gray_jpg, ImageMode::kAsIs, kWhat);
  EXPECT_EQ(one.channels, 1);
  const Image three = decode_image(gray_jpg, ImageMode::kColor, kWhat);
  ASSERT_EQ(three.channels, 3);
  for (size_t i = 0; i < one.pixels.size(); ++i)
    EXPECT_THAT(std::vector<uint8_t>(three.pixels.begin() + 3 * i,
                                     three.pixels.begin() + 3 * i + 3),
                ElementsAre(one.pixels[i], one.pixels[i], one.pixels[i]));
}

// A solid 8 x 8 CMYK JPEG (Adobe's inverted form, as Photoshop writes), via libjpeg.
std::string cmyk_jpeg(uint8_t c, uint8_t m, uint8_t y, uint8_t k) {
  jpeg_compress_struct cinfo{};
  jpeg_error_mgr errors{};
  cinfo.err = jpeg_std_error(&errors);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = cinfo.image_height = 8;
  cinfo.input_components = 4;
  cinfo.in_color_space = JCS_CMYK;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 100, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row;
  for (int x = 0; x < 8; ++x) row.insert(row.end(), {c, m, y, k});
  for (int r = 0; r < 8; ++r) {
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&cinfo, &p, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<char*>(buffer), size);
  std::free(buffer);
  return out;
}

TEST(ImageJpeg, CmykBecomesBgrAndGrayByOpenCVsFormulas) {
  // v' = k - (255 - v) k / 256 for C, M, Y (= R, G, B): with k = 200,
  // C 100 -> 200 - 155 * 200 / 256 = 79, M 255 -> 200, Y 0 -> 1.
  const std::string jpg = cmyk_jpeg(100, 255, 0, 200);
  const Image colour = decode_image(jpg, ImageMode::kAsIs, kWhat);
  ASSERT_EQ(colour.channels, 3);
  EXPECT_NEAR(colour.pixels[0], 1, 3);   // B
  EXPECT_NEAR(colour.pixels[1], 200, 3);  // G
  EXPECT_NEAR(colour.pixels[2], 79, 3);  // R
  // Gray: (1868 B + 9617 G + 4899 R + 8192) >> 14 = (1868 + 1923400 + 387021 + 8192) >> 14
  const Image gray = decode_image(jpg, ImageMode::kGray, kWhat);
  ASSERT_EQ(gray.channels, 1);
  EXPECT_NEAR(gray.pixels[0], 141, 3);
}

// ---- resizing ----

TEST(ImageResize, TwoByTwoToThreeByThreeAveragesBetweenTheCorners) {
  const Image small = make_image(2, 2, 1, {0, 100, 200, 50});
  // Output 0 and 2 fall on the corners (clamped), output 1 half way: (0 + 100 + 200 + 50) / 4
  // = 87.5 rounds up.
  EXPECT_THAT(resize_image(small, 3, 3).pixels,
              ElementsAre(0, 50, 100, 100, 88, 75, 200, 125, 50));
}

TEST(ImageResize, OnePixelIdentityAndShrinking) {
  const Image one = make_image(1, 1, 3, {9, 8, 7});
  EXPECT_THAT(resize_image(one, 2, 3).pixels, ElementsAreArray(std::vector<uint8_t>{
                                                  9, 8, 7, 9, 8, 7, 9, 8, 7,
                                                  9, 8, 7, 9, 8, 7, 9, 8, 7}));
  const Image image = random_image(5, 7, 3, 11);
  EXPECT_EQ(resize_image(image, 5, 7).pixels, image.pixels);
  // 4 x 4 -> 2 x 2: each output the rounded mean of a 2 x 2 block, (a + b + c + d + 2) / 4.
  const Image block = make_image(4, 4, 1, {0, 1, 10, 20, 2, 4, 30, 41,
                                           100, 100, 7, 7, 100, 101, 7, 8});
  EXPECT_THAT(resize_image(block, 2, 2).pixels, ElementsAre(2, 25, 100, 7));
  // 1 x 3 -> 1 x 2: samples at 0.25 and 1.75: 0.75 * 0 + 0.25 * 100, 0.25 * 100 + 0.75 * 200.
  EXPECT_THAT(resize_image(make_image(1, 3, 1, {0, 100, 200}), 1, 2).pixels,
              ElementsAre(25, 175));
  EXPECT_THAT(error_of([&] { resize_image(one, 0, 3); }), HasSubstr("must be positive"));
}

// ---- bad input ----

TEST(ImageErrors, EmptyGarbageTruncatedAndCorruptBytesAreErrorsNamingTheSource) {
  EXPECT_THAT(error_of([] { decode_image("", ImageMode::kAsIs, kWhat); }),
              AllOf(HasSubstr(kWhat), HasSubstr("is empty")));
  EXPECT_THAT(error_of([] { decode_image("<html>", ImageMode::kAsIs, kWhat); }),
              AllOf(HasSubstr(kWhat), HasSubstr("neither a JPEG nor a PNG"),
                    HasSubstr("3c 68 74 6d")));
  const std::string png = encode_image(random_image(8, 8, 3, 2), "png");
  const std::string jpg = encode_image(gradient(32, 32, 3), "jpg");
  for (size_t keep : {size_t(5), size_t(20), png.size() / 2, png.size() - 3}) {
    EXPECT_THAT(error_of([&] { decode_image(png.substr(0, keep), ImageMode::kAsIs, kWhat); }),
                HasSubstr(kWhat))
        << keep << " bytes";
  }
  EXPECT_THAT(error_of([&] { decode_image(png.substr(0, png.size() / 2), ImageMode::kGray,
                                          kWhat); }),
              HasSubstr("truncated"));
  for (size_t keep : {size_t(3), size_t(40), jpg.size() / 2, jpg.size() - 2}) {
    EXPECT_THAT(error_of([&] { decode_image(jpg.substr(0, keep), ImageMode::kColor, kWhat); }),
                AllOf(HasSubstr(kWhat), HasSubstr("JPEG")))
        << keep << " bytes";
  }
  EXPECT_THAT(error_of([&] { decode_image(jpg.substr(0, jpg.size() / 2), ImageMode::kAsIs,
                                          kWhat); }),
              HasSubstr("Premature end of JPEG file"));
  std::string bad_crc = png;
  bad_crc[20] ^= 1;  // inside IHDR
  EXPECT_THAT(error_of([&] { decode_image(bad_crc, ImageMode::kAsIs, kWhat); }),
              AllOf(HasSubstr(kWhat), HasSubstr("CRC")));
  EXPECT_THAT(error_of([] { encode_image(random_image(2, 2, 3, 1), "bmp"); }),
              HasSubstr("Lamina encodes jpg and png"));
}

TEST(ImageErrors, AbsurdDimensionsAreRefusedBeforeAllocating) {
  const std::string huge = png_bytes(100000, 100000, 8, testing::kPngGray, "");
  EXPECT_THAT(error_of([&] { decode_image(huge, ImageMode::kAsIs, kWhat); }),
              AllOf(HasSubstr(kWhat), HasSubstr("100000 x 100000"), HasSubstr("67108864")));
  // A JPEG whose frame header (SOF0: FF C0, length, precision, height, width) claims
  // 60000 x 60000.
  std::string jpg = encode_image(gradient(8, 8, 1), "jpg");
  const size_t sof = jpg.find("\xFF\xC0");
  ASSERT_NE(sof, std::string::npos);
  jpg.replace(sof + 5, 4, "\xEA\x60\xEA\x60");
  EXPECT_THAT(error_of([&] { decode_image(jpg, ImageMode::kAsIs, kWhat); }),
              AllOf(HasSubstr("JPEG header gives 60000 x 60000"), HasSubstr("67108864")));
}

TEST(ImageFiles, ReadImageDecodesAFileAndNamesAMissingOne) {
  testing::TempDir dir;
  const Image image = random_image(3, 4, 3, 5);
  const std::string path = dir.write("x.png", encode_image(image, "png"));
  EXPECT_EQ(read_image(path, ImageMode::kAsIs).pixels, image.pixels);
  EXPECT_THAT(error_of([&] { read_image(dir / "none.jpg", ImageMode::kAsIs); }),
              AllOf(HasSubstr("none.jpg"), HasSubstr("No such file")));
  const std::string text = dir.write("notes.jpg", "just text");
  EXPECT_THAT(error_of([&] { read_image(text, ImageMode::kAsIs); }),
              AllOf(HasSubstr("image '" + text + "'"), HasSubstr("neither a JPEG")));
}

TEST(ImageLayout, ChwOrderIsCaffesDatumOrder) {
  const Image image = make_image(1, 2, 3, {1, 2, 3, 4, 5, 6});  // (B G R)(B G R)
  std::vector<uint8_t> chw(6);
  image_to_chw(image, chw.data());
  EXPECT_THAT(chw, ElementsAre(1, 4, 2, 5, 3, 6));
}

}  // namespace
}  // namespace lamina
