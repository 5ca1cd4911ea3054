// Fuzz target: bytes -> decode_image in every mode (as-is, colour, gray). Every malformed
// file must end in a lamina::Error; anything else (a crash, a sanitizer report, a hang) is a
// bug. What decodes must have the mode's channels and consistent dimensions, and is then
// resized (to itself, which must give it back, and to two other sizes) and encoded: PNG must
// give back exactly the same pixels, JPEG the same dimensions and channels.
// Seeds (corpus/fuzz_image): tiny JPEG (gray, 4:2:0, progressive, CMYK, with restart
// markers) and PNG (gray, RGB, RGBA, gray + alpha, palette with tRNS, 16-bit, 1-bit
// interlaced, with gAMA) files, a few hundred bytes each.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "fuzz_util.hpp"
#include "lamina/image.hpp"

namespace lamina::fuzz {
namespace {

// Larger images are decoded but not resized or encoded again: the fuzzer's time goes to
// the decoders.
constexpr int64_t kMaxCheckedPixels = int64_t{1} << 16;

void check(const Image& image, ImageMode mode) {
  const bool channels_ok = mode == ImageMode::kGray    ? image.channels == 1
                           : mode == ImageMode::kColor ? image.channels == 3
                                                       : image.channels == 1 || image.channels == 3;
  if (!channels_ok || image.height <= 0 || image.width <= 0 ||
      image.height * image.width > kMaxImagePixels ||
      int64_t(image.pixels.size()) != image.count())
    std::abort();
  if (image.height * image.width > kMaxCheckedPixels) return;
  if (resize_image(image, image.height, image.width).pixels != image.pixels) std::abort();
  for (const auto& [h, w] : {std::pair<int64_t, int64_t>{1 + image.height / 3, image.width + 5},
                             {std::min<int64_t>(2 * image.height, 300), 1}}) {
    const Image resized = resize_image(image, h, w);
    if (resized.height != h || resized.width != w || resized.channels != image.channels)
      std::abort();
  }
  const Image png = decode_image(encode_image(image, "png"), ImageMode::kAsIs, "re-encoded");
  if (png.pixels != image.pixels || png.channels != image.channels) std::abort();
  const Image jpg = decode_image(encode_image(image, "jpg"), ImageMode::kAsIs, "re-encoded");
  if (jpg.height != image.height || jpg.width != image.width || jpg.channels != image.channels)
    std::abort();
}

void run(const uint8_t* data, size_t size) {
  static const bool quiet = (quiet_logging(), true);
  (void)quiet;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Image image;
  for (ImageMode mode : {ImageMode::kAsIs, ImageMode::kColor, ImageMode::kGray}) {
    try {
      decode_image(bytes, mode, "fuzz", image);
      accepted("decode_image");
    } catch (const Error& e) {
      rejected("decode_image", e);
      continue;
    }
    check(image, mode);
  }
}

}  // namespace
}  // namespace lamina::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  lamina::fuzz::run(data, size);
  return 0;
}
