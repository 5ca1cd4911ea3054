// Images (image.hpp): the format told by its signature, files, and the HWC -> CHW order.
#include "lamina/image.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>

#include "image_codecs.hpp"
#include "lamina/common.hpp"
#include "lamina/file_access.hpp"

namespace lamina {
namespace {

// The signatures OpenCV tells the formats by.
constexpr std::string_view kJpegSignature("\xFF\xD8\xFF", 3);
constexpr std::string_view kPngSignature("\x89PNG\r\n\x1A\n", 8);

// A file larger than this is no image Lamina would decode (kMaxImagePixels of raw BGR, in
// any format's worst case, is less).
constexpr int64_t kMaxImageFileBytes = int64_t{1} << 30;

constexpr int kJpegQuality = 95;  // cv::imencode's default (IMWRITE_JPEG_QUALITY)

bool starts_with(std::string_view bytes, std::string_view prefix) {
  return bytes.substr(0, prefix.size()) == prefix;
}

// The first bytes, for a message about a file that is neither format: "3c 68 74 6d".
std::string first_bytes(std::string_view bytes) {
  std::string shown;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 8); ++i) {
    char hex[4];
    std::snprintf(hex, sizeof hex, "%s%02x", i ? " " : "", unsigned(uint8_t(bytes[i])));
    shown += hex;
  }
  return shown;
}

}  // namespace

void Image::reshape(int64_t h, int64_t w, int64_t c) {
  height = h, width = w, channels = c;
  pixels.resize(size_t(h * w * c));
}

void require_image_size(int64_t height, int64_t width, const char* format,
                        const std::string& what) {
  LAMINA_REQUIRE(height > 0 && width > 0, what, ": the ", format, " header gives ", width,
                 " x ", height, " pixels (width x height); an image has at least 1 x 1");
  LAMINA_REQUIRE(height <= kMaxImagePixels / width, what, ": the ", format, " header gives ",
                 width, " x ", height, " pixels (width x height), more than the ",
                 kMaxImagePixels, " (2^26) Lamina decodes; the file is corrupt, or resize it "
                 "first");
}

void decode_image(std::string_view bytes, ImageMode mode, const std::string& what, Image& out) {
  LAMINA_REQUIRE(!bytes.empty(), what, ": is empty (0 bytes); an image file is a JPEG or PNG");
  if (starts_with(bytes, kJpegSignature)) return decode_jpeg(bytes, mode, what, out);
  if (starts_with(bytes, kPngSignature)) return decode_png(bytes, mode, what, out);
  fail(what, ": is neither a JPEG nor a PNG image (its first bytes are ", first_bytes(bytes),
       "); Lamina decodes those two formats");
}

Image decode_image(std::string_view bytes, ImageMode mode, const std::string& what) {
  Image image;
  decode_image(bytes, mode, what, image);
  return image;
}

std::string read_image_file(const std::string& path) {
  return InputFile(path, "image").read_all(kMaxImageFileBytes);
}

Image read_image(const std::string& path, ImageMode mode) {
  return decode_image(read_image_file(path), mode, "image " + quoted_path(path));
}

std::string encode_image(const Image& image, const std::string& format) {
  LAMINA_REQUIRE((image.channels == 1 || image.channels == 3) && image.height > 0 &&
                     image.width > 0 && int64_t(image.pixels.size()) == image.count(),
                 "cannot encode an image of ", image.width, " x ", image.height, " x ",
                 image.channels, " (W x H x C) with ", image.pixels.size(), " bytes; an "
                 "image has 1 or 3 channels and W x H x C bytes");
  std::string lower = format;
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  if (lower == "jpg" || lower == "jpeg") return encode_jpeg(image, kJpegQuality);
  if (lower == "png") return encode_png(image);
  fail("cannot encode an image as '", format, "': Lamina encodes jpg and png");
}

void image_to_chw(const Image& image, uint8_t* out) {
  const int64_t C = image.channels, plane = image.height * image.width;
  const uint8_t* in = image.pixels.data();
  if (C == 1) {
    std::memcpy(out, in, size_t(plane));
    return;
  }
  for (int64_t i = 0; i < plane; ++i)
    for (int64_t c = 0; c < C; ++c) out[c * plane + i] = in[i * C + c];
}

}  // namespace lamina
