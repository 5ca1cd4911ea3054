// Bilinear resizing as cv::resize(INTER_LINEAR) does it for 8-bit images.
//
// Along each axis, output index d samples the input at f = (d + 0.5) * in / out - 0.5:
// s = floor(f) and s + 1 weighted 1 - (f - s) and f - s; f below 0 takes pixel 0, f at or
// past in - 1 takes pixel in - 1 (both weight 1 on the edge pixel). The weights are OpenCV's
// fixed point: each rounded to 11 bits (w * 2048). A row is interpolated first (integers
// scaled by 2^11), then two rows are (by 2^22), and the sum is rounded to nearest (+2^21)
// and shifted back: OpenCV's scalar arithmetic exactly. OpenCV's vectorised loops (SSE,
// NEON) drop 4 low bits of the row sums before the vertical step, so their results may
// differ from these by 1 at some pixels; so may OpenCV builds that switch to another
// method for a 2x shrink (INTER_AREA, which gives the same (a + b + c + d + 2) / 4 there).
#include <algorithm>
#include <cmath>
#include <vector>

#include "lamina/common.hpp"
#include "lamina/image.hpp"

namespace lamina {
namespace {

constexpr int kWeightBits = 11;  // OpenCV's INTER_RESIZE_COEF_BITS
constexpr int kOne = 1 << kWeightBits;

// One output index's two taps along an axis.
struct Taps {
  int64_t first, second;  // input indices
  int weight_first, weight_second;  // sum kOne (or within 1 of it), in 1/2048ths
};

std::vector<Taps> axis_taps(int64_t in, int64_t out) {
  // OpenCV divides by the inverse scale it was given (out / in), in double.
  const double scale = 1.0 / (double(out) / double(in));
  std::vector<Taps> taps(static_cast<size_t>(out));
  for (int64_t d = 0; d < out; ++d) {
    float f = float((double(d) + 0.5) * scale - 0.5);
    int64_t s = int64_t(std::floor(f));
    f -= float(s);
    if (s < 0) s = 0, f = 0;
    if (s >= in - 1) s = in - 1, f = 0;
    // cvRound: to nearest, ties to even (lrintf in the default rounding mode)
    taps[size_t(d)] = {s, std::min(s + 1, in - 1), int(std::lrintf((1.0f - f) * kOne)),
                       int(std::lrintf(f * kOne))};
  }
  return taps;
}

}  // namespace

void resize_image(const Image& image, int64_t height, int64_t width, Image& out) {
  LAMINA_REQUIRE(height > 0 && width > 0 && height <= kMaxImagePixels / width,
                 "cannot resize an image to ", width, " x ", height, " (width x height): each "
                 "must be positive, with at most ", kMaxImagePixels, " pixels in all");
  const int64_t C = image.channels, W = image.width;
  const std::vector<Taps> xs = axis_taps(W, width), ys = axis_taps(image.height, height);
  out.reshape(height, width, C);
  // Two input rows interpolated along x, (width * C) each, in 1/2048ths.
  std::vector<int32_t> upper(size_t(width * C)), lower(size_t(width * C));
  const auto interpolate_row = [&](int64_t y, std::vector<int32_t>& row) {
    const uint8_t* src = image.pixels.data() + y * W * C;
    for (int64_t x = 0; x < width; ++x) {
      const Taps& t = xs[size_t(x)];
      for (int64_t c = 0; c < C; ++c)
        row[size_t(x * C + c)] = src[t.first * C + c] * t.weight_first +
                                 src[t.second * C + c] * t.weight_second;
    }
  };
  int64_t upper_y = -1, lower_y = -1;  // the input rows upper and lower hold
  for (int64_t y = 0; y < height; ++y) {
    const Taps& t = ys[size_t(y)];
    if (upper_y != t.first) {
      if (lower_y == t.first) std::swap(upper, lower), std::swap(upper_y, lower_y);
      else interpolate_row(t.first, upper), upper_y = t.first;
    }
    if (lower_y != t.second) interpolate_row(t.second, lower), lower_y = t.second;
    uint8_t* dst = out.pixels.data() + y * width * C;
    for (int64_t i = 0; i < width * C; ++i) {
      const int64_t sum = int64_t(upper[size_t(i)]) * t.weight_first +
                          int64_t(lower[size_t(i)]) * t.weight_second;
      dst[i] = uint8_t(std::clamp<int64_t>((sum + (int64_t{1} << 21)) >> 22, 0, 255));
    }
  }
}

Image resize_image(const Image& image, int64_t height, int64_t width) {
  Image out;
  resize_image(image, height, width, out);
  return out;
}

}  // namespace lamina
