// The codecs behind image.hpp, one file per format (image_jpeg.cpp, image_png.cpp), and the
// size check they share.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "lamina/image.hpp"

namespace lamina {

// Decode bytes the first bytes of which are the format's signature into out.
void decode_jpeg(std::string_view bytes, ImageMode mode, const std::string& what, Image& out);
void decode_png(std::string_view bytes, ImageMode mode, const std::string& what, Image& out);

// cv::imencode's files: JPEG at `quality`, PNG as image.hpp says.
std::string encode_jpeg(const Image& image, int quality);
std::string encode_png(const Image& image);

// Throws unless a header's height x width is 1..kMaxImagePixels pixels: called before the
// pixels are allocated. format: "JPEG" or "PNG".
void require_image_size(int64_t height, int64_t width, const char* format,
                        const std::string& what);

}  // namespace lamina
