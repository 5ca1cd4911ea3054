// PNG through libpng, with the transforms OpenCV's PNG codec asks for:
//   decode: 16-bit samples stripped to their high byte, alpha stripped, palettes expanded,
//           1/2/4-bit gray expanded to 8; then B, G, R order for colour, gray expanded to
//           three equal channels for colour, or png_set_rgb_to_gray(0.299, 0.587) for gray.
//           As-is gives 1 channel for a gray file (with or without tRNS transparency), 3
//           for any other colour type (gray with alpha included).
//   encode: the SUB filter at zlib level 1 (Z_BEST_SPEED) with the RLE strategy, the
//           settings cv::imencode uses when no compression level is asked for.
// libpng reports errors through our error function, which longjmps back to the setjmp of the
// step that called libpng; those steps are plain functions holding no C++ object (a longjmp
// skips destructors). Warnings are not printed.
#include <png.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "image_codecs.hpp"
#include "lamina/common.hpp"

namespace lamina {
namespace {

// What libpng's callbacks see: the bytes read or written so far, and the error message.
struct PngState {
  const uint8_t* data = nullptr;  // reading: the file
  size_t size = 0, position = 0;
  uint8_t* out = nullptr;  // writing: malloc'd, grown by write_bytes
  size_t out_size = 0, out_capacity = 0;
  char message[256] = "";
};

[[noreturn]] void png_fail(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message);
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > state->size - state->position) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, state->data + state->position, n);
  state->position += n;
}

void write_bytes(png_structp png, png_bytep in, size_t n) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > state->out_capacity - state->out_size) {
    const size_t capacity = std::max(state->out_capacity * 2, state->out_size + n + 4096);
    void* grown = std::realloc(state->out, capacity);
    if (!grown) png_error(png, "out of memory");
    state->out = static_cast<uint8_t*>(grown);
    state->out_capacity = capacity;
  }
  std::memcpy(state->out + state->out_size, in, n);
  state->out_size += n;
}

void flush_bytes(png_structp) {}

// The header's facts OpenCV decides by.
struct PngHeader {
  png_uint_32 width = 0, height = 0;
  int bit_depth = 0, color_type = 0;
};

struct PngReader {
  PngState state;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngReader() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

// Step 1: the header. false: state.message says why.
bool read_header(PngReader* r, PngHeader* h) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  png_set_read_fn(r->png, &r->state, read_bytes);
  png_read_info(r->png, r->info);
  png_get_IHDR(r->png, r->info, &h->width, &h->height, &h->bit_depth, &h->color_type, nullptr,
               nullptr, nullptr);
  return true;
}

// Step 2: OpenCV's transforms for `channels` (1 or 3), then the rows (H pointers into the
// image) and the rest of the file.
bool read_pixels(PngReader* r, const PngHeader* h, int channels, png_bytepp rows) {
  if (setjmp(png_jmpbuf(r->png))) return false;
  png_structp png = r->png;
  if (h->bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (h->color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  const bool colour_file = (h->color_type & PNG_COLOR_MASK_COLOR) != 0;
  if (!colour_file && h->bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (colour_file && channels == 3) png_set_bgr(png);
  else if (channels == 3) png_set_gray_to_rgb(png);
  else png_set_rgb_to_gray(png, 1, 0.299, 0.587);
  png_set_interlace_handling(png);
  png_read_update_info(png, r->info);
  if (png_get_rowbytes(png, r->info) != size_t(h->width) * size_t(channels))
    png_error(png, "libpng's rows do not have the size asked for");  // its contract; checked
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  return true;
}

struct PngWriter {
  PngState state;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngWriter() {
    png_destroy_write_struct(&png, info ? &info : nullptr);
    std::free(state.out);
  }
};

bool write_png(PngWriter* w, const Image* image, png_bytepp rows) {
  if (setjmp(png_jmpbuf(w->png))) return false;
  png_structp png = w->png;
  png_set_write_fn(png, &w->state, write_bytes, flush_bytes);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_SUB);
  png_set_compression_level(png, Z_BEST_SPEED);
  png_set_compression_strategy(png, Z_RLE);
  png_set_IHDR(png, w->info, png_uint_32(image->width), png_uint_32(image->height), 8,
               image->channels == 3 ? PNG_COLOR_TYPE_RGB : PNG_COLOR_TYPE_GRAY,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, w->info);
  png_set_bgr(png);
  png_write_image(png, rows);
  png_write_end(png, w->info);
  return true;
}

// Row pointers into an image's pixels (H, W * C).
std::vector<png_bytep> row_pointers(uint8_t* pixels, int64_t height, int64_t stride) {
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int64_t y = 0; y < height; ++y) rows[size_t(y)] = pixels + y * stride;
  return rows;
}

}  // namespace

void decode_png(std::string_view bytes, ImageMode mode, const std::string& what, Image& out) {
  PngReader r;
  r.state.data = reinterpret_cast<const uint8_t*>(bytes.data());
  r.state.size = bytes.size();
  r.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &r.state, png_fail, png_warn);
  if (r.png) r.info = png_create_info_struct(r.png);
  LAMINA_REQUIRE(r.png && r.info, what, ": libpng could not start (out of memory)");
  PngHeader h;
  LAMINA_REQUIRE(read_header(&r, &h), what, ": not a readable PNG: ", r.state.message);
  require_image_size(h.height, h.width, "PNG", what);
  // OpenCV's decoder type has 3 or 4 channels for every colour type but plain gray (gray
  // with tRNS transparency included), and IMREAD_ANYCOLOR makes those 3.
  const bool colour_type = h.color_type != PNG_COLOR_TYPE_GRAY;
  const int channels =
      mode == ImageMode::kGray ? 1 : mode == ImageMode::kColor || colour_type ? 3 : 1;
  out.reshape(h.height, h.width, channels);
  std::vector<png_bytep> rows = row_pointers(out.pixels.data(), out.height, out.width * channels);
  LAMINA_REQUIRE(read_pixels(&r, &h, channels, rows.data()), what, ": a corrupt PNG: ",
                 r.state.message);
}

std::string encode_png(const Image& image) {
  PngWriter w;
  w.png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &w.state, png_fail, png_warn);
  if (w.png) w.info = png_create_info_struct(w.png);
  LAMINA_REQUIRE(w.png && w.info, "libpng could not start (out of memory)");
  // libpng reads the rows; its API has no const
  std::vector<png_bytep> rows = row_pointers(const_cast<uint8_t*>(image.pixels.data()),
                                             image.height, image.width * image.channels);
  LAMINA_REQUIRE(write_png(&w, &image, rows.data()), "cannot encode a ", image.width, " x ",
                 image.height, " image as PNG: ", w.state.message);
  return std::string(reinterpret_cast<const char*>(w.state.out), w.state.out_size);
}

}  // namespace lamina
