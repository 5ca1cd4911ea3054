// JPEG and PNG images, decoded and encoded as Caffe 1.0 does through OpenCV (cv::imread,
// cv::imdecode, cv::imencode, cv::resize), with the libraries OpenCV itself uses underneath:
// libjpeg-turbo (through the libjpeg API) and libpng, called with OpenCV's settings, so that
// decoded pixels are the ones Caffe's data tools and layers see.
//
// An Image is 8-bit, (H, W, C) interleaved, its channels in OpenCV's order: C = 1 (gray) or
// 3 (B, G, R). The format is told by the first bytes (as OpenCV does), never by a file name.
// Every problem (empty, truncated or corrupt bytes, another format, absurd dimensions) is a
// lamina::Error naming the source given as `what` and, where one says it, libjpeg's or
// libpng's reason.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace lamina {

struct Image {
  int64_t height = 0, width = 0, channels = 0;
  std::vector<uint8_t> pixels;  // (H, W, C), B G R for C = 3

  int64_t count() const { return height * width * channels; }
  // Sets the dimensions and sizes pixels (its capacity is kept for the next image).
  void reshape(int64_t h, int64_t w, int64_t c);
};

// How an image decodes (OpenCV's imread flags):
//   kAsIs   IMREAD_ANYCOLOR: a gray image stays 1 channel, any colour one (palette, RGB,
//           gray with alpha, CMYK) becomes 3; alpha is dropped, 16-bit samples keep their
//           high byte.
//   kColor  IMREAD_COLOR: always 3 channels (a gray image gives 3 equal ones).
//   kGray   IMREAD_GRAYSCALE: always 1 channel. A colour JPEG gives its luma (libjpeg's Y,
//           as OpenCV asks for); a colour PNG 0.299 R + 0.587 G + 0.114 B (libpng's
//           conversion with OpenCV's weights).
enum class ImageMode { kAsIs, kColor, kGray };

// The most pixels (H x W) an image may have: 2^26 (8192 x 8192). Dimensions beyond it are
// refused when the header is read, before anything is allocated, so that a corrupt or
// hostile header cannot take the machine's memory.
constexpr int64_t kMaxImagePixels = int64_t{1} << 26;

// Decodes a JPEG or PNG file's bytes. what: the source in messages ("image 'a.jpg'").
// The second form reuses out's buffer.
Image decode_image(std::string_view bytes, ImageMode mode, const std::string& what);
void decode_image(std::string_view bytes, ImageMode mode, const std::string& what, Image& out);

// A file's bytes (at most 1 GiB: no image Lamina decodes is larger); errors name the path.
std::string read_image_file(const std::string& path);
// Reads and decodes a file; errors name the path.
Image read_image(const std::string& path, ImageMode mode);

// The image as a file of format "jpg" (or "jpeg") or "png", any case, as cv::imencode
// writes it: JPEG at quality 95 (4:2:0 for colour), PNG with the SUB filter at zlib level 1.
// Any other format is an Error naming the two.
std::string encode_image(const Image& image, const std::string& format);

// Bilinear resampling to height x width, with cv::resize INTER_LINEAR's mapping: output
// pixel d samples the input at s = (d + 0.5) * in / out - 0.5, clamped to the edge pixels,
// and OpenCV's 11-bit fixed-point weights (image_resize.cpp says where the result may
// differ from OpenCV's by 1).
Image resize_image(const Image& image, int64_t height, int64_t width);
void resize_image(const Image& image, int64_t height, int64_t width, Image& out);

// The pixels as (C, H, W): out[(c * H + h) * W + w] = pixels[(h * W + w) * C + c], the order
// Caffe's CVMatToDatum gives a Datum. out holds count() bytes.
void image_to_chw(const Image& image, uint8_t* out);

}  // namespace lamina
