// JPEG through libjpeg-turbo's libjpeg API, with the settings of OpenCV's JPEG codec:
//   decode: colour as JCS_EXT_BGR, gray as JCS_GRAYSCALE (libjpeg's luma Y of a colour file,
//           not a weighted sum of B, G, R), CMYK/YCCK files (4 components) as JCS_CMYK turned
//           into BGR or gray with OpenCV's formulas; libjpeg's other defaults (ISLOW DCT,
//           fancy upsampling).
//   encode: jpeg_set_defaults (4:2:0 for colour) and jpeg_set_quality(q, baseline).
// libjpeg reports errors by calling error_exit, which must not return: ours longjmps back
// to the setjmp of the step that called libjpeg. Those steps are plain functions holding
// no C++ object, since a longjmp skips destructors; the objects (the image, row buffers)
// are made between the steps, and the libjpeg state is destroyed by its owner whatever
// happens.
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <jpeglib.h>
#include <jerror.h>

#include "image_codecs.hpp"
#include "lamina/common.hpp"

namespace lamina {
namespace {

// libjpeg's error manager with where to jump and the message.
struct JpegErrors {
  jpeg_error_mgr mgr;  // first: libjpeg hands the callbacks &mgr
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  cinfo->err->format_message(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// libjpeg goes on past most corrupt data with a warning (level -1), as OpenCV lets it; but
// a file that ends early (JWRN_JPEG_EOF) is refused, since the rest of the image would be
// invented. Nothing is printed.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo);
}

void install_errors(JpegErrors& errors) {
  jpeg_std_error(&errors.mgr);
  errors.mgr.error_exit = jpeg_fail;
  errors.mgr.emit_message = jpeg_message;
  errors.message[0] = '\0';
}

// CMYK as Adobe writes it (inverted), as OpenCV converts it: each of C, M, Y becomes
// k - (255 - v) * k / 256, then R = C, G = M, B = Y; gray weighs them as BGR -> gray does.
void cmyk_row(const uint8_t* cmyk, int64_t width, int64_t channels, uint8_t* out) {
  constexpr int kR = 4899, kG = 9617, kB = 1868;  // 0.299, 0.587, 0.114 in 14 bits
  for (int64_t x = 0; x < width; ++x, cmyk += 4) {
    const int k = cmyk[3];
    const int r = k - ((255 - cmyk[0]) * k >> 8);
    const int g = k - ((255 - cmyk[1]) * k >> 8);
    const int b = k - ((255 - cmyk[2]) * k >> 8);
    if (channels == 3) {
      out[3 * x] = uint8_t(b), out[3 * x + 1] = uint8_t(g), out[3 * x + 2] = uint8_t(r);
    } else {
      out[x] = uint8_t((b * kB + g * kG + r * kR + (1 << 13)) >> 14);
    }
  }
}

struct Decompressor {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors;
  Decompressor() {
    install_errors(errors);
    cinfo.err = &errors.mgr;
  }
  ~Decompressor() { jpeg_destroy_decompress(&cinfo); }  // safe after a failed create
};

// Step 1: the header (dimensions, components). false: errors.message says why.
bool read_header(Decompressor* d, const uint8_t* data, size_t size) {
  if (setjmp(d->errors.jump)) return false;
  jpeg_create_decompress(&d->cinfo);
  jpeg_mem_src(&d->cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&d->cinfo, TRUE);
  return true;
}

// Step 2: the pixels, row by row, into out (H, W, C); cmyk: a row of W * 4 bytes, or null.
bool read_pixels(Decompressor* d, uint8_t* out, int64_t channels, uint8_t* cmyk) {
  if (setjmp(d->errors.jump)) return false;
  jpeg_decompress_struct* cinfo = &d->cinfo;
  jpeg_start_decompress(cinfo);
  const int64_t width = cinfo->output_width;
  if (cinfo->output_components != (cmyk ? 4 : channels)) {  // libjpeg's contract; checked
    std::snprintf(d->errors.message, sizeof d->errors.message,
                  "libjpeg gives %d components a pixel", cinfo->output_components);
    return false;
  }
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* row = out + int64_t(cinfo->output_scanline) * width * channels;
    JSAMPROW target = cmyk ? cmyk : row;
    jpeg_read_scanlines(cinfo, &target, 1);
    if (cmyk) cmyk_row(cmyk, width, channels, row);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

struct Compressor {
  jpeg_compress_struct cinfo{};
  JpegErrors errors;
  unsigned char* buffer = nullptr;  // jpeg_mem_dest's, malloc'd by libjpeg
  unsigned long size = 0;
  Compressor() {
    install_errors(errors);
    cinfo.err = &errors.mgr;
  }
  ~Compressor() {
    jpeg_destroy_compress(&cinfo);
    std::free(buffer);
  }
};

bool write_jpeg(Compressor* c, const Image* image, int quality) {
  if (setjmp(c->errors.jump)) return false;
  jpeg_compress_struct* cinfo = &c->cinfo;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, &c->buffer, &c->size);
  cinfo->image_width = JDIMENSION(image->width);
  cinfo->image_height = JDIMENSION(image->height);
  cinfo->input_components = int(image->channels);
  cinfo->in_color_space = image->channels == 3 ? JCS_EXT_BGR : JCS_GRAYSCALE;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, quality, TRUE);
  jpeg_start_compress(cinfo, TRUE);
  const int64_t stride = image->width * image->channels;
  while (cinfo->next_scanline < cinfo->image_height) {
    // libjpeg reads the rows; its API has no const
    JSAMPROW row = const_cast<uint8_t*>(image->pixels.data()) + cinfo->next_scanline * stride;
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

void decode_jpeg(std::string_view bytes, ImageMode mode, const std::string& what, Image& out) {
  auto d = std::make_unique<Decompressor>();  // a jmp_buf and two structs: off the stack
  LAMINA_REQUIRE(read_header(d.get(), reinterpret_cast<const uint8_t*>(bytes.data()),
                             bytes.size()),
                 what, ": not a readable JPEG: ", d->errors.message);
  jpeg_decompress_struct& cinfo = d->cinfo;
  require_image_size(cinfo.image_height, cinfo.image_width, "JPEG", what);
  const bool cmyk = cinfo.num_components == 4;
  const int64_t channels =
      mode == ImageMode::kGray ? 1 : mode == ImageMode::kColor || cinfo.num_components > 1 ? 3 : 1;
  cinfo.out_color_space = cmyk ? JCS_CMYK : channels == 3 ? JCS_EXT_BGR : JCS_GRAYSCALE;
  out.reshape(cinfo.image_height, cinfo.image_width, channels);
  std::vector<uint8_t> cmyk_buffer(cmyk ? size_t(out.width) * 4 : 0);
  LAMINA_REQUIRE(read_pixels(d.get(), out.pixels.data(), channels,
                             cmyk ? cmyk_buffer.data() : nullptr),
                 what, ": a corrupt JPEG: ", d->errors.message);
}

std::string encode_jpeg(const Image& image, int quality) {
  auto c = std::make_unique<Compressor>();
  LAMINA_REQUIRE(write_jpeg(c.get(), &image, quality), "cannot encode a ", image.width, " x ",
                 image.height, " image as JPEG: ", c->errors.message);
  return std::string(reinterpret_cast<const char*>(c->buffer), c->size);
}

}  // namespace lamina
